"""The process policy: automatic collection paused while any thread holds the pause, the
thresholds found restored when the last holder leaves, an application's own choices (the
collector on or off, its thresholds) never undone; and freezes that release only their own."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from langchain_qwen_fast.process import ForeignFreeze, collector_paused, resume_after_fork


@pytest.fixture(autouse=True)
def collector_as_found() -> Iterator[None]:
    enabled, thresholds = gc.isenabled(), gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    (gc.enable if enabled else gc.disable)()


def collections_while(make_garbage: Any) -> int:
    """How many automatic collections ran while ``make_garbage`` ran."""
    ran: list[str] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            ran.append(phase)

    gc.callbacks.append(count)
    try:
        make_garbage()
    finally:
        gc.callbacks.remove(count)
    return len(ran)


def cycles() -> None:
    """Many short-lived containers, each in a cycle: enough to set off collections."""
    for _ in range(20_000):
        a: list[Any] = []
        a.append(a)


def test_no_automatic_collection_inside_and_the_thresholds_as_found_after_even_after_an_error() -> None:
    gc.set_threshold(700, 10, 10)
    assert collections_while(cycles) > 0
    with collector_paused():
        assert collections_while(cycles) == 0
        assert gc.isenabled()  # the pause leaves the application's switch alone
    assert gc.get_threshold() == (700, 10, 10) and collections_while(cycles) > 0
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_two_threads_in_the_pause_keep_it_until_the_last_leaves_and_leave_it_as_found() -> None:
    found = gc.get_threshold()
    first_in, second_in, first_out, second_may_leave = (threading.Event() for _ in range(4))
    seen_by_second: list[int] = []

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with collector_paused():
            second_in.set()
            first_out.wait(5)
            seen_by_second.append(collections_while(cycles))  # the first has left: still paused
            second_may_leave.wait(5)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    first_out.wait(5)
    second_may_leave.set()
    for thread in threads:
        thread.join(5)
    assert seen_by_second == [0]
    assert gc.get_threshold() == found and collections_while(cycles) > 0


def test_many_threads_pausing_at_once_leave_the_collector_as_found() -> None:
    found = gc.get_threshold()

    def pause_often() -> None:
        for _ in range(2_000):
            with collector_paused():
                pass

    threads = [threading.Thread(target=pause_often) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert gc.get_threshold() == found and gc.isenabled()


def test_an_application_that_turns_the_collector_off_or_on_during_a_pause_keeps_its_choice() -> None:
    with collector_paused():
        gc.disable()
    assert not gc.isenabled()
    with collector_paused():
        gc.enable()
    assert gc.isenabled()


def test_a_collector_the_application_turned_off_stays_off() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_thresholds_the_application_sets_during_a_pause_stand() -> None:
    with collector_paused():
        gc.set_threshold(5_000, 20, 20)
    assert gc.get_threshold() == (5_000, 20, 20)


def test_a_foreign_freeze_is_undone_only_where_nothing_was_frozen_before() -> None:
    gc.unfreeze()  # the test harness's own freeze of the modules so far (it freezes again later)
    try:
        nothing_before = ForeignFreeze()
        gc.freeze()  # the third party's start-up
        nothing_before.undo()
        assert gc.get_freeze_count() == 0

        gc.freeze()  # the host's own
        hosts = gc.get_freeze_count()
        something_before = ForeignFreeze()
        gc.freeze()
        something_before.undo()
        assert gc.get_freeze_count() >= hosts > 0
    finally:
        gc.freeze()


def test_a_child_forked_inside_a_pause_collects_again_once_it_resumes() -> None:
    found = gc.get_threshold()
    read, write = os.pipe()
    with collector_paused():
        pid = os.fork()
        if pid == 0:  # the child: the thread that holds the pause is not here
            try:
                paused = gc.get_threshold()[0] == 0
                resume_after_fork()
                os.write(
                    write, f"{int(paused)} {int(gc.get_threshold() == found)} {collections_while(cycles)}".encode()
                )
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    os.close(write)
    inherited, restored, collections = (int(x) for x in os.read(read, 100).split())
    os.close(read)
    assert inherited and restored and collections > 0
    assert gc.get_threshold() == found
