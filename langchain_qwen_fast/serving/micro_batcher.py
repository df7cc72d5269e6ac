"""Single texts that arrive together, classified in one grouped request: many clients each
sending one text get batch throughput (the HTTP service's ``POST /v1/classify`` with one text)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_qwen_fast.classification import Classification
    from langchain_qwen_fast.classifiers import QwenClassifier


class MicroBatcher:
    """Groups single texts that arrive together into one ``abatch`` call.

    The first text of a group waits at most ``max_wait`` seconds for company; a group closes
    at ``max_group`` texts. Groups run concurrently; each text's future gets its own result
    or exception.
    """

    def __init__(
        self,
        classifier: QwenClassifier,
        *,
        max_wait: float,
        max_group: int,
        on_group: Callable[[int], object] | None = None,
    ) -> None:
        self.classifier = classifier
        self.max_wait = max_wait
        self.max_group = max_group
        self._on_group = on_group
        self._queue: asyncio.Queue[tuple[Any, asyncio.Future[Any]]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def classify(self, value: Any) -> Classification:
        """The classification of one input, grouped with others arriving at the same time."""
        if self._queue is None or self._worker is None or self._worker.done():
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._collect(self._queue))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._queue.put((value, future))
        result: Classification = await future
        return result

    async def _collect(self, queue: asyncio.Queue[tuple[Any, asyncio.Future[Any]]]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            group = [await queue.get()]
            deadline = loop.time() + self.max_wait
            while len(group) < self.max_group:
                timeout = deadline - loop.time()
                if timeout <= 0:
                    break
                try:
                    group.append(await asyncio.wait_for(queue.get(), timeout))
                except asyncio.TimeoutError:
                    break
            task = asyncio.create_task(self._run(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, group: list[tuple[Any, asyncio.Future[Any]]]) -> None:
        if self._on_group is not None:
            self._on_group(len(group))
        results: list[Any]
        try:
            results = await self.classifier.abatch([value for value, _ in group], return_exceptions=True)
        except Exception as exc:  # the group itself failed: every caller hears why
            results = [exc] * len(group)
        for (_, future), result in zip(group, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
