"""Pooled HTTP to the vLLM server: flow control, retries, replicas and deadlines over an HTTP stack.

A :class:`Transport` keeps what every request shares (the replicas and their windows, the retry
policy and budget, the error types); an HTTP stack (:mod:`~langchain_qwen_fast._core.http_stacks`)
only sends. Requests go through httpx until told otherwise: the classifier's engine hands its
transport an aiohttp stack (:meth:`Transport.aiohttp_stack`), whose client spends far less CPU a
request (docs/performance.md), unless its caller gave an ``http_transport`` of httpx's. A list
of calls goes out as a :class:`~langchain_qwen_fast._core.dispatch.Dispatch` says (flow control,
retries, the deadline); the drivers here only send and wait. The drivers at the bottom
(:func:`drive`, :func:`adrive`) run a sans-I/O procedure's calls through a transport.

**Timeouts count silence, not waiting.** A try is given up when its server has answered
nothing, neither it nor any other request, for ``timeout`` seconds since it was sent: the time
it waits in the server's queue behind the answers to others never counts, and neither does the
time it waits in the client for room in a window (it is not sent yet). A try given up is
closed, so vLLM aborts it.

Knows nothing of LangChain or of prompts. Every failure leaves as a typed
:class:`~langchain_qwen_fast.errors.TransportError` (or :class:`ResponseFormatError`) that
names the URL it was sent to; the API key only ever travels in the ``Authorization`` header,
never in a message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import email.utils
import queue
import re
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import orjson
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
)

from langchain_qwen_fast._core.dispatch import (
    Call,
    Deadline,
    Dispatch,
    PromptBatch,
    Request,
    RetryBudget,
    Send,
    Unit,
    backoff,
)
from langchain_qwen_fast._core.flow import LATENCY_TARGET
from langchain_qwen_fast._core.http_stacks import AiohttpStack, HTTPReply, HTTPStack, HttpxStack, WireSettings
from langchain_qwen_fast._core.replicas import Outcome, Replicas
from langchain_qwen_fast.errors import (
    ConfigurationError,
    ResponseFormatError,
    ServerConnectionError,
    ServerStatusError,
    ServerTimeoutError,
    TransportError,
    is_retryable,
)

T = TypeVar("T")

#: What turns a call's decoded reply into its result (None: the decoded reply is the result).
Reader = Callable[[Any], Any] | None

#: The transport's defaults, the classifier's and the chat model's alike: seconds of silence
#: after which a try is given up, and retries after the first try.
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RETRIES = 3
#: Connections a transport keeps open at most, unless its owner says how many it needs.
DEFAULT_POOL_SIZE = 64


@dataclass(frozen=True)
class RetryPolicy:
    """How often to try: connection errors, timeouts, 429 and 5xx are retried with
    exponential backoff and full jitter (or the server's ``Retry-After``), at most
    ``max_attempts`` tries in all. Other 4xx answers are the request's fault and are not
    retried."""

    max_attempts: int = DEFAULT_MAX_RETRIES + 1

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError("max_attempts must be at least 1")


@dataclass(frozen=True, kw_only=True)
class TransportSettings:
    """How to reach the servers: what :meth:`Transport.from_settings` builds a transport from,
    for the classifier and the chat model alike."""

    #: the OpenAI-compatible base URLs (replicas serving the same model)
    base_urls: tuple[str, ...]
    api_key: str | None = dataclasses.field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    #: seconds a call waits in all (None: as long as its servers answer)
    deadline: float | None = None
    #: an ``httpx`` transport instead of the network (tests, custom TLS or proxies)
    http_transport: Any = None


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_message(content: bytes) -> str:
    """The server's own error text, kept short."""
    try:
        data = orjson.loads(content)
        err = data.get("error", data) if isinstance(data, dict) else data
        message = err.get("message", err) if isinstance(err, dict) else err
    except (orjson.JSONDecodeError, AttributeError):
        message = content.decode(errors="replace")
    return str(message)[:500]


def _decode(reply: HTTPReply, path: str, base_url: str) -> Any:
    """A reply as decoded JSON, or the typed error it is."""
    status, content, retry_after = reply
    if status >= 400:
        hint = ""
        if status == 404 and not path.startswith("/") and not base_url.endswith("/v1"):
            hint = f"; the base URL {shown_url(base_url)} has no /v1; vLLM serves the OpenAI API under /v1"
        raise ServerStatusError(
            f"server answered HTTP {status} to {path}: {_error_message(content)}{hint}",
            status_code=status,
            retry_after=parse_retry_after(retry_after),
        )
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        raise ResponseFormatError(f"server sent malformed JSON to {path} ({len(content)} bytes): {exc}") from None


def shown_url(url: str) -> str:
    """``url`` as a message may show it: without any user name or password in it."""
    return re.sub(r"(?<=//)[^/@]*@", "", url)


class Transport:
    """HTTP to a server: flow control, retries, replicas and typed errors over an :class:`HTTPStack`.

    Given several base URLs (replicas serving the same model, e.g. two vLLM servers sharing
    one GPU), each try goes to the replica whose window has the most room, a retry to another
    one, and a replica whose connection failed rests a few seconds (see
    :class:`~langchain_qwen_fast._core.replicas.Replicas`): the load follows what each server
    answers, and a replica that is down costs a retry, not the items.

    Args:
        base_url: the OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1``, or a list.
        api_key: bearer token, or None.
        timeout: seconds of silence from a try's server after which the try is given up (and
            for a connection to open).
        retry: the retry policy (None: :class:`RetryPolicy`'s defaults).
        pool_size: most connections kept open.
        http_transport: an ``httpx`` transport instead of the network, e.g.
            ``httpx.MockTransport`` in tests; the stack is then always httpx.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
        http_transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ConfigurationError("base_url: give at least one URL")
        self.base_urls = [u.rstrip("/") for u in urls]
        self.base_url = self.base_urls[0]
        # A window's latency target well inside the timeout: answers that slow mean work
        # queued at the server, long before a try waits long enough to be given up.
        self.replicas = Replicas(len(self.base_urls), target=min(LATENCY_TARGET, timeout / 3))
        self.budget = RetryBudget()
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self.wire = WireSettings(headers=headers, timeout=timeout, pool_size=pool_size)
        self.retry = retry or RetryPolicy()
        self.custom_http_transport = http_transport is not None
        self.httpx = HttpxStack(self.wire, http_transport)
        #: how tries go over the wire (httpx until :meth:`use_stack` says otherwise)
        self.stack: HTTPStack = self.httpx
        self._retrying = Retrying(**self._retry_kwargs(is_retryable))

    @classmethod
    def from_settings(cls, settings: TransportSettings, pool_size: int = DEFAULT_POOL_SIZE) -> Transport:
        """A transport as ``settings`` say, with at most ``pool_size`` connections open."""
        return cls(
            settings.base_urls,
            api_key=settings.api_key,
            timeout=settings.timeout,
            retry=RetryPolicy(max_attempts=settings.max_retries + 1),
            pool_size=pool_size,
            http_transport=settings.http_transport,
        )

    def use_stack(self, stack: HTTPStack) -> None:
        """Send through ``stack`` from now on (the one it replaces is closed)."""
        if stack is not self.stack:
            old, self.stack = self.stack, stack
            if old is not self.httpx:
                old.close()

    def aiohttp_stack(self, connector: Callable[[], Any] | None = None) -> AiohttpStack:
        """An aiohttp stack with this transport's headers, timeout and pool (``connector``
        makes its connector, e.g. an ``aiohttp.UnixConnector`` in tests)."""
        return AiohttpStack(self.wire, self.httpx, connector)

    @property
    def retries_refused(self) -> int:
        """Retries the retry budget refused so far."""
        return self.budget.refused

    def _retry_kwargs(
        self, retryable: Callable[[BaseException], bool], deadline: Deadline | None = None
    ) -> dict[str, Any]:
        policy = stop_after_attempt(self.retry.max_attempts)

        def stop(state: RetryCallState) -> bool:
            # Asked only once the error is retryable, and the policy's stop comes first: a
            # retry is paid for only when it would really be made.
            if policy(state):
                return True
            if deadline is not None and time.monotonic() + (state.upcoming_sleep or 0.0) >= deadline.at:
                return True
            return not self.budget.spend()

        return dict(stop=stop, wait=self._wait, retry=retry_if_exception(retryable), reraise=True)

    def retrying(self, retryable: Callable[[BaseException], bool]) -> tuple[Retrying, AsyncRetrying]:
        """This transport's retry policy for calls made through another client (the chat
        model's SDK calls), with ``retryable`` saying which of its errors to retry."""
        return Retrying(**self._retry_kwargs(retryable)), AsyncRetrying(**self._retry_kwargs(retryable))

    @property
    def client(self) -> httpx.Client:
        """The pooled sync httpx client (for an SDK that takes one)."""
        return self.httpx.client

    def new_async_client(self) -> httpx.AsyncClient:
        """A pooled async httpx client with this transport's limits and timeout."""
        return self.httpx.new_async_client()

    def __repr__(self) -> str:
        return f"Transport(base_url={self.base_urls if len(self.base_urls) > 1 else self.base_url!r})"

    @property
    def timeout(self) -> float:
        """Seconds of silence after which a try is given up."""
        return self.wire.timeout

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, ServerStatusError):
            retry_after = exc.retry_after
        else:  # an SDK error carrying the HTTP response (openai.APIStatusError)
            headers = getattr(getattr(exc, "response", None), "headers", None)
            retry_after = parse_retry_after(headers.get("retry-after")) if headers is not None else None
        return retry_after if retry_after is not None else backoff(state.attempt_number)

    # -- one try: the same for blocking and async sends --------------------------------------
    @contextlib.contextmanager
    def _trying(self, send: Send, url: str, sent_at: float) -> Iterator[None]:
        """Around one try's send: a network failure gives the replica its verdict and leaves
        as the typed error naming ``url``; anything else (a cancelled try) gives none."""
        # TimeoutError: a try _Silence gave up (on any stack)
        network_errors: tuple[type[BaseException], ...] = (*self.stack.network_errors, TimeoutError)
        try:
            yield
        except network_errors as exc:
            timed_out = isinstance(exc, (httpx.TimeoutException, TimeoutError))
            self._release(send, "silent" if timed_out else "unreachable", sent_at)
            raise self._network_error(exc, url, timed_out) from None
        except BaseException:
            self._release(send, "cancelled", sent_at)
            raise

    def _release(self, send: Send, outcome: Outcome, sent_at: float) -> None:
        self.replicas.release(send.replica, outcome, send.prompts, sent_at, send.used)

    def _network_error(self, exc: BaseException, url: str, timed_out: bool) -> TransportError:
        where, what = shown_url(url), f"{type(exc).__name__}: {exc}".rstrip(": ")
        if timed_out:
            return ServerTimeoutError(f"{where} answered nothing for the timeout of {self.timeout:g} s ({what})")
        if isinstance(exc, self.stack.connect_errors):
            return ServerConnectionError(f"could not connect to {where}: {what}")
        return ServerConnectionError(f"the connection to {where} failed: {what}")

    def _answered(self, send: Send, reply: HTTPReply, sent_at: float) -> Any:
        status = reply[0]
        self._release(send, "failed" if status >= 500 else "overloaded" if status == 429 else "ok", sent_at)
        path = send.call[1]
        read = send.call[3] if len(send.call) > 3 else None
        if read is None:
            return _decode(reply, path, self.base_urls[send.replica])
        return read(_decode(reply, path, self.base_urls[send.replica]))

    def _send(self, send: Send) -> Any:
        """One blocking try of ``send`` (its window's share taken already)."""
        content = send.content()
        url = _url(self.base_urls[send.replica], send.call[1])
        sent = time.monotonic()
        with self._trying(send, url, sent):
            reply = self.stack.send(send.call[0], url, content)
        return self._answered(send, reply, sent)

    async def _asend(self, send: Send) -> Any:
        """One async try of ``send``, given up once its replica has answered nothing for the
        timeout (:class:`_Silence`)."""
        content = send.content()
        replica = send.replica
        url = _url(self.base_urls[replica], send.call[1])
        sent = time.monotonic()
        with self._trying(send, url, sent):
            async with _Silence(self.replicas, replica, self.timeout, sent):
                reply = await self.stack.asend(send.call[0], url, content)
        return self._answered(send, reply, sent)

    # -- requests ---------------------------------------------------------------------------
    def request(
        self, method: str, path: str, body: Any = None, read: Reader = None, *, deadline: Deadline | None = None
    ) -> Any:
        """One request, blocking, retried per the policy (no retry waits past ``deadline``);
        returns the decoded JSON, or what ``read`` makes of it."""
        unit = Unit(0, 0, 1)
        call: Call = (method, path, body) if read is None else (method, path, body, read)
        self.budget.earn()
        tried: set[int] = set()

        def attempt() -> Any:
            replica, used = self.replicas.acquire(tried)
            tried.add(replica)
            return self._send(Send(unit, replica, call, 1, used))

        retrying = self._retrying if deadline is None else Retrying(**self._retry_kwargs(is_retryable, deadline))
        return retrying.copy()(attempt)

    def request_all(
        self, calls: Sequence[Call | PromptBatch], max_concurrency: int, deadline: Deadline | None = None
    ) -> list[Any]:
        """Run ``calls`` with at most ``max_concurrency`` requests in flight, as the windows
        allow; results in order: each call's decoded JSON (or what its reader made of it) or
        the exception it ended with, each :class:`PromptBatch`'s pieces."""
        if len(calls) == 1 and not isinstance(calls[0], PromptBatch):
            return [_capture(lambda: self.request(*calls[0], deadline=deadline))]  # type: ignore[misc]
        io = self.stack.io_loop()
        if io is not None:
            return io.submit(self._arequest_all(calls, max_concurrency, deadline)).result()
        return self._request_all_on_threads(calls, max_concurrency, deadline)

    async def arequest_all(
        self, calls: Sequence[Call | PromptBatch], max_concurrency: int, deadline: Deadline | None = None
    ) -> list[Any]:
        """Async :meth:`request_all`."""
        io = self.stack.io_loop()
        job = self._arequest_all(calls, max_concurrency, deadline)
        return await (job if io is None else asyncio.wrap_future(io.submit(job)))

    def _dispatch(
        self, calls: Sequence[Call | PromptBatch], max_concurrency: int, deadline: Deadline | None
    ) -> Dispatch:
        # A server silent for as long as a request's every try would wait fails the call whole.
        stall_limit = self.timeout * self.retry.max_attempts
        return Dispatch(
            calls, self.replicas, max_concurrency, self.retry.max_attempts, self.budget, deadline, stall_limit
        )

    async def _arequest_all(
        self, calls: Sequence[Call | PromptBatch], max_concurrency: int, deadline: Deadline | None
    ) -> list[Any]:
        dispatch = self._dispatch(calls, max_concurrency, deadline)
        if len(calls) == 1 and not isinstance(calls[0], PromptBatch):
            return await self._aone(dispatch)
        loop = asyncio.get_running_loop()
        out: dict[asyncio.Task[Any], Send] = {}
        ended: deque[asyncio.Task[Any]] = deque()
        waiter: list[asyncio.Future[None]] = []

        def on_end(task: asyncio.Task[Any]) -> None:
            ended.append(task)
            if waiter and not waiter[0].done():
                waiter[0].set_result(None)

        started = 0
        try:
            while True:
                for send in dispatch.sends(time.monotonic()):
                    task = loop.create_task(self._asend(send))
                    out[task] = send
                    task.add_done_callback(on_end)
                    started += 1
                    # The first wave's requests started one at a time, the loop turning
                    # between: before Python 3.12, aiohttp writes a request's body in a task
                    # of its own, which would otherwise wait behind every other request's
                    # content (token ids made there) and leave the servers idle through all of
                    # it at the start of each batch.
                    if started <= max_concurrency:
                        await asyncio.sleep(0)
                if ended:
                    while ended:
                        task = ended.popleft()
                        if task in out:
                            dispatch.done(out.pop(task), _outcome(task), time.monotonic())
                    continue  # what the ended tries leave room for goes out first
                if dispatch.finished():
                    return dispatch.results()
                now = time.monotonic()
                stopped = dispatch.stopped(now)
                if stopped is not None:
                    dispatch.expire(list(out.values()), stopped)
                    for task in out:
                        task.cancel()
                    out.clear()
                    continue
                wait = dispatch.wake_in(now)
                waiter.append(loop.create_future())
                timer = loop.call_later(wait, _wake, waiter[0]) if wait is not None else None
                try:
                    await waiter[0]
                finally:
                    waiter.clear()
                    if timer is not None:
                        timer.cancel()
        except BaseException:
            for task in out:
                task.cancel()
            raise

    async def _aone(self, dispatch: Dispatch) -> list[Any]:
        """A dispatch of one call, its tries awaited in place (no task to start)."""
        while not dispatch.finished():
            for send in dispatch.sends(time.monotonic()):
                deadline = dispatch.deadline
                try:
                    if deadline is None:
                        outcome = await self._asend(send)
                    else:
                        async with asyncio.timeout(max(0.0, deadline.at - time.monotonic())):
                            outcome = await self._asend(send)
                except Exception as exc:  # a TimeoutError is the deadline's (the silence's is typed)
                    outcome = exc
                stopped = dispatch.stopped(time.monotonic())
                if stopped is not None and type(outcome) is TimeoutError:  # the deadline's, untyped
                    dispatch.expire([send], stopped)
                else:
                    dispatch.done(send, outcome, time.monotonic())
            now = time.monotonic()
            stopped = dispatch.stopped(now)
            if stopped is not None and not dispatch.finished():
                dispatch.expire([], stopped)
            wait = dispatch.wake_in(now)
            if wait and not dispatch.finished():
                await asyncio.sleep(wait)
        return dispatch.results()

    def _request_all_on_threads(
        self, calls: Sequence[Call | PromptBatch], max_concurrency: int, deadline: Deadline | None
    ) -> list[Any]:
        """:meth:`request_all` with blocking tries on threads (an httpx stack of the caller's)."""
        dispatch = self._dispatch(calls, max_concurrency, deadline)
        work = sum(c.size if isinstance(c, PromptBatch) else 1 for c in calls)
        ended: queue.SimpleQueue[tuple[Send, Any]] = queue.SimpleQueue()
        out: set[Send] = set()

        def run(send: Send) -> None:
            try:
                result: Any = self._send(send)
            except BaseException as exc:  # a KeyboardInterrupt too: the caller's thread raises it
                result = exc
            ended.put((send, result))

        pool = concurrent.futures.ThreadPoolExecutor(max(1, min(max_concurrency, work)), thread_name_prefix="qwen-fast")
        try:
            while True:
                for send in dispatch.sends(time.monotonic()):
                    out.add(send)
                    pool.submit(run, send)
                if not ended.empty():
                    while not ended.empty():
                        send, result = ended.get()
                        out.discard(send)
                        dispatch.done(send, _kept(result), time.monotonic())
                    continue
                if dispatch.finished():
                    return dispatch.results()
                now = time.monotonic()
                stopped = dispatch.stopped(now)
                if stopped is not None:
                    dispatch.expire(list(out), stopped)
                    continue
                try:
                    send, result = ended.get(timeout=dispatch.wake_in(now))
                except queue.Empty:
                    continue
                out.discard(send)
                dispatch.done(send, _kept(result), time.monotonic())
        finally:
            pool.shutdown(wait=not out, cancel_futures=True)

    async def aprobe(self, path: str, timeout: float) -> list[bool]:
        """Whether each replica answers ``path`` with 200 within ``timeout`` seconds: one try
        each, with this transport's headers and ``http_transport``, no retry, and no verdict on
        the replicas' health (a probe is not traffic). On the caller's event loop."""

        async def answers(base: str) -> bool:
            try:
                reply = await asyncio.wait_for(self.httpx.asend("GET", _url(base, path), None), timeout)
            except (TimeoutError, httpx.HTTPError):
                return False
            return reply[0] == 200

        return list(await asyncio.gather(*(answers(base) for base in self.base_urls)))

    def close(self) -> None:
        """Close the pooled connections of every stack (they open again on next use)."""
        self.stack.close()
        self.httpx.close()

    async def aclose(self) -> None:
        """Close this event loop's pooled httpx connections (an aiohttp stack serves every
        loop: :meth:`close` ends it)."""
        await self.httpx.aclose()


class _Silence:
    """Around one async try: gives it up (``TimeoutError`` at its ``await``) once its replica
    has answered nothing, neither it nor any other try, for ``timeout`` seconds since it was
    sent. One timer a try, pushed back lazily: when it fires after the replica answered
    others, it is set again from that answer."""

    __slots__ = ("_handle", "_loop", "_replica", "_replicas", "_scope", "_sent", "_timeout")

    def __init__(self, replicas: Replicas, replica: int, timeout: float, sent: float) -> None:
        self._replicas = replicas
        self._replica = replica
        self._timeout = timeout
        self._sent = sent

    async def __aenter__(self) -> None:
        self._scope = asyncio.timeout(None)
        await self._scope.__aenter__()
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(self._timeout, self._check)

    def _check(self) -> None:
        quiet_since = max(self._sent, self._replicas.last_answer[self._replica])
        left = quiet_since + self._timeout - time.monotonic()
        if left <= 0.001:
            self._scope.reschedule(self._loop.time())
        else:
            self._handle = self._loop.call_later(left, self._check)

    async def __aexit__(self, *exc: Any) -> None:
        self._handle.cancel()
        await self._scope.__aexit__(*exc)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _outcome(task: asyncio.Task[Any]) -> Any:
    """What a finished try's task ended with: its result, or its error; raises what ends more
    than the try (a cancellation from outside, a ``KeyboardInterrupt``)."""
    return _kept(task.exception() or task.result())  # a cancelled task's exception() raises


def _kept(outcome: Any) -> Any:
    """``outcome``, kept in its item's place unless it is an exception that ends the call."""
    if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
        raise outcome
    return outcome


def _url(base: str, path: str) -> str:
    """``path`` on the server at ``base``: paths under /v1 are relative to the base URL; server
    routes (/tokenize, /classify) start with "/" and hang off the root."""
    return base.removesuffix("/v1") + path if path.startswith("/") else f"{base}/{path}"


def _capture(fn: Callable[[], T]) -> T | Exception:
    try:
        return fn()
    except Exception as exc:  # handed back in the item's place
        return exc


#: A sans-I/O procedure: yields batches of calls (a :class:`PromptBatch` among them is cut into
#: requests by the transport), receives their results, returns a value. One copy of the logic
#: serves the sync and the async path. Yielding an empty batch is a checkpoint: the async
#: driver lets the event loop run other tasks before resuming.
Steps = Generator[list[Call | PromptBatch], list[Any], T]


def gather(runs: Sequence[Steps[T]]) -> Steps[list[T]]:
    """Several procedures side by side, as one: each round sends every unfinished one's calls
    together (so they share the requests in flight) and hands each its own replies; returns
    their values in order."""
    values: list[Any] = [None] * len(runs)
    pending: dict[int, list[Call | PromptBatch]] = {}
    for i, run in enumerate(runs):
        try:
            pending[i] = next(run)
        except StopIteration as done:
            values[i] = done.value
    while pending:
        order = list(pending)
        replies = yield [call for i in order for call in pending[i]]
        start = 0
        for i in order:
            count = len(pending[i])
            try:
                pending[i] = runs[i].send(replies[start : start + count])
            except StopIteration as done:
                values[i] = done.value
                del pending[i]
            start += count
    return values


def drive(transport: Transport, steps: Steps[T], max_concurrency: int, deadline: Deadline | None = None) -> T:
    """Run ``steps`` with blocking I/O, every request of it under ``deadline``."""
    try:
        calls = next(steps)
        while True:
            calls = steps.send(transport.request_all(calls, max_concurrency, deadline) if calls else [])
    except StopIteration as done:
        return done.value


async def adrive(transport: Transport, steps: Steps[T], max_concurrency: int, deadline: Deadline | None = None) -> T:
    """Run ``steps`` with async I/O, every request of it under ``deadline``."""
    try:
        calls = next(steps)
        while True:
            if not calls:
                await asyncio.sleep(0)
                calls = steps.send([])
                continue
            calls = steps.send(await transport.arequest_all(calls, max_concurrency, deadline))
    except StopIteration as done:
        return done.value


__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_TIMEOUT",
    "Call",
    "Deadline",
    "PromptBatch",
    "Reader",
    "Request",
    "RetryBudget",
    "RetryPolicy",
    "Steps",
    "Transport",
    "TransportSettings",
    "adrive",
    "drive",
    "gather",
    "parse_retry_after",
    "shown_url",
]
