"""Which replica each try goes to, and which replicas rest (outlier ejection).

Knows nothing of HTTP: the transport asks it for a replica before each try and tells it how
the try ended.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Literal

#: How a try on a replica ended, for the replica's record: ``ok`` (an answer that is not a
#: server error, 4xx included: those are the request's fault), ``failed`` (a timeout or a 5xx),
#: ``unreachable`` (the connection failed), ``cancelled`` (the caller gave up: no verdict).
Outcome = Literal["ok", "failed", "unreachable", "cancelled"]


class Replicas:
    """Which replica each try goes to, and which replicas rest (outlier ejection).

    Among the replicas not resting, a try goes to the one with the fewest requests outstanding
    (ties go round in turn), never one this request already tried while another is left. A
    replica is ejected, that is rests, when its connection fails, or after ``max_failures``
    failed tries in a row (timeouts, 5xx): a replica answering 503 in a millisecond would
    otherwise always have the fewest requests outstanding and win most first tries. It rests
    ``cooldown`` seconds, doubled at each ejection in a row up to ``max_cooldown``; then it is
    on probation, taking one try at a time, until a try succeeds (its record is cleared) or
    fails (it rests again, longer). If every replica rests, they are tried anyway: nothing
    waits on a timer. One replica is never ejected: there is nowhere else to go.
    """

    def __init__(self, count: int, cooldown: float = 5.0, max_cooldown: float = 60.0, max_failures: int = 3) -> None:
        self.count = count
        self.cooldown = cooldown
        self.max_cooldown = max_cooldown
        self.max_failures = max_failures
        self.outstanding = [0] * count
        #: first tries each replica got (a retry is not counted)
        self.first_tries = [0] * count
        self._resting_until = [0.0] * count
        self._failures = [0] * count
        self._ejections = [0] * count
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def resting(self) -> list[int]:
        """The replicas resting now."""
        now = time.monotonic()
        with self._lock:
            return [k for k in range(self.count) if self._resting_until[k] > now]

    def acquire(self, tried: set[int]) -> int:
        """The replica for the next try, counted as outstanding until :meth:`release`."""
        if self.count == 1:
            self.first_tries[0] += not tried
            return 0
        now = time.monotonic()
        with self._lock:
            fresh = [k for k in range(self.count) if k not in tried] or list(range(self.count))
            # On probation (rested before, not yet proven): one try at a time.
            usable = [
                k for k in fresh if self._resting_until[k] <= now and not (self._ejections[k] and self.outstanding[k])
            ] or fresh
            start = next(self._turn)
            chosen = min(usable, key=lambda k: (self.outstanding[k], (k - start) % self.count))
            self.outstanding[chosen] += 1
            self.first_tries[chosen] += not tried
            return chosen

    def release(self, replica: int, outcome: Outcome = "ok") -> None:
        """The try on ``replica`` is over, as ``outcome`` says (see :data:`Outcome`)."""
        if self.count == 1:
            return
        with self._lock:
            self.outstanding[replica] -= 1
            if outcome == "ok":
                self._failures[replica] = self._ejections[replica] = 0
            elif outcome == "unreachable":
                self._eject(replica)
            elif outcome == "failed":
                self._failures[replica] += 1
                if self._failures[replica] >= self.max_failures or self._ejections[replica]:
                    self._eject(replica)

    def _eject(self, replica: int) -> None:
        rest = min(self.max_cooldown, self.cooldown * 2 ** self._ejections[replica])
        self._resting_until[replica] = max(self._resting_until[replica], time.monotonic() + rest)
        self._ejections[replica] += 1
        self._failures[replica] = 0
