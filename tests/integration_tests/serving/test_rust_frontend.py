"""A real server with vLLM's Rust frontend (``frontend="rust"``: ``vllm/vllm-rs`` in front of the
CPU engine core, the cpu profile fitted to it): it answers ``/health``, a single token-id prompt
with the logprobs the classifier reads, and refuses a list of prompts, which the Python API
server takes (so the classifier must send one prompt a request there)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from langchain_qwen_fast.testing.tiny_model import build_test_model
from tests.integration_tests.conftest import ROOT, TINY_MODEL
from tests.support.servers import PlannedServer

#: ``QWEN_FAST_TEST_RUST_URL`` names a Rust-frontend server already running (the tiny model as
#: ``qwen3``), to test against it instead.
RUST_SERVER = PlannedServer(
    "QWEN_FAST_TEST_RUST_URL",
    ROOT / "out" / "test-rust-server.log",
    lambda: build_test_model(TINY_MODEL, "tiny"),
    frontend="rust",
)
#: token ids of the tiny model's vocabulary: a prompt and the answer tokens asked about
PROMPT = [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13]
ANSWERS = [16, 17, 18, 19]


@pytest.fixture(scope="module")
def rust_server_url() -> Iterator[str]:
    """The base URL (``…/v1``) of a Rust-frontend CPU server of the tiny model, for this module."""
    try:
        yield RUST_SERVER.url()
    finally:
        RUST_SERVER.stop()


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

