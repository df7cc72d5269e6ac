"""Integration fixtures: one real vLLM server (CPU, tiny random-weight Qwen3 model) per test session.

The server is started through the project's launcher. Set ``QWEN_FAST_TEST_BASE_URL`` to
test against a server that is already running (it must serve the tiny model as ``qwen3``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast.serving.launcher import VLLMServer
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from langchain_qwen_fast.testing.tiny_model import build_test_model
from tests.support.proxy import FaultProxy

ROOT = Path(__file__).resolve().parents[2]
TINY_MODEL = ROOT / ".models" / "qwen3-tiny"
NEWS_LABELS = list(AG_NEWS_LABELS)
_startup_seconds: list[float] = []  # printed in the terminal summary
_timings: list[tuple[str, float]] = []  # (what, seconds), printed in the terminal summary


#: Modules that start a server of their own and run before the session's head servers exist:
#: a 24 GiB machine holds about five small CPU servers (~4 GB each), and a sixth was killed
#: for memory in a CI rehearsal.
_RUN_FIRST = ("test_token_ids_server.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Those modules' tests first among the integration tests (the order is kept otherwise)."""
    items.sort(key=lambda item: ("integration_tests" in item.path.parts, item.path.name not in _RUN_FIRST))


def record_seconds(what: str, seconds: float) -> None:
    """Note a duration for the terminal summary (never asserted: these machines are noisy)."""
    _timings.append((what, seconds))


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return build_test_model(TINY_MODEL, "tiny")


def served(env: str, log_name: str, model: Callable[[], Path], **settings: Any) -> Iterator[str]:
    """A CPU server of ``model()`` for the tests (its start-up time goes to the terminal
    summary), or the running one the environment variable ``env`` names."""
    given = os.environ.get(env)
    if given:
        yield given
        return
    log = ROOT / "out" / log_name
    log.parent.mkdir(exist_ok=True)
    with VLLMServer(model(), profile="cpu", log_path=log, **settings) as server:
        _startup_seconds.append(server.startup_seconds)
        yield server.base_url


@pytest.fixture(scope="session")
def server_url(tiny_model: Path) -> Iterator[str]:
    """Base URL (``.../v1``) of the real vLLM server the tests use (``QWEN_FAST_TEST_BASE_URL``:
    one already running, serving the tiny model as ``qwen3``)."""
    # A 4,096-token context: room for a 200-label prompt.
    yield from served("QWEN_FAST_TEST_BASE_URL", "test-server.log", lambda: tiny_model, max_model_len=4096)


@pytest.fixture(scope="session")
def head_server_url() -> Iterator[str]:
    """A second real server: a tiny random Qwen3ForSequenceClassification (4 classes) on the
    pooling runner, served as ``qwen3-cls``. ``QWEN_FAST_TEST_HEAD_URL`` reuses a running one."""
    yield from served(
        "QWEN_FAST_TEST_HEAD_URL",
        "test-head-server.log",
        lambda: build_test_model(ROOT / ".models" / "qwen3-tiny-cls", "tiny", num_labels=4),
        served_model_name="qwen3-cls",
    )


@pytest.fixture(scope="session")
def multi_head_server_url() -> Iterator[str]:
    """A third real server: a tiny random multi-label (sigmoid) Qwen3ForSequenceClassification
    with 4 classes, served as ``qwen3-multi``. ``QWEN_FAST_TEST_MULTI_URL`` reuses a running one."""
    yield from served(
        "QWEN_FAST_TEST_MULTI_URL",
        "test-multi-head-server.log",
        lambda: build_test_model(ROOT / ".models" / "qwen3-tiny-multi", "tiny", num_labels=4, multi_label=True),
        served_model_name="qwen3-multi",
    )


@pytest.fixture
def proxy(server_url: str) -> Iterator[FaultProxy]:
    """A recording, fault-injecting proxy in front of the real server."""
    with FaultProxy(server_url.removesuffix("/v1")) as p:
        yield p


@pytest.fixture(scope="session")
def news_texts() -> list[str]:
    """175 distinct short news-like texts."""
    return headlines(175)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for seconds in _startup_seconds:
        terminalreporter.write_line(f"vLLM server start-up (launcher to /health 200): {seconds:.1f} s")
    for what, seconds in _timings:
        terminalreporter.write_line(f"{what}: {seconds:.1f} s")
