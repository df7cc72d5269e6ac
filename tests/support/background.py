"""Work the integration tests need later, done in the background while other tests run.

On 2 cores the integration tests leave one core idle for much of their run: a test that sends
one request at a time, a server that boots (one process importing at a time). Work whose result
a later test checks, and that needs nothing of the tests before it (training runs, the long
examples), runs in a queue in the background: one job at a time, in the order queued (a later
one may train on an earlier one's model), each a subprocess at a low CPU priority, so that it
takes the idle core and little else and the foreground tests are barely slowed. A test that needs
a job's result waits for it (:meth:`BackgroundJobs.result`); by then it is usually done.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

#: The lowest CPU priority: a job with no timeouts (a training run) then runs on idle CPU alone.
IDLE_NICENESS = 19
#: Free memory a job that starts servers of its own waits for (a CPU test server takes ~4 GB).
SERVER_JOB_MEMORY = 8 << 30


@dataclass(frozen=True)
class Job:
    """One command to run in the background, and what it writes."""

    #: Unique within a run; names its log.
    name: str
    argv: Sequence[str]
    #: Jobs that must have finished first (queued ahead of this one when it is queued).
    after: tuple[Job, ...] = ()
    #: Its CPU priority. A job that starts servers and sends them requests under timeouts takes
    #: a higher one than :data:`IDLE_NICENESS`, where a busy foreground could starve it past them.
    niceness: int = IDLE_NICENESS
    #: It starts servers of its own: it waits for :data:`SERVER_JOB_MEMORY` to be free first.
    starts_servers: bool = False
    #: A server's base URL (``.../v1``) the job talks to: it waits for its ``/health`` first.
    waits_for: str | None = None
    #: Seconds it may run before it is killed (a hung job would hold up the rest of the queue).
    timeout: float = 1800


#: Run as ``python -c _LOWERED NICENESS ARGV...`` in a session of its own: sets the niceness of the
#: process and of its session's autogroup, then becomes ARGV. Where the kernel groups processes by
#: session (autogroup), the groups share the CPU fairly whatever their processes' niceness, so the
#: process's niceness alone would still give the job a fair share against the test process and
#: each server. (A ``preexec_fn`` would do the same, but is unsafe in a process with threads.)
_LOWERED = """
import contextlib, os, sys
niceness = int(sys.argv[1])
os.nice(niceness)
with contextlib.suppress(OSError):  # no autogroups: the process's niceness is enough
    with open("/proc/self/autogroup", "w") as autogroup:
        autogroup.write(str(niceness))
os.execvp(sys.argv[2], sys.argv[2:])
"""


def available_memory() -> int | None:
    """Bytes of memory available for new processes (Linux), or None where it cannot be read."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemAvailable:"))
        return int(line.split()[1]) * 1024
    return None


class BackgroundJobs:
    """A queue of :class:`Job` run one at a time by a thread of the test process."""

    def __init__(self, log_dir: Path, cwd: Path, memory_wait: float = 600) -> None:
        self.log_dir = log_dir
        self.cwd = cwd
        #: Seconds a job waits at most for memory or for its server (then it runs anyway).
        self.memory_wait = memory_wait
        self._queue: list[Job] = []
        self._queued: dict[str, Sequence[str]] = {}  # name -> the command of the job queued under it
        self._codes: dict[str, int] = {}  # exit codes of the jobs that ended
        self._running: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def log(self, job: Job) -> Path:
        return self.log_dir / f"{job.name}.log"

    def queue(self, job: Job) -> None:
        """Queue ``job`` (first the jobs it comes after), unless it is queued already."""
        with self._wake:
            for earlier in job.after:
                self.queue(earlier)
            known = self._queued.get(job.name)
            # A name is one job for the whole run: another job under it would be answered with
            # the first one's result.
            assert known in (None, job.argv), f"two background jobs are named {job.name!r}"
            if known is None:
                self._queued[job.name] = job.argv
                self._queue.append(job)
                self._wake.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run_queue, name="background-jobs", daemon=True)
                self._thread.start()

    def ended(self, job: Job) -> bool:
        """Whether ``job`` has ended (with any exit code), without waiting."""
        with self._wake:
            return job.name in self._codes

    def result(self, job: Job, timeout: float = 3600) -> Path:
        """Wait for ``job`` (queued now if it is not yet) and return its log; an ``AssertionError``
        with the log's tail when it failed."""
        self.queue(job)
        deadline = time.monotonic() + timeout
        with self._wake:
            while job.name not in self._codes:
                left = deadline - time.monotonic()
                assert left > 0 and not self._stopped, f"background job {job.name!r} did not finish"
                self._wake.wait(min(left, 5))
            code = self._codes[job.name]
        tail = self.log(job).read_text(errors="replace")[-6000:]
        assert code == 0, f"background job {job.name!r} exited with {code}:\n{tail}"
        return self.log(job)

    def stop(self) -> None:
        """Kill the job that runs and drop the rest of the queue."""
        with self._wake:
            self._stopped = True
            self._queue.clear()
            self._wake.notify_all()
            running = self._running
        if running is not None and running.poll() is None:
            os.killpg(running.pid, 9)
            running.wait()

    def _spawn(self, job: Job) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.log(job).open("wb") as sink:
            return subprocess.Popen(
                [sys.executable, "-c", _LOWERED, str(job.niceness), *job.argv],
                cwd=self.cwd,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() kills its children too
            )

    def _wait_for_server(self, base_url: str) -> None:
        health = base_url.removesuffix("/v1") + "/health"
        deadline = time.monotonic() + self.memory_wait
        while not self._stopped and time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(health, timeout=5).status_code == 200:
                    return
            time.sleep(2)

    def _wait_for_memory(self) -> None:
        deadline = time.monotonic() + self.memory_wait
        while not self._stopped and time.monotonic() < deadline:
            free = available_memory()
            if free is None or free >= SERVER_JOB_MEMORY:
                return
            time.sleep(2)

    def _run_queue(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._stopped:
                    self._wake.wait()
                if self._stopped:
                    return
                job = self._queue.pop(0)
            if job.starts_servers:
                self._wait_for_memory()
            if job.waits_for:
                self._wait_for_server(job.waits_for)
            with self._wake:
                if self._stopped:
                    return
                self._running = process = self._spawn(job)
            try:
                code = process.wait(timeout=job.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                code = process.wait()
                with self.log(job).open("a") as log:
                    log.write(f"\n[killed after {job.timeout:.0f} s]\n")
            with self._wake:
                self._codes[job.name] = code
                self._running = None
                self._wake.notify_all()
