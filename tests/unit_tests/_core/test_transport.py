"""The transport: status handling, Retry-After, retries, ordering, replicas (MockTransport)."""

from __future__ import annotations

import asyncio
import email.utils
import os
import shutil
import tempfile
import time
from collections.abc import Generator
from typing import Any

import httpx
import pytest

from langchain_qwen_fast import (
    ResponseFormatError,
    ServerConnectionError,
    ServerStatusError,
    ServerTimeoutError,
)
from langchain_qwen_fast._core.dispatch import Deadline
from langchain_qwen_fast._core.http_stacks import AiohttpStack, HTTPStack, HttpxStack
from langchain_qwen_fast._core.replicas import Replicas
from langchain_qwen_fast._core.transport import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    RetryBudget,
    RetryPolicy,
    Transport,
    TransportSettings,
    adrive,
    drive,
    parse_retry_after,
)
from langchain_qwen_fast.errors import ConfigurationError, is_retryable_status
from tests.support.fake_vllm import FakeVLLM, UnixServer, raw, reset, status, timeout

FAST = RetryPolicy(max_attempts=3)


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
    t.replicas.cooldown = 0.2
    for _ in range(6):
        t.request("GET", "models")
    assert seen.count("b.test") == 6 and seen.count("a.test") == 1  # one failed try, then it rests
    time.sleep(0.25)  # once its rest is over it takes traffic again
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


def test_connection_errors_run_out_into_a_typed_error_naming_the_url() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(ServerConnectionError, match=r"could not connect to http://t\.test/v1/models: ConnectError"):
        transport(handler).request("GET", "models")


def test_a_connection_error_never_shows_credentials_in_the_url() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(ServerConnectionError) as info:
        transport(handler, "http://user:sk-secret@t.test/v1").request("GET", "models")
    assert "sk-secret" not in str(info.value) and "http://t.test/v1/models" in str(info.value)


def test_a_timeout_names_the_url_and_the_timeout() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(ServerTimeoutError, match=r"http://t\.test/v1/models answered nothing for the timeout of 5 s"):
        transport(handler).request("GET", "models")


async def test_a_try_waiting_behind_answers_to_others_is_not_timed_out_but_a_silent_server_is() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        # item/0 takes three timeouts to come, while the others are answered all along
        await asyncio.sleep(0.9 if request.url.path.endswith("/0") else 0.05)
        return httpx.Response(200, json={"n": request.url.path})

    t = Transport("http://t.test/v1", timeout=0.3, retry=RetryPolicy(1), http_transport=httpx.MockTransport(handler))
    calls = [("GET", f"item/{n}", None) for n in range(30)]
    replies = await t.arequest_all(calls, max_concurrency=2)
    assert replies == [{"n": f"/v1/item/{n}"} for n in range(30)]
    # alone, the same try meets a server that answers nothing for the timeout: given up
    (alone,) = await t.arequest_all(calls[:1], max_concurrency=2)
    assert isinstance(alone, ServerTimeoutError) and "answered nothing for the timeout of 0.3 s" in str(alone)


async def test_a_deadline_gives_every_item_its_error_in_place_when_it_passes() -> None:
    async def never(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(60)
        return httpx.Response(200, json={})

    t = Transport("http://t.test/v1", timeout=30, retry=FAST, http_transport=httpx.MockTransport(never))
    calls = [("GET", f"item/{n}", None) for n in range(10)]
    start = time.monotonic()
    for group in (calls, calls[:1]):  # a batch, and a single call
        replies = await t.arequest_all(group, max_concurrency=4, deadline=Deadline.after(0.3))
        assert all(isinstance(r, ServerTimeoutError) and "deadline of 0.3 s" in str(r) for r in replies)
    assert time.monotonic() - start < 2
    assert t.replicas.outstanding == [0] and t.replicas.windows[0].in_flight == 0  # the tries were closed


def test_a_blocking_call_stops_retrying_at_its_deadline() -> None:
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        return httpx.Response(503, headers={"retry-after": "0.4"}, json={"error": {"message": "busy"}})

    t = transport(handler)
    t.retry = RetryPolicy(max_attempts=10)
    with pytest.raises(ServerStatusError):
        t.request("GET", "models", deadline=Deadline.after(1.0))
    assert len(calls) == 3  # at 0, 0.4 and 0.8 s: the next wait would end past the deadline


@pytest.mark.parametrize(("base", "hinted"), [("http://t.test:8000", True), ("http://t.test:8000/v1", False)])
def test_a_404_under_a_base_url_without_v1_says_so(base: str, hinted: bool) -> None:
    t = transport(lambda request: httpx.Response(404, json={"detail": "Not Found"}), base)
    with pytest.raises(ServerStatusError) as info:
        t.request("GET", "models")
    assert info.value.status_code == 404
    assert (
        "the base URL http://t.test:8000 has no /v1; vLLM serves the OpenAI API under /v1" in str(info.value)
    ) is hinted
    with pytest.raises(ServerStatusError) as root:  # a server route hangs off the root either way
        t.request("POST", "/tokenize", {})
    assert "has no /v1" not in str(root.value)


def test_a_transport_from_settings_takes_the_shared_defaults() -> None:
    t = Transport.from_settings(TransportSettings(base_urls=("http://t.test/v1/",), api_key="k"))
    assert t.base_urls == ["http://t.test/v1"] and t.timeout == DEFAULT_TIMEOUT
    assert t.retry == RetryPolicy(max_attempts=DEFAULT_MAX_RETRIES + 1)
    assert t.wire.headers["authorization"] == "Bearer k"


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


async def test_a_body_given_as_a_function_is_built_once_when_sent() -> None:
    built: list[int] = []
    attempts = []

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append(request.content)
        if len(attempts) == 1:
            return httpx.Response(503, json={"error": {"message": "busy"}})
        return httpx.Response(200, json={"ok": True})

    def body() -> dict[str, Any]:
        built.append(len(attempts))
        return {"prompt": [[1, 2, 3]]}

    t = transport(handler)
    assert await t.arequest_all([("POST", "completions", body)], 1) == [{"ok": True}]
    assert built == [0]  # once, before the first try
    assert attempts == [b'{"prompt":[[1,2,3]]}'] * 2  # the retry re-sent the same bytes
    assert t.request("POST", "completions", body) == {"ok": True} and len(built) == 2


class _WritesInATask(HTTPStack):
    """A stack that writes each request's body in a task of its own, as aiohttp does before
    Python 3.12, and notes when each body is built and written."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def send(self, method: str, url: str, content: bytes | None) -> Any:
        raise AssertionError("async only")

    def close(self) -> None:
        pass

    async def asend(self, method: str, url: str, content: bytes | None) -> Any:
        n = int(content or b"0")
        await asyncio.ensure_future(self._write(n))
        return (200, b"{}", None)

    async def _write(self, n: int) -> None:
        self.events.append(("written", n))


async def test_each_request_of_the_first_wave_is_written_before_the_next_body_is_built() -> None:
    stack = _WritesInATask()
    t = Transport("http://t.test/v1", retry=FAST)
    t.use_stack(stack)

    def body(n: int) -> Any:
        def build() -> int:
            stack.events.append(("built", n))
            return n

        return build

    assert await t.arequest_all([("POST", "completions", body(n)) for n in range(6)], 4) == [{}] * 6
    first_wave = [e for e in stack.events if e[1] < 4]
    assert first_wave == [(what, n) for n in range(4) for what in ("built", "written")]
    assert sorted(stack.events) == sorted((what, n) for n in range(6) for what in ("built", "written"))


def test_a_reader_makes_the_result_where_the_reply_arrives() -> None:
    seen: list[Any] = []

    def read(reply: Any) -> Any:
        seen.append(reply)
        if reply["n"] == 2:
            raise ResponseFormatError("item 2 unreadable")
        return reply["n"] * 10

    t = transport(lambda r: httpx.Response(200, json={"n": int(r.url.path.rsplit("/", 1)[1])}))
    results = t.request_all([("GET", f"item/{n}", None, read) for n in range(4)], max_concurrency=2)
    assert results[:2] == [0, 10] and isinstance(results[2], ResponseFormatError) and results[3] == 30
    assert sorted(r["n"] for r in seen) == [0, 1, 2, 3]
    assert t.request("GET", "item/5", None, read) == 50
    assert t.request("GET", "item/6") == {"n": 6}  # no reader: the decoded reply


# -- the aiohttp path (servers that take one prompt a request), over a Unix socket ------------
@pytest.fixture
def unix_fake() -> Generator[tuple[FakeVLLM, UnixServer], None, None]:
    folder = tempfile.mkdtemp(prefix="qf-", dir="/tmp")  # a socket path must be short
    fake = FakeVLLM()
    with UnixServer(fake, os.path.join(folder, "vllm.sock")) as server:
        yield fake, server
    shutil.rmtree(folder, ignore_errors=True)


def on_aiohttp(server: UnixServer, urls: Any = "http://t.test/v1", **kwargs: Any) -> Transport:
    settings: dict[str, Any] = {"api_key": "sk-unix", "timeout": 5, "retry": FAST, **kwargs}
    t = Transport(urls, **settings)
    t.use_stack(t.aiohttp_stack(server.connector))
    assert isinstance(t.stack, AiohttpStack)
    return t


def completion(text: str) -> tuple[str, str, Any]:
    body = {"model": "qwen3", "prompt": text, "max_tokens": 1, "logprobs": 1, "logprob_token_ids": [7, 8]}
    return ("POST", "completions", body)


def test_a_transport_sends_through_httpx_until_told_otherwise() -> None:
    t = transport(lambda request: httpx.Response(200, json={}))
    assert isinstance(t.stack, HttpxStack) and t.stack is t.httpx


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_aiohttp_gives_the_replies_httpx_gives_in_order(unix_fake: tuple[FakeVLLM, UnixServer], kind: str) -> None:
    fake, server = unix_fake
    calls = [completion(f"text {i}") for i in range(40)]
    want = transport(FakeVLLM()).request_all(calls, 8)
    t = on_aiohttp(server)
    got = t.request_all(calls, 8) if kind == "sync" else asyncio.run(t.arequest_all(calls, 8))
    assert got == want
    assert {r.headers["authorization"] for r in fake.requests} == {"Bearer sk-unix"}
    t.close()


@pytest.mark.parametrize("fault", [status(503), status(429, {"retry-after": "0"}), reset()])
async def test_aiohttp_retries_transient_faults(unix_fake: tuple[FakeVLLM, UnixServer], fault: Any) -> None:
    fake, server = unix_fake
    fake.fail("/v1/completions", fault)
    t = on_aiohttp(server)
    (reply,) = await t.arequest_all([completion("again")], 4)
    assert reply["choices"] and len(fake.calls("/v1/completions")) == 2
    t.close()


async def test_aiohttp_timeouts_and_dropped_connections_are_typed_errors(
    unix_fake: tuple[FakeVLLM, UnixServer],
) -> None:
    fake, server = unix_fake
    server.stall = 0.3  # past the timeout; the fixture's server waits it out when it stops
    t = on_aiohttp(server, timeout=0.1, retry=RetryPolicy(max_attempts=1))
    fake.fail("/v1/completions", timeout(), reset(), status(400, message="bad prompt"), raw(b"{tru"))
    for error in (ServerTimeoutError, ServerConnectionError, ServerStatusError, ResponseFormatError):
        replies = await t.arequest_all([completion("x")], 1)
        assert isinstance(replies[0], error), replies
    assert (await t.arequest_all([completion("x")], 1))[0]["choices"]  # the faults are spent: answered
    t.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_aiohttp_fails_over_from_a_replica_that_is_down(unix_fake: tuple[FakeVLLM, UnixServer], kind: str) -> None:
    fake, server = unix_fake
    fake.down_hosts.add("a.test")
    t = on_aiohttp(server, ["http://a.test/v1", "http://b.test/v1"])
    calls = [completion(f"text {i}") for i in range(20)]
    got = t.request_all(calls, 4) if kind == "sync" else asyncio.run(t.arequest_all(calls, 4))
    assert all(r["choices"] for r in got)
    # a.test was tried, dropped the connection and rested; every call was answered by b.test
    assert "a.test" in server.hosts and server.hosts.count("b.test") == 20
    t.close()


@pytest.mark.parametrize(("kind", "bound"), [("sync", 5), ("async", 5), ("async", 64)])
def test_aiohttp_honours_the_in_flight_bound(unix_fake: tuple[FakeVLLM, UnixServer], kind: str, bound: int) -> None:
    _, server = unix_fake
    server.gather = bound  # requests are held until the bound's worth are in at once
    t = on_aiohttp(server, pool_size=256)
    calls = [completion(f"text {i}") for i in range(bound * 4)]
    got = t.request_all(calls, bound) if kind == "sync" else asyncio.run(t.arequest_all(calls, bound))
    assert len(got) == len(calls) and all(r["choices"] for r in got)
    assert server.peak == bound
    t.close()


def test_a_sync_batch_on_aiohttp_reuses_its_connections_and_close_ends_them(
    unix_fake: tuple[FakeVLLM, UnixServer],
) -> None:
    _, server = unix_fake
    t = on_aiohttp(server)
    for _ in range(3):
        assert all(r["choices"] for r in t.request_all([completion("a"), completion("b")], 2))
    t.close()
    assert all(r["choices"] for r in t.request_all([completion("a"), completion("b")], 2))  # back on next use
    t.close()


# -- outlier ejection and the retry budget ------------------------------------------------------
def fast_failing_replica(ejection: bool) -> Transport:
    """Two replicas: a.test answers 503 at once, b.test answers after a moment (so a.test
    always has the fewer requests outstanding)."""

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "a.test":
            return httpx.Response(503, json={"error": {"message": "overloaded"}})
        await asyncio.sleep(0.005)
        return httpx.Response(200, json={"ok": True})

    t = Transport(
        ["http://a.test/v1", "http://b.test/v1"],
        api_key=None,
        timeout=5,
        retry=FAST,
        http_transport=httpx.MockTransport(handler),
    )
    t.budget = RetryBudget(capacity=10**6)  # the comparison is of ejection alone
    if not ejection:
        t.replicas.max_failures = 10**9
    return t


@pytest.mark.parametrize("ejection", [False, True])
async def test_a_replica_answering_503_at_once_is_ejected_and_loses_its_share_of_first_tries(ejection: bool) -> None:
    t = fast_failing_replica(ejection)
    replies = await t.arequest_all([("GET", "models", None)] * 200, 8)
    assert all(r == {"ok": True} for r in replies)  # every request answered, on b.test if not at first
    share = t.replicas.first_tries[0] / sum(t.replicas.first_tries)
    if ejection:
        assert share < 0.1 and t.replicas.resting() == [0]
    else:
        assert share > 0.5  # without ejection, the failing replica wins most first tries


def test_an_ejected_replica_rests_longer_each_time_then_one_try_at_a_time_until_it_succeeds() -> None:
    r = Replicas(2, cooldown=0.05, max_cooldown=0.1, max_failures=2)
    for _ in range(2):
        assert r.acquire({1})[0] == 0
        r.release(0, "failed")
    assert r.resting() == [0]
    assert {r.acquire(set())[0] for _ in range(3)} == {1}  # b.test takes the load while a.test rests
    for _ in range(3):
        r.release(1, "ok")
    time.sleep(0.06)
    assert r.acquire({1})[0] == 0  # its rest is over: on probation, one try
    assert r.acquire(set())[0] == 1  # ... and no second while that one is out
    r.release(0, "failed")  # a failed probe: rests again, twice as long
    r.release(1, "ok")
    assert r.resting() == [0]
    time.sleep(0.11)
    assert r.acquire({1})[0] == 0
    r.release(0, "ok")  # a good probe clears the record
    assert r.resting() == [] and r.acquire({1})[0] == 0 and r.acquire({1})[0] == 0
    r.release(0, "cancelled")
    r.release(0, "cancelled")  # a cancelled try gives no verdict
    assert r.resting() == []


def test_a_4xx_answer_is_the_requests_fault_not_the_replicas() -> None:
    r = Replicas(2, max_failures=1)
    r.acquire(set())[0]
    r.release(0, "ok")  # what _send reports for a 400
    assert r.resting() == []


def test_the_retry_budget_caps_retries_under_overload() -> None:
    budget = RetryBudget(ratio=0.5, min_per_second=0.0, capacity=2)
    assert budget.spend() and budget.spend() and not budget.spend()
    budget.earn()
    assert not budget.spend()  # half a retry earned
    budget.earn()
    assert budget.spend()


def test_retries_stop_when_the_budget_is_spent() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(503, json={"error": {"message": "down"}})

    t = transport(handler)
    t.budget = RetryBudget(ratio=0.0, min_per_second=0.0, capacity=3)
    for _ in range(4):
        with pytest.raises(ServerStatusError):
            t.request("GET", "models")
    # 4 first tries, and only the 3 retries the budget held (not 4 × 2)
    assert len(calls) == 7 and t.retries_refused >= 2


class _AsyncOnly(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": []})


class _BlockingOnly(httpx.BaseTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": []})


def test_a_transport_of_one_kind_refuses_the_other_kind_of_call_instead_of_reaching_the_network() -> None:
    async_only = Transport(["http://nowhere.test/v1"], api_key=None, timeout=5, retry=FAST, http_transport=_AsyncOnly())
    with pytest.raises(ConfigurationError, match="serves async calls only"):
        async_only.request("GET", "/models")
    assert asyncio.run(async_only.arequest_all([("GET", "/models", None)], 1)) == [{"data": []}]
    blocking = Transport(
        ["http://nowhere.test/v1"], api_key=None, timeout=5, retry=FAST, http_transport=_BlockingOnly()
    )
    (refused,) = asyncio.run(blocking.arequest_all([("GET", "/models", None)], 1))
    assert isinstance(refused, ConfigurationError) and "serves blocking calls only" in str(refused)
    assert blocking.request("GET", "/models") == {"data": []}


async def test_a_probe_asks_each_replica_once_and_leaves_their_health_alone() -> None:
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers.get("authorization")))
        if request.url.host == "down":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200 if request.url.host == "up" else 503, json={})

    urls = ["http://up/v1", "http://busy/v1", "http://down/v1"]
    transport = Transport(urls, api_key="k", timeout=5, retry=FAST, http_transport=httpx.MockTransport(handler))
    assert await transport.aprobe("models", timeout=1.0) == [True, False, False]
    assert sorted(seen) == sorted((f"{url}/models", "Bearer k") for url in urls)  # one try each, the key sent
    assert transport.replicas.outstanding == [0, 0, 0] and transport.replicas.first_tries == [0, 0, 0]
    # No replica was put to rest by the probe: the next requests still go to every one in turn.
    await transport.arequest_all([("GET", "models", None)] * 2, 2)
    assert transport.replicas.first_tries[:2] == [1, 1]
