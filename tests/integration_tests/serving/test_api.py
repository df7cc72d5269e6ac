"""The HTTP service on a real socket in front of the real vLLM server (through the proxy):
concurrent single-text clients grouped, bad input, an outage mid-load, the key, save/load, and
requests generated from its own OpenAPI document each answered as the document says."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.serving.launcher import free_port
from langchain_qwen_fast.serving.service import ServiceOptions, create_app
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from langchain_qwen_fast.testing.service import BackgroundService
from tests.support.openapi import call_and_check
from tests.support.proxy import Fault, FaultProxy


def service_for(classifier: QwenClassifier, **kwargs: Any) -> BackgroundService:
    return BackgroundService(create_app(classifier, ServiceOptions(**kwargs)))


@pytest.fixture
def classifier(proxy: FaultProxy) -> QwenClassifier:
    c = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url=proxy.base_url, max_retries=1)
    c.prepare()
    return c


async def clients(url: str, texts: list[str], **kwargs: Any) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        return list(await asyncio.gather(*(http.post("/v1/classify", json={"input": t}, **kwargs) for t in texts)))


def test_concurrent_single_text_clients_are_grouped(proxy: FaultProxy, classifier: QwenClassifier) -> None:
    texts = headlines(64)
    with service_for(classifier, max_wait_ms=20) as service:
        before = len(proxy.calls("/v1/completions"))
        answers = asyncio.run(clients(service.url, texts))
        requests = proxy.calls("/v1/completions")[before:]
    assert all(a.status_code == 200 for a in answers)
    assert [a.json()["result"]["label"] for a in answers] == [r.label for r in classifier.batch(texts)]
    assert len(requests) < len(texts) // 4  # one grouped request per burst, not one per client
    assert sum(len(r.body["prompt"]) for r in requests) == len(texts)


def test_bad_input_and_lists(classifier: QwenClassifier) -> None:
    with service_for(classifier) as service, httpx.Client(base_url=service.url) as http:
        listed = http.post("/v1/classify", json={"input": ["Goal!", "", "Markets slide"]}).json()["results"]
        assert [("error" in r) for r in listed] == [False, True, False]
        assert listed[1]["error"]["type"] == "InvalidInputError"
        single = http.post("/v1/classify", json={"input": ""})
        assert single.status_code == 422 and single.json()["error"]["type"] == "InvalidInputError"
        assert http.get("/health").json() == {"status": "ok"}
        assert "qwen_fast_requests_total" in http.get("/metrics").text


def test_outage_mid_load_every_caller_gets_an_answer_or_a_clear_error(
    proxy: FaultProxy, classifier: QwenClassifier
) -> None:
    texts = headlines(80)
    with service_for(classifier, max_wait_ms=5, max_group=8) as service:
        proxy.inject("/v1/completions", *[Fault.reset() for _ in range(6)], *[Fault.http(503) for _ in range(6)])
        answers = asyncio.run(clients(service.url, texts))
    assert len(answers) == len(texts)
    for answer in answers:
        body = answer.json()
        if answer.status_code == 200:
            assert body["result"]["label"] in AG_NEWS_LABELS
        else:
            # 503: the server's own answer passed on (it asked for time)
            assert answer.status_code in (502, 503, 504) and body["error"]["type"] in (
                "ServerConnectionError",
                "ServerStatusError",
                "ServerTimeoutError",
            )
    assert sum(a.status_code == 200 for a in answers) > 0


def test_api_key(classifier: QwenClassifier) -> None:
    with service_for(classifier, api_key="sk-api-3") as service, httpx.Client(base_url=service.url) as http:
        assert http.post("/v1/classify", json={"input": "x"}).status_code == 401
        ok = http.post("/v1/classify", json={"input": "x"}, headers={"authorization": "Bearer sk-api-3"})
        assert ok.status_code == 200 and ok.json()["result"]["label"] in AG_NEWS_LABELS


def test_served_from_a_saved_configuration(classifier: QwenClassifier, tmp_path: Path) -> None:
    loaded = QwenClassifier.load(classifier.save(tmp_path))
    with service_for(loaded) as service, httpx.Client(base_url=service.url) as http:
        answer = http.post("/v1/classify", json={"input": "Shares slide"}).json()["result"]
    assert answer["label"] == classifier.invoke("Shares slide").label


def test_worker_processes_share_the_port_and_sum_their_metrics(server_url: str, tmp_path: Path) -> None:
    """``qwen-fast api --workers 2``: two processes answer on one port, each text as the
    classifier labels it, and ``/metrics`` counts every request, whichever worker took it."""
    import psutil

    saved = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url=server_url).save(tmp_path / "news")
    port = free_port("127.0.0.1")
    service = subprocess.Popen([sys.executable, "-m", "langchain_qwen_fast.cli", "api", str(saved), "--port",
                                str(port), "--workers", "2"], stderr=subprocess.PIPE)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert service.poll() is None and time.monotonic() < deadline, service.stderr and service.stderr.read()
            time.sleep(0.2)
        texts = headlines(96)
        answers = asyncio.run(clients(url, texts))
        metrics = httpx.get(f"{url}/metrics").text
        workers = [p for p in psutil.Process(service.pid).children() if "spawn_main" in " ".join(p.cmdline())]
    finally:
        service.terminate()
        service.wait(30)
    expected = QwenClassifier.load(saved).batch(texts)
    assert [a.json()["result"]["label"] for a in answers] == [r.label for r in expected]
    assert 'qwen_fast_requests_total{kind="single",status="200"} 96.0' in metrics
    assert len(workers) == 2


def refusing_oversize_bodies(document: Any) -> Any:
    """``document`` with 413 among the answers its checks take for valid and invalid data alike:
    a body over the service's byte limit is refused before it is read, a rule no schema keyword
    can state (the document gives it in words), as a text's length in tokens is."""
    checks = document.config.checks
    for config in (checks.negative_data_rejection, checks.positive_data_acceptance):
        config.expected_statuses = [*config.expected_statuses, "413"]
    return document


SCHEMA_KEY = "sk-api-schema-9"
# The document of a service over these labels with a key, which the service below serves (its
# fixture checks): schemathesis needs the document when the module loads, before any fixture.
document = refusing_oversize_bodies(
    schemathesis.openapi.from_dict(
        create_app(
            QwenClassifier(labels=list(AG_NEWS_LABELS), base_url="http://127.0.0.1:9/v1"),
            ServiceOptions(api_key=SCHEMA_KEY),
        ).openapi()
    )
)


@pytest.fixture
def keyed_service(classifier: QwenClassifier) -> Iterator[BackgroundService]:
    """The service in front of the real server, key on; it serves ``document`` word for word."""
    with service_for(classifier, api_key=SCHEMA_KEY) as service:
        assert httpx.get(f"{service.url}/openapi.json").json() == document.raw_schema
        yield service


@document.parametrize()
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzzed_from_its_own_document_every_answer_matches_it(
    case: schemathesis.Case, keyed_service: BackgroundService
) -> None:
    # The checks are the unit layer's (tests/support/openapi.py), here with the real server
    # behind: declared status, body and content type; valid accepted, invalid refused; no 5xx.
    call_and_check(case, {"Authorization": f"Bearer {SCHEMA_KEY}"}, keyed_service.url)
