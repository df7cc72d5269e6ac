"""InProcessVLLM: the tiny model's engine and vLLM's own app inside the test process, reached
through an httpx transport, answers the classifier as the served model does.

Both engines are configured alike: the in-process one gets the very flags (less host and port)
and environment that the launcher gives the session's server (``server_url``), so their scores
agree to float noise. One engine serves the whole module, on the session's event loop (where
every test runs: ``asyncio_default_*_loop_scope = "session"``), since an engine belongs to the
loop that started it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from langchain_qwen_fast import Classification, QwenClassifier
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving.in_process import IN_PROCESS_BASE_URL, InProcessVLLM
from langchain_qwen_fast.serving.launcher import VLLMServer
from langchain_qwen_fast.serving.profiles import drop_flags
from tests.integration_tests.conftest import NEWS_LABELS, SERVERS, record_seconds

#: Probabilities of the two engines may differ by float noise only.
TOLERANCE = 1e-3


def served_alike(model: Path) -> tuple[list[str], dict[str, str]]:
    """The ``vllm serve`` flags and environment the launcher gives the session's server
    (``server_url``), less the host and port, which an engine in this process has none of."""
    settings = SERVERS["server_url"].settings
    server = VLLMServer(model, profile="cpu", **settings)
    command = server.command()
    flags = drop_flags(command[command.index("serve") + 1 :], ["--host", "--port"])
    return flags, {**server.profile.env, **server.command_env}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def engine(tiny_model: Path) -> AsyncIterator[InProcessVLLM]:
    flags, env = served_alike(tiny_model)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():  # read by the engine core (KV cache size, threads)
            patch.setenv(name, value)
        started = time.monotonic()
        async with InProcessVLLM(flags) as engine:
            record_seconds("in-process vLLM start-up (start() to ready)", time.monotonic() - started)
            yield engine


class Recording(httpx.AsyncBaseTransport, httpx.BaseTransport):
    """Passes every request on to ``inner``, noting its host and path."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seen: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.host, request.url.path))
        return await self.inner.handle_async_request(request)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.host, request.url.path))
        return self.inner.handle_request(request)


def classifier(url: str, **kwargs: Any) -> QwenClassifier:
    return QwenClassifier(labels=NEWS_LABELS, model="qwen3", base_url=url, **kwargs)


def assert_same(got: list[Classification], expected: list[Classification]) -> None:
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.labels == theirs.labels
        assert mine.label == theirs.label
        assert mine.scoring == theirs.scoring
        assert mine.scores is not None and theirs.scores is not None
        assert set(mine.scores) == set(theirs.scores)
        for label, probability in theirs.scores.items():
            assert mine.scores[label] == pytest.approx(probability, abs=TOLERANCE)


async def test_single_label_matches_the_served_model(
    engine: InProcessVLLM, server_url: str, news_texts: list[str]
) -> None:
    texts = news_texts[:24]
    recording = Recording(engine.transport)
    mine = await classifier(engine.base_url, http_transport=recording).abatch(texts)
    theirs = await classifier(server_url).abatch(texts)
    assert_same(mine, theirs)
    # Each text has scores of its own (random weights give most texts one label): a mix-up
    # of results would show.
    assert len({tuple(sorted(result.scores.items())) for result in theirs if result.scores}) == len(texts)
    # Everything, the set-up's probing included, went to the engine in this process: the host is
    # one no resolver knows, and the set-up's model list was among the requests.
    assert {host for host, _ in recording.seen} == {httpx.URL(IN_PROCESS_BASE_URL).host}
    assert "/v1/models" in [path for _, path in recording.seen]
    assert len(recording.seen) > 1


async def test_multi_label_matches_the_served_model(
    engine: InProcessVLLM, server_url: str, news_texts: list[str]
) -> None:
    texts = news_texts[24:40]
    mine = await classifier(engine.base_url, http_transport=engine.transport, multi_label=True).abatch(texts)
    theirs = await classifier(server_url, multi_label=True).abatch(texts)
    assert_same(mine, theirs)
    assert all(result.multi_label for result in mine)


async def test_engine_level_calls_and_calls_from_other_threads_and_loops(
    engine: InProcessVLLM, news_texts: list[str]
) -> None:
    texts = news_texts[40:48]
    model = classifier(engine.base_url, http_transport=engine.transport)
    through_engine = await model.engine.aclassify(texts)
    # A blocking batch from a worker thread is handed to the engine's loop (running here), and so
    # are the requests of an event loop of another thread.
    blocking = await asyncio.to_thread(model.batch, texts)
    assert_same(blocking, through_engine)
    elsewhere = await asyncio.to_thread(asyncio.run, model.abatch(texts))
    assert_same(elsewhere, through_engine)
    # On the loop's own thread a blocking call would wait on itself: refused, never the network.
    fresh = classifier(engine.base_url, http_transport=engine.transport)
    with pytest.raises(ConfigurationError, match="event-loop thread"):
        fresh.invoke(texts[0])


async def test_bad_flags_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="no-such-flag"):
        await InProcessVLLM(["--no-such-flag"]).start()
    with pytest.raises(ConfigurationError, match="api-server-count"):
        await InProcessVLLM(["some-model", "--api-server-count", "2"]).start()
    stopped = InProcessVLLM(["some-model"])
    with pytest.raises(ConfigurationError, match="not running"):
        await stopped.transport.handle_async_request(httpx.Request("GET", f"{stopped.base_url}/models"))
