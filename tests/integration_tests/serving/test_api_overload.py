"""The service (``qwen-fast api``, a process of its own) under overload and abuse, in front of
the real vLLM server through the fault proxy: a stalled upstream and hundreds of callers (each
answered within its deadline, 504 or 429, ``/health`` fast throughout, memory bounded), an
oversize body refused at once with memory flat, the key checked before the body, an upstream
503's ``Retry-After`` passed on, and readiness that follows the upstream.

The figures (``/health`` p99, the service's memory, the answers and how fast) are printed for
the record (``pytest -s``); the assertions are generous bounds that state the behaviour."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.serving.launcher import free_port
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from tests.support.proxy import Fault, FaultProxy

KEY = "sk-overload-2"
AUTHORISED = {"authorization": f"Bearer {KEY}"}
#: The service's settings here: short enough that a stalled upstream is felt in seconds.
DEADLINE = 1.5
MAX_QUEUED = 200
MAX_BODY = 1 << 20


@dataclass
class Service:
    """``qwen-fast api`` running in a process of its own."""

    url: str
    process: subprocess.Popen[bytes]

    def rss(self) -> int:
        """The service's resident memory, in bytes."""
        return int(psutil.Process(self.process.pid).memory_info().rss)


@pytest.fixture
def service(proxy: FaultProxy, tmp_path: Path) -> Iterator[Service]:
    """The service over the tiny model through the proxy, key on, with this module's limits; set
    up (``/ready`` answered 200) and warmed by a few requests before the test."""
    saved = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url=proxy.base_url, max_retries=0).save(tmp_path / "c")
    port = free_port("127.0.0.1")
    command = [sys.executable, "-m", "langchain_qwen_fast.cli", "api", str(saved), "--port", str(port),
               "--request-timeout", str(DEADLINE), "--max-queued-texts", str(MAX_QUEUED),
               "--max-body-bytes", str(MAX_BODY), "--max-texts", "100", "--ready-timeout", "1"]  # fmt: skip
    log = (tmp_path / "service.log").open("wb")
    process = subprocess.Popen(command, stderr=log, env={**os.environ, "QWEN_FAST_API_KEY": KEY})
    running = Service(f"http://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "service.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{running.url}/ready", timeout=5).status_code == 200:
                    break
            time.sleep(0.1)
        # Eight answered; on a loaded machine a warm-up request may outlast the short deadline (504).
        warmed, texts = 0, itertools.cycle(headlines(8))
        while warmed < 8:
            assert time.monotonic() < deadline, "the service answered no 8 warm-up requests within 60 s"
            body = {"input": next(texts)}
            answer = httpx.post(f"{running.url}/v1/classify", json=body, headers=AUTHORISED, timeout=30)
            assert answer.status_code in (200, 504), answer.text
            warmed += answer.status_code == 200
        yield running
    finally:
        process.terminate()
        process.wait(30)
        log.close()


@dataclass
class Watch:
    """``/health`` asked every 20 ms and the service's memory sampled, until stopped."""

    service: Service
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    peak_rss: int = 0
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        async with httpx.AsyncClient(base_url=self.service.url, timeout=10) as http:
            while not self._stop.is_set():
                start = time.perf_counter()
                answer = await http.get("/health")
                self.latencies.append(time.perf_counter() - start)
                self.statuses[answer.status_code] += 1
                self.peak_rss = max(self.peak_rss, self.service.rss())
                await asyncio.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()

    @property
    def p99(self) -> float:
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[98]


#: The callers, in a process of their own (aiohttp: the least client CPU a request), so that
#: what is measured is the service, not a test process busy with hundreds of its own clients.
#: Each caller's status, seconds, Retry-After, x-request-id and body, one JSON line each.
_CALLERS = """
import asyncio, json, os, sys, time
import aiohttp
url, count = sys.argv[1], int(sys.argv[2])
headers = {"authorization": "Bearer " + os.environ["QWEN_FAST_TEST_KEY"]}
async def main():
    async with aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(limit=0), headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=30)) as http:
        async def one(k):
            start = time.perf_counter()
            async with http.post("/v1/classify", json={"input": f"Stocks rally, day {k}"}) as answer:
                body = await answer.json()
                return [answer.status, time.perf_counter() - start, answer.headers.get("retry-after"),
                        answer.headers.get("x-request-id"), body]
        for done in await asyncio.gather(*(one(k) for k in range(count))):
            print(json.dumps(done))
asyncio.run(main())
"""


@dataclass
class Called:
    """One caller's answer."""

    status: int
    seconds: float
    retry_after: str | None
    request_id: str | None
    body: dict[str, Any]


async def overload(service: Service, count: int) -> tuple[list[Called], Watch]:
    """``count`` callers at once, one text each, while ``/health`` is watched."""
    watch = Watch(service)
    watching = asyncio.create_task(watch.run())
    await asyncio.sleep(0.3)  # a few /health answers before the load
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CALLERS, service.url, str(count), stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "QWEN_FAST_TEST_KEY": KEY},
        )  # fmt: skip
        out, _ = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0
        await asyncio.sleep(0.3)
    finally:
        watch.stop()
        await watching
    return [Called(*json.loads(line)) for line in out.decode().splitlines()], watch


def test_a_stalled_upstream_and_300_callers_each_answered_within_its_deadline(
    proxy: FaultProxy, service: Service
) -> None:
    """vLLM stalls; 300 callers arrive at once. The line takes what it may hold and refuses the
    rest at once (429, Retry-After); those in line are answered 504 at their deadline, their
    work dropped; /health stays fast and the memory bounded; once vLLM answers again, so does
    the service."""
    baseline = service.rss()
    proxy.standing(Fault.stall(30), 30)
    try:
        answers, watch = asyncio.run(overload(service, 300))
    finally:
        proxy.standing(None)
    statuses = Counter(called.status for called in answers)
    slowest = {status: max(c.seconds for c in answers if c.status == status) for status in statuses}
    print(f"\n300 callers, stalled upstream: {dict(statuses)}, slowest by status {slowest}, /health p99 "
          f"{watch.p99 * 1000:.1f} ms over {len(watch.latencies)}, service RSS {baseline / 2**20:.0f} MiB -> "
          f"peak {watch.peak_rss / 2**20:.0f} MiB")  # fmt: skip
    assert len(answers) == 300 and set(statuses) == {429, 504} and statuses[429] >= 300 - MAX_QUEUED
    assert all(called.seconds < DEADLINE + 2 for called in answers)  # none waits on the stalled upstream
    for called in answers:
        error = called.body["error"]
        if called.status == 429:
            assert error["type"] == "Overloaded" and called.retry_after is not None and int(called.retry_after) >= 1
        else:
            assert error["type"] == "DeadlineExceeded" and error["request_id"] == called.request_id
    assert set(watch.statuses) == {200} and watch.p99 < 1.0
    assert watch.peak_rss - baseline < 64 * 2**20
    # The line drained (the texts of callers that left went with them): the service answers again.
    after = httpx.post(f"{service.url}/v1/classify", json={"input": "Stocks rally"}, headers=AUTHORISED, timeout=30)
    assert after.status_code == 200 and after.json()["result"]["label"] in AG_NEWS_LABELS


def raw_post(url: str, headers: dict[str, str], total: int, chunked: bool = False) -> tuple[bytes, int, float]:
    """POST /v1/classify over a plain socket, sending up to ``total`` body bytes (as the
    service reads them) until the service answers: the status line, the bytes sent, the
    seconds to the answer."""
    host, port = url.removeprefix("http://").split(":")
    head = "".join(f"{k}: {v}\r\n" for k, v in {"host": host, "content-type": "application/json", **headers}.items())
    chunk = b" " * 65536
    piece = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if chunked else chunk
    sent = 0
    received = b""
    start = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST /v1/classify HTTP/1.1\r\n{head}\r\n".encode())
        sock.setblocking(False)
        while b"\r\n" not in received and time.perf_counter() - start < 20:
            readable, writable, _ = select.select([sock], [sock] if sent < total else [], [], 1)
            if readable:
                try:
                    part = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not part:
                    break
                received += part
            elif writable:
                with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionResetError):
                    sent += sock.send(piece)
    return received.split(b"\r\n", 1)[0], sent, time.perf_counter() - start


async def uploads(
    service: Service, jobs: list[tuple[dict[str, str], int, bool]]
) -> tuple[list[tuple[bytes, int, float]], Watch]:
    watch = Watch(service)
    watching = asyncio.create_task(watch.run())
    await asyncio.sleep(0.3)
    try:
        done = await asyncio.gather(*(asyncio.to_thread(raw_post, service.url, *job) for job in jobs))
        await asyncio.sleep(0.3)
    finally:
        watch.stop()
        await watching
    return list(done), watch


def test_oversize_bodies_are_refused_at_once_with_memory_flat(service: Service) -> None:
    """Four 50 MB bodies at once, two declared by Content-Length and two streamed in chunks:
    each is answered 413 as soon as its size is known (the declared ones before any body byte
    is read, the streamed ones once the limit is passed), the service's memory stays flat and
    /health fast."""
    baseline = service.rss()
    size = 50 << 20
    jobs = [({**AUTHORISED, "content-length": str(size)}, size, False)] * 2
    jobs += [({**AUTHORISED, "transfer-encoding": "chunked"}, size, True)] * 2
    done, watch = asyncio.run(uploads(service, jobs))
    each = [(s.decode(), f"{sent / 2**20:.1f} MiB sent", f"{t * 1000:.0f} ms") for s, sent, t in done]
    print(f"\nfour 50 MB bodies: {each}, /health p99 {watch.p99 * 1000:.1f} ms, service RSS "
          f"{baseline / 2**20:.0f} MiB -> peak {watch.peak_rss / 2**20:.0f} MiB")  # fmt: skip
    for status, sent, seconds in done:
        assert status.startswith(b"HTTP/1.1 413") and seconds < 5
        assert sent < size // 4  # refused long before the body was all sent
    assert set(watch.statuses) == {200} and watch.p99 < 1.0
    assert watch.peak_rss - baseline < 16 * 2**20  # not one body's worth


def test_the_key_is_checked_before_the_body_is_read(service: Service) -> None:
    """A request without the key (or a wrong one) is answered 401 at once, its body unsent; with
    the key the same request is read, so a body that never comes meets the deadline (408)."""
    for headers in [{}, {"authorization": "Bearer wrong"}]:
        status, _, seconds = raw_post(service.url, {**headers, "content-length": "1000"}, 0)
        assert status.startswith(b"HTTP/1.1 401") and seconds < DEADLINE
    status, _, seconds = raw_post(service.url, {**AUTHORISED, "content-length": "1000"}, 0)
    assert status.startswith(b"HTTP/1.1 408") and DEADLINE * 0.9 <= seconds < DEADLINE + 3


def test_an_upstream_503s_retry_after_is_passed_on_without_its_internals(proxy: FaultProxy, service: Service) -> None:
    proxy.inject("/v1/completions", Fault.http(503, {"Retry-After": "7"}, message=f"busy at {proxy.base_url}"))
    answer = httpx.post(f"{service.url}/v1/classify", json={"input": "Stocks rally"}, headers=AUTHORISED, timeout=30)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "7"
    error = answer.json()["error"]
    assert error["type"] == "ServerStatusError" and error["request_id"] == answer.headers["x-request-id"]
    assert proxy.base_url not in answer.text and "busy" not in answer.text
    again = httpx.post(f"{service.url}/v1/classify", json={"input": "Stocks rally"}, headers=AUTHORISED, timeout=30)
    assert again.status_code == 200


def test_readiness_is_false_while_the_upstream_is_down_and_true_after(proxy: FaultProxy, service: Service) -> None:
    """vLLM answers 503 to everything for four seconds: /ready says not ready (each answer
    within its timeout), /health stays ok; then /ready says ready again."""
    proxy.standing(Fault.http(503), 4)
    time.sleep(1.1)  # past the reuse of the fixture's last readiness answer
    seen: list[int] = []
    deadline = time.monotonic() + 20
    while not (503 in seen and seen[-1] == 200):
        assert time.monotonic() < deadline, seen
        start = time.perf_counter()
        seen.append(httpx.get(f"{service.url}/ready", timeout=10).status_code)
        assert time.perf_counter() - start < 1 + 1  # the readiness timeout, and room
        assert httpx.get(f"{service.url}/health", timeout=10).status_code == 200
        time.sleep(0.25)
    assert seen[0] == 503 and set(seen) == {200, 503}
