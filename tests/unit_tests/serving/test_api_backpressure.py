"""Backpressure, deadlines and readiness in the service (ASGI in process over the canned vLLM,
whose answers a test can hold back): one bounded line for single texts and lists answered 429
with ``Retry-After``, a request's deadline answered 504 with its work dropped, and ``/ready``
against ``/health``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast._core import engine
from langchain_qwen_fast.serving.service import ServiceOptions, create_app, readiness
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS
from tests.support.fake_vllm import FakeVLLM, status


class HeldVLLM(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The canned vLLM, whose answers on the paths in ``held`` wait until ``release`` is set
    (async requests only); ``cancelled`` counts held requests whose caller gave up."""

    def __init__(self, fake: FakeVLLM) -> None:
        self.fake = fake
        self.held: tuple[str, ...] = ()
        self.release = asyncio.Event()
        self.waiting = 0
        self.cancelled = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        return self.fake(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        if self.held and request.url.path.endswith(self.held):
            self.waiting += 1
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            finally:
                self.waiting -= 1
        return self.fake(request)


def held_service(prepared: bool = True, **kwargs: Any) -> tuple[HeldVLLM, Any, httpx.AsyncClient]:
    upstream = HeldVLLM(FakeVLLM())
    classifier = QwenClassifier(
        labels=list(AG_NEWS_LABELS), base_url="http://vllm.test/v1", http_transport=upstream, max_retries=0
    )
    if prepared:
        classifier.prepare()
    app = create_app(classifier, ServiceOptions(**kwargs))
    return upstream, app, httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test")


#: The set-up's cool-down after a failure and the reuse of a readiness answer, shortened from
#: 2 s and 1 s: the readiness tests wait out both, and only their order matters.
COOLDOWN, REUSE = 0.2, 0.2


@pytest.fixture
def short_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "SETUP_RETRY_COOLDOWN", COOLDOWN)
    monkeypatch.setattr(readiness, "READY_REUSE_SECONDS", REUSE)


async def until(condition: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.005)


async def ready_within(client: httpx.AsyncClient, seconds: float) -> httpx.Response:
    """``/ready``'s first 200 within ``seconds``, each answer within the readiness timeout."""
    deadline = time.monotonic() + seconds
    while True:
        answer = await asyncio.wait_for(client.get("/ready"), 3)
        if answer.status_code == 200:
            return answer
        assert answer.status_code == 503 and time.monotonic() < deadline, answer.text
        await asyncio.sleep(0.05)


async def test_single_texts_and_lists_share_one_bounded_line_answered_429_with_retry_after() -> None:
    upstream, app, client = held_service(groups_in_flight=1, max_queued_texts=4, max_texts=4)
    upstream.held = ("/v1/completions",)
    first = asyncio.create_task(client.post("/v1/classify", json={"input": "Stocks rally"}))
    await until(lambda: upstream.waiting == 1)  # in flight, and counted
    listed = asyncio.create_task(client.post("/v1/classify", json={"input": ["Goal!", "Rates fall", "Oil up"]}))
    await until(lambda: app.state.batcher.queued == 4)
    for body in [{"input": "One more"}, {"input": ["One more"]}]:
        refused = await client.post("/v1/classify", json=body)
        assert refused.status_code == 429 and refused.json()["error"]["type"] == "Overloaded"
        assert int(refused.headers["retry-after"]) >= 1
    assert (await client.get("/health")).status_code == 200
    upstream.release.set()
    assert (await first).status_code == 200 and (await listed).status_code == 200
    assert len((await listed).json()["results"]) == 3
    assert (await client.post("/v1/classify", json={"input": "One more"})).status_code == 200
    assert 'qwen_fast_requests_total{kind="single",status="429"} 1.0' in (await client.get("/metrics")).text


async def test_a_list_goes_through_the_group_slots() -> None:
    """A list takes the same slots as single texts: with one slot busy, it waits its turn."""
    upstream, app, client = held_service(groups_in_flight=1, max_group=4)
    upstream.held = ("/v1/completions",)
    single = asyncio.create_task(client.post("/v1/classify", json={"input": "Stocks rally"}))
    await until(lambda: upstream.waiting == 1)
    listed = asyncio.create_task(client.post("/v1/classify", json={"input": [f"text {k}" for k in range(10)]}))
    await until(lambda: app.state.batcher.queued == 11)
    assert upstream.waiting == 1  # the list waits for the slot
    upstream.release.set()
    assert (await single).status_code == 200
    results = (await listed).json()["results"]
    assert len(results) == 10 and all(r["label"] in AG_NEWS_LABELS for r in results)
    sizes = [len(r.body["prompt"]) for r in upstream.fake.calls("/v1/completions")[-3:]]
    assert sizes == [4, 4, 2]  # in groups of max_group


async def test_a_request_past_its_deadline_is_answered_504_and_its_work_dropped() -> None:
    upstream, app, client = held_service(request_timeout=0.15, groups_in_flight=1)
    upstream.held = ("/v1/completions",)
    start = time.monotonic()
    answers = await asyncio.gather(
        client.post("/v1/classify", json={"input": "Stocks rally"}),
        client.post("/v1/classify", json={"input": ["Goal!", "Rates fall"]}),
    )
    assert time.monotonic() - start < 3  # within its deadline, not the upstream's
    for answer in answers:
        error = answer.json()["error"]
        assert answer.status_code == 504 and error["type"] == "DeadlineExceeded"
        assert error["request_id"] == answer.headers["x-request-id"]
    await until(lambda: app.state.batcher.queued == 0)  # the waiting texts left; the group was dropped
    assert upstream.cancelled == 1 and upstream.waiting == 0
    upstream.release.set()
    assert (await client.post("/v1/classify", json={"input": "Stocks rally"})).status_code == 200


@pytest.mark.usefixtures("short_clocks")
async def test_ready_says_whether_set_up_is_done_and_vllm_answers_and_health_never_asks() -> None:
    upstream, _, client = held_service(prepared=False)
    upstream.fake.fail("/v1/models", status(503))
    down = await client.get("/ready")
    assert down.status_code == 503 and down.json()["error"]["type"] == "NotReady"
    assert down.json()["error"]["request_id"] == down.headers["x-request-id"]
    calls = len(upstream.fake.requests)
    assert (await client.get("/health")).json() == {"status": "ok"}
    assert len(upstream.fake.requests) == calls  # liveness never calls vLLM
    up = await ready_within(client, 10)  # once the set-up is tried again (the engine's cool-down)
    assert up.json() == {"status": "ready", "replicas": 1, "answering": 1}
    upstream.fake.fail("/v1/models", status(500))
    await asyncio.sleep(REUSE + 0.05)  # past the reuse of the last answer
    assert (await client.get("/ready")).status_code == 503  # set up, but vLLM does not answer


@pytest.mark.usefixtures("short_clocks")
@pytest.mark.parametrize("prepared", [False, True], ids=["during-set-up", "after-set-up"])
async def test_ready_answers_within_its_timeout_while_vllm_stalls(prepared: bool) -> None:
    """Stalled during the set-up or after it (the probe has its own timeout): /ready answers
    503 within the readiness timeout, and the set-up goes on behind it."""
    upstream, _, client = held_service(prepared=prepared, ready_timeout=0.15)
    upstream.held = ("/models",)
    start = time.monotonic()
    answer = await client.get("/ready")
    assert answer.status_code == 503 and time.monotonic() - start < 2
    assert (await client.get("/health")).status_code == 200
    upstream.release.set()
    await ready_within(client, 10)
