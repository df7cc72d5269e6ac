"""The client's circuit breaking and its cache against the real vLLM server: a replica that
answers 503 at once is ejected and loses its share of first tries; retries stay within their
budget; a cache that fails costs no results; a failed set-up is shared by its waiters."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest

from langchain_qwen_fast import Classification, QwenClassifier, ServerStatusError
from langchain_qwen_fast.caches import InMemoryCache
from tests.integration_tests.conftest import NEWS_LABELS
from tests.support.proxy import Fault, FaultProxy


def make(url: Any, **kwargs: Any) -> QwenClassifier:
    return QwenClassifier(labels=NEWS_LABELS, base_url=url, **kwargs)


async def test_a_replica_answering_503_is_ejected_and_nothing_is_lost(
    proxy: FaultProxy, server_url: str, news_texts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas of one real server: one straight, one through the proxy answering 503 at
    once. Every text is classified either way; with ejection the failing replica gets a small
    share of the first tries, without it (side by side) most of them."""
    from langchain_qwen_fast._core import transport

    proxy.standing(Fault.http(503, message="overloaded"))
    shares = {}
    for ejection in (False, True):
        if not ejection:
            monkeypatch.setattr(transport.Replicas, "__init__", _never_ejecting(transport.Replicas.__init__))
        else:
            monkeypatch.undo()
        classifier = make([proxy.base_url, server_url], batch_size=1, max_retries=3)
        await classifier.aprepare()
        start = classifier.engine.first_tries()
        results = await classifier.abatch(news_texts, return_exceptions=True)
        assert all(isinstance(r, Classification) for r in results)
        tries = [b - a for a, b in zip(start, classifier.engine.first_tries())]
        shares[ejection] = tries[0] / sum(tries)
    print(f"first tries to the replica answering 503: {shares[False]:.3f} without ejection, {shares[True]:.3f} with")
    assert shares[True] < 0.2 and shares[True] < shares[False] / 2, shares


def _never_ejecting(init: Any) -> Any:
    def patched(self: Any, count: int, **kwargs: Any) -> None:
        init(self, count, max_failures=10**9)

    return patched


async def test_an_outage_costs_no_more_tries_than_the_retry_budget_allows(proxy: FaultProxy) -> None:
    proxy.standing(Fault.http(503, message="down"))
    classifier = make(proxy.base_url, max_retries=5)
    results = await asyncio.gather(*(classifier.ainvoke(t) for t in ["a", "b", "c"]), return_exceptions=True)
    assert all(isinstance(r, ServerStatusError) and r.status_code == 503 for r in results)
    # One set-up, tried once and retried at most max_retries times; its waiters did not try again.
    assert len(proxy.calls("/v1/models")) <= 6


class LockedCache(InMemoryCache):
    def _get(self, keys: Any) -> dict[str, dict[str, Any]]:
        raise sqlite3.OperationalError("database is locked")

    def _put(self, values: Any) -> None:
        raise sqlite3.OperationalError("database is locked")


def test_a_failing_cache_costs_no_results_on_the_real_server(server_url: str, news_texts: list[str]) -> None:
    results = make(server_url, cache=LockedCache()).batch(news_texts[:40], return_exceptions=True)
    assert all(isinstance(r, Classification) for r in results)
    assert [r.label for r in results] == [r.label for r in make(server_url).batch(news_texts[:40])]


@pytest.mark.parametrize("code", [401, 404])
def test_an_answer_the_same_for_every_prompt_is_not_split(proxy: FaultProxy, code: int) -> None:
    classifier = make(proxy.base_url, batch_size=64, max_retries=0)
    classifier.prepare()
    before = len(proxy.calls("/v1/completions"))
    proxy.inject("/v1/completions", Fault.http(code))
    results = classifier.batch([f"text {i}" for i in range(64)], return_exceptions=True)
    assert all(isinstance(r, ServerStatusError) and r.status_code == code for r in results)
    assert len(proxy.calls("/v1/completions")) - before == 1
