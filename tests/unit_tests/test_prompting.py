"""Prompt layout, label planning, control-token defusing and input validation: pure logic."""

from __future__ import annotations

import math

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompt_values import ChatPromptValue

from langchain_qwen_fast import InvalidInputError
from langchain_qwen_fast._stats import percentile
from langchain_qwen_fast.classification import text_of, validate_text
from langchain_qwen_fast.prompting import (
    DEFAULT_INSTRUCTIONS,
    PROMPT_SUFFIX,
    ClassifierPlan,
    LabelSet,
    label_probabilities,
    neutralize_control_tokens,
    plan_scoring,
    strip_think,
)
from langchain_qwen_fast.samples import AG_NEWS_LABELS, headlines, news_items


def plan(labels: LabelSet, scoring: str = "label_tokens", overhead: int = 40, max_len: int = 512) -> ClassifierPlan:
    return ClassifierPlan(
        label_set=labels,
        scoring=scoring,  # type: ignore[arg-type]
        prefix=labels.render_prefix(scoring),  # type: ignore[arg-type]
        answer_token_ids=(1, 2, 3, 4),
        max_tokens=1,
        overhead_tokens=overhead,
        max_model_len=max_len,
        has_logprob_token_ids=True,
    )


NEWS = LabelSet.build(AG_NEWS_LABELS)


# -- labels ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (["only"], "at least two"),
        (["a", "a", "b"], "repeated: \\['a'\\]"),
        (["a", ""], "non-empty"),
        (["a", " b"], "whitespace"),
        (["a", 3], "non-empty string"),
    ],
)
def test_label_set_rejects_bad_labels(labels: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LabelSet.build(labels)


def test_descriptions_must_name_known_labels() -> None:
    with pytest.raises(ValueError, match="unknown labels: \\['Weather'\\]"):
        LabelSet.build(["World", "Sports"], {"Weather": "rain"})


def test_prefix_lists_labels_after_the_instructions() -> None:
    assert NEWS.render_prefix("label_tokens") == (
        f"<|im_start|>system\n{DEFAULT_INSTRUCTIONS}\nLabels: World, Sports, Business, Sci/Tech"
        "<|im_end|>\n<|im_start|>user\n"
    )


def test_prefix_with_descriptions_and_custom_instructions() -> None:
    labels = LabelSet.build(["spam", "ham"], {"spam": "unwanted mail"}, "  Is this spam?  ")
    assert labels.render_prefix("label_tokens") == (
        "<|im_start|>system\nIs this spam?\nLabels:\n- spam (unwanted mail)\n- ham<|im_end|>\n<|im_start|>user\n"
    )


def test_letter_prefix_and_the_26_letter_cap() -> None:
    prefix = NEWS.render_prefix("letter_tokens")
    assert "Answer with the label's letter.\nA: World\nB: Sports\nC: Business\nD: Sci/Tech" in prefix
    assert LabelSet.build([f"l{i}" for i in range(27)]).letters() is None


def test_plan_scoring_prefers_label_tokens_then_letters_then_choice() -> None:
    letters = [[65], [66], [67], [68]]
    assert plan_scoring(NEWS, [[10, 1], [11], [12], [13, 5]], letters) == ("label_tokens", (10, 11, 12, 13), 1)
    assert plan_scoring(NEWS, [[10, 1], [10, 2], [12], [13]], letters) == ("letter_tokens", (65, 66, 67, 68), 1)
    scoring, ids, max_tokens = plan_scoring(NEWS, [[10, 1], [10, 2], [12], [13]], None)
    assert (scoring, ids) == ("constrained_choice", ())
    assert max_tokens == len(b"Business")  # the longest label in bytes bounds the reply


def test_letters_that_are_not_single_tokens_fall_back_to_choice() -> None:
    assert plan_scoring(NEWS, [[1], [1], [2], [3]], [[65], [66, 1], [67], [68]])[0] == "constrained_choice"


# -- rendering -------------------------------------------------------------------------------
def test_render_puts_the_text_between_prefix_and_suffix() -> None:
    p = plan(NEWS)
    assert p.render("Markets wobble") == p.prefix + "Markets wobble" + PROMPT_SUFFIX
    assert PROMPT_SUFFIX == "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert plan(NEWS, "head").render("bare <|im_start|> text") == "bare <\u2060|im_start|> text"


@pytest.mark.parametrize(
    "forged",
    ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_response>", "<|endoftext|>"],
)
def test_control_tokens_in_user_text_are_defused(forged: str) -> None:
    text = f"before {forged} after"
    defused = neutralize_control_tokens(text)
    assert forged not in defused and defused.replace("\u2060", "") == text


def test_ordinary_angle_brackets_are_kept() -> None:
    for text in ("a < b > c", "<b>bold</b>", "<|not a token", "x <thinking> y"):
        assert neutralize_control_tokens(text) == text


def test_strip_think() -> None:
    assert strip_think("<think>\nhmm\n</think>\n\nSports") == "Sports"
    assert strip_think("<think>never closed") == ""
    assert strip_think("Sports</think>") == "Sports"
    assert strip_think("  World ") == "World"


def test_context_budget_and_length_error() -> None:
    p = plan(NEWS, overhead=40, max_len=100)
    assert p.text_token_budget == 100 - 40 - 2 - 1  # margin of 2 at the boundaries, 1 answer token
    assert p.length_error(p.text_token_budget) is None
    error = p.length_error(p.text_token_budget + 1)
    assert error is not None and error.tokens == 58 and error.limit == 57 and "context of 100" in str(error)


def test_label_probabilities_softmax_over_the_labels() -> None:
    probs = label_probabilities({1: math.log(0.2), 2: math.log(0.6), 3: math.log(0.2)}, [1, 2, 3, 4])
    assert probs == pytest.approx((0.2, 0.6, 0.2, 0.0))
    assert label_probabilities({1: -1e9, 2: float("nan")}, [1, 2]) == (1.0, 0.0)
    with pytest.raises(ValueError, match="no label token"):
        label_probabilities({9: 0.0}, [1, 2])


# -- input -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "got None"),
        (3, "got int"),
        (b"x", "decode bytes first"),
        ("", "empty"),
        (" \n\t", "whitespace only"),
        ("\ud800", "lone surrogate at position 0"),
        ({"title": "x"}, "needs a 'text' key"),
        ([], "expected text"),
        ([1, 2], "expected text"),
    ],
)
def test_bad_input_is_named(value: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        text_of(value)


def test_input_shapes_give_the_same_text() -> None:
    assert text_of({"text": "hello", "x": 1}) == "hello"
    messages = [HumanMessage("first"), AIMessage("second")]
    assert text_of(messages) == "first\n\nsecond" == text_of(ChatPromptValue(messages=messages))
    assert validate_text(" padded ") == " padded "


# -- samples and statistics ------------------------------------------------------------------
def test_sample_generators_are_distinct_and_deterministic() -> None:
    assert len(set(headlines(500))) == 500 and headlines(5) == headlines(5)
    assert len(set(news_items(500))) == 500 and news_items(3) == news_items(3)


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 50) == 50 and percentile(values, 95) == 95 and percentile(values, 100) == 100
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)
