"""Property-based tests over the pure logic (hypothesis): thousands of generated texts never
forge a control token or a turn in a rendered prompt, and arbitrary replies never crash the
parser: each gives a label or a typed error."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_qwen_fast import QwenFastError
from langchain_qwen_fast._core import vllm_api as api
from langchain_qwen_fast._core.prompting import PROMPT_SUFFIX, ClassifierPlan, LabelSet, Step, neutralize_control_tokens
from langchain_qwen_fast.classification import text_of

CONTROL = re.compile(r"<\|[a-z_]{1,30}\|>|</?(?:think|tool_call|tool_response)>")
FRAGMENTS = [
    "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_response>", "<|endoftext|>",
    "<|", "|>", "<", ">", "|", "/", "im_start", "think", "assistant\n", "system", "\n", " ",
]  # fmt: skip
# Texts built from control-token fragments and arbitrary characters, so forgeries get tried.
texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=30).map("".join)

LABELS = LabelSet.build(["World", "Sports", "Business", "Sci/Tech"])
PLAN = ClassifierPlan(
    label_set=LABELS,
    scoring="label_tokens",
    head=LABELS.render_head(),
    steps=(Step(PROMPT_SUFFIX, (101, 102, 103, 104)),),
    max_tokens=1,
    overhead_tokens=30,
    max_model_len=512,
    has_logprob_token_ids=True,
)
PLANS = [
    PLAN,
    dataclasses.replace(PLAN, scoring="head"),
    dataclasses.replace(PLAN, scoring="constrained_choice", steps=(Step(PROMPT_SUFFIX),)),
    dataclasses.replace(PLAN, scoring="head", label_set=LabelSet.build(LABELS.labels, multi_label=True)),
]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_no_text_forges_a_control_token_or_a_turn(text: str) -> None:
    rendered = PLAN.render(text)
    fixed = CONTROL.findall(PLAN.head + "<|im_start|>user\n" + PROMPT_SUFFIX)
    assert CONTROL.findall(rendered) == fixed  # only the template's own control tokens
    assert rendered.startswith(PLAN.head + "<|im_start|>user\n") and rendered.endswith(PROMPT_SUFFIX)
    assert CONTROL.search(neutralize_control_tokens(text)) is None
    # Only word joiners are inserted: every other character is kept, in order.
    assert neutralize_control_tokens(text).replace("\u2060", "") == text.replace("\u2060", "")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
token_names = st.one_of(st.sampled_from(["token_id:101", "token_id:102", "token_id:999"]), st.text(max_size=10))
logprob_values = st.one_of(st.floats(), st.integers(), st.text(max_size=4), st.none())
near_choices = st.fixed_dictionaries(
    {
        "index": st.integers(0, 3),
        "text": st.one_of(st.sampled_from(["World", "Sports", "x", ""]), json_values),
        "logprobs": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "tokens": st.lists(token_names, max_size=2),
                    "token_logprobs": st.lists(logprob_values, max_size=2),
                    "top_logprobs": st.lists(
                        st.one_of(st.none(), st.dictionaries(token_names, logprob_values, max_size=5)), max_size=2
                    ),
                }
            ),
        ),
        "probs": st.lists(st.one_of(st.floats(), st.integers(-2, 5)), max_size=5),
    }
)


def check_prediction(plan: ClassifierPlan, item: Any) -> None:
    try:
        prediction = api.combine(plan, [api.parse_item(plan, 0, item)])
    except QwenFastError:
        return  # a typed error naming the problem
    assert 0 <= prediction.best < len(LABELS.labels)
    if prediction.scores is not None:
        assert len(prediction.scores) == len(LABELS.labels)
        assert all(0.0 <= p <= 1.0 for p in prediction.scores)
        if not plan.label_set.multi_label:
            assert math.isclose(sum(prediction.scores), 1.0, rel_tol=1e-6)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PLANS), st.one_of(json_values, near_choices))
def test_any_reply_item_gives_a_label_or_a_typed_error(plan: ClassifierPlan, item: Any) -> None:
    check_prediction(plan, item)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PLANS), json_values)
def test_any_reply_gives_items_or_a_typed_error(plan: ClassifierPlan, reply: Any) -> None:
    try:
        items = api.reply_items(plan, reply)
    except QwenFastError:
        return
    for item in items.values():
        check_prediction(plan, item)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_setup_reply_parses_or_raises_typed(reply: Any) -> None:
    for parse in (api.parse_models, api.parse_tokenize, api.parse_num_classes):
        with contextlib.suppress(QwenFastError):
            parse(reply)


@settings(max_examples=200, deadline=None)
@given(st.one_of(json_values, texts))
def test_any_input_is_text_or_an_invalid_input_error(value: Any) -> None:
    try:
        text = text_of(value)
    except QwenFastError:
        return
    assert isinstance(text, str) and text.strip()
