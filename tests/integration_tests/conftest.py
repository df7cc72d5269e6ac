"""Integration fixtures: real vLLM servers (CPU, tiny random-weight Qwen3 models) started through
the project's launcher, the shared ones spawned together as soon as the tests are collected.

Set ``QWEN_FAST_TEST_BASE_URL`` (and the other variables in :data:`SERVERS`) to test against a
server that is already running (it must serve the tiny model as ``qwen3``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from langchain_qwen_fast.testing.tiny_model import build_test_model
from tests.support.proxy import FaultProxy
from tests.support.servers import PlannedServer

ROOT = Path(__file__).resolve().parents[2]
TINY_MODEL = ROOT / ".models" / "qwen3-tiny"
NEWS_LABELS = list(AG_NEWS_LABELS)
_startup_seconds: list[float] = []  # printed in the terminal summary
_timings: list[tuple[str, float]] = []  # (what, seconds), printed in the terminal summary


def _tiny() -> Path:
    return build_test_model(TINY_MODEL, "tiny")


def _log(name: str) -> Path:
    return ROOT / "out" / name


#: The servers that several modules share, or that the first module needs, by fixture name.
#: Each fixture's variable names a server that is already running, to test against it instead.
SERVERS = {
    # A 4,096-token context: room for a 200-label prompt.
    "server_url": PlannedServer("QWEN_FAST_TEST_BASE_URL", _log("test-server.log"), _tiny, max_model_len=4096),
    # A tiny random Qwen3ForSequenceClassification (4 classes) on the pooling runner.
    "head_server_url": PlannedServer(
        "QWEN_FAST_TEST_HEAD_URL",
        _log("test-head-server.log"),
        lambda: build_test_model(ROOT / ".models" / "qwen3-tiny-cls", "tiny", num_labels=4),
        served_model_name="qwen3-cls",
    ),
    # The tiny model without a tokenizer: token-id prompts only (its module runs first, then it stops).
    "ids_only_server_url": PlannedServer(
        "QWEN_FAST_TEST_IDS_ONLY_URL",
        _log("test-ids-only-server.log"),
        _tiny,
        max_model_len=4096,
        extra_args=["--skip-tokenizer-init"],
    ),
    # A tiny random multi-label (sigmoid) Qwen3ForSequenceClassification, 4 classes, for one
    # module: spawned when that module starts, not with the others (memory).
    "multi_head_server_url": PlannedServer(
        "QWEN_FAST_TEST_MULTI_URL",
        _log("test-multi-head-server.log"),
        lambda: build_test_model(ROOT / ".models" / "qwen3-tiny-multi", "tiny", num_labels=4, multi_label=True),
        served_model_name="qwen3-multi",
    ),
}
#: Those spawned as soon as the tests are collected, when a collected test uses them.
_SPAWN_AT_START = ("server_url", "head_server_url", "ids_only_server_url")

#: Modules that start a server of their own and run first, while the shared servers are the only
#: others: a 24 GiB machine holds about five small CPU servers (~4 GB each).
_RUN_FIRST = ("test_token_ids_server.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Those modules' tests first among the integration tests (the order is kept otherwise)."""
    items.sort(key=lambda item: ("integration_tests" in item.path.parts, item.path.name not in _RUN_FIRST))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Spawn every shared server the collected integration tests use, all at once, before any test
    runs: they boot side by side, and while the unit layer runs."""
    if session.config.option.collectonly:
        return
    used = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    for name in _SPAWN_AT_START:
        if name in used:
            SERVERS[name].spawn()


def pytest_sessionfinish() -> None:
    """Stop any planned server still up (one spawned for tests that were then not run)."""
    for planned in SERVERS.values():
        planned.stop()


def record_seconds(what: str, seconds: float) -> None:
    """Note a duration for the terminal summary (never asserted: these machines are noisy)."""
    _timings.append((what, seconds))


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return _tiny()


def served(name: str) -> Iterator[str]:
    """The URL of the planned server ``name`` (see :data:`SERVERS`), stopped when the fixture ends."""
    planned = SERVERS[name]
    try:
        yield planned.url()
    finally:
        if planned.startup_seconds is not None:
            _startup_seconds.append(planned.startup_seconds)
        planned.stop()


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """Base URL (``.../v1``) of the real vLLM server most tests use: the tiny model as ``qwen3``."""
    yield from served("server_url")


@pytest.fixture(scope="session")
def head_server_url() -> Iterator[str]:
    """A second real server: a tiny random Qwen3ForSequenceClassification (4 classes) on the
    pooling runner, served as ``qwen3-cls``."""
    yield from served("head_server_url")


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
