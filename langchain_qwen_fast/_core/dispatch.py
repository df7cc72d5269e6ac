"""How a call's requests go out: cut to the servers' windows, retried, under a deadline.

A :class:`Dispatch` is sans-I/O: it says which tries to send now (:meth:`Dispatch.sends`),
takes how each ended (:meth:`Dispatch.done`), and says when it next needs waking; the
transport's drivers (:mod:`~langchain_qwen_fast._core.transport`) do the sending, blocking or
async, so both follow the same rules:

* **Flow control.** A try goes out only while its replica's window
  (:class:`~langchain_qwen_fast._core.replicas.Window`) has room for its prompts; a
  :class:`PromptBatch` is cut into requests as it goes, each no bigger than the window's
  share, so a slow server gets fewer and smaller requests, a fast one more and bigger. A call
  with nothing in flight always sends one try, so that it cannot wait on the windows forever.
* **Retries.** A try that failed in a way worth trying again (:func:`errors.is_retryable`) goes
  back to the queue, its prompts cut again at the window of the moment, after a backoff with
  full jitter (or the server's ``Retry-After``), at most ``RetryPolicy.max_attempts`` tries in
  all, each paid from the transport's retry budget. A try given up was closed by the driver, so
  the server no longer works on what is sent again.
* **When to stop.** At a call's :class:`Deadline`, what is not answered gets
  :class:`~langchain_qwen_fast.errors.ServerTimeoutError` in its place; no retry waits past it.
  So it does, deadline or not, once the servers have answered nothing at all (to this call or
  any other) for ``stall_limit`` seconds: a server that makes no progress fails the call whole,
  rather than each item after its own tries.
"""

from __future__ import annotations

import heapq
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from langchain_qwen_fast._core.flow import REQUESTS_PER_WINDOW
from langchain_qwen_fast._core.replicas import Replicas
from langchain_qwen_fast.errors import ServerStatusError, ServerTimeoutError, is_retryable

#: A request: (HTTP method, path under the base URL, JSON body or None), and optionally a
#: reader. The body may also be a function that builds it, called once when the request's
#: turn to be sent comes: a group's prompts are tokenised then, so the first requests are out
#: before the last are built. The async path calls it on the event loop, not in a worker
#: thread: tiktoken holds the interpreter lock and ``tokenizers`` spreads a batch over threads
#: of its own, so a worker thread bought no overlap, only the cost of handing the lock back
#: and forth. A reader turns the decoded reply into what the caller keeps,
#: the moment it arrives, so that a large reply's JSON never outlives its request (many
#: replies held at once until the last one arrives cost the cyclic garbage collector a pass
#: over each of their objects); what it returns, or raises, is the call's result.
Request = tuple[str, str, Any]
Call = Request | tuple[str, str, Any, Callable[[Any], Any]]

#: The fewest and most prompts a request carries when the transport cuts a batch: bigger
#: requests cut the client's and the API server's per-request work, smaller ones keep the
#: pipeline full (each request is built as it is sent, so a smaller one reaches the server
#: sooner). The largest size is where the sweeps in docs/performance.md stopped gaining.
MIN_BATCH_SIZE = 16
MAX_BATCH_SIZE = 128
#: The backoff between tries (full jitter): the first wait is up to ``RETRY_BACKOFF_INITIAL``
#: seconds, each next one up to twice as long, never more than ``RETRY_BACKOFF_MAX``. Short
#: against a request's timeout: a retry mostly waits for a replica or a restart to answer.
RETRY_BACKOFF_INITIAL = 0.1
RETRY_BACKOFF_MAX = 4.0


def batch_size_for(prompts: int, max_requests: int) -> int:
    """Prompts per request for ``prompts`` prompts with ``max_requests`` requests allowed at
    once: an equal share for each, so every request in flight (every replica's share) is
    busy, within ``MIN_BATCH_SIZE``..``MAX_BATCH_SIZE``."""
    share = -(-prompts // max(1, max_requests))
    return max(MIN_BATCH_SIZE, min(MAX_BATCH_SIZE, share))


def backoff(attempt: int) -> float:
    """Seconds before try ``attempt + 1`` (``attempt`` tries made): full jitter over an
    exponential bound."""
    return random.uniform(0, min(RETRY_BACKOFF_MAX, RETRY_BACKOFF_INITIAL * 2**attempt))


class RetryBudget:
    """Caps the extra load retries add: each first try earns ``ratio`` of a retry, and
    ``min_per_second`` more are earned with time, up to ``capacity`` saved; a retry spends one.
    Under overload, when most tries fail, retries then add at most that share of the load
    instead of multiplying it by the retry count (the retry budgets of Finagle and Envoy)."""

    def __init__(self, ratio: float = 0.2, min_per_second: float = 10.0, capacity: float = 100.0) -> None:
        self.ratio = ratio
        self.min_per_second = min_per_second
        self.capacity = capacity
        self._tokens = capacity
        self._at = time.monotonic()
        self._lock = threading.Lock()
        #: retries refused so far
        self.refused = 0

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.min_per_second)
        self._at = now

    def earn(self) -> None:
        """A first try was made."""
        with self._lock:
            self._refill()
            self._tokens = min(self.capacity, self._tokens + self.ratio)

    def spend(self) -> bool:
        """Whether a retry may go now (and if so, it is paid for)."""
        with self._lock:
            self._refill()
            if self._tokens < 1:
                self.refused += 1
                return False
            self._tokens -= 1
            return True


@dataclass(frozen=True)
class PromptBatch:
    """Prompts asked alike, which the transport cuts into requests as the servers' windows
    allow: ``call(start, stop)`` is the request for prompts ``start:stop``. Its result is the
    list of :class:`Piece` it was cut into, in order. ``per_request``: the most prompts a
    request carries whatever the windows (1 for a server that takes one prompt a request; the
    caller's fixed batch size; half a group the server refused, to find its bad prompt);
    None: the transport picks."""

    size: int
    call: Callable[[int, int], Call]
    per_request: int | None = None


class Piece(NamedTuple):
    """A request's share of a :class:`PromptBatch`: prompts ``start:stop`` and what their
    request ended with (the decoded or read reply, or the exception)."""

    start: int
    stop: int
    result: Any


@dataclass(frozen=True)
class Deadline:
    """The moment (``time.monotonic()``) a call stops waiting, ``seconds`` after it began."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float | None) -> Deadline | None:
        """The deadline ``seconds`` from now (None: none)."""
        return None if seconds is None else cls(time.monotonic() + seconds, seconds)

    def error(self) -> ServerTimeoutError:
        """What an item not answered by then gets."""
        return ServerTimeoutError(f"no answer within the call's deadline of {self.seconds:g} s")


#: What a unit's body is before its first try builds it.
_UNBUILT: Any = object()


class Unit:
    """Work waiting to be sent: a call, or prompts ``start:stop`` of a batch, and its body
    once built (a retry of the same prompts sends the same bytes)."""

    __slots__ = ("attempt", "content", "item", "ready_at", "start", "stop", "tried")

    def __init__(self, item: int, start: int, stop: int, attempt: int = 0, tried: frozenset[int] = frozenset()) -> None:
        self.item = item
        self.start = start
        self.stop = stop
        self.attempt = attempt
        self.tried = tried
        self.ready_at = 0.0
        self.content: bytes | None = _UNBUILT

    def __lt__(self, other: Unit) -> bool:  # the waiting heap's order
        return self.ready_at < other.ready_at


@dataclass(slots=True, eq=False)
class Send:
    """One try to make: ``call`` to ``replica``, carrying ``prompts`` prompts (its window's
    share is taken already, ``used`` as the window said; the driver releases it with the
    try's outcome)."""

    unit: Unit
    replica: int
    call: Call
    prompts: int
    used: bool
    #: the deadline passed while it was out: its outcome is no longer read
    expired: bool = field(default=False, init=False)

    def content(self) -> bytes | None:
        """The request's body as JSON bytes: built (if its body is a function, called) on the
        first try, the same bytes on a retry of the same prompts."""
        unit = self.unit
        if unit.content is _UNBUILT:
            body = self.call[2]
            unit.content = None if body is None else orjson.dumps(body() if callable(body) else body)
        return unit.content


class Dispatch:
    """The tries of one call's ``items`` (see the module docstring). ``max_requests``: the
    most tries in flight at once; ``max_attempts``: tries of an item in all; ``budget``: what
    pays for the retries; ``stall_limit``: the seconds of the servers' silence that stop it."""

    def __init__(
        self,
        items: Sequence[Call | PromptBatch],
        replicas: Replicas,
        max_requests: int,
        max_attempts: int,
        budget: RetryBudget,
        deadline: Deadline | None = None,
        stall_limit: float = math.inf,
    ) -> None:
        self._items = items
        self._replicas = replicas
        self._max_requests = max(1, max_requests)
        # A window is cut into as many requests as a replica may have in flight, up to
        # REQUESTS_PER_WINDOW: a caller that allows one request at a time gets whole windows.
        self._requests_per_window = max(1, min(REQUESTS_PER_WINDOW, -(-self._max_requests // replicas.count)))
        self._max_attempts = max_attempts
        self._budget = budget
        self.deadline = deadline
        self._stall_limit = stall_limit
        self._started = time.monotonic()
        self._results: list[Any] = [None] * len(items)
        self._shares: list[int] = [0] * len(items)
        self._queue: deque[Unit] = deque()
        self._waiting: list[Unit] = []  # retries, by when they may go
        for i, item in enumerate(items):
            if isinstance(item, PromptBatch):
                self._results[i] = []
                self._shares[i] = item.per_request or batch_size_for(item.size, max_requests)
                if item.size:
                    self._queue.append(Unit(i, 0, item.size))
            else:
                self._queue.append(Unit(i, 0, 1))
        #: tries out now
        self.in_flight = 0

    def finished(self) -> bool:
        """Whether every item has its outcome."""
        return not (self._queue or self._waiting or self.in_flight)

    def sends(self, now: float) -> list[Send]:
        """The tries to make now: as many as the windows and ``max_requests`` allow (one at
        the least where none is out), each window's share taken."""
        while self._waiting and self._waiting[0].ready_at <= now:
            self._queue.appendleft(heapq.heappop(self._waiting))
        out: list[Send] = []
        queue, replicas = self._queue, self._replicas
        while queue and self.in_flight < self._max_requests:
            unit = queue[0]
            replica, room, limit = replicas.choose(unit.tried)
            item = self._items[unit.item]
            wanted = unit.stop - unit.start
            if isinstance(item, PromptBatch):
                share = self._shares[unit.item]
                if not item.per_request:
                    share = min(share, max(1, -(-limit // self._requests_per_window)))
                prompts = min(wanted, share)
            else:
                prompts = 1
            if room < prompts and self.in_flight:
                break
            if not unit.attempt:
                self._budget.earn()
            used = replicas.take(replica, prompts, not unit.attempt)
            if prompts < wanted:
                piece = Unit(unit.item, unit.start, unit.start + prompts, unit.attempt, unit.tried)
                unit.start += prompts
                unit.content = _UNBUILT
            else:
                piece = queue.popleft()
            call = item.call(piece.start, piece.stop) if isinstance(item, PromptBatch) else item
            out.append(Send(piece, replica, call, prompts, used))
            self.in_flight += 1
        return out

    def done(self, send: Send, outcome: Any, now: float) -> None:
        """``send``'s try ended with ``outcome`` (its result, or the exception): kept, or its
        work queued again where the error is worth a retry that the attempts, the deadline and
        the retry budget allow."""
        if send.expired:
            return
        self.in_flight -= 1
        unit = send.unit
        if isinstance(outcome, BaseException) and is_retryable(outcome) and unit.attempt + 1 < self._max_attempts:
            wait = _retry_after(outcome)
            ready = now + (backoff(unit.attempt + 1) if wait is None else wait)
            if (self.deadline is None or ready < self.deadline.at) and self._budget.spend():
                unit.attempt += 1
                unit.tried = unit.tried | {send.replica}
                unit.ready_at = ready
                heapq.heappush(self._waiting, unit)
                return
        self._keep(unit, outcome)

    def _quiet_since(self) -> float:
        """Since when the servers have answered nothing (this call's start at the earliest)."""
        return max(self._started, self._replicas.last_progress())

    def wake_in(self, now: float) -> float | None:
        """Seconds until a retry may go or the call must stop, whichever is first (None:
        neither is due; only an answer changes anything)."""
        due = [self._waiting[0].ready_at] if self._waiting else []
        if self.deadline is not None:
            due.append(self.deadline.at)
        if self._stall_limit < math.inf:
            due.append(self._quiet_since() + self._stall_limit)
        return max(0.0, min(due) - now) if due else None

    def stopped(self, now: float) -> ServerTimeoutError | None:
        """Why the call stops now, if it must: its deadline passed, or its servers answered
        nothing for ``stall_limit`` seconds."""
        if self.deadline is not None and now >= self.deadline.at:
            return self.deadline.error()
        quiet = now - self._quiet_since()
        if quiet >= self._stall_limit:
            return ServerTimeoutError(f"the servers answered nothing at all for {quiet:.3g} s")
        return None

    def expire(self, out: Sequence[Send], error: ServerTimeoutError) -> None:
        """The call stops (:meth:`stopped`): every item not answered gets ``error``, the tries
        ``out`` included (the driver closes them; what they end with is no longer read)."""
        for send in out:
            if not send.expired:
                send.expired = True
                self.in_flight -= 1
                self._keep(send.unit, error)
        for unit in [*self._queue, *self._waiting]:
            self._keep(unit, error)
        self._queue.clear()
        self._waiting.clear()

    def results(self) -> list[Any]:
        """Each item's outcome, in order: a call's result or exception, a batch's pieces."""
        for result in self._results:
            if isinstance(result, list):
                result.sort()
        return self._results

    def _keep(self, unit: Unit, outcome: Any) -> None:
        if isinstance(self._items[unit.item], PromptBatch):
            self._results[unit.item].append(Piece(unit.start, unit.stop, outcome))
        else:
            self._results[unit.item] = outcome


def _retry_after(error: BaseException) -> float | None:
    """The seconds an error's ``Retry-After`` asks to wait, if it gave any."""
    if isinstance(error, ServerStatusError):
        return error.retry_after
    return None


__all__ = [
    "MAX_BATCH_SIZE",
    "MIN_BATCH_SIZE",
    "Call",
    "Deadline",
    "Dispatch",
    "Piece",
    "PromptBatch",
    "Request",
    "RetryBudget",
    "Send",
    "Unit",
    "backoff",
    "batch_size_for",
]
