"""A loopback HTTP proxy in front of the real vLLM server that records and injects faults.

Every request is recorded (method, path, JSON body). Faults are queued per path and each is
used once, in order: an HTTP error status (with headers such as ``Retry-After``), a
connection reset, a stall past the client's timeout, malformed or truncated JSON, or a
rewrite of the server's real reply. Requests with no fault queued go to the real server.

:meth:`FaultProxy.pace` makes the server behind it answer a given number of prompts a second,
one request after another in the order they came (a server of that capacity with a queue),
and changes it mid-batch; a standing stall then holds what it has queued too. A client that
hangs up on a request, waiting or stalled, is counted (``hung_up``) and its request leaves the
queue, as vLLM aborts a request whose client left.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


@dataclass
class Fault:
    """One injected fault. Build with the class methods."""

    kind: str
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    seconds: float = 0.0
    rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @classmethod
    def http(cls, status: int, headers: dict[str, str] | None = None, message: str = "injected") -> Fault:
        body = json.dumps({"error": {"message": message, "code": status}}).encode()
        return cls("http", status=status, headers=headers or {}, body=body)

    @classmethod
    def reset(cls) -> Fault:
        return cls("reset")

    @classmethod
    def stall(cls, seconds: float) -> Fault:
        return cls("stall", seconds=seconds)

    @classmethod
    def raw(cls, body: bytes, status: int = 200) -> Fault:
        """Send ``body`` as the reply (e.g. malformed or truncated JSON)."""
        return cls("raw", status=status, body=body)

    @classmethod
    def rewrite_reply(cls, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Fault:
        """Forward to the server, then pass its JSON reply through ``fn``."""
        return cls("rewrite", rewrite=fn)


class _Pace:
    """A server of ``rate`` prompts a second with a queue: requests are served one after
    another in the order they came, each for its prompts' time at the rate of the moment; a
    request whose client hung up leaves at once (waiting, or being served)."""

    #: how often a request checks its client and the rate
    STEP = 0.01

    def __init__(self) -> None:
        self.rate: float | None = None
        self._tickets = 0
        self._serving = 0
        self._left: set[int] = set()
        self._turn = threading.Condition()

    def serve(self, prompts: int, hung_up: Callable[[], bool], stalled: Callable[[], bool]) -> bool:
        """Hold the caller for its request's turn and service time (which does not pass while
        ``stalled()``); False if its client hung up meanwhile."""
        with self._turn:
            ticket, self._tickets = self._tickets, self._tickets + 1
        try:
            while True:
                with self._turn:
                    if self._serving == ticket:
                        break
                    self._turn.wait(self.STEP)
                if hung_up():
                    return False
            left = float(prompts)
            while left > 0:
                time.sleep(self.STEP)
                if not stalled():
                    left -= (self.rate or float("inf")) * self.STEP
                if hung_up():
                    return False
            return True
        finally:
            with self._turn:
                self._left.add(ticket)
                while self._serving in self._left:
                    self._left.discard(self._serving)
                    self._serving += 1
                self._turn.notify_all()


@dataclass
class Recorded:
    method: str
    path: str
    body: Any
    headers: dict[str, str]


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up before its reply (a caller past its deadline) is no error of the
        proxy's: nothing is printed for it."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FaultProxy:
    """Start with ``with FaultProxy(upstream_root) as proxy:``; point clients at ``proxy.base_url``."""

    def __init__(self, upstream_root: str) -> None:
        self.upstream_root = upstream_root.rstrip("/")
        self.requests: list[Recorded] = []
        self.connections = 0
        self.in_flight = 0
        #: most requests handled at the same moment since the last reset
        self.max_in_flight = 0
        self._faults: dict[str, list[Fault]] = {}
        #: a fault every request gets (after the queued ones) until ``_standing_until``
        self._standing: Fault | None = None
        self._standing_until = 0.0
        #: applied to every forwarded JSON reply: fn(request_body, reply) -> reply
        self.rewrite_all: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self._upstream = httpx.Client(timeout=120, limits=httpx.Limits(max_connections=256))
        self._pace = _Pace()
        #: requests whose client hung up before their reply (waiting, paced or stalled)
        self.hung_up = 0
        self._server = _ProxyServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def inject(self, path_suffix: str, *faults: Fault) -> None:
        """Queue faults for requests whose path ends with ``path_suffix`` (one each, in order)."""
        with self._lock:
            self._faults.setdefault(path_suffix, []).extend(faults)

    def standing(self, fault: Fault | None, seconds: float = float("inf")) -> None:
        """Give every request ``fault`` (once the queued faults are used) for ``seconds``, e.g.
        ``standing(Fault.http(503), 30)`` for an outage or ``standing(Fault.stall(60))`` for a
        stalled upstream; ``standing(None)`` ends it. A stall ends early when it does."""
        with self._lock:
            self._standing = fault
            self._standing_until = time.monotonic() + seconds

    def _standing_fault(self) -> Fault | None:
        with self._lock:
            if self._standing is not None and time.monotonic() < self._standing_until:
                return self._standing
        return None

    def pace(self, prompts_per_second: float | None) -> None:
        """Answer at most ``prompts_per_second`` prompts a second from now on, requests served
        one after another in the order they came (None: as fast as the server does)."""
        self._pace.rate = prompts_per_second

    def _stalled(self) -> bool:
        """Whether a standing stall holds the server now: a paced server answers nothing then,
        what it holds included."""
        standing = self._standing_fault()
        return standing is not None and standing.kind == "stall"

    def pending_faults(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._faults.values())

    def reset_stats(self) -> None:
        with self._lock:
            self.max_in_flight = self.in_flight

    def calls(self, path_suffix: str) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith(path_suffix)]

    def _take_fault(self, path: str) -> Fault | None:
        with self._lock:
            for suffix, queue in self._faults.items():
                if path.endswith(suffix) and queue:
                    return queue.pop(0)
        return self._standing_fault()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return type("Handler", (_Handler,), {"proxy": self})

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._upstream.close()


class _Handler(BaseHTTPRequestHandler):
    """One request through a :class:`FaultProxy` (``proxy``)."""

    proxy: FaultProxy
    protocol_version = "HTTP/1.1"
    #: whether this request still counts in ``self.proxy.in_flight``
    _counted = False

    def setup(self) -> None:
        super().setup()
        with self.proxy._lock:
            self.proxy.connections += 1

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        # The request stops counting before its reply goes out: once the client has read
        # the reply it may send its next request before this thread runs again.
        self._leave()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        with self.proxy._lock:
            self.proxy.in_flight += 1
            self.proxy.max_in_flight = max(self.proxy.max_in_flight, self.proxy.in_flight)
        self._counted = True
        try:
            self._handle_counted()
        finally:
            self._leave()

    def _hung_up(self) -> bool:
        """Whether the client closed its connection (what vLLM takes as an abort)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            gone = bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            gone = True
        if gone:
            with self.proxy._lock:
                self.proxy.hung_up += 1
        return gone

    def _waited(self, fault: Fault | None, standing: bool, body: Any) -> bool:
        """Hold the request through a stall and its paced turn; False if its client hung up."""
        if fault is not None and fault.kind == "stall":
            end = time.monotonic() + fault.seconds
            # a standing stall ends early when the standing fault does
            while time.monotonic() < end and (not standing or self.proxy._standing_fault() is fault):
                time.sleep(0.05)
                if self._hung_up():
                    return False
        if self.proxy._pace.rate is not None and fault is None and isinstance(body, dict) and "prompt" in body:
            prompt = body["prompt"]
            listed = isinstance(prompt, list) and bool(prompt) and not isinstance(prompt[0], int)
            return self.proxy._pace.serve(len(prompt) if listed else 1, self._hung_up, self.proxy._stalled)
        return True

    def _leave(self) -> None:
        if self._counted:
            self._counted = False
            with self.proxy._lock:
                self.proxy.in_flight -= 1

    def _handle_counted(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        path = self.path
        with self.proxy._lock:
            self.proxy.requests.append(Recorded(self.command, path, body, dict(self.headers)))
        fault = self.proxy._take_fault(path)
        standing = fault is not None and fault is self.proxy._standing
        if fault is not None and fault.kind == "reset":
            # SO_LINGER 0: close sends RST, the client sees a reset connection.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._leave()
            self.connection.close()
            self.close_connection = True
            return
        if not self._waited(fault, standing, body):
            self.close_connection = True
            return
        if fault is not None and fault.kind in ("http", "raw"):
            self._reply(fault.status, fault.body, fault.headers)
            return
        forward = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
        try:
            upstream = self.proxy._upstream.request(
                self.command, self.proxy.upstream_root + path, content=raw, headers=forward
            )
        except httpx.HTTPError:
            self._reply(502, b'{"error": {"message": "upstream unreachable"}}')
            return
        content = upstream.content
        if fault is not None and fault.kind == "rewrite" and fault.rewrite is not None:
            content = json.dumps(fault.rewrite(upstream.json())).encode()
        elif self.proxy.rewrite_all is not None and upstream.status_code == 200:
            content = json.dumps(self.proxy.rewrite_all(body, upstream.json())).encode()
        self._reply(upstream.status_code, content)
