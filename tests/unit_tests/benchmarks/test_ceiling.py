"""vLLM's ceiling, the reference row of the throughput benchmark: the pure parts (the texts
dealt among the engines, the fraction, the engine's settings from a server's command line and
from the classifier's request); the engines themselves need a GPU host and are not started here."""

from __future__ import annotations

import pytest

from benchmarks.ceiling import (
    Ceiling,
    CeilingSampling,
    CeilingWork,
    ceiling_work,
    engine_flags,
    engine_spec,
    fraction_of_ceiling,
    known_flags,
    measure_ceilings,
    sampling_from_body,
    split_among,
)
from langchain_qwen_fast._core.prompting import LabelSet, local_plan
from langchain_qwen_fast.serving import VLLMServer
from langchain_qwen_fast.testing.samples import news_items
from tests.support.fake_vllm import ToyTokenizer


@pytest.mark.parametrize(("items", "parts"), [(10, 3), (8, 4), (2, 3), (0, 2), (7, 1)])
def test_the_texts_are_dealt_in_order_in_shares_within_one_of_each_other(items: int, parts: int) -> None:
    shares = split_among(list(range(items)), parts)
    assert len(shares) == parts
    assert [t for share in shares for t in share] == list(range(items))  # each text once, in order
    sizes = [len(share) for share in shares]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_there_is_at_least_one_engine() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        split_among([1, 2], 0)


def test_a_layout_is_a_fraction_of_the_ceiling_measured_for_it() -> None:
    ceiling = Ceiling(engines=2, items=100, per_s=8000.0)
    assert fraction_of_ceiling(6000.0, ceiling) == 0.75
    assert fraction_of_ceiling(6000.0, Ceiling(engines=2, items=100, error="no engine started")) is None
    assert fraction_of_ceiling(6000.0, None) is None and fraction_of_ceiling(None, ceiling) is None


def test_the_engine_is_asked_what_the_classifier_asks_a_server() -> None:
    body = {"model": "q", "prompt": [[1, 2]], "max_tokens": 1, "temperature": 0.0, "stream": False,
            "return_tokens_as_token_ids": True, "logprobs": 1, "logprob_token_ids": [11, 12, 13, 14]}  # fmt: skip
    sampling = sampling_from_body(body)
    # vLLM's SamplingParams wants a logprob for each asked-for token (its server maps top-k 1)
    assert sampling == CeilingSampling(max_tokens=1, temperature=0.0, logprobs=4, logprob_token_ids=[11, 12, 13, 14])
    assert sampling.params() == {
        "max_tokens": 1, "temperature": 0.0, "logprobs": 4, "logprob_token_ids": [11, 12, 13, 14], "detokenize": False,
    }  # fmt: skip
    assert sampling.label_tokens == [11, 12, 13, 14]


def test_a_server_without_logprob_token_ids_restricts_the_answer_to_the_label_tokens() -> None:
    body = {"max_tokens": 1, "temperature": 0.0, "allowed_token_ids": [11, 12], "logprobs": 20}
    sampling = sampling_from_body(body)
    assert sampling.params() == {
        "max_tokens": 1, "temperature": 0.0, "logprobs": 20, "allowed_token_ids": [11, 12], "detokenize": False,
    }  # fmt: skip
    assert sampling.label_tokens == [11, 12]
    with pytest.raises(ValueError, match="constrained-choice"):
        sampling_from_body({"max_tokens": 3, "structured_outputs": {"choice": ["a", "b"]}})


def test_an_engine_gets_its_servers_engine_flags_and_not_its_http_ones() -> None:
    command = ["python", "-m", "x", "serve", "/m", "--served-model-name", "q", "--host", "127.0.0.1", "--port", "8000",
               "--max-model-len", "512", "--quantization", "fp8", "--port=9", "--enable-prefix-caching"]  # fmt: skip
    assert engine_flags(command) == [
        "--served-model-name", "q", "--max-model-len", "512", "--quantization", "fp8", "--enable-prefix-caching",
    ]  # fmt: skip


def test_an_engine_spec_is_its_servers_model_flags_and_environment() -> None:
    server = VLLMServer("/models/m", profile="cpu", port=8000, quantization="fp8", env={"CUDA_VISIBLE_DEVICES": "1"})
    spec = engine_spec(server, {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/pipe"})
    assert spec.model == "/models/m"
    assert spec.flags[spec.flags.index("--quantization") + 1] == "fp8"
    assert "--host" not in spec.flags and "--port" not in spec.flags
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "1" and spec.env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/pipe"
    assert set(server.profile.env) <= set(spec.env)  # the profile's variables, as the server had them


def test_an_engine_reads_only_the_flags_its_parser_knows() -> None:
    flags = ["--max-model-len", "512", "--tool-call-parser", "hermes", "--disable-uvicorn-access-log", "-O0",
             "--compilation-config", '{"mode": 3}', "--quantization=fp8", "--enable-auto-tool-choice"]  # fmt: skip
    known = {"--max-model-len", "--compilation-config", "--quantization"}
    assert known_flags(flags, known) == [
        "--max-model-len", "512", "-O0", "--compilation-config", '{"mode": 3}', "--quantization=fp8",
    ]  # fmt: skip


class _Prepared:
    """What :func:`ceiling_work` reads of a classifier: its plan (the prompts are the same in
    either mode)."""

    def __init__(self) -> None:
        self.plan = local_plan(LabelSet.build(["World", "Sports"]), ToyTokenizer())

    def prepare(self) -> object:
        return self.plan


def test_a_heads_engines_classify_the_classifiers_own_prompts() -> None:
    work = ceiling_work(_Prepared(), "q", 8, "head")
    assert work.mode == "head" and work.missing() is None and work.request() == "classify"
    assert work.engine_sampling() is None  # the engine classifies: no sampling, no logprobs
    assert work.prompts == [tuple(ids) for ids in _Prepared().plan.encode(news_items(8))]


def test_a_generating_work_needs_its_sampling() -> None:
    work = ceiling_work(_Prepared(), "q", 4, "generate")
    assert work.missing() is None and work.engine_sampling() is work.sampling and work.sampling is not None
    assert work.request() == "logprob_token_ids"
    assert CeilingWork(prompts=[[1]]).missing() == "no sampling settings"
    assert CeilingWork(reason="a constrained choice").missing() == "a constrained choice"
    with pytest.raises(ValueError, match="no sampling settings"):  # refused before any engine starts
        measure_ceilings([], [CeilingWork(prompts=[[1]])])


def test_held_token_ids_leave_the_collectors_sight() -> None:
    import gc

    work = CeilingWork(prompts=[[1, 2, 3], "text"], warm_ups=[[4, 5]])
    gc.collect()
    assert work.prompts == [(1, 2, 3), "text"] and work.warm_ups == [(4, 5)]
    assert not gc.is_tracked(work.prompts[0]) and not gc.is_tracked(work.warm_ups[0])
