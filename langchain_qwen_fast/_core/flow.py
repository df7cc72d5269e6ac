"""Flow control: how many prompts one server may have in flight, following what it is
measured to answer.

A :class:`Window` is one replica's limit, an AIMD limit as the concurrency limits of Netflix
and Envoy are: it starts small and grows while answers come back within the latency target,
and shrinks when they come back later (in proportion to how much later) or a try fails. A
server therefore holds about as much work as it answers within the target, never so much
that a request would wait past its timeout in the server's queue: a slow server gets fewer
and smaller requests, a fast one up to the ceiling, where more would only wait in its queue.

Sans-I/O and clock-free: the caller passes the times. Not thread-safe by itself
(:class:`~langchain_qwen_fast._core.replicas.Replicas` holds the lock).
"""

from __future__ import annotations

import math

#: Prompts a window starts at: small, so that a slow server is not handed more than it can
#: answer before it has answered anything; doubled or tripled each round trip while answers
#: come back within the latency target.
INITIAL_WINDOW = 64
#: The prompts a window holds at most where nothing else bounds it: the requests a server
#: keeps queued while the client builds and reads others (``REQUESTS_PER_WINDOW``), each of
#: the largest size (``dispatch.MAX_BATCH_SIZE``). More only waits in the server's queue.
DEFAULT_CEILING = 8 * 128
#: The requests a full window is cut into: enough that the server always has the next ones
#: while the client builds and reads others.
REQUESTS_PER_WINDOW = 8
#: A window's latency target at most, in seconds: answers slower than this mean work waits in
#: the server's queue, and the window shrinks. Never more than a third of the timeout.
LATENCY_TARGET = 5.0
#: The most and the least a late answer leaves of a window (it keeps ``target / latency`` of
#: itself between them), and what a failed try leaves of it (a timeout, a 5xx, a 429, a
#: dropped connection).
LATE_CUT = 0.9
FAILURE_CUT = 0.5


class Window:
    """The prompts one replica may have in flight (``limit``), and those it has.

    It starts at ``INITIAL_WINDOW`` and grows while answers come back within ``target``
    seconds: by each answer's prompts at first (doubling every round trip, as TCP's slow
    start; by twice them, tripling, while answers take less than half the target), then by a
    ``REQUESTS_PER_WINDOW``-th of them once it has been cut. An answer later
    than ``target`` cuts it to ``target / latency`` of itself (between ``FAILURE_CUT`` and
    ``LATE_CUT``), a failed try to ``FAILURE_CUT``, at most once a round trip: the answers to
    tries sent before a cut say nothing of the window after it. It grows only while it is
    used (at least half full when the answered try was sent: a window the load does not fill
    says nothing of what more would do), and never past ``ceiling``.
    """

    __slots__ = ("ceiling", "cut_at", "in_flight", "limit", "starting", "target")

    def __init__(self, ceiling: int, target: float) -> None:
        self.ceiling = ceiling
        self.target = target
        self.limit = float(min(INITIAL_WINDOW, ceiling))
        self.in_flight = 0
        #: still doubling (not yet cut)
        self.starting = True
        self.cut_at = -math.inf

    def room(self) -> int:
        """Prompts that may go now."""
        return max(0, int(self.limit) - self.in_flight)

    def load(self) -> float:
        """The share of the window in use."""
        return self.in_flight / self.limit

    def take(self, prompts: int) -> bool:
        """``prompts`` go out; whether the window is then at least half used (only the
        answers to tries sent so grow it)."""
        self.in_flight += prompts
        return self.in_flight * 2 >= self.limit

    def answered(self, prompts: int, sent_at: float, now: float, used: bool) -> None:
        """A try of ``prompts`` sent at ``sent_at`` (``used``: as :meth:`take` said) was
        answered at ``now``."""
        self.in_flight -= prompts
        latency = now - sent_at
        if latency > self.target:
            self._cut(sent_at, now, max(FAILURE_CUT, min(LATE_CUT, self.target / latency)))
        elif used:
            # Far inside the target, the server has room to spare: a starting window triples.
            fast = latency * 2 < self.target
            step = (2.0 if fast else 1.0) if self.starting else 1 / REQUESTS_PER_WINDOW
            self.limit = min(float(self.ceiling), self.limit + prompts * step)

    def failed(self, prompts: int, sent_at: float, now: float) -> None:
        """A try of ``prompts`` sent at ``sent_at`` failed at ``now``."""
        self.in_flight -= prompts
        self._cut(sent_at, now, FAILURE_CUT)

    def _cut(self, sent_at: float, now: float, factor: float) -> None:
        self.starting = False
        if sent_at >= self.cut_at:
            self.limit = max(1.0, self.limit * factor)
            self.cut_at = now


__all__ = [
    "DEFAULT_CEILING",
    "FAILURE_CUT",
    "INITIAL_WINDOW",
    "LATENCY_TARGET",
    "LATE_CUT",
    "REQUESTS_PER_WINDOW",
    "Window",
]
