"""How a call's requests go out, sans-I/O: cut to the windows, one out at the least, retried
through the queue after a backoff, and every item answered or given its error by the deadline."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from langchain_qwen_fast._core.dispatch import (
    MAX_BATCH_SIZE,
    MIN_BATCH_SIZE,
    Deadline,
    Dispatch,
    Piece,
    PromptBatch,
    RetryBudget,
    Send,
    batch_size_for,
)
from langchain_qwen_fast._core.flow import INITIAL_WINDOW, REQUESTS_PER_WINDOW
from langchain_qwen_fast._core.replicas import Replicas
from langchain_qwen_fast.errors import ServerConnectionError, ServerStatusError, ServerTimeoutError


def batch(size: int, per_request: int | None = None) -> PromptBatch:
    return PromptBatch(
        size, lambda start, stop: ("POST", "completions", {"prompt": list(range(start, stop))}), per_request
    )


def dispatch(items: list[Any], replicas: Replicas | None = None, **kwargs: Any) -> Dispatch:
    settings: dict[str, Any] = {"max_requests": 8, "max_attempts": 3, "budget": RetryBudget(), "deadline": None}
    settings |= kwargs
    return Dispatch(items, replicas or Replicas(1), **settings)


def answer(d: Dispatch, replicas: Replicas, send: Send, outcome: Any, at: float) -> None:
    """What a driver does when a try ends: the replica's verdict (answered at once: the
    replicas keep their own clock), then the dispatch's (at the test's time ``at``)."""
    ok = not isinstance(outcome, Exception)
    replicas.release(send.replica, "ok" if ok else "failed", send.prompts, time.monotonic(), send.used)
    d.done(send, outcome, at)


def test_a_fresh_window_cuts_a_batch_into_small_requests_and_holds_the_rest() -> None:
    replicas = Replicas(1)
    d = dispatch([batch(1000)], replicas)
    sends = d.sends(0.0)
    size = INITIAL_WINDOW // REQUESTS_PER_WINDOW
    assert [s.prompts for s in sends] == [size] * REQUESTS_PER_WINDOW
    assert [s.call[2]["prompt"] for s in sends[:2]] == [list(range(size)), list(range(size, 2 * size))]
    assert d.sends(0.0) == []  # the window is full: the rest waits for answers
    answer(d, replicas, sends[0], "reply", 0.1)
    assert [s.prompts for s in d.sends(0.1)] == [size]  # an answer makes room for one more


def test_a_call_with_nothing_out_sends_one_try_whatever_the_windows() -> None:
    replicas = Replicas(1)
    for k in range(10):  # failures cut the window to a single prompt
        replicas.windows[0].failed(0, float(k), float(k) + 0.1)
    d = dispatch([batch(100, per_request=40)], replicas)
    (send,) = d.sends(20.0)
    assert send.prompts == 40 and d.sends(20.0) == []


def test_the_pieces_cover_the_batch_in_order_whatever_order_they_are_answered_in() -> None:
    replicas = Replicas(1)
    d = dispatch([batch(100)], replicas)
    now = 0.0
    while not d.finished():
        sends = d.sends(now)
        for send in reversed(sends):
            now += 0.01
            answer(d, replicas, send, f"reply {send.unit.start}", now)
    (pieces,) = d.results()
    assert [p.start for p in pieces] == sorted(p.start for p in pieces) and pieces[0].start == 0
    assert all(a.stop == b.start for a, b in itertools.pairwise(pieces)) and pieces[-1].stop == 100
    assert all(p.result == f"reply {p.start}" for p in pieces)


def test_a_failed_try_is_queued_again_after_a_backoff_then_kept_once_the_tries_run_out() -> None:
    replicas = Replicas(1)
    d = dispatch([("GET", "models", None)], replicas, max_attempts=3)
    error = ServerStatusError("down", status_code=503)
    now = 0.0
    tries = 0
    while not d.finished():
        (send,) = d.sends(now)
        tries += 1
        answer(d, replicas, send, error, now)
        wait = d.wake_in(now)
        if d.finished():
            break
        assert wait is not None and 0 <= wait <= 4.0 and d.sends(now + wait - 1e-6 if wait else now) == []
        now += wait or 0.0
    assert tries == 3 and d.results() == [error]


def test_retry_after_is_waited_and_a_4xx_is_kept_at_once() -> None:
    replicas = Replicas(1)
    d = dispatch([("GET", "a", None), ("GET", "b", None)], replicas)
    first, second = d.sends(0.0)
    answer(d, replicas, first, ServerStatusError("busy", status_code=429, retry_after=2.5), 0.0)
    refused = ServerStatusError("bad", status_code=400)
    answer(d, replicas, second, refused, 0.0)
    assert d.wake_in(0.0) == pytest.approx(2.5) and d.sends(2.4) == []
    (again,) = d.sends(2.5)
    answer(d, replicas, again, {"ok": True}, 2.6)
    assert d.finished() and d.results() == [{"ok": True}, refused]


def test_a_retry_goes_to_another_replica_and_is_cut_again_at_the_window_of_the_moment() -> None:
    replicas = Replicas(2)
    d = dispatch([batch(16, per_request=None)], replicas, max_requests=1)
    (send,) = d.sends(0.0)
    answer(d, replicas, send, ServerConnectionError("refused"), 0.0)
    (again,) = d.sends(d.wake_in(0.0) or 0.0)
    assert again.replica != send.replica and (again.unit.start, again.unit.stop) == (0, 16)


def test_retries_the_budget_refuses_keep_their_error() -> None:
    budget = RetryBudget(ratio=0.0, min_per_second=0.0, capacity=1)
    replicas = Replicas(1)
    d = dispatch([("GET", "a", None), ("GET", "b", None)], replicas, budget=budget)
    error = ServerTimeoutError("silent")
    for send in d.sends(0.0):
        answer(d, replicas, send, error, 0.0)
    assert budget.refused == 1  # one of the two retried, the other kept its error
    (again,) = d.sends(10.0)
    answer(d, replicas, again, "ok", 10.0)
    assert sorted(map(str, d.results())) == sorted(["ok", str(error)])


def test_at_the_deadline_every_item_left_gets_its_error_and_no_retry_waits_past_it() -> None:
    replicas = Replicas(1)
    deadline = Deadline(10.0, 10.0)
    d = dispatch([batch(200), ("GET", "models", None)], replicas, deadline=deadline, max_requests=2)
    out = d.sends(0.0)
    assert len(out) == 2 and d.wake_in(3.0) == pytest.approx(7.0)
    answer(d, replicas, out[0], ServerStatusError("down", status_code=503, retry_after=30), 3.0)
    assert d.stopped(9.9) is None
    stopped = d.stopped(10.0)
    assert stopped is not None
    d.expire(out[1:], stopped)
    d.done(out[1], "too late", 11.0)  # what a closed try ends with is no longer read
    assert d.finished()
    pieces, models = d.results()
    assert isinstance(models, ServerTimeoutError) and "deadline of 10 s" in str(models)
    first, *rest = pieces
    # its retry would have waited past the deadline: it keeps its own error
    assert (first.start, first.stop) == (0, out[0].prompts) and first.result.status_code == 503
    assert sum(p.stop - p.start for p in pieces) == 200
    assert rest and all(isinstance(p.result, ServerTimeoutError) for p in rest)


def test_servers_that_answer_nothing_for_the_stall_limit_stop_the_call_whole() -> None:
    replicas = Replicas(2)
    d = dispatch([batch(100), ("GET", "models", None)], replicas, stall_limit=60.0)
    out = d.sends(time.monotonic())
    now = time.monotonic()
    assert d.stopped(now + 59) is None and d.wake_in(now) == pytest.approx(60, abs=0.5)
    answer(d, replicas, out[0], "reply", now)  # an answer: the silence starts again
    answered = replicas.last_progress()
    assert d.stopped(answered + 59) is None
    stopped = d.stopped(answered + 61)
    assert stopped is not None and "answered nothing at all for 61 s" in str(stopped)
    d.expire(out[1:], stopped)
    assert d.finished()


def test_plain_calls_count_a_prompt_each_and_max_requests_bounds_them() -> None:
    d = dispatch([("GET", f"item/{n}", None) for n in range(20)], Replicas(1), max_requests=3)
    assert len(d.sends(0.0)) == 3


def test_a_fixed_batch_size_is_kept_and_an_empty_batch_is_done_at_once() -> None:
    d = dispatch([batch(100, per_request=30), batch(0)], Replicas(1))
    assert [s.prompts for s in d.sends(0.0)][:2] == [30, 30]
    assert d.results()[1] == []


@pytest.mark.parametrize(("prompts", "requests", "size"), [(4096, 8, 128), (200, 8, 25), (40, 8, 16), (960, 24, 40)])
def test_a_batch_s_share_of_each_request(prompts: int, requests: int, size: int) -> None:
    assert batch_size_for(prompts, requests) == size
    assert MIN_BATCH_SIZE <= batch_size_for(1, 8) <= MAX_BATCH_SIZE


def test_a_piece_is_a_named_tuple_in_order() -> None:
    assert sorted([Piece(10, 20, "b"), Piece(0, 10, "a")]) == [Piece(0, 10, "a"), Piece(10, 20, "b")]
