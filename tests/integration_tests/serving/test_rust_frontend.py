"""A real server with vLLM's Rust frontend (``frontend="rust"``: ``vllm/vllm-rs`` in front of the
CPU engine core, the cpu profile fitted to it): it answers ``/health``, a single token-id prompt
with the logprobs the classifier reads, and refuses a list of prompts, which the Python API
server takes (so the classifier must send one prompt a request there)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from tests.integration_tests.conftest import TINY_MODEL, served

#: token ids of the tiny model's vocabulary: a prompt and the answer tokens asked about
PROMPT = [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13]
ANSWERS = [16, 17, 18, 19]


@pytest.fixture(scope="module")
def rust_server_url() -> Iterator[str]:
    """The base URL (``…/v1``) of a Rust-frontend CPU server of the tiny model, for this module
    (planned in the conftest)."""
    yield from served("rust_server_url")


def completion(url: str, prompt: object) -> httpx.Response:
    body = {
        "model": "qwen3",
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": 1,
        "logprob_token_ids": ANSWERS,
        "return_tokens_as_token_ids": True,
    }
    return httpx.post(f"{url}/completions", json=body, timeout=60)


def test_it_answers_health_and_names_the_model(rust_server_url: str) -> None:
    root = rust_server_url.removesuffix("/v1")
    assert httpx.get(f"{root}/health", timeout=10).status_code == 200
    models = httpx.get(f"{rust_server_url}/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["qwen3"]


def test_a_single_token_id_prompt_gets_every_asked_logprob(rust_server_url: str) -> None:
    reply = completion(rust_server_url, PROMPT)
    assert reply.status_code == 200, reply.text
    (choice,) = reply.json()["choices"]
    top = choice["logprobs"]["top_logprobs"][0]
    assert {int(token.rpartition(":")[2]) for token in top} >= set(ANSWERS)
    assert all(token.startswith("token_id:") for token in top)
    assert all(value <= 0.0 for value in top.values())


def test_a_list_of_prompts_is_refused(rust_server_url: str) -> None:
    for prompts in ([PROMPT, PROMPT], [PROMPT], ["a headline", "another"]):
        reply = completion(rust_server_url, prompts)
        assert reply.status_code == 400, (prompts, reply.text)
        assert "Prompt" in reply.text
    assert completion(rust_server_url, "a headline").status_code == 200


@pytest.mark.parametrize("multi_label", [False, True], ids=["single-label", "multi-label"])
def test_the_classifier_scores_as_on_the_python_server(
    rust_server_url: str, server_url: str, multi_label: bool
) -> None:
    """Generate mode on 256 texts: the classifier learns that the Rust frontend takes one prompt a
    request and sends each alone (batch and abatch), and every score is the Python API server's,
    where the prompts went in lists, within 1e-3."""
    texts = headlines(256)
    common = {"labels": list(AG_NEWS_LABELS), "model": "qwen3", "multi_label": multi_label}
    python = QwenClassifier(base_url=server_url, **common)
    rust = QwenClassifier(base_url=rust_server_url, **common)
    assert python.prepare().takes_prompt_lists and not rust.prepare().takes_prompt_lists
    want = python.batch(texts)
    for got in (rust.batch(texts), asyncio.run(rust.abatch(texts))):
        for ours, theirs in zip(got, want, strict=True):
            assert ours.scores == pytest.approx(theirs.scores, abs=1e-3)


def test_bench_scale_times_invoke_beside_raw_http_with_one_prompt_a_request(rust_server_url: str) -> None:
    """``python -m benchmarks.scale``'s one-at-a-time figures on this frontend: the raw request
    is the classifier's own, a single prompt (a list would be refused)."""
    from benchmarks.common import warm_classifier
    from benchmarks.layouts import invoke_and_raw_http_p50
    from langchain_qwen_fast.bench.measure import RunContext

    classifier = warm_classifier([rust_server_url], "qwen3", str(TINY_MODEL))
    figures = invoke_and_raw_http_p50(RunContext(), classifier, rust_server_url, "qwen3", 3)
    assert figures.invoke_p50_ms and figures.raw_http_p50_ms
    assert figures.takes_prompt_lists is False
