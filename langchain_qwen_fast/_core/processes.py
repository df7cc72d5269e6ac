"""Client processes: one large batch spread over several Python processes.

One process's event loop builds, sends and parses every request of a batch while its
tokenizer threads contend for the same interpreter lock: in front of several fast servers that
one process, not the servers, sets the pace, and spreading the batch over processes lets the
servers set it again (the figures are in docs/performance.md). Each worker process holds its
own engine, made by a factory sent from the parent, and classifies shares of the batch with its
``aclassify``, one at a time (``SHARES_PER_PROCESS`` shares for each process); the shares come
back in input order. Knows nothing of an engine beyond
``aclassify`` and ``aprepare``.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import multiprocessing
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from langchain_qwen_fast.errors import ConfigurationError

#: Fewer items than this per process, and a batch runs in the calling process: below it the
#: shares' transfer and the tail of each worker's pipeline cost more than a second loop saves.
MIN_ITEMS_PER_PROCESS = 1024

#: Shares a batch is cut into for each process it is spread over: a worker's results cross
#: back to the calling process share by share while the other shares are still out, so
#: little of that crossing is left for after the servers' last answer.
SHARES_PER_PROCESS = 4

# The worker's classifier and event loop, set by _start_worker in each worker process.
_worker: Any = None
_loop: asyncio.AbstractEventLoop | None = None


def _start_worker(factory: Callable[[], Any]) -> None:
    global _worker, _loop
    _worker = factory()
    _loop = asyncio.new_event_loop()


def _classify_share(texts: list[str], max_concurrency: int) -> list[Any]:
    assert _loop is not None, "worker not started"
    return _loop.run_until_complete(_worker.aclassify(texts, max_concurrency=max_concurrency))


def _prepare_worker() -> None:
    assert _loop is not None, "worker not started"
    _loop.run_until_complete(_worker.aprepare())


def shares(count: int, processes: int) -> list[range]:
    """``count`` items cut into ``processes`` contiguous shares, sizes differing by at most one."""
    step, extra = divmod(count, processes)
    bounds = [0]
    for i in range(processes):
        bounds.append(bounds[-1] + step + (1 if i < extra else 0))
    return [range(a, b) for a, b in itertools.pairwise(bounds)]


def processes_for(items: int, processes: int) -> int:
    """How many of ``processes`` a batch of ``items`` texts is spread over (1: run here)."""
    return max(1, min(processes, items // MIN_ITEMS_PER_PROCESS))


class ClientProcesses:
    """A pool of ``processes`` worker processes, each with an engine made by ``factory()``
    (a picklable callable). Started on first use, stopped by :meth:`close`.

    A worker that dies loses nothing: its share is given back as None and the caller
    classifies it itself.
    """

    def __init__(self, factory: Callable[[], Any], processes: int) -> None:
        if processes < 2:
            raise ConfigurationError("ClientProcesses needs at least 2 processes")
        self.processes = processes
        self._factory = factory
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # the factory holds the settings, and with them the API key: never shown
        return f"ClientProcesses(processes={self.processes}, started={self._pool is not None})"

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                # spawn, not fork: the parent has threads (HTTP pools, tokenizer workers).
                self._pool = ProcessPoolExecutor(
                    self.processes,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start_worker,
                    initargs=(self._factory,),
                )
            return self._pool

    def _submit(self, texts: list[str], in_flight: int, parts: int) -> list[Future[list[Any]]]:
        # The call's requests in flight are shared out, so the servers see the load they
        # would from one process.
        share = max(1, math.ceil(in_flight / parts))
        parts_of = [texts[s.start : s.stop] for s in shares(len(texts), parts * SHARES_PER_PROCESS)]
        try:
            pool = self._executor()
            return [pool.submit(_classify_share, part, share) for part in parts_of]
        except BrokenProcessPool:  # a worker died between batches: start a fresh pool, once
            self._forget_broken()
            pool = self._executor()
            return [pool.submit(_classify_share, part, share) for part in parts_of]

    def _forget_broken(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None

    def classify(self, texts: list[str], in_flight: int, parts: int) -> list[list[Any] | None]:
        """``texts`` cut into ``parts`` shares, each classified by a worker with its part of
        ``in_flight`` requests in flight: each share's results in order, or None for a share
        whose worker died."""
        futures = self._submit(texts, in_flight, parts)
        return [self._outcome(f) for f in futures]

    async def aclassify(self, texts: list[str], in_flight: int, parts: int) -> list[list[Any] | None]:
        """Async :meth:`classify`."""
        futures = self._submit(texts, in_flight, parts)
        await asyncio.gather(*(asyncio.wrap_future(f) for f in futures), return_exceptions=True)
        return [self._outcome(f) for f in futures]

    def _outcome(self, future: Future[list[Any]]) -> list[Any] | None:
        try:
            return future.result()
        except BrokenProcessPool:
            self._forget_broken()
            return None

    def prepare(self) -> None:
        """Start the workers and set each one up (one set-up task per worker)."""
        pool = self._executor()
        for future in [pool.submit(_prepare_worker) for _ in range(self.processes)]:
            future.result()

    def close(self) -> None:
        """Stop the workers (a later batch starts them again)."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None


def merge(count: int, outcomes: Sequence[list[Any] | None]) -> tuple[list[Any], list[int]]:
    """The results of ``count`` texts from their shares' outcomes, in order, and the indices
    of the texts whose share was lost (their places hold None)."""
    results: list[Any] = [None] * count
    lost: list[int] = []
    for span, outcome in zip(shares(count, len(outcomes)), outcomes, strict=True):
        if outcome is None or len(outcome) != len(span):
            lost.extend(span)
        else:
            results[span.start : span.stop] = outcome
    return results, lost


__all__ = ["MIN_ITEMS_PER_PROCESS", "SHARES_PER_PROCESS", "ClientProcesses", "merge", "processes_for", "shares"]
