"""The HTTP service over the canned vLLM (ASGI in process, no sockets): answers, per-item
errors, micro-batching, the API key, metrics and the OpenAPI schema."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.errors import (
    ConfigurationError,
    ContextLengthError,
    DeadlineExceeded,
    InvalidInputError,
    LabelParseError,
    MissingDependencyError,
    Overloaded,
    RequestTooLargeError,
    ResponseFormatError,
    ServerConnectionError,
    ServerStatusError,
    ServerTimeoutError,
)
from langchain_qwen_fast.serving.service import APIKey, ServiceOptions, create_app, serve_api
from langchain_qwen_fast.serving.service.answers import HTTPAnswer, error_status
from langchain_qwen_fast.serving.service.fast_path import ClassifyFastPath
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from tests.support.fake_vllm import FakeVLLM, status

LABELS = list(AG_NEWS_LABELS)


def service(fake: FakeVLLM, **kwargs: Any) -> tuple[QwenClassifier, httpx.AsyncClient]:
    classifier = QwenClassifier(
        labels=LABELS, base_url="http://vllm.test/v1", http_transport=fake.transport, max_retries=0
    )
    app = create_app(classifier, ServiceOptions(**kwargs))
    return classifier, httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test")


async def test_one_text_and_a_list_with_a_bad_item() -> None:
    fake = FakeVLLM()
    classifier, client = service(fake)
    one = await client.post("/v1/classify", json={"input": "Stocks rally"})
    assert one.status_code == 200
    assert one.json()["result"] == classifier.invoke("Stocks rally").model_dump(mode="json", exclude_none=True)
    many = await client.post("/v1/classify", json={"input": ["Goal!", "", "Shares slide"]})
    results = many.json()["results"]
    assert many.status_code == 200 and [r.get("label") is not None for r in results] == [True, False, True]
    assert results[1]["error"]["type"] == "InvalidInputError"
    bad = await client.post("/v1/classify", json={"input": "   "})
    assert bad.status_code == 422 and bad.json()["error"]["type"] == "InvalidInputError"


async def test_single_texts_arriving_together_share_one_request() -> None:
    fake = FakeVLLM()
    classifier, client = service(fake, max_wait_ms=50, max_group=64)
    classifier.prepare()
    before = len(fake.calls("/v1/completions"))
    texts = headlines(40)
    answers = await asyncio.gather(*(client.post("/v1/classify", json={"input": t}) for t in texts))
    sent = fake.calls("/v1/completions")[before:]
    assert len(sent) <= 3 < len(texts)  # grouped, not one request per client
    assert sum(len(r.body["prompt"]) for r in sent) == len(texts)
    assert [a.json()["result"]["label"] for a in answers] == [r.label for r in classifier.batch(texts)]


@pytest.mark.parametrize(
    ("fault", "code", "retry_after"),
    [
        (status(503, {"Retry-After": "7"}, message="overloaded at http://10.1.2.3:8000"), 503, "7"),
        (status(429, {"Retry-After": "2.5"}, message="overloaded at http://10.1.2.3:8000"), 429, "3"),
        (status(500, message="Traceback at http://10.1.2.3:8000"), 502, None),
    ],
)
async def test_a_server_failure_reaches_every_caller_with_a_request_id_and_no_internals(
    fault: Any, code: int, retry_after: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeVLLM()
    classifier, client = service(fake, max_wait_ms=20)
    classifier.prepare()
    fake.fail("/v1/completions", fault)
    with caplog.at_level("WARNING", logger="langchain_qwen_fast.serving.service"):
        answers = await asyncio.gather(*(client.post("/v1/classify", json={"input": t}) for t in headlines(5)))
    assert {a.status_code for a in answers} == {code}
    assert {a.headers.get("retry-after") for a in answers} == {retry_after}  # the server's, passed on
    for answer in answers:
        error = answer.json()["error"]
        assert error["type"] == "ServerStatusError" and error["request_id"] == answer.headers["x-request-id"]
        assert "10.1.2.3" not in answer.text and "overloaded" not in answer.text and "Traceback" not in answer.text
        # the details are in the log, under the id the client got
        assert any(error["request_id"] in r.message and "10.1.2.3" in r.message for r in caplog.records)


async def test_a_list_the_server_asked_time_for_is_answered_so_and_partial_failures_in_place() -> None:
    fake = FakeVLLM()
    classifier, client = service(fake)
    classifier.prepare()
    fake.fail("/v1/completions", status(503, {"Retry-After": "4"}))
    whole = await client.post("/v1/classify", json={"input": ["Goal!", "Shares slide"]})
    assert whole.status_code == 503 and whole.headers["retry-after"] == "4"
    fake.fail("/v1/completions", status(500, message="at http://10.1.2.3:8000"))
    mixed = await client.post("/v1/classify", json={"input": ["Goal!", ""]})
    assert mixed.status_code == 200 and "10.1.2.3" not in mixed.text
    failed, empty = mixed.json()["results"]
    assert failed["error"]["type"] == "ServerStatusError"
    assert failed["error"]["request_id"] == mixed.headers["x-request-id"]
    assert empty["error"] == {"type": "InvalidInputError", "message": "text is empty or whitespace only"}


async def test_api_key_guards_classify_and_metrics() -> None:
    _, client = service(FakeVLLM(), api_key="sk-service-7")
    assert (await client.post("/v1/classify", json={"input": "x"})).status_code == 401
    assert (await client.get("/metrics")).status_code == 401
    wrong = await client.post("/v1/classify", json={"input": "x"}, headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "sk-service-7" not in wrong.text
    assert wrong.json()["error"]["type"] == "Unauthorized" and wrong.headers["www-authenticate"] == "Bearer"
    ok = await client.post("/v1/classify", json={"input": "x"}, headers={"authorization": "Bearer sk-service-7"})
    assert ok.status_code == 200
    assert (await client.get("/health")).json() == {"status": "ok"}


async def test_metrics_count_requests_groups_and_errors() -> None:
    _, client = service(FakeVLLM())
    await client.post("/v1/classify", json={"input": ["a", "", "b"]})
    await client.post("/v1/classify", json={"input": "c"})
    text = (await client.get("/metrics")).text
    assert 'qwen_fast_requests_total{kind="list",status="200"} 1.0' in text
    assert 'qwen_fast_requests_total{kind="single",status="200"} 1.0' in text
    assert 'qwen_fast_item_errors_total{type="InvalidInputError"} 1.0' in text
    assert "qwen_fast_group_size_count 2.0" in text and "qwen_fast_request_seconds_bucket" in text


async def test_openapi_documents_the_route() -> None:
    _, client = service(FakeVLLM())
    schema = (await client.get("/openapi.json")).json()
    assert "/v1/classify" in schema["paths"] and "World" in schema["info"]["description"]


@pytest.mark.parametrize("body", [{}, {"input": 3}, {"text": "x"}, {"input": ""}, {"input": ["a", 3]}])
async def test_malformed_bodies_are_rejected(body: dict[str, Any]) -> None:
    fake = FakeVLLM()
    _, client = service(fake)
    answer = await client.post("/v1/classify", json=body)
    assert answer.status_code == 422 and answer.json()["error"]["type"] == "InvalidInputError"
    assert "input" in answer.json()["error"]["message"] and fake.calls("/v1/completions") == []
    assert 'qwen_fast_requests_total{kind="invalid",status="422"} 1.0' in (await client.get("/metrics")).text


@pytest.mark.parametrize("missing", ["fastapi", "uvicorn"])
def test_without_the_api_extra_the_service_names_it(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # what `import` then does: ImportError
    with pytest.raises(MissingDependencyError, match=rf"'api' extra \({missing} is missing\)"):
        if missing == "fastapi":
            create_app(QwenClassifier(labels=LABELS, base_url="http://vllm.test/v1"))
        else:
            serve_api("no-such-classifier.json")


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"workers": 0}, "workers must be 1 or more, not 0"),
        ({"api_key": ""}, "api_key is empty"),
        ({"max_texts": 100, "max_queued_texts": 10}, "max_queued_texts"),
        ({"request_timeout": 0}, "request_timeout"),
        ({"groups_in_flight": 0}, "groups_in_flight"),
        ({"max_group": 0}, "max_group"),
    ],
)
def test_options_that_cannot_work_are_refused_before_anything_starts(options: dict[str, Any], refused: str) -> None:
    with pytest.raises(ConfigurationError, match=refused):
        ServiceOptions(**options)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidInputError("text is empty"), 422),
        (ContextLengthError("too long", tokens=9, limit=8), 422),
        (LabelParseError("no label", reply="maybe"), 422),  # the text's own: the same on any try
        (ServerStatusError("refused", status_code=400), 422),  # the server refused the text itself
        (ServerStatusError("busy", status_code=429), 429),  # passed on: the server asked for time
        (ServerStatusError("busy", status_code=503), 503),
        (ServerStatusError("broken", status_code=500), 502),
        (ServerStatusError("no such model", status_code=404), 502),  # the same for every text
        (ServerConnectionError("refused"), 502),
        (ResponseFormatError("not JSON"), 502),
        (ServerTimeoutError("slow"), 504),
        (RequestTooLargeError("over the limit"), 413),
        (Overloaded(asked=1, queued=4, limit=4, retry_after=2), 429),
        (DeadlineExceeded("late"), 504),
        (RuntimeError("a bug"), 500),
    ],
)
def test_each_error_answers_the_status_of_whose_failure_it_is(error: BaseException, code: int) -> None:
    assert error_status(error) == code


@pytest.mark.parametrize(
    "body",
    [{"input": "Stocks rally"}, {"input": ["Goal!", "", "Shares slide"]}, {"input": "   "}, {"input": []}],
)
async def test_the_fast_path_answers_as_the_fastapi_route_does(body: dict[str, Any]) -> None:
    fake = FakeVLLM()
    _, client = service(fake, api_key="sk-9")
    key = {"authorization": "Bearer sk-9"}
    fast = await client.post("/v1/classify", json=body, headers=key)
    # +json is JSON to FastAPI but not taken by the fast path: FastAPI's route answers it
    routed = await client.post(
        "/v1/classify", content=json.dumps(body), headers={**key, "content-type": "application/vnd.api+json"}
    )
    assert (fast.status_code, fast.json()) == (routed.status_code, routed.json())
    assert fast.headers["content-type"] == routed.headers["content-type"] == "application/json"
    counts = (await client.get("/metrics", headers=key)).text
    assert ('kind="invalid",status="422"} 2.0' in counts) == (body == {"input": "   "})


async def test_the_fast_path_hands_every_other_request_to_fastapi_with_its_body() -> None:
    seen: list[tuple[str, str, bytes]] = []
    answered: list[Any] = []

    async def downstream(scope: dict[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        seen.append((scope["method"], scope["path"], message.get("body", b"")))
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def respond(request: Any, deadline: float) -> HTTPAnswer:
        answered.append(request.input)
        return HTTPAnswer(200, b'{"result": "fast"}', {})

    app: Any = ClassifyFastPath(downstream, respond=respond, key=APIKey("sk-1"))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test")
    key = {"authorization": "Bearer sk-1"}
    fast = await client.post("/v1/classify", json={"input": "x"}, headers=key)
    assert fast.status_code == 200 and fast.json() == {"result": "fast"} and answered == ["x"] and seen == []
    for kwargs in [
        {"content": b'{"input": ', "headers": {**key, "content-type": "application/json"}},  # not JSON
        {"json": {"input": ""}, "headers": key},  # breaks the schema
        {"content": b'{"input": "x"}', "headers": {**key, "content-type": "text/plain"}},
    ]:
        sent = client.build_request("POST", "/v1/classify", **kwargs)  # type: ignore[arg-type]
        assert (await client.send(sent)).status_code == 299
        assert seen[-1] == ("POST", "/v1/classify", sent.content)
    assert (await client.get("/v1/classify")).status_code == 299
    assert answered == ["x"] and len(seen) == 4
    # A wrong key or none is answered here, before the body is read, as FastAPI's route would.
    for headers in [{"authorization": "Bearer sk-2"}, {}, {"authorization": "Basic sk-1"}]:
        refused = await client.post("/v1/classify", json={"input": "x"}, headers=headers)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        assert refused.json()["error"] == {"type": "Unauthorized", "message": "missing or wrong API key"}
    assert len(seen) == 4 and answered == ["x"]
