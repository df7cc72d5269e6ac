"""Single texts that arrive together, classified in one grouped request: many clients each
sending one text get batch throughput (the HTTP service's ``POST /v1/classify`` with one text)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from langchain_qwen_fast._core.procedure import MAX_BATCH_SIZE

if TYPE_CHECKING:
    from langchain_qwen_fast._core.classification import Classification
    from langchain_qwen_fast._core.engine import Engine

#: Groups in flight a vLLM server by default: one in the server while the next is sent or
#: answered; fewer groups in flight make each group larger, and a larger group costs the
#: service less CPU a text (docs/performance.md).
GROUPS_IN_FLIGHT_PER_REPLICA = 2


def default_groups_in_flight(replicas: int, processes: int = 1) -> int:
    """Groups in flight for each of ``processes`` batchers over the same ``replicas``: together
    ``GROUPS_IN_FLIGHT_PER_REPLICA`` a replica, at least one each."""
    return max(1, GROUPS_IN_FLIGHT_PER_REPLICA * replicas // processes)


#: A text waiting for its group, and the future its caller awaits.
_Waiting = tuple[Any, "asyncio.Future[Any]"]


class MicroBatcher:
    """Groups single texts that arrive together into one engine call.

    At most ``groups_in_flight`` groups run at once (None: :func:`default_groups_in_flight` of
    the engine's replicas). While every slot is busy, texts queue; when one frees,
    everything queued (up to ``max_group`` texts) goes as the next group. So under load the
    groups grow with the load, and a text arriving at a quiet service goes at once, alone.
    ``max_wait`` > 0 also has a group's first text wait up to that many seconds for company
    before it goes. Each text's future gets its own result or exception.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        max_wait: float = 0.0,
        max_group: int = 256,
        groups_in_flight: int | None = None,
        on_group: Callable[[int], object] | None = None,
    ) -> None:
        self.engine = engine
        self.max_wait = max_wait
        self.max_group = max_group
        self.groups_in_flight = groups_in_flight
        self._on_group = on_group
        self._queue: asyncio.Queue[_Waiting] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._takes_prompt_lists: bool | None = None

    async def classify(self, value: Any) -> Classification:
        """The classification of one input, grouped with others arriving at the same time."""
        if self._queue is None or self._worker is None or self._worker.done():
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._collect(self._queue))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((value, future))
        result: Classification = await future
        return result

    async def _collect(self, queue: asyncio.Queue[_Waiting]) -> None:
        slots = asyncio.Semaphore(self.groups_in_flight or default_groups_in_flight(self.engine.replica_count))
        while True:
            await slots.acquire()
            group = [await queue.get()]
            if self.max_wait > 0:
                await self._wait_for_company(queue, group)
            while len(group) < self.max_group and not queue.empty():
                group.append(queue.get_nowait())
            task = asyncio.create_task(self._run(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda _: slots.release())

    async def _wait_for_company(self, queue: asyncio.Queue[_Waiting], group: list[_Waiting]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait
        while len(group) < self.max_group:
            timeout = deadline - loop.time()
            if timeout <= 0:
                return
            try:
                group.append(await asyncio.wait_for(queue.get(), timeout))
            except asyncio.TimeoutError:
                return

    async def _run(self, group: list[_Waiting]) -> None:
        if self._on_group is not None:
            self._on_group(len(group))
        results: list[Any]
        try:
            # One request a group (of up to MAX_BATCH_SIZE prompts) where the server takes prompt
            # lists, as a batch's own requests are at full load; a request a text where not.
            if self._takes_prompt_lists is None:  # learnt once, by the set-up
                self._takes_prompt_lists = (await self.engine.aprepare()).takes_prompt_lists
            requests = -(-len(group) // MAX_BATCH_SIZE) if self._takes_prompt_lists else len(group)
            results = await self.engine.aclassify([value for value, _ in group], max_concurrency=requests)
        except Exception as exc:  # the group itself failed: every caller hears why
            results = [exc] * len(group)
        for (_, future), result in zip(group, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
