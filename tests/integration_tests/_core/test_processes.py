"""``client_processes``: a large batch spread over worker processes, against the real server."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from langchain_qwen_fast import Classification, InvalidInputError, QwenClassifier
from langchain_qwen_fast._core import processes
from langchain_qwen_fast._core.processes import MIN_ITEMS_PER_PROCESS
from tests.integration_tests.conftest import NEWS_LABELS

#: A batch spreads over the workers from this many items a worker on, in the tests that check
#: what a spread batch gives rather than how it behaves at the real threshold: the same
#: shares, order and errors, from a tenth of the items.
SMALL_SHARE = 96


@pytest.fixture
def small_shares(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(processes, "MIN_ITEMS_PER_PROCESS", SMALL_SHARE)
    return SMALL_SHARE


@pytest.mark.parametrize("token_ids", [False, True], ids=["text", "token-ids"])
async def test_processes_give_what_one_process_gives_in_order(
    server_url: str, tiny_model: Path, news_texts: list[str], token_ids: bool, small_shares: int
) -> None:
    texts = (news_texts * (2 * small_shares // len(news_texts) + 1))[: 2 * small_shares + 40]
    texts = [f"{i}: {t}" for i, t in enumerate(texts)]  # distinct, so order is visible
    inputs: list[object] = list(texts)
    inputs[7] = ""  # invalid items keep their errors in their places
    inputs[-3] = {"no": "text"}
    settings = {"labels": NEWS_LABELS, "base_url": server_url, "model": "qwen3"}
    if token_ids:
        settings["tokenizer_path"] = str(tiny_model)
    here = QwenClassifier(**settings)
    spread = QwenClassifier(**settings, client_processes=2)
    try:
        spread.prepare()
        workers = {p.pid for p in multiprocessing.active_children()}
        assert len(workers) >= 2
        expected = await here.abatch(inputs, return_exceptions=True)
        for got in (await spread.abatch(inputs, return_exceptions=True), spread.batch(inputs, return_exceptions=True)):
            assert len(got) == len(inputs)
            for a, b in zip(expected, got, strict=True):
                if isinstance(a, Exception):
                    assert type(b) is type(a) and str(b) == str(a)
                else:
                    assert isinstance(b, Classification) and b.label == a.label
                    assert b.scores == pytest.approx(a.scores, abs=2e-3)
            assert isinstance(got[7], InvalidInputError) and isinstance(got[-3], InvalidInputError)
        # The same workers did the work: none was started again.
        assert workers <= {p.pid for p in multiprocessing.active_children()}
    finally:
        spread.close()
        here.close()
    assert not multiprocessing.active_children()


def test_small_batches_run_here_and_watched_batches_keep_their_runs_here(
    server_url: str, news_texts: list[str]
) -> None:
    from langchain_core.callbacks import BaseCallbackHandler

    class Count(BaseCallbackHandler):
        def __init__(self) -> None:
            self.ends = 0

        def on_chain_end(self, outputs: object, **kwargs: object) -> None:
            self.ends += 1

    spread = QwenClassifier(labels=NEWS_LABELS, base_url=server_url, model="qwen3", client_processes=2)
    try:
        assert len(spread.batch(news_texts[:50])) == 50
        assert not multiprocessing.active_children()  # too small to spread: no worker started
        texts = (news_texts * (2 * MIN_ITEMS_PER_PROCESS // len(news_texts) + 1))[: 2 * MIN_ITEMS_PER_PROCESS]
        counter = Count()
        results = spread.batch(texts, {"callbacks": [counter]})
        # classified by the workers, every item's run opened and closed here
        assert len(results) == len(texts) and counter.ends == len(texts)
        assert all(r.label in NEWS_LABELS for r in results) and multiprocessing.active_children()
    finally:
        spread.close()


async def test_a_worker_killed_mid_batch_loses_no_item(server_url: str, news_texts: list[str]) -> None:
    import asyncio
    import os
    import signal

    texts = [f"{i}: {t}" for i, t in enumerate((news_texts * 200)[: 2 * MIN_ITEMS_PER_PROCESS])]
    here = QwenClassifier(labels=NEWS_LABELS, base_url=server_url, model="qwen3")
    spread = QwenClassifier(labels=NEWS_LABELS, base_url=server_url, model="qwen3", client_processes=2)
    try:
        spread.prepare()
        batch = asyncio.ensure_future(spread.abatch(texts))
        await asyncio.sleep(1.0)
        victim = multiprocessing.active_children()[0].pid
        assert victim is not None and not batch.done()  # killed while the batch runs
        os.kill(victim, signal.SIGKILL)
        got = await batch
        expected = await here.abatch(texts)
        assert [r.label for r in got] == [r.label for r in expected]
        for a, b in zip(expected, got, strict=True):
            assert b.scores == pytest.approx(a.scores, abs=2e-3)
    finally:
        spread.close()
        here.close()
