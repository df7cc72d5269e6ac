"""Flow control against the real vLLM server behind a proxy that slows it down, stalls it or
silences it: a slow server makes a batch slower, never lost; a stalled one is waited out; a
silent one fails every item in its place by the call's deadline; a replica that slows down
loses its share to the other. Timeouts are scaled down from the defaults to keep CI short:
what matters is how far a fault runs past them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from langchain_qwen_fast import Classification, QwenClassifier, ServerTimeoutError
from langchain_qwen_fast.testing.samples import headlines
from tests.integration_tests.conftest import NEWS_LABELS
from tests.support.fake_vllm import prompts_of
from tests.support.proxy import Fault, FaultProxy


def make(url: Any, **kwargs: Any) -> QwenClassifier:
    return QwenClassifier(labels=NEWS_LABELS, base_url=url, **kwargs)


def texts(count: int, tag: str) -> list[str]:
    """``count`` distinct headlines, none of which the server has seen (its prefix cache
    would answer them faster)."""
    return [f"{tag} {i}: {h}" for i, h in enumerate(headlines(count))]


def forwarded(proxy: FaultProxy) -> int:
    """The prompts of the completions requests the proxy took."""
    return sum(len(prompts_of(r.body["prompt"])[0]) for r in proxy.calls("/v1/completions"))


async def until(condition: Callable[[], bool], seconds: float = 60) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "the condition never came"
        await asyncio.sleep(0.02)


@pytest.fixture
def second_proxy(server_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(server_url.removesuffix("/v1")) as p:
        yield p


async def test_a_server_whose_capacity_drops_tenfold_mid_batch_answers_every_item_once(proxy: FaultProxy) -> None:
    """At a tenth of its speed the server takes longer than the timeout to answer what a
    window held before the drop; every text is answered all the same, each asked once, and
    no try is given up."""
    classifier = make(proxy.base_url, timeout=6)
    await classifier.aprepare()
    before = forwarded(proxy)
    proxy.pace(100)
    batch = texts(150, "drop")
    start = time.monotonic()
    task = asyncio.ensure_future(classifier.abatch(batch, return_exceptions=True))
    await until(lambda: forwarded(proxy) - before >= 50)
    proxy.pace(10)
    results = await task
    print(f"capacity drop: {len(batch)} texts in {time.monotonic() - start:.1f} s")
    assert all(isinstance(r, Classification) for r in results), [r for r in results if isinstance(r, Exception)][:3]
    assert forwarded(proxy) - before == len(batch) and proxy.hung_up == 0


async def test_a_server_that_stalls_past_the_timeout_then_recovers_loses_nothing(proxy: FaultProxy) -> None:
    classifier = make(proxy.base_url, timeout=2)
    await classifier.aprepare()
    batch = texts(300, "stall")
    proxy.pace(150)  # so that the batch is still out when the stall comes
    task = asyncio.ensure_future(classifier.abatch(batch, return_exceptions=True))
    await until(lambda: len(proxy.calls("/v1/completions")) >= 3)
    proxy.standing(Fault.stall(60), seconds=6.5)  # three timeouts and more
    results = await task
    assert all(isinstance(r, Classification) for r in results), [r for r in results if isinstance(r, Exception)][:3]
    assert proxy.hung_up >= 1  # the tries given up were closed, and asked again


async def test_a_server_that_never_answers_fails_every_item_in_place_by_the_deadline(proxy: FaultProxy) -> None:
    classifier = make(proxy.base_url, deadline=3)
    await classifier.aprepare()
    proxy.standing(Fault.stall(3600))
    start = time.monotonic()
    results = await classifier.abatch(texts(50, "silent"), return_exceptions=True)
    took = time.monotonic() - start
    assert all(isinstance(r, ServerTimeoutError) and "deadline of 3 s" in str(r) for r in results)
    assert 3 <= took < 4.5
    await until(lambda: proxy.in_flight == 0, seconds=5)  # every try was closed
    assert proxy.hung_up >= 1
    with pytest.raises(ServerTimeoutError, match="deadline of 3 s"):  # one at a time alike
        classifier.invoke("a text")


async def test_without_a_deadline_a_silent_server_fails_the_batch_whole_once_every_try_would_have_waited(
    proxy: FaultProxy,
) -> None:
    """Not a try at a time (a window's worth of tries, each waiting out its timeout, again and
    again): once the server has answered nothing for as long as a request's every try waits
    (``timeout`` x tries), every item left gets its error at once."""
    classifier = make(proxy.base_url, timeout=1, max_retries=1)
    await classifier.aprepare()
    proxy.standing(Fault.stall(3600))
    start = time.monotonic()
    results = await classifier.abatch(texts(400, "stalled"), return_exceptions=True)
    took = time.monotonic() - start
    assert all(isinstance(r, ServerTimeoutError) for r in results)
    assert any("answered nothing at all" in str(r) for r in results)
    assert took < 4  # two timeouts and a backoff, not a round of them a window's worth at a time


async def test_a_replica_that_slows_down_loses_its_share_to_the_other(
    proxy: FaultProxy, second_proxy: FaultProxy
) -> None:
    classifier = make([proxy.base_url, second_proxy.base_url])
    await classifier.aprepare()
    for p in (proxy, second_proxy):
        p.pace(200)
    batch = texts(1500, "share")
    task = asyncio.ensure_future(classifier.abatch(batch, return_exceptions=True))
    await until(lambda: forwarded(proxy) + forwarded(second_proxy) >= 300)
    second_proxy.pace(20)
    at_slowdown = (forwarded(proxy), forwarded(second_proxy))
    results = await task
    assert all(isinstance(r, Classification) for r in results)
    fast, slow = forwarded(proxy) - at_slowdown[0], forwarded(second_proxy) - at_slowdown[1]
    print(f"after the slow-down: {fast} prompts to the fast replica, {slow} to the slow one")
    assert slow < 0.25 * (fast + slow)
