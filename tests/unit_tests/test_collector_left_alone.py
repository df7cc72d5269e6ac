"""The library leaves the process's garbage collector to the application: a batch neither
turns it off or on, nor freezes or unfreezes objects, and a choice the application makes
while a batch runs on another thread is what stands after it."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from langchain_qwen_fast import Classification, QwenClassifier
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from tests.support.fake_vllm import FakeVLLM

COLLECTOR_CALLS = ("disable", "enable", "set_threshold", "freeze", "unfreeze")


class Collector:
    """The ``gc`` module's switches, each call recorded; a thread of the batch that turns the
    collector off waits there until the application has made its own choice."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real: dict[str, Callable[..., Any]] = {name: getattr(gc, name) for name in COLLECTOR_CALLS}
        self.calls: list[str] = []
        self.library_paused = threading.Event()
        self.application_chose = threading.Event()
        for name in COLLECTOR_CALLS:
            monkeypatch.setattr(gc, name, self._recorded(name))

    def _recorded(self, name: str) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            self.calls.append(name)
            result = self.real[name](*args)
            if name == "disable":
                self.library_paused.set()
                self.application_chose.wait(5)
            return result

        return call


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    enabled = gc.isenabled()
    recorded = Collector(monkeypatch)
    yield recorded
    (recorded.real["enable"] if enabled else recorded.real["disable"])()


def classifier(handler: Callable[[httpx.Request], httpx.Response]) -> QwenClassifier:
    return QwenClassifier(
        labels=list(AG_NEWS_LABELS),
        base_url="http://vllm.test/v1",
        model="qwen3",
        http_transport=httpx.MockTransport(handler),
    )


def test_the_collector_the_application_turns_off_while_a_batch_runs_stays_off(collector: Collector) -> None:
    fake = FakeVLLM()
    in_flight = threading.Event()
    texts = headlines(64)
    first_text = json.dumps(texts[0])[1:-1].encode()

    def server(request: httpx.Request) -> httpx.Response:
        if first_text in request.content and not in_flight.is_set():
            in_flight.set()  # the batch's first request waits for the application's choice
            collector.application_chose.wait(5)
        return fake(request)

    results: list[Any] = []
    batch = threading.Thread(target=lambda: results.extend(classifier(server).batch(texts)))
    batch.start()
    deadline = time.monotonic() + 10
    while not (collector.library_paused.is_set() or in_flight.is_set()) and time.monotonic() < deadline:
        time.sleep(0.001)
    collector.real["disable"]()  # the application's choice, made while the batch runs
    collector.application_chose.set()
    batch.join(30)
    assert len(results) == len(texts) and all(isinstance(r, Classification) for r in results)
    assert not gc.isenabled()
    assert collector.calls == []


def test_an_async_batch_leaves_the_collector_alone(collector: Collector) -> None:
    collector.application_chose.set()
    results = asyncio.run(classifier(FakeVLLM()).abatch(headlines(64)))
    assert all(isinstance(r, Classification) for r in results)
    assert collector.calls == []
