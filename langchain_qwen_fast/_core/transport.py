"""Pooled HTTP to the vLLM server: retries, replicas and bounded fan-out over an HTTP stack.

A :class:`Transport` keeps what every request shares (the retry policy, the replica choice,
the error types); an HTTP stack (:mod:`~langchain_qwen_fast._core.http_stacks`) only sends.
Requests go through httpx until told otherwise: the classifier's engine hands its transport
an aiohttp stack (:meth:`Transport.aiohttp_stack`), whose client spends far less CPU a request
(docs/performance.md), unless its caller gave an ``http_transport`` of httpx's. The drivers
at the bottom (:func:`drive`, :func:`adrive`) run a sans-I/O procedure's calls through a
transport.

Knows nothing of LangChain or of prompts. Every failure leaves as a typed
:class:`~langchain_qwen_fast.errors.TransportError` (or :class:`ResponseFormatError`) that
names the URL it was sent to; the API key only ever travels in the ``Authorization`` header,
never in a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import re
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
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
    stop_before_delay,
    wait_random_exponential,
)

from langchain_qwen_fast._core import collector
from langchain_qwen_fast._core.http_stacks import AiohttpStack, HTTPReply, HTTPStack, HttpxStack, WireSettings
from langchain_qwen_fast._core.replicas import Replicas
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

#: The transport's defaults, the classifier's and the chat model's alike: seconds allowed for
#: each request, retries after the first try, and the seconds after the first try past which
#: no retry wait may end.
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_DEADLINE = 60.0
#: Connections a transport keeps open at most, unless its owner says how many it needs.
DEFAULT_POOL_SIZE = 64
#: The backoff between tries (full jitter): the first wait is up to ``RETRY_BACKOFF_INITIAL``
#: seconds, each next one up to twice as long, never more than ``RETRY_BACKOFF_MAX``. Short
#: against a request's timeout: a retry mostly waits for a replica or a restart to answer.
RETRY_BACKOFF_INITIAL = 0.1
RETRY_BACKOFF_MAX = 4.0

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
#: A call without a reader.
Request = tuple[str, str, Any]
Call = Request | tuple[str, str, Any, Callable[[Any], Any]]


def _content(body: Any) -> bytes | None:
    """A call's body as JSON bytes (built first if it is a function)."""
    if body is None:
        return None
    return orjson.dumps(body() if callable(body) else body)


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to retry.

    Connection errors, timeouts, 429 and 5xx are retried with exponential backoff and full
    jitter (or the server's ``Retry-After``), at most ``max_attempts`` tries in all, and never
    starting a wait that would end past ``deadline`` seconds after the first try.
    Other 4xx answers are the request's fault and are not retried.
    """

    max_attempts: int = DEFAULT_MAX_RETRIES + 1
    deadline: float = DEFAULT_RETRY_DEADLINE

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError("max_attempts must be at least 1")
        if self.deadline <= 0:
            raise ConfigurationError("deadline must be positive")


@dataclass(frozen=True, kw_only=True)
class TransportSettings:
    """How to reach the servers: what :meth:`Transport.from_settings` builds a transport from,
    for the classifier and the chat model alike."""

    #: the OpenAI-compatible base URLs (replicas serving the same model)
    base_urls: tuple[str, ...]
    api_key: str | None = dataclasses.field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_deadline: float = DEFAULT_RETRY_DEADLINE
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
                return False
            self._tokens -= 1
            return True


class Transport:
    """HTTP to a server: retries, replicas and typed errors over an :class:`HTTPStack`.

    Given several base URLs (replicas serving the same model, e.g. two vLLM servers sharing
    one GPU), each try goes to the replica with the fewest requests outstanding, a retry to
    another one, and a replica whose connection failed rests a few seconds (see
    :class:`~langchain_qwen_fast._core.replicas.Replicas`): the load follows what each server
    answers, and a replica that is down costs a retry, not the items.

    Args:
        base_url: the OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1``, or a list.
        api_key: bearer token, or None.
        timeout: seconds for each request (connect, write, read each).
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
        self.replicas = Replicas(len(self.base_urls))
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
        self._aretrying = AsyncRetrying(**self._retry_kwargs(is_retryable))
        #: retries refused by the retry budget so far
        self.retries_refused = 0
        self._jitter = wait_random_exponential(multiplier=RETRY_BACKOFF_INITIAL, max=RETRY_BACKOFF_MAX)

    @classmethod
    def from_settings(cls, settings: TransportSettings, pool_size: int = DEFAULT_POOL_SIZE) -> Transport:
        """A transport as ``settings`` say, with at most ``pool_size`` connections open."""
        return cls(
            settings.base_urls,
            api_key=settings.api_key,
            timeout=settings.timeout,
            retry=RetryPolicy(max_attempts=settings.max_retries + 1, deadline=settings.retry_deadline),
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

    def _retry_kwargs(self, retryable: Callable[[BaseException], bool]) -> dict[str, Any]:
        policy = stop_after_attempt(self.retry.max_attempts) | stop_before_delay(self.retry.deadline)

        def stop(state: RetryCallState) -> bool:
            # Asked only once the error is retryable, and the policy's stop comes first: a
            # retry is paid for only when it would really be made.
            if policy(state):
                return True
            if self.budget.spend():
                return False
            self.retries_refused += 1
            return True

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
        """Seconds allowed for each request."""
        return self.wire.timeout

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, ServerStatusError):
            retry_after = exc.retry_after
        else:  # an SDK error carrying the HTTP response (openai.APIStatusError)
            headers = getattr(getattr(exc, "response", None), "headers", None)
            retry_after = parse_retry_after(headers.get("retry-after")) if headers is not None else None
        return retry_after if retry_after is not None else self._jitter(state)

    # -- one try: the same for blocking and async sends --------------------------------------
    def _pick(self, tried: set[int], path: str) -> tuple[int, str]:
        """The replica for the next try of a request and the URL of ``path`` on it."""
        replica = self.replicas.acquire(tried)
        tried.add(replica)
        return replica, _url(self.base_urls[replica], path)

    @contextlib.contextmanager
    def _trying(self, replica: int, url: str) -> Iterator[None]:
        """Around one try's send: a network failure gives the replica its verdict and leaves
        as the typed error naming ``url``; anything else (a cancelled try) gives none."""
        try:
            yield
        except self.stack.network_errors as exc:
            timed_out = isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError))
            self.replicas.release(replica, "failed" if timed_out else "unreachable")
            raise self._network_error(exc, url, timed_out) from None
        except BaseException:
            self.replicas.release(replica, "cancelled")
            raise

    def _network_error(self, exc: BaseException, url: str, timed_out: bool) -> TransportError:
        where, what = shown_url(url), f"{type(exc).__name__}: {exc}".rstrip(": ")
        if timed_out:
            return ServerTimeoutError(f"no answer from {where} within the timeout of {self.timeout:g} s ({what})")
        if isinstance(exc, self.stack.connect_errors):
            return ServerConnectionError(f"could not connect to {where}: {what}")
        return ServerConnectionError(f"the connection to {where} failed: {what}")

    def _answered(self, replica: int, reply: HTTPReply, path: str, read: Reader) -> Any:
        self.replicas.release(replica, "failed" if reply[0] >= 500 else "ok")
        if read is None:
            return _decode(reply, path, self.base_urls[replica])
        with collector.paused():
            return read(_decode(reply, path, self.base_urls[replica]))

    def _send(self, method: str, path: str, tried: set[int], content: bytes | None, read: Reader) -> Any:
        replica, url = self._pick(tried, path)
        with self._trying(replica, url):
            reply = self.stack.send(method, url, content)
        return self._answered(replica, reply, path, read)

    async def _asend(self, method: str, path: str, tried: set[int], content: bytes | None, read: Reader) -> Any:
        replica, url = self._pick(tried, path)
        with self._trying(replica, url):
            reply = await self.stack.asend(method, url, content)
        return self._answered(replica, reply, path, read)

    # -- requests ---------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, read: Reader = None) -> Any:
        """One request, retried per the policy; returns the decoded JSON, or what ``read``
        makes of it."""
        content = _content(body)
        self.budget.earn()
        return self._retrying.copy()(self._send, method, path, set(), content, read)

    async def _arequest(self, method: str, path: str, body: Any = None, read: Reader = None) -> Any:
        content = _content(body)
        self.budget.earn()
        return await self._aretrying.copy()(self._asend, method, path, set(), content, read)

    def request_all(self, calls: Sequence[Call], max_concurrency: int) -> list[Any]:
        """Run ``calls`` with at most ``max_concurrency`` in flight; results in order,
        each the decoded JSON or the exception that call ended with."""
        if len(calls) == 1:
            return [_capture(self.request, *calls[0])]
        io = self.stack.io_loop()
        if io is not None:
            return io.submit(self._arequest_all(calls, max_concurrency)).result()
        with ThreadPoolExecutor(max(1, min(max_concurrency, len(calls))), thread_name_prefix="qwen-fast") as pool:
            return list(pool.map(lambda call: _capture(self.request, *call), calls))

    async def arequest_all(self, calls: Sequence[Call], max_concurrency: int) -> list[Any]:
        """Async :meth:`request_all`."""
        io = self.stack.io_loop()
        job = self._arequest_all(calls, max_concurrency)
        return await (job if io is None else asyncio.wrap_future(io.submit(job)))

    async def _arequest_all(self, calls: Sequence[Call], max_concurrency: int) -> list[Any]:
        if len(calls) == 1:
            return [await _acapture(self._arequest, *calls[0])]
        gate = asyncio.Semaphore(max(1, max_concurrency))

        async def one(call: Call) -> Any:
            async with gate:
                return await _acapture(self._arequest, *call)

        # The first wave's requests started one at a time, the loop turning between: before
        # Python 3.12, aiohttp writes a request's body in a task of its own, which would
        # otherwise wait behind every other request's content (token ids made there) and
        # leave the servers idle through all of it at the start of each batch. The rest wait
        # for the gate and are started at once.
        started: list[asyncio.Future[Any]] = []
        try:
            for call in calls:
                started.append(asyncio.ensure_future(one(call)))
                if len(started) <= max_concurrency:
                    await asyncio.sleep(0)
        except BaseException:
            for task in started:
                task.cancel()
            raise
        return list(await asyncio.gather(*started))

    async def aprobe(self, path: str, timeout: float) -> list[bool]:
        """Whether each replica answers ``path`` with 200 within ``timeout`` seconds: one try
        each, with this transport's headers and ``http_transport``, no retry, and no verdict on
        the replicas' health (a probe is not traffic). On the caller's event loop."""

        async def answers(base: str) -> bool:
            try:
                reply = await asyncio.wait_for(self.httpx.asend("GET", _url(base, path), None), timeout)
            except (httpx.HTTPError, asyncio.TimeoutError):
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


def _url(base: str, path: str) -> str:
    """``path`` on the server at ``base``: paths under /v1 are relative to the base URL; server
    routes (/tokenize, /classify) start with "/" and hang off the root."""
    return base.removesuffix("/v1") + path if path.startswith("/") else f"{base}/{path}"


def _capture(fn: Callable[..., T], *args: Any) -> T | Exception:
    try:
        return fn(*args)
    except Exception as exc:  # handed back in the item's place
        return exc


async def _acapture(fn: Callable[..., Awaitable[T]], *args: Any) -> T | Exception:
    try:
        return await fn(*args)
    except Exception as exc:
        return exc


#: A sans-I/O procedure: yields batches of calls, receives their results, returns a value.
#: One copy of the logic serves the sync and the async path. Yielding an empty batch is a
#: checkpoint: the async driver lets the event loop run other tasks before resuming.
Steps = Generator[list[Call], list[Any], T]


def gather(runs: Sequence[Steps[T]]) -> Steps[list[T]]:
    """Several procedures side by side, as one: each round sends every unfinished one's calls
    together (so they share the requests in flight) and hands each its own replies; returns
    their values in order."""
    values: list[Any] = [None] * len(runs)
    pending: dict[int, list[Call]] = {}
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


def drive(transport: Transport, steps: Steps[T], max_concurrency: int) -> T:
    """Run ``steps`` with blocking I/O."""
    try:
        calls = next(steps)
        while True:
            calls = steps.send(transport.request_all(calls, max_concurrency) if calls else [])
    except StopIteration as done:
        return done.value


async def adrive(transport: Transport, steps: Steps[T], max_concurrency: int) -> T:
    """Run ``steps`` with async I/O."""
    try:
        calls = next(steps)
        while True:
            if not calls:
                await asyncio.sleep(0)
                calls = steps.send([])
                continue
            calls = steps.send(await transport.arequest_all(calls, max_concurrency))
    except StopIteration as done:
        return done.value
