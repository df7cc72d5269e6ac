"""vLLM endpoint bodies and reply parsing, on canned replies."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from langchain_qwen_fast import LabelParseError, QwenFastError, ResponseFormatError
from langchain_qwen_fast._core import vllm_api as api
from langchain_qwen_fast._core.prompting import PROMPT_SUFFIX, ClassifierPlan, LabelSet, Step

LABELS = LabelSet.build(["World", "Sports", "Business"])
PLAN = ClassifierPlan(
    label_set=LABELS,
    scoring="label_tokens",
    head=LABELS.render_head(),
    steps=(Step(PROMPT_SUFFIX, (101, 102, 103)),),
    max_tokens=1,
    overhead_tokens=30,
    max_model_len=512,
    has_logprob_token_ids=True,
)


def choice(chosen: int, logprobs: dict[int, float], text: str = "x") -> dict[str, Any]:
    return {
        "index": 0,
        "text": text,
        "logprobs": {
            "tokens": [f"token_id:{chosen}"],
            "token_logprobs": [logprobs.get(chosen, -0.1)],
            "top_logprobs": [{f"token_id:{t}": v for t, v in logprobs.items()}],
        },
    }


def test_completions_body_limits_the_answer_to_label_tokens() -> None:
    method, path, body = api.classify_call(PLAN, "qwen3", 0, ["p1", [1, 2, 3]])
    assert (method, path) == ("POST", "completions")
    assert body == {
        "model": "qwen3",
        "prompt": ["p1", [1, 2, 3]],
        "max_tokens": 1,
        "temperature": 0.0,
        "stream": False,
        "return_tokens_as_token_ids": True,
        "logprobs": 1,
        "logprob_token_ids": [101, 102, 103],
    }


def test_a_server_that_takes_one_prompt_a_request_gets_it_alone() -> None:
    alone = dataclasses.replace(PLAN, takes_prompt_lists=False)
    assert api.classify_call(alone, "m", 0, ["p1"])[2]["prompt"] == "p1"
    assert api.classify_call(alone, "m", 0, [[1, 2, 3]])[2]["prompt"] == [1, 2, 3]  # one token-id prompt
    head = dataclasses.replace(alone, scoring="head", steps=(Step(""),), max_tokens=0)
    assert api.classify_call(head, "m", 0, ["text"])[2] == {"model": "m", "input": "text"}
    method, path, build = api.classify_call(alone, "m", 0, lambda: [[4, 5]])
    assert (method, path, build()["prompt"]) == ("POST", "completions", [4, 5])
    with pytest.raises(QwenFastError, match="one prompt a request"):
        api.classify_call(alone, "m", 0, ["p1", "p2"])


def test_fallback_and_constrained_choice_bodies() -> None:
    fallback = api.completions_body(dataclasses.replace(PLAN, has_logprob_token_ids=False), "m", 0, ["p"])
    assert fallback["logprobs"] == api.TOP_LOGPROBS_FALLBACK and "logprob_token_ids" not in fallback
    # only the top-k comes back there: the sampled token must be an answer token
    assert fallback["allowed_token_ids"] == [101, 102, 103]
    choice_plan = dataclasses.replace(PLAN, scoring="constrained_choice", steps=(Step(PROMPT_SUFFIX),), max_tokens=8)
    body = api.completions_body(choice_plan, "m", 0, ["p"])
    assert body["structured_outputs"] == {"choice": ["World", "Sports", "Business"]}
    assert "allowed_token_ids" not in body and body["max_tokens"] == 8


def test_head_and_tokenize_and_models_calls() -> None:
    head = dataclasses.replace(PLAN, scoring="head")
    assert api.classify_call(head, "cls", 0, ["a", "b"]) == ("POST", "/classify", {"model": "cls", "input": ["a", "b"]})
    assert api.tokenize_call("m", "hi") == (
        "POST",
        "/tokenize",
        {"model": "m", "prompt": "hi", "add_special_tokens": False},
    )
    assert api.models_call() == ("GET", "models", None)
    assert api.detokenize_call("m", [1, 2]) == ("POST", "/detokenize", {"model": "m", "tokens": [1, 2]})
    assert api.parse_detokenize({"prompt": "Sci"}) == "Sci"
    with pytest.raises(ResponseFormatError):
        api.parse_detokenize({"prompt": 3})


def test_parse_models_and_tokenize() -> None:
    assert api.parse_models({"data": [{"id": "a", "max_model_len": 512}, {"id": "b"}]}) == {"a": 512, "b": 0}
    assert api.parse_tokenize({"tokens": [1, 2], "count": 2}) == [1, 2]
    for bad in ({}, {"data": None}, [], None):
        with pytest.raises(ResponseFormatError, match="model list"):
            api.parse_models(bad)
    with pytest.raises(ResponseFormatError, match="tokens"):
        api.parse_tokenize({"count": 2})


def test_parse_choice_gives_the_label_and_its_probabilities() -> None:
    logprobs = {101: math.log(0.1), 102: math.log(0.7), 103: math.log(0.2)}
    answer = api.parse_item(PLAN, 0, choice(102, logprobs))
    assert answer == pytest.approx(logprobs)
    prediction = api.combine(PLAN, [answer])
    assert prediction.best == 1 and prediction.scores == pytest.approx((0.1, 0.7, 0.2))


FALLBACK = dataclasses.replace(PLAN, has_logprob_token_ids=False)


def test_top_k_fallback_counts_the_chosen_token_even_when_missing_from_top_logprobs() -> None:
    item = choice(101, {102: math.log(0.5)})
    item["logprobs"]["token_logprobs"] = [math.log(0.5)]
    prediction = api.combine(FALLBACK, [api.parse_choice(FALLBACK, 0, item)])
    assert prediction.best == 0 and prediction.scores == pytest.approx((0.5, 0.5, 0.0))


def test_with_logprob_token_ids_the_sampled_token_is_not_read() -> None:
    # Unrestricted sampling picked token 999; only the answer tokens' logprobs count.
    logprobs = {101: math.log(0.1), 102: math.log(0.6), 103: math.log(0.2), 999: math.log(0.1)}
    answer = api.parse_item(PLAN, 0, choice(999, logprobs, text="Weather"))
    assert answer == pytest.approx({101: math.log(0.1), 102: math.log(0.6), 103: math.log(0.2)})
    assert api.combine(PLAN, [answer]).scores == pytest.approx((1 / 9, 6 / 9, 2 / 9))


def test_with_logprob_token_ids_a_missing_answer_token_is_a_format_error() -> None:
    with pytest.raises(ResponseFormatError, match=r"no logprob for answer tokens \[103\]"):
        api.parse_item(PLAN, 0, choice(101, {101: -1.0, 102: -2.0}))


@pytest.mark.parametrize(
    "item",
    [
        {},
        {"text": "x"},
        {"text": "x", "logprobs": None},
        {"text": "x", "logprobs": {"tokens": []}},
        {"text": "x", "logprobs": {"tokens": ["token_id:abc"], "top_logprobs": [{}], "token_logprobs": [0]}},
        {"text": 5, "logprobs": {}},
        "not a dict",
    ],
)
def test_malformed_choices_are_format_errors(item: Any) -> None:
    with pytest.raises(ResponseFormatError):
        api.parse_item(PLAN, 0, item)


def test_answers_without_usable_logprobs_are_format_errors() -> None:
    with pytest.raises(ResponseFormatError, match="no usable label probabilities"):
        api.combine(PLAN, [{101: float("nan")}])


def test_top_k_fallback_a_token_outside_the_labels_is_a_label_parse_error() -> None:
    with pytest.raises(LabelParseError, match="token 999") as info:
        api.parse_item(FALLBACK, 0, choice(999, {999: -0.1}, text="Weather"))
    assert info.value.reply == "Weather"


def test_constrained_choice_replies() -> None:
    choice_plan = dataclasses.replace(PLAN, scoring="constrained_choice", steps=(Step(PROMPT_SUFFIX),))
    answer = api.parse_item(choice_plan, 0, {"text": "<think>\n\n</think>\n\nSports"})
    assert api.combine(choice_plan, [answer]) == api.Prediction(1, None)
    with pytest.raises(LabelParseError, match="none of the labels"):
        api.parse_item(choice_plan, 0, {"text": "Weather"})


def test_parse_head() -> None:
    head = dataclasses.replace(PLAN, scoring="head")
    prediction = api.combine(head, [api.parse_item(head, 0, {"index": 0, "probs": [0.2, 0.2, 0.6]})])
    assert prediction.best == 2 and prediction.scores == pytest.approx((0.2, 0.2, 0.6))
    with pytest.raises(ResponseFormatError, match="2 class probabilities for 3 labels"):
        api.parse_item(head, 0, {"probs": [0.5, 0.5]})
    for bad in ([0, 0, 0], [float("nan"), 1, 1], [-1, 1, 1], ["a", 1, 1], [2, 0, 0]):
        with pytest.raises(ResponseFormatError):
            api.parse_item(head, 0, {"probs": bad})


def test_a_multi_label_head_keeps_independent_probabilities() -> None:
    head = dataclasses.replace(PLAN, scoring="head", label_set=LabelSet.build(LABELS.labels, multi_label=True))
    prediction = api.combine(head, [api.parse_item(head, 0, {"probs": [0.9, 0.8, 0.1]})])
    assert prediction.scores == pytest.approx((0.9, 0.8, 0.1)) and prediction.best == 0


def test_reply_items_by_index() -> None:
    assert api.reply_items(PLAN, {"choices": [{"index": 1}, {"index": 0}]}) == {1: {"index": 1}, 0: {"index": 0}}
    head = dataclasses.replace(PLAN, scoring="head")
    assert api.reply_items(head, {"data": [{"index": 0}]}) == {0: {"index": 0}}
    for bad in ({}, {"choices": [{}]}, {"choices": None}, []):
        with pytest.raises(ResponseFormatError, match="per-prompt items"):
            api.reply_items(PLAN, bad)


def test_probe_tells_whether_logprob_token_ids_is_honoured() -> None:
    every = {"choices": [choice(101, {101: -1.0, 102: -2.0, 103: -3.0})]}
    only_chosen = {"choices": [choice(101, {101: -1.0})]}
    assert api.probe_has_logprob_token_ids(PLAN, every)
    assert not api.probe_has_logprob_token_ids(PLAN, only_chosen)
    with pytest.raises(ResponseFormatError):
        api.probe_has_logprob_token_ids(PLAN, {"choices": []})
    assert api.parse_num_classes({"data": [{"num_classes": 4}]}) == 4


def test_token_id() -> None:
    assert api.token_id("token_id:151644") == 151644
    with pytest.raises(ValueError):
        api.token_id("World")


def test_a_served_context_is_the_model_s_own_else_its_parent_s_else_unknown() -> None:
    reply = {
        "data": [
            {"id": "qwen3", "max_model_len": 4096},
            {"id": "news", "max_model_len": None, "parent": "qwen3"},
            {"id": "orphan", "parent": "elsewhere"},
        ]
    }
    assert api.served_context(reply, "qwen3") == 4096
    assert api.served_context(reply, "news") == 4096
    assert api.served_context(reply, "orphan") == 0
