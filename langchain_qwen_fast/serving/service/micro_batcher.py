"""Texts that arrive together, classified in grouped requests, behind one bounded admission:
many clients each sending one text get batch throughput, and a list's texts take the same
group slots and the same place in line (the HTTP service's ``POST /v1/classify``)."""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from langchain_qwen_fast._core.dispatch import MAX_BATCH_SIZE
from langchain_qwen_fast.errors import ConfigurationError, DeadlineExceeded, Overloaded, ResponseFormatError
from langchain_qwen_fast.serving.service.options import DEFAULT_MAX_GROUP, DEFAULT_MAX_QUEUED_TEXTS

if TYPE_CHECKING:
    from langchain_qwen_fast._core.classification import Classification

#: Groups in flight a vLLM server by default: one in the server while the next is sent or
#: answered; fewer groups in flight make each group larger, and a larger group costs the
#: service less CPU a text (docs/performance.md).
GROUPS_IN_FLIGHT_PER_REPLICA = 2
#: The most seconds an overloaded batcher asks callers to wait before trying again.
MAX_RETRY_AFTER = 30
#: How far back the completion rate behind a ``Retry-After`` estimate looks, in seconds.
_RATE_WINDOW = 10.0
#: Seconds asked when nothing finished within the window, so no rate is known.
_UNKNOWN_RATE_RETRY_AFTER = 5


class GroupEngine(Protocol):
    """What the line needs of what answers its groups: the classifier's
    :class:`~langchain_qwen_fast._core.engine.Engine`, or the decisions route's
    :class:`~langchain_qwen_fast.serving.service.decisions.DecisionGroups`."""

    @property
    def replica_count(self) -> int: ...

    async def aprepare(self) -> Any: ...

    async def aclassify(self, values: Sequence[Any], *, max_concurrency: int) -> list[Any]: ...


def default_groups_in_flight(replicas: int, processes: int = 1) -> int:
    """Groups in flight for each of ``processes`` batchers over the same ``replicas``: together
    ``GROUPS_IN_FLIGHT_PER_REPLICA`` a replica, at least one each."""
    return max(1, GROUPS_IN_FLIGHT_PER_REPLICA * replicas // processes)


class _Ticket:
    """One caller's texts: their values, their outcomes in order (each a result or an
    exception), how many are still to come, the one future the caller awaits for them all
    (cancelling it takes every text of the caller out) and the spans its texts are in."""

    __slots__ = ("future", "outcomes", "remaining", "spans", "values")

    def __init__(self, future: asyncio.Future[list[Any]], values: Sequence[Any]) -> None:
        self.future = future
        self.values = values
        self.outcomes: list[Any] = [None] * len(values)
        self.remaining = len(values)
        self.spans: list[_Span] = []


class _Span:
    """A run of one caller's texts, ``values[start:stop]`` of its ticket: in line while
    ``group`` is None, else in that group. A caller's texts are one span in line; a group that
    takes part of it splits it. So the line costs a caller, not a text."""

    __slots__ = ("group", "start", "stop", "ticket")

    def __init__(self, ticket: _Ticket, start: int, stop: int) -> None:
        self.ticket = ticket
        self.start = start
        self.stop = stop
        self.group: _Group | None = None
        ticket.spans.append(self)


class _Group:
    """Texts sent together, as spans; ``live`` counts the spans whose callers still wait for
    them, ``finished`` is set once the group's outcomes are handed out (or it ended)."""

    __slots__ = ("finished", "live", "size", "spans", "task")

    def __init__(self, spans: list[_Span]) -> None:
        self.spans = spans
        self.size = sum(span.stop - span.start for span in spans)
        self.live = len(spans)
        self.finished = False
        self.task: asyncio.Task[None] | None = None


class MicroBatcher:
    """Groups texts that arrive together into engine calls, behind one bounded line.

    At most ``groups_in_flight`` groups run at once (None: :func:`default_groups_in_flight` of
    the engine's replicas). While every slot is busy, texts wait in line; when one frees,
    everything waiting (up to ``max_group`` texts) goes as the next group. So under load the
    groups grow with the load, and a text arriving at a quiet service goes at once, alone.
    ``max_wait`` > 0 also has a group's first text wait up to that many seconds for company
    before it goes. Each text's future gets its own result or exception.

    Admission: at most ``max_queued`` texts wait or are in flight at once, single texts and
    lists' alike; a request that would pass it is refused whole with :class:`Overloaded`. A
    caller that stops waiting (its deadline passed: its task is cancelled) takes its waiting
    texts out of line at once; a group whose callers all left is cancelled, which frees its
    slot and drops its requests to vLLM.
    """

    def __init__(
        self,
        engine: GroupEngine,
        *,
        max_wait: float = 0.0,
        max_group: int = DEFAULT_MAX_GROUP,
        groups_in_flight: int | None = None,
        max_queued: int = DEFAULT_MAX_QUEUED_TEXTS,
        on_group: Callable[[int], object] | None = None,
    ) -> None:
        if max_group < 1 or max_queued < 1 or (groups_in_flight is not None and groups_in_flight < 1):
            raise ConfigurationError("max_group, max_queued and groups_in_flight must be 1 or more")
        self.engine = engine
        self.max_wait = max_wait
        self.max_group = max_group
        self.groups_in_flight = groups_in_flight
        self.max_queued = max_queued
        self._on_group = on_group
        self._waiting: deque[_Span] = deque()
        #: cancelled spans still in ``_waiting`` (an estimate that only decides when to sweep)
        self._dead = 0
        self._queued = 0
        self._arrived: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._takes_prompt_lists: bool | None = None
        #: (monotonic time, texts) of recent finished groups, for the Retry-After estimate
        self._finished: deque[tuple[float, int]] = deque(maxlen=1024)

    @property
    def queued(self) -> int:
        """Texts waiting for a group or in a group in flight."""
        return self._queued

    @property
    def line_entries(self) -> int:
        """Entries the line keeps in memory: one for each caller's texts waiting (a run of a
        list's texts is one), and those whose callers left and that are not swept out yet."""
        return len(self._waiting)

    @property
    def prepared(self) -> bool:
        """Whether a group has learnt the engine's set-up (it is done)."""
        return self._takes_prompt_lists is not None

    def retry_after(self) -> int:
        """Whole seconds until the texts held now are likely done, from the recent completion
        rate: between 1 and :data:`MAX_RETRY_AFTER`."""
        now = time.monotonic()
        while self._finished and self._finished[0][0] < now - _RATE_WINDOW:
            self._finished.popleft()
        done = sum(count for _, count in self._finished)
        if not done:  # nothing finished lately: a stalled server, or a service just started
            return _UNKNOWN_RATE_RETRY_AFTER
        rate = done / _RATE_WINDOW
        return max(1, min(MAX_RETRY_AFTER, math.ceil(self._queued / rate)))

    def submit(self, values: Sequence[Any]) -> asyncio.Future[list[Any]]:
        """Put ``values`` in line, all or none: one future for their outcomes in order (each a
        classification or an exception), or :class:`Overloaded`. Cancelling the future takes
        the texts out (see the class docstring). One future and one callback a caller, not a
        text: a list's texts cost the line little more than a single text does."""
        if self._queued + len(values) > self.max_queued:
            raise Overloaded(
                asked=len(values), queued=self._queued, limit=self.max_queued, retry_after=self.retry_after()
            )
        if self._arrived is None or self._worker is None or self._worker.done():
            self._arrived = asyncio.Event()
            self._worker = asyncio.create_task(self._collect(self._arrived))
        ticket = _Ticket(asyncio.get_running_loop().create_future(), values)
        ticket.future.add_done_callback(functools.partial(self._left, ticket))
        self._waiting.append(_Span(ticket, 0, len(values)))
        self._queued += len(values)
        self._arrived.set()
        return ticket.future

    async def classify_many(self, values: Sequence[Any], deadline: float | None = None) -> list[Any]:
        """Each value's classification or exception, in order (see :meth:`submit`). Past
        ``deadline`` (the event loop's clock), the texts not yet done leave and
        :class:`DeadlineExceeded` (a :class:`TimeoutError`) is raised. (A timer that cancels the
        caller's future, not ``asyncio.timeout``: it costs a request a fraction as much.)"""
        if not values:
            return []
        future = self.submit(values)
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            future.cancel()

        timer = asyncio.get_running_loop().call_at(deadline, expire) if deadline is not None else None
        try:
            return await future
        except asyncio.CancelledError:
            if expired:
                raise DeadlineExceeded from None
            raise
        finally:
            if timer is not None:
                timer.cancel()

    async def classify(self, value: Any) -> Classification:
        """The classification of one input, grouped with others arriving at the same time;
        raises its exception, or :class:`Overloaded`."""
        (outcome,) = await self.submit([value])
        if isinstance(outcome, BaseException):
            raise outcome
        result: Classification = outcome
        return result

    def close(self) -> None:
        """Stop the collecting task and cancel every group in flight and text in line."""
        for task in [self._worker, *self._tasks]:
            if task is not None:
                task.cancel()
        while self._waiting:
            self._waiting.popleft().ticket.future.cancel()

    # -- inside ------------------------------------------------------------------------------
    def _left(self, ticket: _Ticket, future: asyncio.Future[list[Any]]) -> None:
        """A caller's future is done; if it was cancelled, its texts still in line leave the
        count, and those in flight their groups' callers (a group whose callers all left is
        cancelled)."""
        if not future.cancelled():
            return
        for span in ticket.spans:
            group = span.group
            if group is None:
                self._queued -= span.stop - span.start
                self._dead += 1
            elif not group.finished:
                group.live -= 1
                if group.live == 0 and group.task is not None:
                    group.task.cancel()
        if self._dead > 64 and self._dead * 2 > len(self._waiting):
            # Swept now and then rather than removed one by one: each removal from the
            # middle of a deque is a scan, a sweep is one for many.
            self._waiting = deque(span for span in self._waiting if not span.ticket.future.done())
            self._dead = 0

    def _fill(self, spans: list[_Span], size: int) -> int:
        """Take waiting texts into ``spans`` (of ``size`` texts) up to ``max_group`` texts,
        splitting the last span taken where it does not fit whole; the new size."""
        while size < self.max_group and self._waiting:
            span = self._waiting[0]
            if span.ticket.future.done():
                self._waiting.popleft()
                continue
            room = self.max_group - size
            if span.stop - span.start > room:  # the rest stays first in line
                taken = _Span(span.ticket, span.start, span.start + room)
                span.start += room
            else:
                taken = self._waiting.popleft()
            spans.append(taken)
            size += taken.stop - taken.start
        return size

    async def _collect(self, arrived: asyncio.Event) -> None:
        slots = asyncio.Semaphore(self.groups_in_flight or default_groups_in_flight(self.engine.replica_count))
        while True:
            await slots.acquire()
            spans: list[_Span] = []
            while not self._fill(spans, 0):
                arrived.clear()
                await arrived.wait()
            if self.max_wait > 0:
                await self._wait_for_company(arrived, spans)
                # A caller that left meanwhile took its texts out of the count already.
                spans = [span for span in spans if not span.ticket.future.done()]
                if not spans:
                    slots.release()
                    continue
            group = _Group(spans)
            for span in spans:
                span.group = group
            group.task = task = asyncio.create_task(self._run(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda _: slots.release())

    async def _wait_for_company(self, arrived: asyncio.Event, spans: list[_Span]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait
        size = sum(span.stop - span.start for span in spans)
        while size < self.max_group:
            size = self._fill(spans, size)
            timeout = deadline - loop.time()
            if size >= self.max_group or timeout <= 0:
                return
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), timeout)
            except TimeoutError:
                self._fill(spans, size)
                return

    async def _run(self, group: _Group) -> None:
        spans, size = group.spans, group.size
        if self._on_group is not None:
            self._on_group(size)
        results: list[Any]
        handed_out = False
        try:
            try:
                # One request a group (of up to MAX_BATCH_SIZE prompts) where the server takes
                # prompt lists, as a batch's own requests are at full load; a request a text where not.
                if self._takes_prompt_lists is None:  # learnt once, by the set-up
                    self._takes_prompt_lists = (await self.engine.aprepare()).takes_prompt_lists
                requests = -(-size // MAX_BATCH_SIZE) if self._takes_prompt_lists else size
                values = [v for span in spans for v in span.ticket.values[span.start : span.stop]]
                results = await self.engine.aclassify(values, max_concurrency=requests)
                if len(results) != size:  # what no caller's slice could be cut from
                    raise ResponseFormatError(f"the classifier answered {len(results)} outcomes for {size} texts")
            except Exception as exc:  # the group itself failed: every caller hears why
                results = [exc] * size
            self._finished.append((time.monotonic(), size))
            offset = 0
            for span in spans:
                ticket, count = span.ticket, span.stop - span.start
                if not ticket.future.done():
                    ticket.outcomes[span.start : span.stop] = results[offset : offset + count]
                    ticket.remaining -= count
                    if not ticket.remaining:
                        ticket.future.set_result(ticket.outcomes)
                offset += count
            handed_out = True
        finally:
            group.finished = True
            self._queued -= size
            if not handed_out:  # cancelled (closed, or every caller left): none waits forever
                for span in spans:
                    if not span.ticket.future.done():
                        span.ticket.future.cancel()


__all__ = [
    "GROUPS_IN_FLIGHT_PER_REPLICA",
    "MAX_RETRY_AFTER",
    "GroupEngine",
    "MicroBatcher",
    "default_groups_in_flight",
]
