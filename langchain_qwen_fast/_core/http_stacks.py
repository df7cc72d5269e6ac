"""How a transport's tries go over the wire: an :class:`HTTPStack` only sends one try and hands
back the reply as it came; the :class:`~langchain_qwen_fast._core.transport.Transport` above it
keeps the retries, the replica choice and the error types.

:class:`HttpxStack` serves every transport (and the blocking tries of every other stack);
:class:`AiohttpStack` takes the async tries once the set-up finds a server that takes one prompt
a request, where many small requests are in flight and aiohttp's client spends far less CPU a
request (docs/performance.md). Knows nothing of LangChain, prompts, retries or replicas.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import dataclasses
import functools
import ssl
import threading
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from langchain_qwen_fast.errors import ConfigurationError

T = TypeVar("T")


#: One try's reply as it came over the wire: (HTTP status, body, ``Retry-After`` header or None).
HTTPReply = tuple[int, bytes, "str | None"]


#: Seconds an idle aiohttp connection is kept: under the 5 s after which vLLM's Python API
#: server (uvicorn) drops one, so a request never goes out on a connection being dropped.
_AIOHTTP_KEEPALIVE = 4.0


@dataclass(frozen=True)
class WireSettings:
    """What every HTTP stack of a transport shares: headers, timeout, pool size."""

    headers: dict[str, str] = dataclasses.field(repr=False)
    timeout: float
    pool_size: int


class HTTPStack(abc.ABC):
    """How a transport's tries go over the wire: the transport keeps the retries, the replica
    choice and the error types, a stack only sends. Chosen once the set-up knows the server
    (:meth:`~langchain_qwen_fast._core.transport.Transport.use_stack`)."""

    #: the exceptions of this stack that mean the try failed on the network
    network_errors: tuple[type[BaseException], ...] = (httpx.HTTPError,)
    #: those of them that mean no connection could be made at all
    connect_errors: tuple[type[BaseException], ...] = (httpx.ConnectError,)

    @abc.abstractmethod
    def send(self, method: str, url: str, content: bytes | None) -> HTTPReply:
        """One try, blocking."""

    @abc.abstractmethod
    async def asend(self, method: str, url: str, content: bytes | None) -> HTTPReply:
        """One try, on the event loop of :meth:`io_loop` (the caller's where it is None)."""

    def io_loop(self) -> _LoopThread | None:
        """The event loop of its own this stack's async tries run on, which also runs a
        blocking batch (a batch then costs what an async one costs, not a thread a request);
        None: they run on the caller's loop, and a blocking batch on threads."""
        return None

    @abc.abstractmethod
    def close(self) -> None:
        """Close the pooled connections (they open again on next use)."""


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context, made once a process and shared by every client: making
    one loads the certificate store, the largest part of a new client's cost, and an async
    client is new for each event loop (each ``asyncio.run``)."""
    return httpx.create_ssl_context()


class HttpxStack(HTTPStack):
    """httpx: a pooled sync client, and a pooled async client per event loop; a blocking batch
    runs on threads. ``http_transport`` replaces the network (``httpx.MockTransport`` serves
    both clients)."""

    def __init__(self, wire: WireSettings, http_transport: Any = None) -> None:
        self._headers = wire.headers
        self._timeout = httpx.Timeout(wire.timeout)
        # The async tries wait for an answer as long as their server answers others (the
        # transport's _Silence gives them up); a blocking try times out by itself.
        self._async_timeout = httpx.Timeout(wire.timeout, read=None)
        self._limits = httpx.Limits(max_connections=wire.pool_size, max_keepalive_connections=wire.pool_size)
        self._http_transport = http_transport
        self._client: httpx.Client | None = None
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def client(self) -> httpx.Client:
        """The pooled sync client."""
        if self._client is None:
            custom = self._http_transport
            if custom is not None and not isinstance(custom, httpx.BaseTransport):
                # Else the blocking calls would quietly go to the network instead.
                raise ConfigurationError(
                    f"http_transport {custom!r} serves async calls only (an httpx.AsyncBaseTransport): use "
                    "abatch/ainvoke, or a transport that is also an httpx.BaseTransport"
                )
            self._client = httpx.Client(
                headers=self._headers,
                timeout=self._timeout,
                limits=self._limits,
                transport=custom,
                verify=tls_context(),
            )
        return self._client

    def new_async_client(self) -> httpx.AsyncClient:
        """A pooled async client with these limits and timeout, without the headers (for an
        SDK that keeps its own client; it binds to the event loop that first uses it)."""
        return httpx.AsyncClient(timeout=self._timeout, limits=self._limits, verify=tls_context())

    def _aclient(self) -> httpx.AsyncClient:
        # An AsyncClient belongs to the loop that made it; asyncio.run() twice means two loops.
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            transport = self._http_transport
            if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
                raise ConfigurationError(
                    f"http_transport {transport!r} serves blocking calls only (an httpx.BaseTransport): use "
                    "batch/invoke, or a transport that is also an httpx.AsyncBaseTransport"
                )
            client = httpx.AsyncClient(
                headers=self._headers,
                timeout=self._async_timeout,
                limits=self._limits,
                transport=transport,
                verify=tls_context(),
            )
            self._aclients[loop] = client
        return client

    def send(self, method: str, url: str, content: bytes | None) -> HTTPReply:
        reply = self.client.request(method, url, content=content)
        return reply.status_code, reply.content, reply.headers.get("retry-after")

    async def asend(self, method: str, url: str, content: bytes | None) -> HTTPReply:
        reply = await self._aclient().request(method, url, content=content)
        return reply.status_code, reply.content, reply.headers.get("retry-after")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        client = self._aclients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


class _LoopThread:
    """An event loop in a daemon thread, holding one aiohttp session: sync and async callers
    alike hand it their requests (a sync batch then costs what an async one costs, not a
    thread per request), and however many event loops call, one pool of connections serves
    them. Dropped unclosed with its stack, it closes the session and stops."""

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


class AiohttpStack(HTTPStack):
    """aiohttp on a loop of its own, for a server that takes one prompt a request: hundreds of
    small requests in flight, where httpx's client costs far more CPU a request. A single
    blocking try stays on httpx (``sync``): no event loop to hop to."""

    def __init__(self, wire: WireSettings, sync: HttpxStack, connector: Callable[[], Any] | None = None) -> None:
        import aiohttp

        self.network_errors = (httpx.HTTPError, aiohttp.ClientError, asyncio.TimeoutError)
        self.connect_errors = (httpx.ConnectError, aiohttp.ClientConnectorError)
        self._wire = wire
        self._sync = sync
        self._connector = connector
        self._io: _LoopThread | None = None
        self._io_lock = threading.Lock()

    def io_loop(self) -> _LoopThread:
        with self._io_lock:
            if self._io is None:
                self._io = _LoopThread(self._new_session)
                weakref.finalize(self, self._io.stop, False)
            return self._io

    def _new_session(self) -> Any:
        import aiohttp

        connector = (
            self._connector()
            if self._connector is not None
            else aiohttp.TCPConnector(limit=self._wire.pool_size, keepalive_timeout=_AIOHTTP_KEEPALIVE)
        )
        seconds = self._wire.timeout
        # No read timeout: the transport gives a try up by its server's silence, not by how
        # long it waits in the server's queue (transport._Silence).
        timeout = aiohttp.ClientTimeout(total=None, connect=seconds, sock_connect=seconds, sock_read=None)
        return aiohttp.ClientSession(
            connector=connector, headers=self._wire.headers, timeout=timeout, skip_auto_headers=("User-Agent",)
        )

    def send(self, method: str, url: str, content: bytes | None) -> HTTPReply:
        return self._sync.send(method, url, content)

    async def asend(self, method: str, url: str, content: bytes | None) -> HTTPReply:
        async with self.io_loop().get_session().request(method, url, data=content) as response:
            return response.status, await response.read(), response.headers.get("retry-after")

    def close(self) -> None:
        self._sync.close()
        with self._io_lock:
            io, self._io = self._io, None
        if io is not None:
            io.stop()
