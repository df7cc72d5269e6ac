"""The service's declared limits, checked before work (ASGI in process, canned vLLM): the key
before the body is read, the body's size from its ``Content-Length`` and while it streams in
(never read past the limit), the body's deadline, the texts a list and the characters a text;
the key in no repr; a long list rendered with the event loop's other work between slices."""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.errors import ConfigurationError, InvalidInputError
from langchain_qwen_fast.serving.service import APIKey, ServiceOptions, create_app
from langchain_qwen_fast.serving.service.answers import RENDER_SLICE, RequestId, render_list
from langchain_qwen_fast.serving.service.fast_path import PARSE_IN_THREAD_BYTES
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS
from tests.support.fake_vllm import FakeVLLM

KEY = "sk-limits-4"


def app_over(fake: FakeVLLM, **kwargs: Any) -> Any:
    classifier = QwenClassifier(
        labels=list(AG_NEWS_LABELS), base_url="http://vllm.test/v1", http_transport=fake.transport, max_retries=0
    )
    return create_app(classifier, ServiceOptions(**kwargs))


@dataclass
class Exchange:
    """One request sent straight to the ASGI app: the body comes in ``chunks`` (an iterator, so
    an endless one can stand for a huge upload), and every ``receive`` the app made is counted."""

    headers: dict[str, str]
    chunks: Iterator[bytes]
    stall_after: int | None = None  # receives after which the client sends nothing more
    receives: int = 0
    status: int = 0
    response_headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    async def receive(self) -> dict[str, Any]:
        self.receives += 1
        if self.stall_after is not None and self.receives > self.stall_after:
            await asyncio.Event().wait()  # a client that stops sending
        chunk = next(self.chunks, None)
        return {"type": "http.request", "body": chunk or b"", "more_body": chunk is not None}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.response_headers = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")

    async def to(self, app: Any, path: str = "/v1/classify") -> Exchange:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(k.encode(), v.encode()) for k, v in self.headers.items()],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        await app(scope, self.receive, self.send)
        return self


def endless(size: int = 65536) -> Iterator[bytes]:
    """A body that never ends, a chunk at a time (the same bytes each time: no memory grows)."""
    chunk = b" " * size
    while True:
        yield chunk


JSON = {"content-type": "application/json"}


async def test_a_declared_oversize_body_is_refused_unread() -> None:
    app = app_over(FakeVLLM(), max_body_bytes=1000)
    sent = await Exchange({**JSON, "content-length": str(50 << 20)}, endless()).to(app)
    assert sent.status == 413 and sent.receives == 0
    assert json.loads(sent.body)["error"]["type"] == "PayloadTooLarge"
    assert sent.response_headers["connection"] == "close"  # the unread body is not read for a next request
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test") as client:
        assert 'qwen_fast_requests_total{kind="invalid",status="413"} 1.0' in (await client.get("/metrics")).text


async def test_a_streamed_body_is_read_only_up_to_the_limit() -> None:
    app = app_over(FakeVLLM(), max_body_bytes=1 << 20)
    sent = await Exchange({**JSON, "transfer-encoding": "chunked"}, endless(65536)).to(app)
    assert sent.status == 413 and sent.receives == (1 << 20) // 65536 + 1  # the chunk that passed it, no more
    assert json.loads(sent.body)["error"]["type"] == "PayloadTooLarge"


async def test_a_body_at_the_limit_is_taken() -> None:
    body = json.dumps({"input": "Stocks rally"}).encode()
    app = app_over(FakeVLLM(), max_body_bytes=len(body))
    sent = await Exchange({**JSON, "content-length": str(len(body))}, iter([body])).to(app)
    assert sent.status == 200 and json.loads(sent.body)["result"]["label"] in AG_NEWS_LABELS


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {KEY}", KEY])
async def test_the_key_is_checked_before_the_body_is_read(authorization: str | None) -> None:
    fake = FakeVLLM()
    app = app_over(fake, api_key=KEY)
    headers = {**JSON, "content-length": str(50 << 20)}
    if authorization is not None:
        headers["authorization"] = authorization
    sent = await Exchange(headers, endless()).to(app)
    assert sent.status == 401 and sent.receives == 0 and fake.requests == []
    assert json.loads(sent.body) == {"error": {"type": "Unauthorized", "message": "missing or wrong API key"}}
    assert sent.response_headers["www-authenticate"] == "Bearer"
    # and with the key the same request goes on to the size check
    headers["authorization"] = f"bearer {KEY}"
    assert (await Exchange(headers, endless()).to(app)).status == 413


async def test_a_body_that_stops_arriving_is_answered_408_at_the_deadline() -> None:
    app = app_over(FakeVLLM(), request_timeout=0.2)
    sent = Exchange({**JSON, "content-length": "1000"}, iter([b'{"input": ']), stall_after=1)
    await asyncio.wait_for(sent.to(app), 5)  # answered, not left hanging
    assert sent.status == 408 and json.loads(sent.body)["error"]["type"] == "RequestTimeout"


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        ({"input": ["a", "b", "c"]}, False),
        ({"input": ["a", "b", "c", "d"]}, True),
        ({"input": "x" * 20}, False),
        ({"input": "x" * 21}, True),
        ({"input": ["ok", "x" * 21]}, True),
    ],
)
async def test_too_many_texts_or_too_long_a_text_is_refused_422_before_any_work(
    body: dict[str, Any], refused: bool
) -> None:
    fake = FakeVLLM()
    classifier = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url="http://vllm.test/v1",
                                http_transport=fake.transport, max_retries=0)  # fmt: skip
    classifier.prepare()
    before = len(fake.requests)
    app = create_app(classifier, ServiceOptions(max_texts=3, max_text_chars=20))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test") as client:
        answer = await client.post("/v1/classify", json=body)
    if refused:
        assert answer.status_code == 422 and answer.json()["error"]["type"] == "InvalidInputError"
        assert "at most 3 items" in answer.text or "at most 20 characters" in answer.text
        assert len(fake.requests) == before
    else:
        assert answer.status_code == 200


def test_an_empty_key_is_refused_and_the_key_is_in_no_repr() -> None:
    with pytest.raises(ConfigurationError, match="api_key is empty"):
        app_over(FakeVLLM(), api_key="")
    app = app_over(FakeVLLM(), api_key=KEY)
    shown = [repr(app.user_middleware), str(app.user_middleware), repr(APIKey(KEY)), str(APIKey(KEY))]
    assert all(KEY not in text for text in shown)
    assert "APIKey(<hidden>)" in shown[0]
    with pytest.raises(ConfigurationError, match="not pickled"):
        pickle.dumps(APIKey(KEY))


async def test_a_long_list_is_rendered_with_the_loops_other_work_between_slices() -> None:
    results: list[Any] = [InvalidInputError("text is empty or whitespace only")] * 4000
    turns = 0

    async def other_client() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(other_client())
    await asyncio.sleep(0)
    turns = 0
    rendered = await render_list(results, RequestId())
    ticker.cancel()
    assert len(json.loads(rendered)["results"]) == 4000
    assert turns >= 4000 // RENDER_SLICE - 1  # the other client ran between the slices, not only after


async def test_a_large_valid_body_is_answered_by_the_fast_path() -> None:
    fake = FakeVLLM()
    app = app_over(fake)
    texts = [f"headline number {k} " * 60 for k in range(1000)]  # over the size parsed in a thread
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test") as client:
        answer = await client.post("/v1/classify", json={"input": texts})
    assert len(json.dumps({"input": texts})) > PARSE_IN_THREAD_BYTES
    assert answer.status_code == 200 and len(answer.json()["results"]) == len(texts)
