"""The transport: status handling, Retry-After, retries, ordering, replicas (MockTransport)."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Generator
from typing import Any

import httpx
import pytest

from langchain_qwen_fast import ResponseFormatError, ServerConnectionError, ServerStatusError
from langchain_qwen_fast._core.transport import RetryPolicy, Transport, adrive, drive, parse_retry_after
from langchain_qwen_fast.errors import is_retryable_status

FAST = RetryPolicy(max_attempts=3, initial_backoff=0.001, max_backoff=0.002, deadline=5)


def transport(handler: Any, urls: Any = "http://t.test/v1", **kwargs: Any) -> Transport:
    return Transport(urls, api_key=None, timeout=5, retry=FAST, http_transport=httpx.MockTransport(handler), **kwargs)


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert parse_retry_after("3") == 3.0 and parse_retry_after("0.5") == 0.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("") is None and parse_retry_after("soon") is None
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 8 <= (parse_retry_after(in_ten) or 0) <= 10
    assert parse_retry_after(email.utils.formatdate(time.time() - 100, usegmt=True)) == 0.0


@pytest.mark.parametrize(("status", "retryable"), [(429, True), (500, True), (503, True), (400, False), (404, False)])
def test_the_one_retry_rule(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable
    assert ServerStatusError("x", status_code=status).retryable is retryable


def test_retry_policy_validates() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="deadline"):
        RetryPolicy(deadline=0)


def test_error_status_carries_the_servers_words_and_retry_after() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": {"message": "The model `x` does not exist."}})

    with pytest.raises(ServerStatusError, match="HTTP 404 to completions: The model `x` does not exist") as info:
        transport(handler).request("POST", "completions", {})
    assert info.value.status_code == 404 and info.value.retry_after is None


def test_retry_after_is_honoured_then_success() -> None:
    replies = iter([httpx.Response(429, headers={"retry-after": "0"}, json={}), httpx.Response(200, json={"ok": 1})])
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        return next(replies)

    assert transport(handler).request("GET", "models") == {"ok": 1}
    assert len(calls) == 2


def test_malformed_json_is_a_format_error() -> None:
    with pytest.raises(ResponseFormatError, match="malformed JSON"):
        transport(lambda r: httpx.Response(200, content=b"{not json")).request("GET", "models")


def test_request_all_keeps_order_and_captures_each_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        n = int(request.url.path.rsplit("/", 1)[1])
        return httpx.Response(400 if n % 3 == 0 else 200, json={"n": n})

    results = transport(handler).request_all([("GET", f"item/{n}", None) for n in range(10)], max_concurrency=4)
    assert [r if isinstance(r, dict) else "error" for r in results] == [
        "error" if n % 3 == 0 else {"n": n} for n in range(10)
    ]


async def test_arequest_all_bounds_concurrency() -> None:
    in_flight = 0
    peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return httpx.Response(200, json={})

    results = await transport(handler).arequest_all([("GET", "x", None)] * 12, max_concurrency=3)
    assert len(results) == 12 and peak == 3


def test_a_replica_that_refuses_costs_one_retry_then_rests() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        if request.url.host == "a.test":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={})

    t = transport(handler, ["http://a.test/v1", "http://b.test/v1"])
    t.replicas.cooldown = 0.5
    for _ in range(6):
        t.request("GET", "models")
    assert seen.count("b.test") == 6 and seen.count("a.test") == 1  # one failed try, then it rests
    time.sleep(0.6)  # once its rest is over it takes traffic again
    for _ in range(2):
        t.request("GET", "models")
    assert seen.count("a.test") == 2
    assert repr(t).startswith("Transport(base_url=[")


def test_replicas_take_turns_when_equally_loaded() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        return httpx.Response(200, json={})

    t = transport(handler, ["http://a.test/v1", "http://b.test/v1", "http://c.test/v1"])
    for _ in range(9):
        t.request("GET", "models")
    assert sorted(seen.count(h) for h in ("a.test", "b.test", "c.test")) == [3, 3, 3]


async def test_the_replica_with_fewer_requests_outstanding_gets_more() -> None:
    seen: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        await asyncio.sleep(0.05 if request.url.host == "slow.test" else 0.005)
        return httpx.Response(200, json={})

    t = transport(handler, ["http://slow.test/v1", "http://fast.test/v1"])
    await t.arequest_all([("GET", "models", None)] * 120, max_concurrency=8)
    assert seen.count("fast.test") > 2 * seen.count("slow.test")  # round robin would split 60/60
    assert t.replicas.outstanding == [0, 0]


def test_root_routes_hang_off_the_server_root() -> None:
    urls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        urls.append(str(request.url))
        return httpx.Response(200, json={})

    t = transport(handler, "http://t.test/v1/")
    t.request("POST", "/tokenize", {})
    t.request("POST", "completions", {})
    assert urls == ["http://t.test/tokenize", "http://t.test/v1/completions"]


def test_connection_errors_run_out_into_a_typed_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(ServerConnectionError, match="ConnectError"):
        transport(handler).request("GET", "models")


def test_one_procedure_drives_sync_and_async() -> None:
    def steps() -> Generator[list[Any], list[Any], list[Any]]:
        first = yield [("GET", "a", None)]
        yield []  # a checkpoint: no calls
        second = yield [("GET", "b", None), ("GET", "c", None)]
        return [*first, *second]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"path": request.url.path})

    t = transport(handler)
    want = [{"path": "/v1/a"}, {"path": "/v1/b"}, {"path": "/v1/c"}]
    assert drive(t, steps(), 2) == want
    assert asyncio.run(adrive(t, steps(), 2)) == want


async def test_a_body_given_as_a_function_is_built_once_off_the_event_loop() -> None:
    import threading

    built: list[int] = []
    attempts = []

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append(request.content)
        if len(attempts) == 1:
            return httpx.Response(503, json={"error": {"message": "busy"}})
        return httpx.Response(200, json={"ok": True})

    def body() -> dict[str, Any]:
        built.append(threading.get_ident())
        return {"prompt": [[1, 2, 3]]}

    t = transport(handler)
    assert await t.arequest("POST", "completions", body) == {"ok": True}
    assert len(built) == 1 and built[0] != threading.get_ident()  # once, in a worker thread
    assert attempts == [b'{"prompt":[[1,2,3]]}'] * 2  # the retry re-sent the same bytes
    assert t.request("POST", "completions", body) == {"ok": True} and len(built) == 2
