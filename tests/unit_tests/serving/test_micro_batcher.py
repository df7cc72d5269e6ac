"""The service's grouping of single texts (pure asyncio, a stand-in engine whose calls wait
for the test): group slots, what queues while they are busy, each caller's own answer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from langchain_qwen_fast.errors import Overloaded, ResponseFormatError
from langchain_qwen_fast.serving.service.micro_batcher import (
    GROUPS_IN_FLIGHT_PER_REPLICA,
    MAX_RETRY_AFTER,
    MicroBatcher,
    default_groups_in_flight,
)


@dataclass
class Plan:
    takes_prompt_lists: bool = True


@dataclass
class HeldClassifier:
    """Each ``aclassify`` call is recorded (with its requests in flight) and waits until the
    test releases it."""

    replica_count: int = 1
    takes_prompt_lists: bool = True
    calls: list[tuple[list[str], int]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: list[list[str]] = field(default_factory=list)

    async def aprepare(self) -> Plan:
        return Plan(self.takes_prompt_lists)

    async def aclassify(self, values: list[str], *, max_concurrency: int) -> list[Any]:
        self.calls.append((values, max_concurrency))
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(values)
            raise
        return [ValueError(v) if v.startswith("bad") else f"label of {v}" for v in values]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_texts_arriving_while_every_slot_is_busy_go_together_as_the_next_group() -> None:
    classifier = HeldClassifier()
    sizes: list[int] = []
    batcher = MicroBatcher(classifier, groups_in_flight=1, on_group=sizes.append)  # type: ignore[arg-type]
    first = asyncio.create_task(batcher.classify("a"))
    await settle()
    assert [values for values, _ in classifier.calls] == [["a"]]  # a quiet service: at once, alone
    rest = [asyncio.create_task(batcher.classify(t)) for t in ["b", "bad c", "d"]]
    await settle()
    assert len(classifier.calls) == 1  # the one slot is busy: the three wait
    classifier.release.set()
    assert await first == "label of a"
    done = await asyncio.gather(*rest, return_exceptions=True)
    assert [values for values, _ in classifier.calls] == [["a"], ["b", "bad c", "d"]]
    assert sizes == [1, 3]
    assert done[0] == "label of b" and done[2] == "label of d"
    assert isinstance(done[1], ValueError) and str(done[1]) == "bad c"


async def test_the_default_slots_follow_the_replicas_and_a_group_is_one_request_a_list_server() -> None:
    classifier = HeldClassifier(replica_count=3)
    batcher = MicroBatcher(classifier)  # type: ignore[arg-type]
    tasks = []
    for k in range(3 * GROUPS_IN_FLIGHT_PER_REPLICA + 5):  # one at a time
        tasks.append(asyncio.create_task(batcher.classify(f"t{k}")))
        await settle()
    assert [len(values) for values, _ in classifier.calls] == [1] * (3 * GROUPS_IN_FLIGHT_PER_REPLICA)
    classifier.release.set()
    assert await asyncio.gather(*tasks) == [f"label of t{k}" for k in range(len(tasks))]
    assert [len(values) for values, _ in classifier.calls] == [1] * (3 * GROUPS_IN_FLIGHT_PER_REPLICA) + [5]
    assert all(in_flight == 1 for _, in_flight in classifier.calls)


@pytest.mark.parametrize(("lists", "group", "requests"), [(True, 300, 3), (False, 300, 300)])
async def test_a_group_goes_in_requests_of_at_most_128_or_one_a_text(lists: bool, group: int, requests: int) -> None:
    classifier = HeldClassifier(takes_prompt_lists=lists)
    classifier.release.set()
    batcher = MicroBatcher(classifier, groups_in_flight=1, max_group=group)  # type: ignore[arg-type]
    held = asyncio.create_task(batcher.classify("first"))
    await held
    classifier.release.clear()
    blocker = asyncio.create_task(batcher.classify("blocker"))
    await settle()
    tasks = [asyncio.create_task(batcher.classify(f"t{k}")) for k in range(group)]
    await settle()
    classifier.release.set()
    await asyncio.gather(blocker, *tasks)
    values, in_flight = classifier.calls[-1]
    assert len(values) == group and in_flight == requests


async def test_max_wait_lets_a_first_text_wait_for_company() -> None:
    classifier = HeldClassifier()
    classifier.release.set()
    batcher = MicroBatcher(classifier, max_wait=0.05, groups_in_flight=4)  # type: ignore[arg-type]
    first = asyncio.create_task(batcher.classify("a"))
    await asyncio.sleep(0.01)
    later = [asyncio.create_task(batcher.classify(t)) for t in ["b", "c"]]
    await asyncio.gather(first, *later)
    assert [values for values, _ in classifier.calls] == [["a", "b", "c"]]


async def test_a_caller_that_leaves_while_waiting_for_company_is_not_counted_twice() -> None:
    classifier = HeldClassifier()
    classifier.release.set()
    batcher = MicroBatcher(classifier, max_wait=0.05, groups_in_flight=1)  # type: ignore[arg-type]
    gone = asyncio.create_task(batcher.classify_many(["gone 1", "gone 2"]))
    await asyncio.sleep(0.01)  # taken for the group, which waits for company
    gone.cancel()
    kept = await batcher.classify("kept")
    assert kept == "label of kept" and batcher.queued == 0
    assert [values for values, _ in classifier.calls] == [["kept"]]


async def test_a_list_over_several_groups_gets_each_outcome_in_its_place() -> None:
    classifier = HeldClassifier()
    classifier.release.set()
    batcher = MicroBatcher(classifier, max_group=2, groups_in_flight=2)  # type: ignore[arg-type]
    texts = ["a", "bad b", "c", "d", "bad e"]
    outcomes = await batcher.classify_many(texts)
    assert [values for values, _ in classifier.calls] == [["a", "bad b"], ["c", "d"], ["bad e"]]
    assert outcomes[0] == "label of a" and outcomes[2:4] == ["label of c", "label of d"]
    assert [str(outcomes[k]) for k in (1, 4)] == ["bad b", "bad e"] and isinstance(outcomes[4], ValueError)
    assert batcher.queued == 0


async def test_lists_that_share_a_group_each_get_their_own_outcomes() -> None:
    classifier = HeldClassifier()
    batcher = MicroBatcher(classifier, max_group=4, groups_in_flight=1)  # type: ignore[arg-type]
    busy = asyncio.create_task(batcher.classify("busy"))
    await settle()
    first = asyncio.create_task(batcher.classify_many(["a", "bad b", "c"]))
    second = asyncio.create_task(batcher.classify_many(["d", "e", "bad f"]))
    await settle()
    classifier.release.set()
    assert await busy == "label of busy"
    one, two = await first, await second
    assert [values for values, _ in classifier.calls] == [["busy"], ["a", "bad b", "c", "d"], ["e", "bad f"]]
    assert [one[0], one[2], two[0], two[1]] == ["label of a", "label of c", "label of d", "label of e"]
    assert [str(one[1]), str(two[2])] == ["bad b", "bad f"] and batcher.queued == 0


async def test_a_list_that_leaves_part_in_flight_and_part_in_line_leaves_both() -> None:
    classifier = HeldClassifier()
    batcher = MicroBatcher(classifier, max_group=2, groups_in_flight=1)  # type: ignore[arg-type]
    listed = asyncio.create_task(batcher.classify_many(["a", "b", "c", "d", "e"]))
    await settle()
    assert classifier.calls == [(["a", "b"], 1)] and batcher.queued == 5
    listed.cancel()
    await settle()
    assert classifier.cancelled == [["a", "b"]] and batcher.queued == 0  # its group cancelled, its line left
    classifier.release.set()
    assert await batcher.classify("next") == "label of next"
    assert [values for values, _ in classifier.calls] == [["a", "b"], ["next"]]


async def test_a_failed_set_up_reaches_every_caller_of_the_group() -> None:
    class Down(HeldClassifier):
        async def aprepare(self) -> Plan:
            raise ConnectionError("vLLM is down")

    batcher = MicroBatcher(Down(), groups_in_flight=1)  # type: ignore[arg-type]
    done = await asyncio.gather(*(batcher.classify(t) for t in "xyz"), return_exceptions=True)
    assert all(isinstance(e, ConnectionError) and "down" in str(e) for e in done)


async def test_an_answer_short_of_outcomes_fails_the_group_for_every_caller() -> None:
    class Short(HeldClassifier):
        async def aclassify(self, values: list[str], *, max_concurrency: int) -> list[Any]:
            return [f"label of {v}" for v in values[1:]]

    classifier = Short()
    batcher = MicroBatcher(classifier, groups_in_flight=1)  # type: ignore[arg-type]
    outcomes = await batcher.classify_many(["a", "b", "c"])
    assert all(isinstance(o, ResponseFormatError) and "2 outcomes for 3 texts" in str(o) for o in outcomes)
    assert batcher.queued == 0


@pytest.mark.parametrize(("replicas", "processes", "each"), [(1, 1, 2), (4, 1, 8), (1, 4, 1), (4, 8, 1), (4, 2, 4)])
def test_worker_processes_share_the_default_groups_in_flight(replicas: int, processes: int, each: int) -> None:
    assert default_groups_in_flight(replicas, processes) == each


async def test_admission_is_one_bound_for_single_texts_and_lists_all_or_nothing() -> None:
    classifier = HeldClassifier()
    batcher = MicroBatcher(classifier, groups_in_flight=1, max_queued=5)  # type: ignore[arg-type]
    first = asyncio.create_task(batcher.classify("a"))
    await settle()  # in flight: it counts until its group is done
    listed = asyncio.create_task(batcher.classify_many(["b", "c", "d"]))
    await settle()
    assert batcher.queued == 4
    with pytest.raises(Overloaded) as refused:
        batcher.submit(["e", "f"])  # would be 6: refused whole, nothing queued
    assert refused.value.queued == 4 and refused.value.limit == 5 and 1 <= refused.value.retry_after <= MAX_RETRY_AFTER
    assert batcher.queued == 4
    last = asyncio.create_task(batcher.classify("e"))  # 5 fits
    await settle()
    with pytest.raises(Overloaded):
        await batcher.classify("f")
    classifier.release.set()
    assert [await first, await listed, await last] == ["label of a", ["label of b", "label of c", "label of d"],
                                                      "label of e"]  # fmt: skip
    assert batcher.queued == 0


async def test_a_caller_that_stops_waiting_takes_its_texts_out_of_line() -> None:
    classifier = HeldClassifier()
    batcher = MicroBatcher(classifier, groups_in_flight=1, max_queued=100)  # type: ignore[arg-type]
    busy = asyncio.create_task(batcher.classify("busy"))
    await settle()
    waiting = asyncio.create_task(batcher.classify_many([f"w{k}" for k in range(50)]))
    await settle()
    assert batcher.queued == 51
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):  # its deadline passes while its texts wait
            await waiting
    await settle()
    assert batcher.queued == 1  # only the one in flight is left
    stay = asyncio.create_task(batcher.classify("stay"))
    classifier.release.set()
    assert await busy == "label of busy" and await stay == "label of stay"
    assert [values for values, _ in classifier.calls] == [["busy"], ["stay"]]  # the others never went


async def test_a_group_whose_callers_all_left_is_cancelled_and_frees_its_slot() -> None:
    classifier = HeldClassifier()
    batcher = MicroBatcher(classifier, groups_in_flight=1)  # type: ignore[arg-type]
    left = asyncio.create_task(batcher.classify_many(["x", "y"]))
    await settle()
    assert classifier.calls == [(["x", "y"], 1)]
    left.cancel()
    await settle()
    assert classifier.cancelled == [["x", "y"]] and batcher.queued == 0
    classifier.release.set()
    assert await batcher.classify("next") == "label of next"  # the slot is free again


async def test_a_group_some_callers_left_goes_on_for_the_others() -> None:
    classifier = HeldClassifier()
    batcher = MicroBatcher(classifier, groups_in_flight=1)  # type: ignore[arg-type]
    gone, kept = asyncio.create_task(batcher.classify("gone")), asyncio.create_task(batcher.classify("kept"))
    await settle()
    assert classifier.calls == [(["gone", "kept"], 1)]
    gone.cancel()
    await settle()
    assert classifier.cancelled == [] and batcher.queued == 2  # in flight until the group is done
    classifier.release.set()
    assert await kept == "label of kept" and gone.cancelled() and batcher.queued == 0


async def test_texts_that_left_the_line_do_not_pile_up_while_the_slots_stay_busy() -> None:
    """A stalled server holds every slot: callers come and go; what they leave behind is
    swept, so the line's memory follows the texts actually waiting."""
    classifier = HeldClassifier()
    batcher = MicroBatcher(classifier, groups_in_flight=1, max_queued=10_000)  # type: ignore[arg-type]
    stuck = asyncio.create_task(batcher.classify("stuck"))
    await settle()
    for _ in range(1000):
        caller = asyncio.create_task(batcher.classify_many([f"t{k}" for k in range(5)]))
        await settle()
        caller.cancel()
        await settle()
    assert batcher.queued == 1
    assert batcher.line_entries <= 200  # swept: not the 1,000 callers that came and went
    stuck.cancel()


async def test_retry_after_follows_the_recent_completion_rate() -> None:
    classifier = HeldClassifier()
    classifier.release.set()
    batcher = MicroBatcher(classifier, groups_in_flight=1, max_queued=20_000)  # type: ignore[arg-type]
    assert batcher.retry_after() >= 1  # nothing known yet
    await batcher.classify_many([f"t{k}" for k in range(100)])  # 100 texts done within the window
    classifier.release.clear()
    held = [batcher.submit([f"w{k}" for k in range(10)])]  # ten waiting at 10 a second: a second
    assert batcher.retry_after() == 1
    held.append(batcher.submit([f"x{k}" for k in range(10_000)]))  # far beyond: capped
    assert batcher.retry_after() == MAX_RETRY_AFTER
    batcher.close()
    await settle()
    assert all(future.cancelled() for future in held)
