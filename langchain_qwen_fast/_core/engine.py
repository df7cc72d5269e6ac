"""The classifier's engine: everything between a list of inputs and their results.

It holds the transport and the request procedure, learns the plans once from the server and
keeps them, decides how many requests go in flight and how many prompts go in each, drives
the procedure with blocking or async I/O, spreads a large batch over client processes, and
cuts a batch into the parts ``batch_as_completed`` yields. It imports no LangChain: the
``QwenClassifier`` facade, the HTTP service and the jobs all call it, and a client worker
process builds one from its :class:`~langchain_qwen_fast._core.settings.EngineSettings` alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from langchain_qwen_fast._core.chat_formats import fitted_settings_steps
from langchain_qwen_fast._core.classification import text_of
from langchain_qwen_fast._core.dispatch import MAX_BATCH_SIZE, Deadline, batch_size_for
from langchain_qwen_fast._core.flow import DEFAULT_CEILING
from langchain_qwen_fast._core.procedure import Procedure
from langchain_qwen_fast._core.processes import ClientProcesses, merge, processes_for
from langchain_qwen_fast._core.prompting import ClassifierPlan
from langchain_qwen_fast._core.settings import EngineSettings, Node
from langchain_qwen_fast._core.tokenizing import load_tokenizer
from langchain_qwen_fast._core.transport import Steps, Transport, adrive, drive, gather
from langchain_qwen_fast.errors import ConfigurationError, InvalidInputError

#: Requests in flight per replica by default: enough that a server always has the next
#: requests queued while the client builds and parses others; more only wait in the server's
#: queue (the sweeps behind the choice: docs/performance.md).
MAX_CONCURRENCY_PER_REPLICA = 8
#: The same for a server that takes one prompt a request (vLLM's Rust frontend): every prompt
#: is a request of its own, so as many are in flight as a grouped load has prompts in flight.
ONE_PROMPT_MAX_CONCURRENCY_PER_REPLICA = 256
#: Seconds a failed set-up's error is given to every caller before the set-up is tried again:
#: with the server unreachable, the callers waiting on one set-up all hear its failure, rather
#: than each trying in turn behind the one before.
SETUP_RETRY_COOLDOWN = 2.0
#: ``ainvoke`` calls that do their set-up at once, at the least: a thousand simultaneous calls
#: would otherwise all build their requests before any awaited the network, holding the loop.
_MIN_AINVOKE_GATE = 16


class ClassifyOptions(TypedDict, total=False):
    """How :meth:`Engine.classify` sends a call's inputs (each may be left out)."""

    #: requests in flight (None: :meth:`Engine.max_concurrency`'s default)
    max_concurrency: int | None
    #: prompts per request (None: the settings', else picked per call)
    batch_size: int | None
    #: each input's selected examples, rendered (or the error selecting them raised)
    examples: Sequence[str | Exception] | None
    #: the call's deadline (None: the settings' ``deadline`` from now, if any)
    deadline: Deadline | None


@dataclass(frozen=True)
class BatchSlice:
    """The slice of a batch that ``batch_as_completed`` classifies on its own and yields when
    it lands: the inputs in ``span``, with ``max_concurrency`` requests in flight (None: the
    call's)."""

    span: range
    max_concurrency: int | None

    def of(self, items: Sequence[Any]) -> list[Any]:
        """This slice's share of ``items``."""
        return list(items[self.span.start : self.span.stop])


class Engine:
    """Classifies inputs on vLLM servers: see the module docstring. Thread-safe; usable from
    any number of event loops."""

    def __init__(self, settings: EngineSettings) -> None:
        if settings.client_processes > 1:
            stay = [name for name in ("cache", "http_transport") if getattr(settings, name) is not None]
            if stay:
                raise ConfigurationError(
                    f"client_processes={settings.client_processes} classifies in other processes, where "
                    f"{stay[0]} cannot go; use one or the other"
                )
        self.settings = settings
        # Room for the most requests in flight of either kind of server: connections are
        # opened only as requests need them.
        pool = max(settings.max_concurrency or 0, ONE_PROMPT_MAX_CONCURRENCY_PER_REPLICA * len(settings.base_urls))
        self._transport = Transport.from_settings(settings, pool_size=pool)
        if settings.max_concurrency:  # a window holds what the caller asks to have in flight
            asked = settings.max_concurrency * (settings.batch_size or MAX_BATCH_SIZE)
            self._transport.replicas.set_ceiling(max(DEFAULT_CEILING, -(-asked // len(settings.base_urls))))
        # Batches go through aiohttp, which spends a fraction of httpx's CPU a request, the
        # more so the more requests are in flight (docs/performance.md); httpx keeps a caller's
        # own http_transport and the single blocking tries.
        if not self._transport.custom_http_transport:
            self._transport.use_stack(self._transport.aiohttp_stack())
        tokenizer = load_tokenizer(settings.tokenizer_path) if settings.tokenizer_path is not None else None
        self._procedure = Procedure(settings, tokenizer)
        self._plans: dict[Node, ClassifierPlan] | None = None
        #: the last set-up's failure, and until when it stands
        self._setup_failure: tuple[float, Exception] | None = None
        self._plan_lock = threading.Lock()
        self._aplan_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._ainvoke_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, asyncio.Semaphore]] = (
            weakref.WeakKeyDictionary()
        )
        self._processes: ClientProcesses | None = None
        if settings.client_processes > 1:
            worker = dataclasses.replace(settings, client_processes=1)
            self._processes = ClientProcesses(functools.partial(Engine, worker), settings.client_processes)

    def __repr__(self) -> str:
        return f"Engine(model={self.settings.model!r}, base_urls={list(self.settings.base_urls)!r})"

    @property
    def transport(self) -> Transport:
        """The transport every request of this engine goes through."""
        return self._transport

    @property
    def procedure(self) -> Procedure:
        """The request procedure this engine drives."""
        return self._procedure

    @property
    def replica_count(self) -> int:
        """The vLLM servers (replicas) requests are spread over."""
        return self._transport.replicas.count

    def first_tries(self) -> list[int]:
        """The first tries each replica got so far (retries not counted)."""
        return list(self._transport.replicas.first_tries)

    # -- set-up: learnt once from the server ------------------------------------------------
    def plans(self, deadline: Deadline | None = None) -> dict[Node, ClassifierPlan]:
        """Every hierarchy node's plan, learnt from the server on first use (by ``deadline``,
        if given); raises what the set-up ran into (and tries again on the next call once its
        cool-down is over)."""
        if self._plans is not None:
            return self._plans
        with self._plan_lock:  # another thread's set-up may have ended while this one waited
            known = self._plans
            if known is not None:
                return known
            return drive(self._transport, self._setup_steps(), self.max_concurrency(), deadline)

    async def aplans(self, deadline: Deadline | None = None) -> dict[Node, ClassifierPlan]:
        """Async :meth:`plans`."""
        if self._plans is not None:
            return self._plans
        async with self._aplan_locks.setdefault(asyncio.get_running_loop(), asyncio.Lock()):
            known = self._plans
            if known is not None:
                return known
            return await adrive(self._transport, self._setup_steps(), self.max_concurrency(), deadline)

    def _setup_steps(self) -> Steps[dict[Node, ClassifierPlan]]:
        """The set-up, kept: its plans, in the served model's chat format
        (:mod:`~langchain_qwen_fast._core.chat_formats`), with the transport's HTTP stack fitted
        to the server they were learnt from; or its failure, given to every caller for
        ``SETUP_RETRY_COOLDOWN`` seconds (with the server unreachable, the callers waiting on
        one set-up all hear its failure, rather than each trying in turn behind the one before)."""
        until, error = self._setup_failure or (0.0, None)
        if error is not None and time.monotonic() < until:
            raise error
        try:
            # The chat format is probed beside the set-up's first round, at no cost in round
            # trips; only a model that is not Qwen3 has its plans learnt again in its format.
            runs: list[Steps[Any]] = [fitted_settings_steps(self._procedure), self._procedure.setup_steps()]
            fitted, plans = yield from gather(runs)
            if isinstance(fitted, Exception):
                raise fitted
            if fitted is not self._procedure.settings:
                self._procedure = Procedure(fitted, self._procedure.tokenizer)
                plans = yield from self._procedure.setup_steps()
        except Exception as exc:
            self._setup_failure = (time.monotonic() + SETUP_RETRY_COOLDOWN, exc)
            raise
        self._plans = plans
        return plans

    def prepare(self) -> ClassifierPlan:
        """Do the set-up now and return the top level's plan; with client processes, also
        start the workers and set each one up."""
        plan = self.plans()[()]
        if self._processes is not None:
            self._processes.prepare()
        return plan

    async def aprepare(self) -> ClassifierPlan:
        """Async :meth:`prepare`."""
        plan = (await self.aplans())[()]
        if self._processes is not None:
            await asyncio.to_thread(self._processes.prepare)
        return plan

    def try_setup(self) -> None:
        """The set-up, done now where it can be, before the requests in flight are counted
        (their default depends on what it learns); its failure reaches each item later."""
        with contextlib.suppress(Exception):
            self.plans()

    async def atry_setup(self) -> None:
        """Async :meth:`try_setup`."""
        with contextlib.suppress(Exception):
            await self.aplans()

    # -- how much at once ---------------------------------------------------------------------
    @property
    def one_prompt_server(self) -> bool:
        """Whether the set-up, once done, found a server that takes one prompt a request."""
        return self._plans is not None and not self._plans[()].takes_prompt_lists

    def max_concurrency(self, requested: int | None = None) -> int:
        """Requests in flight: ``requested``, else the settings', else
        ``MAX_CONCURRENCY_PER_REPLICA`` for each replica (``ONE_PROMPT_...`` once the set-up
        found a server that takes one prompt a request)."""
        if requested or self.settings.max_concurrency:
            return int(requested or self.settings.max_concurrency or 1)
        per_replica = ONE_PROMPT_MAX_CONCURRENCY_PER_REPLICA if self.one_prompt_server else MAX_CONCURRENCY_PER_REPLICA
        return per_replica * self.replica_count

    def rows_in_flight(self) -> int:
        """Prompts a batch needs now for every request in flight to carry a full group (one
        prompt each where the server takes one prompt a request), as much as the servers'
        windows hold (they follow what each server answers): below it, requests go out
        smaller or fewer, and the servers idle between them."""
        most = self.max_concurrency() * (1 if self.one_prompt_server else MAX_BATCH_SIZE)
        return min(most, self._transport.replicas.window_total())

    def ainvoke_gate(self) -> asyncio.Semaphore:
        """The calling event loop's gate for single-input async calls: at most a batch's worth
        of them do their set-up at once. A gate made before the set-up learnt that the server
        takes one prompt a request gives way to a wider one."""
        loop = asyncio.get_running_loop()
        size = max(_MIN_AINVOKE_GATE, self.max_concurrency())
        known = self._ainvoke_gates.get(loop)
        if known is None or known[0] != size:
            known = self._ainvoke_gates[loop] = (size, asyncio.Semaphore(size))
        return known[1]

    def slices(self, count: int, max_concurrency: int | None = None) -> tuple[list[BatchSlice], int]:
        """How ``batch_as_completed`` cuts ``count`` inputs (slices of ``batch_size`` inputs)
        and how many slices run at once. Against a server that takes one prompt a request,
        each slice's prompts are requests of their own: the slices running at once share the
        requests in flight between them."""
        in_flight = self.max_concurrency(max_concurrency)
        size = self.settings.batch_size or batch_size_for(count, in_flight)
        spans = [range(start, min(start + size, count)) for start in range(0, count, size)]
        at_once = max(1, min(in_flight, len(spans)))
        share = max(1, in_flight // at_once) if self.one_prompt_server else None
        return [BatchSlice(span, share) for span in spans], at_once

    # -- classification ---------------------------------------------------------------------
    def classify(self, inputs: Sequence[Any], **how: Unpack[ClassifyOptions]) -> list[Any]:
        """Each input's ``Classification`` or the exception it ended with, in input order
        (``how``: see :class:`ClassifyOptions`). A large batch without a fixed ``batch_size``
        or examples is spread over the client processes, if any."""
        inputs = list(inputs)
        shares = self._shares(inputs, how)
        if shares is None:
            return self._classify_here(inputs, how)
        self.try_setup()
        outcomes = shares.pool.classify(shares.texts, self.max_concurrency(how.get("max_concurrency")), shares.parts)
        return shares.results(self._classify_here(shares.lost_inputs(outcomes), shares.rest(how)))

    async def aclassify(self, inputs: Sequence[Any], **how: Unpack[ClassifyOptions]) -> list[Any]:
        """Async :meth:`classify`."""
        inputs = list(inputs)
        shares = self._shares(inputs, how)
        if shares is None:
            return await self._aclassify_here(inputs, how)
        await self.atry_setup()
        in_flight = self.max_concurrency(how.get("max_concurrency"))
        outcomes = await shares.pool.aclassify(shares.texts, in_flight, shares.parts)
        return shares.results(await self._aclassify_here(shares.lost_inputs(outcomes), shares.rest(how)))

    def deadline(self, how: ClassifyOptions | None = None) -> Deadline | None:
        """A call's deadline: the one ``how`` gives, else the settings' ``deadline`` from now."""
        given = how.get("deadline") if how else None
        return given if given is not None else Deadline.after(self.settings.deadline)

    def _classify_here(self, inputs: list[Any], how: ClassifyOptions) -> list[Any]:
        """:meth:`classify` in this process."""
        deadline = self.deadline(how)
        try:
            plans: dict[Node, ClassifierPlan] | Exception = self.plans(deadline) if inputs else {}
        except Exception as exc:
            plans = exc
        return drive(self._transport, *self._job(inputs, plans, how), deadline)

    async def _aclassify_here(self, inputs: list[Any], how: ClassifyOptions) -> list[Any]:
        """Async :meth:`_classify_here`."""
        deadline = self.deadline(how)
        try:
            plans: dict[Node, ClassifierPlan] | Exception = await self.aplans(deadline) if inputs else {}
        except Exception as exc:
            plans = exc
        return await adrive(self._transport, *self._job(inputs, plans, how), deadline)

    def _job(
        self, inputs: list[Any], plans: dict[Node, ClassifierPlan] | Exception, how: ClassifyOptions
    ) -> tuple[Steps[list[Any]], int]:
        """The steps that classify ``inputs`` with ``plans`` (every input gets the set-up's
        error if they are one), and the requests they may have in flight."""
        in_flight = self.max_concurrency(how.get("max_concurrency"))
        if isinstance(plans, Exception) or not inputs:
            return _done([plans] * len(inputs)), in_flight
        steps = self._procedure.classify_steps(inputs, plans, how.get("examples"), batch_size=how.get("batch_size"))
        return steps, in_flight

    def _shares(self, inputs: list[Any], how: ClassifyOptions) -> _Shares | None:
        """The batch cut into shares for the client processes; None: it runs here (no client
        processes, a fixed batch size, examples chosen per input, or too few items)."""
        if self._processes is None or how.get("batch_size") is not None or how.get("examples") is not None:
            return None
        parts = processes_for(len(inputs), self.settings.client_processes)
        return _Shares(self._processes, parts, inputs) if parts > 1 else None

    def close(self) -> None:
        """Close the pooled connections and stop any client processes (both come back on
        next use)."""
        self._transport.close()
        if self._processes is not None:
            self._processes.close()

    async def aclose(self) -> None:
        """Close this event loop's pooled async connections."""
        await self._transport.aclose()


def _done(results: list[Any]) -> Steps[list[Any]]:
    """Steps that send nothing and end with ``results``."""
    return results
    yield  # a generator all the same


def run_slices(
    slices: Sequence[BatchSlice], at_once: int, run: Callable[[BatchSlice], list[Any]]
) -> Iterator[tuple[int, Any]]:
    """``(index, result)`` for every input of ``slices`` as each slice lands, ``at_once``
    slices running at a time on threads; ``run`` classifies one slice."""
    with ThreadPoolExecutor(at_once, thread_name_prefix="qwen-fast-slice") as pool:
        futures = {pool.submit(run, piece): piece for piece in slices}
        for future in as_completed(futures):
            start = futures[future].span.start
            for offset, result in enumerate(future.result()):
                yield start + offset, result


async def arun_slices(
    slices: Sequence[BatchSlice], at_once: int, run: Callable[[BatchSlice], Awaitable[list[Any]]]
) -> AsyncIterator[tuple[int, Any]]:
    """Async :func:`run_slices`: the slices are tasks, ``at_once`` of them classifying at a time."""
    gate = asyncio.Semaphore(at_once)

    async def one(piece: BatchSlice) -> tuple[BatchSlice, list[Any]]:
        async with gate:
            return piece, await run(piece)

    tasks = [asyncio.ensure_future(one(piece)) for piece in slices]
    try:
        for next_done in asyncio.as_completed(tasks):
            piece, results = await next_done
            for offset, result in enumerate(results):
                yield piece.span.start + offset, result
    finally:
        for task in tasks:
            task.cancel()


class _Shares:
    """A batch spread over the client processes: the valid inputs' texts go to the workers
    (each invalid input keeps its error), and the texts of a share whose worker died are
    classified here."""

    def __init__(self, pool: ClientProcesses, parts: int, inputs: list[Any]) -> None:
        self.pool = pool
        self.parts = parts
        self.inputs = inputs
        #: the valid inputs' texts, and each one's place in the batch
        self.texts: list[str] = []
        self.places: list[int] = []
        self._results: list[Any] = [None] * len(inputs)
        for i, value in enumerate(inputs):
            try:
                self.texts.append(text_of(value))
                self.places.append(i)
            except InvalidInputError as exc:
                self._results[i] = exc
        self._shared: list[Any] = []
        self._lost: list[int] = []

    def lost_inputs(self, outcomes: Sequence[list[Any] | None]) -> list[Any]:
        """Take the workers' outcomes (one per share, None for a lost one); the inputs of the
        lost shares, to classify here."""
        self._shared, self._lost = merge(len(self.texts), outcomes)
        return [self.inputs[self.places[i]] for i in self._lost]

    @staticmethod
    def rest(how: ClassifyOptions) -> ClassifyOptions:
        """How the texts of the lost shares are classified here: the call's requests in
        flight (its batch size and examples kept them from the workers to begin with)."""
        return {"max_concurrency": how.get("max_concurrency")}

    def results(self, redone: Sequence[Any]) -> list[Any]:
        """Every input's result or error in its place, with ``redone`` (the results of
        :meth:`lost_inputs`) for the lost shares' texts."""
        again = dict(zip(self._lost, redone, strict=True))
        for i, (place, result) in enumerate(zip(self.places, self._shared, strict=True)):
            self._results[place] = again.get(i, result)
        return self._results


__all__ = [
    "MAX_CONCURRENCY_PER_REPLICA",
    "ONE_PROMPT_MAX_CONCURRENCY_PER_REPLICA",
    "BatchSlice",
    "ClassifyOptions",
    "Engine",
    "arun_slices",
    "load_tokenizer",
    "run_slices",
]
