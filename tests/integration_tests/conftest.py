"""Integration fixtures: real vLLM servers (CPU, tiny random-weight Qwen3 models) started through
the project's launcher, the shared ones spawned together as soon as the tests are collected.

Set ``QWEN_FAST_TEST_BASE_URL`` (and the other variables in :data:`SERVERS`) to test against a
server that is already running (it must serve the tiny model as ``qwen3``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from langchain_qwen_fast.testing.tiny_model import build_test_model
from tests.support.background import BackgroundJobs, Job
from tests.support.proxy import FaultProxy
from tests.support.servers import PlannedServer

ROOT = Path(__file__).resolve().parents[2]
# One compute thread for torch here and in every process the tests start (the CPU servers' model
# runs on one anyway): with the servers and background jobs beside it, a second thread is often
# starved of its core and holds the first up at every parallel operation.
os.environ.setdefault("OMP_NUM_THREADS", "1")
TINY_MODEL = ROOT / ".models" / "qwen3-tiny"
NEWS_LABELS = list(AG_NEWS_LABELS)
#: The API key the reliability module's own server requires.
RELIABILITY_KEY = "sk-reliability-7f3a9c"
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
    # module (see _SPAWN_AHEAD).
    "multi_head_server_url": PlannedServer(
        "QWEN_FAST_TEST_MULTI_URL",
        _log("test-multi-head-server.log"),
        lambda: build_test_model(ROOT / ".models" / "qwen3-tiny-multi", "tiny", num_labels=4, multi_label=True),
        served_model_name="qwen3-multi",
    ),
    # The tiny model behind vLLM's Rust frontend (one prompt a request).
    "rust_server_url": PlannedServer("QWEN_FAST_TEST_RUST_URL", _log("test-rust-server.log"), _tiny, frontend="rust"),
    # The reliability module's own server, requiring an API key: its crash test kills it and
    # starts another in its place, so it is never one given by the environment.
    "keyed_server": PlannedServer(None, _log("reliability-server.log"), _tiny, api_key=RELIABILITY_KEY),
}
#: Those spawned as soon as the tests are collected, when a collected test uses them.
_SPAWN_AT_START = ("server_url", "head_server_url", "ids_only_server_url")

#: The integration modules that run first, in this order (the others follow in theirs). The first
#: starts a server of its own while the shared servers are the only others (a 24 GiB machine
#: holds about five small CPU servers of ~4 GB each); the capability module runs before the
#: group module, which starts four servers in turn, so that its own server is gone by then.
_RUN_FIRST = (
    "test_token_ids_server.py",
    "test_processes.py",
    "test_report.py",
    "test_reliability.py",
    "test_api.py",
    "test_server.py",
    "test_capabilities.py",
    "test_rust_frontend.py",
)
#: The integration modules that run last, in this order: the ones that wait for background work
#: (see :data:`BACKGROUND`), which by then has had the rest of the run to get done.
_RUN_LAST = ("test_trainer.py", "test_examples.py")

#: Servers of one module, spawned when an earlier module starts: a lone CPU server's start-up
#: keeps one core busy importing and leaves the other to the tests running meanwhile.
_SPAWN_AHEAD = {
    "test_processes.py": ("keyed_server",),
    "test_reliability.py": ("multi_head_server_url",),
    "test_capabilities.py": ("rust_server_url",),
}

#: Work that the integration modules need later, in the background (see
#: :mod:`tests.support.background`). A module plans its jobs with a function ``background_jobs()``
#: that maps the name of a fixture, or of a test, to the jobs it waits for; the jobs that collected
#: tests need are queued in the order the modules run, as soon as the tests are collected.
BACKGROUND = BackgroundJobs(ROOT / "out" / "background", ROOT)
#: Modules whose jobs that start servers of their own are queued later instead, as the module
#: named first starts (and at the latest as their own starts): the two examples that start their
#: own, once the Ray module (the most processes at once) is over. From there the foreground waits
#: on one server's start-up at a time and leaves a core idle, until the trainer module, whose
#: servers then find the memory to boot ahead. Their other jobs are queued with the rest, behind
#: the training runs.
_QUEUE_AHEAD = {"test_outliers.py": ("test_examples.py",)}
_QUEUED_LATER = {module for modules in _QUEUE_AHEAD.values() for module in modules}
#: Modules whose ``servers_ahead(n)`` (their first n servers) is called as each module named first
#: starts (again at each: a server is spawned once, and only while memory allows): the trainer
#: module's first servers boot while the modules before it run, which leave a core to them, and
#: its third from the classifier module's, which leave one most of the time.
_SERVERS_AHEAD = {"test_chat_standard.py": (("test_trainer.py", 2),), "test_classifier.py": (("test_trainer.py", 3),)}
_servers_asked: set[tuple[str, str]] = set()  # (module started, module asked)
_planned: dict[str, list[Job]] = {}  # module file name -> the jobs its collected tests need
_modules: dict[str, Any] = {}  # file name -> the integration module, where tests of it were collected
_background_root: list[Path] = []


def background_work(name: str) -> Path:
    """A folder, the same for the whole run, for a background job's files."""
    if not _background_root:
        _background_root.append(Path(tempfile.mkdtemp(prefix="qwen-fast-tests-")))
    path = _background_root[0] / name
    path.mkdir(exist_ok=True)
    return path


def _plan_background(items: list[pytest.Item]) -> None:
    modules: dict[str, tuple[object, set[str]]] = {}  # file name -> (module, what its tests use)
    for item in items:
        if "integration_tests" in item.path.parts and isinstance(item, pytest.Function):
            used = modules.setdefault(item.path.name, (item.module, set()))[1]
            used.update([*item.fixturenames, item.originalname])
    for file, (module, used) in modules.items():
        _modules[file] = module
        plan = getattr(module, "background_jobs", None)
        jobs = [job for name, jobs in (plan() if plan else {}).items() if name in used for job in jobs]
        if jobs:
            _planned[file] = jobs
            for job in jobs:
                if file not in _QUEUED_LATER or not job.starts_servers:
                    BACKGROUND.queue(job)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The unit layer first, then the integration modules in :data:`_RUN_FIRST`, then the others,
    then those in :data:`_RUN_LAST` (the sort is stable: the tests of a module keep their order)."""

    def rank(item: pytest.Item) -> tuple[bool, int, int]:
        integration = "integration_tests" in item.path.parts
        name = item.path.name  # unit modules of the same names keep their places
        first = _RUN_FIRST.index(name) if integration and name in _RUN_FIRST else len(_RUN_FIRST)
        last = _RUN_LAST.index(name) if integration and name in _RUN_LAST else -1
        return integration, first, last

    items.sort(key=rank)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Spawn the servers that :data:`_SPAWN_AHEAD` plans for the module this test is in, when
    later tests that were collected use them, and those of the later modules
    :data:`_SERVERS_AHEAD` names for it; and queue the background jobs that :data:`_QUEUE_AHEAD`
    names for it and those of its own fixtures (again for each test: spawning or queueing twice
    is a no-op)."""
    if "integration_tests" not in item.path.parts:
        return
    for file in (item.path.name, *_QUEUE_AHEAD.get(item.path.name, ())):
        for job in _planned.get(file, ()):
            BACKGROUND.queue(job)
    for later, count in _SERVERS_AHEAD.get(item.path.name, ()):
        if (item.path.name, later) not in _servers_asked:
            _servers_asked.add((item.path.name, later))
            if later in _modules:
                _modules[later].servers_ahead(count)
    planned = _SPAWN_AHEAD.get(item.path.name, ())
    if planned:
        used = {name for other in item.session.items for name in getattr(other, "fixturenames", ())}
        for name in planned:
            if name in used:
                SERVERS[name].spawn()


def _whole_suite(config: pytest.Config) -> bool:
    """Whether this run is of every test: pytest's test paths, none deselected, none skipped over."""
    narrowed = ("keyword", "markexpr", "deselect", "lf", "failedfirst", "stepwise", "collectonly", "exitfirst")
    return config.args_source is pytest.Config.ArgsSource.TESTPATHS and not any(
        getattr(config.option, option, None) for option in narrowed
    )


def pytest_configure(config: pytest.Config) -> None:
    """On a run of the whole suite, spawn the shared servers as pytest starts, before the tests are
    collected: collecting keeps one core busy and leaves the other to their start-up."""
    if _whole_suite(config):
        for name in _SPAWN_AT_START:
            SERVERS[name].spawn()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Spawn every shared server the collected integration tests use, all at once, before any test
    runs: they boot side by side, and while the unit layer runs (those spawned as pytest started
    and not used are stopped)."""
    if session.config.option.collectonly:
        return
    used = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    for name in _SPAWN_AT_START:
        if name in used:
            SERVERS[name].spawn()
        else:
            SERVERS[name].stop()
    _plan_background(session.items)


def pytest_sessionfinish() -> None:
    """Stop any planned server still up (one spawned for tests that were then not run) and any
    background job still running, and remove the background jobs' files."""
    for planned in SERVERS.values():
        planned.stop()
    BACKGROUND.stop()
    for root in _background_root:
        shutil.rmtree(root, ignore_errors=True)


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
