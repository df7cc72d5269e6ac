"""Client processes: shares, merging, dead workers, errors crossing processes, what may travel."""

from __future__ import annotations

import functools
import os
import pickle
from typing import Any

import httpx
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast._core.processes import (
    MIN_ITEMS_PER_PROCESS,
    SHARES_PER_PROCESS,
    ClientProcesses,
    merge,
    processes_for,
    shares,
)
from langchain_qwen_fast.caches import InMemoryCache
from langchain_qwen_fast.errors import ContextLengthError, LabelParseError, QwenFastError, ServerStatusError
from tests.support.echo_worker import DIE_ON, EchoEngine


def test_shares_cover_every_item_once_in_order() -> None:
    for count in (0, 1, 7, 1024, 4099):
        for processes in (2, 3, 8):
            spans = shares(count, processes)
            assert len(spans) == processes
            assert [i for span in spans for i in span] == list(range(count))
            assert max(map(len, spans)) - min(map(len, spans)) <= 1


def test_small_batches_stay_in_this_process() -> None:
    assert processes_for(MIN_ITEMS_PER_PROCESS * 2 - 1, 4) == 1
    assert processes_for(MIN_ITEMS_PER_PROCESS * 2, 4) == 2
    assert processes_for(MIN_ITEMS_PER_PROCESS * 100, 4) == 4


def test_merge_marks_a_lost_share() -> None:
    results, lost = merge(5, [["a", "b", "c"], None])
    assert results == ["a", "b", "c", None, None]
    assert lost == [3, 4]
    results, lost = merge(5, [["a", "b"], ["c", "d"]])  # a short share counts as lost, never shifts
    assert lost == [0, 1, 2] and results == [None, None, None, "c", "d"]


async def test_a_pool_answers_in_order_and_outlives_its_workers() -> None:
    """One pool's life (each worker spawn costs seconds, so one test): shares, several a
    process, answered in order with the load shared out; workers killed between batches replaced; a worker dying
    mid-batch losing only its share; the pool usable again after."""
    import multiprocessing
    import signal

    pool = ClientProcesses(EchoEngine, processes=2)
    try:
        texts = [f"t{i}" for i in range(11)]
        outcomes = pool.classify(texts, in_flight=9, parts=2)
        # several shares a process, so results cross back while later shares are out; the
        # requests in flight shared out by the processes (one share at a time in each)
        assert len(outcomes) == 2 * SHARES_PER_PROCESS
        results, lost = merge(len(texts), outcomes)
        assert lost == [] and [text for _, text, _ in results] == texts
        assert {in_flight for _, _, in_flight in results} == {5}  # 9 in flight shared out
        first = {pid for pid, _, _ in results}
        assert os.getpid() not in first

        killed = multiprocessing.active_children()
        for worker in killed:
            os.kill(worker.pid or 0, signal.SIGKILL)
        for worker in killed:
            worker.join(10)
        # The next batch either finds the pool known broken and starts a fresh one, or (the
        # pool's manager thread not having noticed yet) gets its shares back as lost: never a
        # wrong result. The batch after it runs on fresh workers and loses nothing.
        results, lost = merge(4, pool.classify(["a", "b", "c", "d"], in_flight=2, parts=2))
        assert all(results[i][1] == "abcd"[i] for i in range(4) if i not in lost)
        results, lost = merge(4, pool.classify(["a", "b", "c", "d"], in_flight=2, parts=2))
        assert lost == [] and [text for _, text, _ in results] == ["a", "b", "c", "d"]
        assert not {pid for pid, _, _ in results} & first  # a fresh pool

        dying = [f"d{i}" for i in range(7)] + [DIE_ON] + [f"d{i}" for i in range(8, 16)]
        outcomes = await pool.aclassify(dying, in_flight=4, parts=2)
        results, lost = merge(len(dying), outcomes)
        assert 7 in lost  # the dying text's share (others may have been lost with the pool)
        assert all(results[i][1] == dying[i] for i in range(len(dying)) if i not in lost)
        again = pool.classify(["x"] * 4, in_flight=2, parts=2)
        results, lost = merge(4, again)
        assert lost == [] and [text for _, text, _ in results] == ["x"] * 4
    finally:
        pool.close()


def test_repr_shows_no_configuration() -> None:
    pool = ClientProcesses(functools.partial(EchoEngine, api_key="sk-secret"), processes=2)
    assert "sk-secret" not in repr(pool) and "api_key" not in repr(pool)


@pytest.mark.parametrize(
    "error",
    [
        QwenFastError("plain"),
        ContextLengthError("too long", tokens=9000, limit=4000),
        ServerStatusError("busy", status_code=503, retry_after=1.5),
        LabelParseError("no label", reply="maybe"),
    ],
)
def test_errors_cross_processes_whole(error: QwenFastError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error) and back.__dict__ == error.__dict__


@pytest.mark.parametrize(
    "extra",
    [
        {"cache": InMemoryCache()},
        {"http_transport": httpx.MockTransport(lambda r: httpx.Response(200))},
    ],
)
def test_what_cannot_travel_is_refused(extra: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=f"client_processes=2 .* {next(iter(extra))} cannot go"):
        QwenClassifier(labels=["a", "b"], base_url="http://127.0.0.1:9/v1", client_processes=2, **extra)
