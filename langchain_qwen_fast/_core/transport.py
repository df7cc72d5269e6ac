"""Pooled HTTP to the vLLM server: one sync and one async client, retries, bounded fan-out.

Requests go through ``httpx``, or, once :meth:`Transport.use_aiohttp` is called (a server
that takes one prompt a request, so many small requests are in flight), async requests and
sync batches of requests go through ``aiohttp``: at hundreds of requests in flight httpx's
client spends far more CPU on each request (docs/benchmarks.md). Both paths share the retry
policy, the replica choice and the error types.

Knows nothing of LangChain or of prompts. Every failure leaves as a typed
:class:`~langchain_qwen_fast.errors.TransportError` (or :class:`ResponseFormatError`);
the API key only ever travels in the ``Authorization`` header, never in a message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import itertools
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
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

from langchain_qwen_fast.errors import (
    ConfigurationError,
    ResponseFormatError,
    ServerConnectionError,
    ServerStatusError,
    ServerTimeoutError,
    TransportError,
)

T = TypeVar("T")

#: A request: (HTTP method, path under the base URL, JSON body or None). The body may also be
#: a function that builds it, called once when the request is sent (the async path calls it
#: in a worker thread): tokenising a group's prompts then overlaps the other requests.
Call = tuple[str, str, Any]


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

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 4.0
    deadline: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError("max_attempts must be at least 1")
        if self.deadline <= 0 or self.initial_backoff < 0 or self.max_backoff < 0:
            raise ConfigurationError("deadline must be positive and backoffs non-negative")


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, ServerStatusError):
        return exc.retryable
    return isinstance(exc, (ServerConnectionError, ServerTimeoutError))


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


def _decode(status: int, content: bytes, retry_after: str | None, path: str) -> Any:
    """An answer (status, body, ``Retry-After``) as decoded JSON, or the typed error it is."""
    if status >= 400:
        raise ServerStatusError(
            f"server answered HTTP {status} to {path}: {_error_message(content)}",
            status_code=status,
            retry_after=parse_retry_after(retry_after),
        )
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        raise ResponseFormatError(f"server sent malformed JSON to {path} ({len(content)} bytes): {exc}") from None


def _decode_response(response: httpx.Response, path: str) -> Any:
    return _decode(response.status_code, response.content, response.headers.get("retry-after"), path)


def _translate(exc: Exception, path: str) -> TransportError:
    """An httpx or aiohttp failure as its typed error (a timeout, or a failed connection)."""
    if isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError)):
        return ServerTimeoutError(f"no answer to {path} within the timeout ({type(exc).__name__})")
    return ServerConnectionError(f"talking to the server at {path} failed: {type(exc).__name__}: {exc}")


#: Seconds an idle aiohttp connection is kept: under the 5 s after which vLLM's Python API
#: server (uvicorn) drops one, so a request never goes out on a connection being dropped.
_AIOHTTP_KEEPALIVE = 4.0


class _LoopThread:
    """The transport's own event loop, in a daemon thread, holding its one aiohttp session:
    sync and async callers alike hand it their requests (a sync batch then costs what an
    async one costs, not a thread per request), and however many event loops call, one pool
    of connections serves them and :meth:`Transport.close` ends it. Dropped unclosed with its
    transport, it closes the session and stops."""

    def __init__(self, make_session: Callable[[], Any]) -> None:
        self.loop = asyncio.new_event_loop()
        self.session: Any = None
        self._make_session = make_session
        self._thread = threading.Thread(target=self.loop.run_forever, name="qwen-fast-io", daemon=True)
        self._thread.start()

    def get_session(self) -> Any:
        """The session (made on first use, on this loop)."""
        if self.session is None:
            self.session = self._make_session()
        return self.session

    def submit(self, job: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``job`` on this loop."""
        return asyncio.run_coroutine_threadsafe(job, self.loop)

    def run(self, job: Coroutine[Any, Any, T]) -> T:
        """Run ``job`` on this loop and wait for its result."""
        return self.submit(job).result()

    async def _shutdown(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None
        self.loop.stop()

    def stop(self, wait: bool = True) -> None:
        """Close the session and stop the loop (``wait``: until the thread is done)."""
        if self.loop.is_closed():
            return
        self.submit(self._shutdown())
        if wait:
            self._thread.join()
            self.loop.close()


class Replicas:
    """Which replica each try goes to: among the replicas not resting, the one with the fewest
    requests outstanding (ties go round in turn), never one this request already tried while
    another is left. A replica whose connection fails rests ``cooldown`` seconds, then takes
    traffic again (if every replica rests, they are tried anyway: nothing waits on a timer).
    """

    def __init__(self, count: int, cooldown: float = 5.0) -> None:
        self.count = count
        self.cooldown = cooldown
        self.outstanding = [0] * count
        self._resting_until = [0.0] * count
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def acquire(self, tried: set[int]) -> int:
        """The replica for the next try, counted as outstanding until :meth:`release`."""
        if self.count == 1:
            return 0
        now = time.monotonic()
        with self._lock:
            fresh = [k for k in range(self.count) if k not in tried] or list(range(self.count))
            awake = [k for k in fresh if self._resting_until[k] <= now] or fresh
            start = next(self._turn)
            chosen = min(awake, key=lambda k: (self.outstanding[k], (k - start) % self.count))
            self.outstanding[chosen] += 1
            return chosen

    def release(self, replica: int, *, connection_failed: bool = False) -> None:
        """The try on ``replica`` is over; a failed connection sends the replica to rest."""
        if self.count == 1:
            return
        with self._lock:
            self.outstanding[replica] -= 1
            if connection_failed:
                self._resting_until[replica] = time.monotonic() + self.cooldown


class Transport:
    """HTTP to a server: a pooled sync client, a pooled async client per event loop.

    Given several base URLs (replicas serving the same model, e.g. two vLLM servers sharing
    one GPU), each try goes to the replica with the fewest requests outstanding, a retry to
    another one, and a replica whose connection failed rests a few seconds (see
    :class:`Replicas`): the load follows what each server answers, and a replica that is
    down costs a retry, not the items.

    Args:
        base_url: the OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1``, or a list.
        api_key: bearer token, or None.
        timeout: seconds for each request (connect, write, read each).
        retry: the retry policy.
        pool_size: most connections kept open per client.
        http_transport: an ``httpx`` transport for the clients instead of the network, e.g.
            ``httpx.MockTransport`` (serves both the sync and the async client) in tests. With
            one, every request goes through httpx (:meth:`use_aiohttp` changes nothing).
        aiohttp_connector: makes the connector of each event loop's aiohttp session (default:
            TCP with ``pool_size`` connections), e.g. an ``aiohttp.UnixConnector`` in tests.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        api_key: str | None,
        timeout: float,
        retry: RetryPolicy,
        pool_size: int = 64,
        http_transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        aiohttp_connector: Callable[[], Any] | None = None,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ConfigurationError("base_url: give at least one URL")
        self.base_urls = [u.rstrip("/") for u in urls]
        self.base_url = self.base_urls[0]
        self.replicas = Replicas(len(self.base_urls))
        self._headers = {"content-type": "application/json"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._timeout = httpx.Timeout(timeout)
        self._limits = httpx.Limits(max_connections=pool_size, max_keepalive_connections=pool_size)
        self.pool_size = pool_size
        self._http_transport = http_transport
        self.retry = retry
        self._client: httpx.Client | None = None
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self._aiohttp_connector = aiohttp_connector
        self._io: _LoopThread | None = None
        self._io_lock = threading.Lock()
        #: async requests and sync batches go through aiohttp (see :meth:`use_aiohttp`)
        self.aiohttp = False
        self._network_errors: tuple[type[Exception], ...] = (httpx.HTTPError,)
        self._retrying = Retrying(**self._retry_kwargs(_retryable))
        self._aretrying = AsyncRetrying(**self._retry_kwargs(_retryable))
        self._jitter = wait_random_exponential(multiplier=retry.initial_backoff, max=retry.max_backoff)

    def use_aiohttp(self) -> None:
        """Send async requests and sync batches of requests through aiohttp from now on (a
        single sync request stays on httpx: no event loop to hop to). Worth it where many
        small requests are in flight; nothing changes with an ``http_transport``."""
        if self._http_transport is None:
            import aiohttp

            self._network_errors = (httpx.HTTPError, aiohttp.ClientError, asyncio.TimeoutError)
            self.aiohttp = True

    def _retry_kwargs(self, retryable: Callable[[BaseException], bool]) -> dict[str, Any]:
        return dict(
            stop=stop_after_attempt(self.retry.max_attempts) | stop_before_delay(self.retry.deadline),
            wait=self._wait,
            retry=retry_if_exception(retryable),
            reraise=True,
        )

    def retrying(self, retryable: Callable[[BaseException], bool]) -> tuple[Retrying, AsyncRetrying]:
        """This transport's retry policy for calls made through another client (the chat
        model's SDK calls), with ``retryable`` saying which of its errors to retry."""
        return Retrying(**self._retry_kwargs(retryable)), AsyncRetrying(**self._retry_kwargs(retryable))

    def new_async_client(self) -> httpx.AsyncClient:
        """A pooled async client with this transport's limits and timeout (for an SDK that
        keeps its own; it binds to the event loop that first uses it)."""
        return httpx.AsyncClient(timeout=self._timeout, limits=self._limits)

    def __repr__(self) -> str:
        return f"Transport(base_url={self.base_urls if len(self.base_urls) > 1 else self.base_url!r})"

    @property
    def timeout(self) -> float:
        """Seconds allowed for each request."""
        return float(self._timeout.read or 0)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, ServerStatusError):
            retry_after = exc.retry_after
        else:  # an SDK error carrying the HTTP response (openai.APIStatusError)
            headers = getattr(getattr(exc, "response", None), "headers", None)
            retry_after = parse_retry_after(headers.get("retry-after")) if headers is not None else None
        return retry_after if retry_after is not None else self._jitter(state)

    def _url(self, replica: int, path: str) -> str:
        # Paths under /v1 are relative to base_url; server routes (/tokenize, /classify)
        # start with "/" and hang off the root.
        base = self.base_urls[replica]
        return base.removesuffix("/v1") + path if path.startswith("/") else f"{base}/{path}"

    # -- sync ---------------------------------------------------------------------------
    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            sync = self._http_transport if isinstance(self._http_transport, httpx.BaseTransport) else None
            self._client = httpx.Client(
                headers=self._headers, timeout=self._timeout, limits=self._limits, transport=sync
            )
        return self._client

    def _send(self, method: str, path: str, tried: set[int], content: bytes | None) -> Any:
        replica = self.replicas.acquire(tried)
        tried.add(replica)
        try:
            response = self.client.request(method, self._url(replica, path), content=content)
        except httpx.HTTPError as exc:
            self.replicas.release(replica, connection_failed=not isinstance(exc, httpx.TimeoutException))
            raise _translate(exc, path) from None
        self.replicas.release(replica)
        return _decode_response(response, path)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One request, retried per the policy; returns the decoded JSON."""
        content = _content(body)
        return self._retrying.copy()(self._send, method, path, set(), content)

    def request_all(self, calls: Sequence[Call], max_concurrency: int) -> list[Any]:
        """Run ``calls`` with at most ``max_concurrency`` in flight; results in order,
        each the decoded JSON or the exception that call ended with."""
        if len(calls) == 1:
            return [_capture(self.request, *calls[0])]
        if self.aiohttp:
            return self._io_loop().run(self._arequest_all(calls, max_concurrency))
        workers = max(1, min(max_concurrency, len(calls)))
        with ThreadPoolExecutor(workers, thread_name_prefix="qwen-fast") as pool:
            return list(pool.map(lambda call: _capture(self.request, *call), calls))

    def _io_loop(self) -> _LoopThread:
        with self._io_lock:
            if self._io is None:
                self._io = _LoopThread(self._new_session)
                weakref.finalize(self, self._io.stop, False)
            return self._io

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        with self._io_lock:
            io, self._io = self._io, None
        if io is not None:
            io.stop()

    # -- async --------------------------------------------------------------------------
    @property
    def aclient(self) -> httpx.AsyncClient:
        # An AsyncClient belongs to the loop that made it; asyncio.run() twice means two loops.
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            transport = self._http_transport
            client = httpx.AsyncClient(
                headers=self._headers,
                timeout=self._timeout,
                limits=self._limits,
                transport=transport if isinstance(transport, httpx.AsyncBaseTransport) else None,
            )
            self._aclients[loop] = client
        return client

    def _new_session(self) -> Any:
        """The aiohttp session of :meth:`use_aiohttp` (made on the transport's own loop)."""
        import aiohttp

        connector = (
            self._aiohttp_connector()
            if self._aiohttp_connector is not None
            else aiohttp.TCPConnector(limit=self.pool_size, keepalive_timeout=_AIOHTTP_KEEPALIVE)
        )
        seconds = self.timeout
        timeout = aiohttp.ClientTimeout(total=None, connect=seconds, sock_connect=seconds, sock_read=seconds)
        return aiohttp.ClientSession(
            connector=connector, headers=self._headers, timeout=timeout, skip_auto_headers=("User-Agent",)
        )

    async def _araw(self, method: str, url: str, content: bytes | None) -> tuple[int, bytes, str | None]:
        """One try: (status, body, ``Retry-After``), through aiohttp (on the transport's own
        loop, where :meth:`arequest` and :meth:`arequest_all` send it) or httpx."""
        if self.aiohttp:
            async with self._io_loop().get_session().request(method, url, data=content) as response:
                return response.status, await response.read(), response.headers.get("retry-after")
        reply = await self.aclient.request(method, url, content=content)
        return reply.status_code, reply.content, reply.headers.get("retry-after")

    async def _asend(self, method: str, path: str, tried: set[int], content: bytes | None) -> Any:
        replica = self.replicas.acquire(tried)
        tried.add(replica)
        try:
            status, body, retry_after = await self._araw(method, self._url(replica, path), content)
        except self._network_errors as exc:
            timed_out = isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError))
            self.replicas.release(replica, connection_failed=not timed_out)
            raise _translate(exc, path) from None
        except BaseException:  # cancelled: the try is over all the same
            self.replicas.release(replica)
            raise
        self.replicas.release(replica)
        return _decode(status, body, retry_after, path)

    async def arequest(self, method: str, path: str, body: Any = None) -> Any:
        """Async :meth:`request`."""
        if self.aiohttp:
            return await asyncio.wrap_future(self._io_loop().submit(self._arequest(method, path, body)))
        return await self._arequest(method, path, body)

    async def _arequest(self, method: str, path: str, body: Any = None) -> Any:
        content = await asyncio.to_thread(_content, body) if callable(body) else _content(body)
        return await self._aretrying.copy()(self._asend, method, path, set(), content)

    async def arequest_all(self, calls: Sequence[Call], max_concurrency: int) -> list[Any]:
        """Async :meth:`request_all`."""
        if self.aiohttp:
            return await asyncio.wrap_future(self._io_loop().submit(self._arequest_all(calls, max_concurrency)))
        return await self._arequest_all(calls, max_concurrency)

    async def _arequest_all(self, calls: Sequence[Call], max_concurrency: int) -> list[Any]:
        if len(calls) == 1:
            return [await _acapture(self._arequest, *calls[0])]
        gate = asyncio.Semaphore(max(1, max_concurrency))

        async def one(call: Call) -> Any:
            async with gate:
                return await _acapture(self._arequest, *call)

        return list(await asyncio.gather(*(one(call) for call in calls)))

    async def aclose(self) -> None:
        """Close this event loop's pooled httpx connections (the aiohttp ones of
        :meth:`use_aiohttp` serve every loop: :meth:`close` ends them)."""
        loop = asyncio.get_running_loop()
        client = self._aclients.pop(loop, None)
        if client is not None:
            await client.aclose()


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
