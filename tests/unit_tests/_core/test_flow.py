"""A replica's window: it starts small, doubles while answers come back in time, holds what
it is used for, and shrinks when answers come late (in proportion) or tries fail, once a round
trip."""

from __future__ import annotations

import pytest

from langchain_qwen_fast._core.flow import (
    DEFAULT_CEILING,
    FAILURE_CUT,
    INITIAL_WINDOW,
    LATE_CUT,
    REQUESTS_PER_WINDOW,
    Window,
)


def round_trip(window: Window, at: float, latency: float, requests: int = REQUESTS_PER_WINDOW) -> float:
    """A round trip of a window kept full, as a batch keeps it: its tries sent at ``at`` (into
    a window already half full with the round before's, as in a stream of requests) and
    answered ``latency`` later; returns when the last was answered."""
    size = max(1, int(window.limit) // requests)
    window.in_flight += int(window.limit) // 2  # the round before's, still out
    sent = [(size, window.take(size)) for _ in range(requests)]
    window.in_flight -= int(window.limit) // 2
    for prompts, used in sent:
        window.answered(prompts, at, at + latency, used)
    return at + latency


@pytest.mark.parametrize(("latency", "factor"), [(0.1, 3), (3.0, 2)])
def test_a_window_starts_small_and_grows_each_round_trip_that_answers_in_time(latency: float, factor: int) -> None:
    """Answers far inside the target (under half) triple the window, others double it."""
    window = Window(DEFAULT_CEILING, target=5.0)
    assert window.limit == INITIAL_WINDOW and window.room() == INITIAL_WINDOW and window.starting
    now = 0.0
    limits = []
    for _ in range(6):
        now = round_trip(window, now, latency)
        limits.append(window.limit)
    grown = [INITIAL_WINDOW * factor**k for k in range(1, 7)]
    assert limits == [min(g, DEFAULT_CEILING) for g in grown]
    round_trip(window, now, latency)
    assert window.limit == DEFAULT_CEILING and window.in_flight == 0  # never past the ceiling


def test_a_window_the_load_does_not_fill_does_not_grow() -> None:
    window = Window(DEFAULT_CEILING, target=5.0)
    for k in range(10):
        used = window.take(4)  # a few prompts at a time: the window is never half full
        window.answered(4, k, k + 0.1, used)
    assert window.limit == INITIAL_WINDOW


def test_late_answers_cut_the_window_in_proportion_once_a_round_trip() -> None:
    window = Window(DEFAULT_CEILING, target=5.0)
    round_trip(window, 0.0, 0.1)  # 128
    before = window.limit
    round_trip(window, 1.0, 7.5)  # late by half again: cut to 5 / 7.5 of itself, once
    assert window.limit == pytest.approx(before * 5 / 7.5) and not window.starting
    limit = window.limit
    round_trip(window, 9.0, 100.0)  # far later: at most a halving
    assert window.limit == pytest.approx(limit * FAILURE_CUT)
    limit = window.limit
    round_trip(window, 110.0, 5.2)  # a little late: at least a tenth off
    assert window.limit == pytest.approx(limit * LATE_CUT)


def test_answers_to_tries_sent_before_a_cut_do_not_cut_again() -> None:
    window = Window(DEFAULT_CEILING, target=5.0)
    sent = [window.take(8) for _ in range(8)]
    window.failed(8, 0.0, 10.0)  # the first failure cuts
    assert window.limit == INITIAL_WINDOW * FAILURE_CUT
    for used in sent[1:]:
        window.answered(8, 0.0, 10.0, used)  # the rest of that round trip, late too
    assert window.limit == INITIAL_WINDOW * FAILURE_CUT and window.in_flight == 0
    window.failed(0, 11.0, 12.0)  # a try sent after the cut: cuts again
    assert window.limit == INITIAL_WINDOW * FAILURE_CUT**2


def test_after_a_cut_a_window_grows_by_an_eighth_a_round_trip_and_never_under_one() -> None:
    window = Window(DEFAULT_CEILING, target=5.0)
    for k in range(20):
        window.failed(0, float(k), float(k) + 0.5)
    assert window.limit == 1.0 and window.room() == 1
    window = Window(DEFAULT_CEILING, target=5.0)
    window.failed(0, 0.0, 1.0)
    cut = window.limit
    round_trip(window, 2.0, 0.1)
    assert window.limit == pytest.approx(cut * (1 + 1 / REQUESTS_PER_WINDOW))


def test_load_and_room_follow_what_is_in_flight() -> None:
    window = Window(100, target=5.0)
    assert window.limit == INITIAL_WINDOW
    window.take(16)
    assert window.room() == INITIAL_WINDOW - 16 and window.load() == pytest.approx(16 / INITIAL_WINDOW)
    window.take(100)
    assert window.room() == 0  # over the limit (a call with nothing out sends one anyway)
