"""Which replica each try goes to, how much work each may have in flight, and which replicas
rest (outlier ejection).

Knows nothing of HTTP: the transport asks it for a replica before each try and tells it how
the try ended. Each replica has a :class:`~langchain_qwen_fast._core.flow.Window`, the prompts
it may have in flight, which follows what the server is measured to answer (flow control); the
transport's dispatcher (:mod:`~langchain_qwen_fast._core.dispatch`) sends no more than the
windows allow.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Set as AbstractSet
from typing import Literal

from langchain_qwen_fast._core.flow import DEFAULT_CEILING, LATENCY_TARGET, Window

#: How a try on a replica ended, for the replica's record: ``ok`` (an answer that is not a
#: server error, 4xx included: those are the request's fault), ``overloaded`` (a 429: the
#: server asks for less, which no more blames it than an ``ok``), ``failed`` (a 5xx),
#: ``silent`` (no answer within the timeout), ``unreachable`` (the connection failed),
#: ``cancelled`` (the caller gave up: no verdict).
Outcome = Literal["ok", "overloaded", "failed", "silent", "unreachable", "cancelled"]


class Replicas:
    """Which replica each try goes to, how much each may have in flight, and which rest.

    Among the replicas not resting, a try goes to the one using the least of its
    :class:`Window` (ties to the one with the fewest requests outstanding, then in turn),
    never one this request already tried while another is left: the load follows what each
    server answers, and a replica that slows down gets less. A replica is ejected, that is
    rests, when its connection fails, or after ``max_failures`` failed tries in a row
    (timeouts, 5xx): a replica answering 503 in a millisecond would otherwise always have room
    and win most first tries. It rests ``cooldown`` seconds, doubled at each ejection in a row
    up to ``max_cooldown``; then it is on probation, taking one try at a time, until a try
    succeeds (its record is cleared) or fails (it rests again, longer). If every replica rests,
    they are tried anyway: nothing waits on a timer. One replica is never ejected: there is
    nowhere else to go.

    ``ceiling``: the prompts a window holds at most; ``target``: its latency target in seconds.
    """

    def __init__(
        self,
        count: int,
        cooldown: float = 5.0,
        max_cooldown: float = 60.0,
        max_failures: int = 3,
        *,
        ceiling: int = DEFAULT_CEILING,
        target: float = LATENCY_TARGET,
    ) -> None:
        self.count = count
        self.cooldown = cooldown
        self.max_cooldown = max_cooldown
        self.max_failures = max_failures
        self.outstanding = [0] * count
        #: first tries each replica got (a retry is not counted)
        self.first_tries = [0] * count
        self.windows = [Window(ceiling, target) for _ in range(count)]
        #: when each replica last answered anything (``time.monotonic()``)
        self.last_answer = [time.monotonic()] * count
        self._resting_until = [0.0] * count
        self._failures = [0] * count
        self._ejections = [0] * count
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def set_ceiling(self, prompts: int) -> None:
        """The prompts each window holds at most from now on."""
        with self._lock:
            for window in self.windows:
                window.ceiling = prompts
                window.limit = min(window.limit, float(prompts))

    def last_progress(self) -> float:
        """When any replica last answered anything (``time.monotonic()``)."""
        return max(self.last_answer)

    def window_total(self) -> int:
        """The prompts every window together may have in flight now."""
        with self._lock:
            return sum(int(w.limit) for w in self.windows)

    def resting(self) -> list[int]:
        """The replicas resting now."""
        now = time.monotonic()
        with self._lock:
            return [k for k in range(self.count) if self._resting_until[k] > now]

    def choose(self, tried: AbstractSet[int]) -> tuple[int, int, int]:
        """The replica the next try of a request would go to (see the class docstring), the
        prompts that may go to it now, and its window's limit; nothing is counted until
        :meth:`take`."""
        now = time.monotonic()
        with self._lock:
            fresh = [k for k in range(self.count) if k not in tried] or list(range(self.count))
            # On probation (rested before, not yet proven): one try at a time.
            usable = [
                k for k in fresh if self._resting_until[k] <= now and not (self._ejections[k] and self.outstanding[k])
            ] or fresh
            windows = self.windows
            if len(usable) == 1:
                chosen = usable[0]
            else:
                start = next(self._turn)
                chosen = min(usable, key=lambda k: (windows[k].load(), self.outstanding[k], (k - start) % self.count))
            window = windows[chosen]
            return chosen, window.room(), int(window.limit)

    def take(self, replica: int, prompts: int, first: bool) -> bool:
        """A try of ``prompts`` prompts goes to ``replica`` (``first``: the request's first
        try), counted as outstanding until :meth:`release`; whether it fills its window enough
        that its answer may grow it (:meth:`Window.take`)."""
        with self._lock:
            self.outstanding[replica] += 1
            self.first_tries[replica] += first
            return self.windows[replica].take(prompts)

    def acquire(self, tried: AbstractSet[int], prompts: int = 1) -> tuple[int, bool]:
        """:meth:`choose` and :meth:`take` at once: the replica for the next try of a request,
        and what :meth:`take` said."""
        replica = self.choose(tried)[0]
        return replica, self.take(replica, prompts, not tried)

    def release(
        self, replica: int, outcome: Outcome = "ok", prompts: int = 1, sent_at: float | None = None, used: bool = False
    ) -> None:
        """The try of ``prompts`` prompts sent to ``replica`` at ``sent_at`` is over, as
        ``outcome`` says (see :data:`Outcome`); ``used``: what :meth:`take` said of it."""
        now = time.monotonic()
        with self._lock:
            self.outstanding[replica] -= 1
            window = self.windows[replica]
            if outcome == "cancelled":
                window.in_flight -= prompts
                return
            if outcome not in ("silent", "unreachable"):
                self.last_answer[replica] = now
            if outcome == "ok":
                window.answered(prompts, now if sent_at is None else sent_at, now, used)
            else:
                window.failed(prompts, now if sent_at is None else sent_at, now)
            if self.count == 1 or outcome == "overloaded":
                return
            if outcome == "ok":
                self._failures[replica] = self._ejections[replica] = 0
            elif outcome == "unreachable":
                self._eject(replica)
            else:
                self._failures[replica] += 1
                if self._failures[replica] >= self.max_failures or self._ejections[replica]:
                    self._eject(replica)

    def _eject(self, replica: int) -> None:
        rest = min(self.max_cooldown, self.cooldown * 2 ** self._ejections[replica])
        self._resting_until[replica] = max(self._resting_until[replica], time.monotonic() + rest)
        self._ejections[replica] += 1
        self._failures[replica] = 0


__all__ = ["Outcome", "Replicas"]
