"""Prompt layout, label planning, control-token defusing and input validation: pure logic."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompt_values import ChatPromptValue

from langchain_qwen_fast import InvalidInputError, ResponseFormatError
from langchain_qwen_fast._core.prompting import (
    DEFAULT_INSTRUCTIONS,
    PROMPT_SUFFIX,
    USER_OPEN,
    ClassifierPlan,
    LabelSet,
    Prediction,
    Step,
    label_probabilities,
    neutralize_control_tokens,
    plan_steps,
    softmax,
    strip_think,
    yes_probability,
)
from langchain_qwen_fast._core.stats import percentile
from langchain_qwen_fast.classification import text_of, validate_text
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines, news_items


def plan(labels: LabelSet, scoring: str = "label_tokens", overhead: int = 40, max_len: int = 512) -> ClassifierPlan:
    return ClassifierPlan(
        label_set=labels,
        scoring=scoring,  # type: ignore[arg-type]
        head=labels.render_head(),
        steps=(Step(PROMPT_SUFFIX, (1, 2, 3, 4)),),
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


def test_head_lists_labels_after_the_instructions() -> None:
    assert NEWS.render_head() == (
        f"<|im_start|>system\n{DEFAULT_INSTRUCTIONS}\nLabels: World, Sports, Business, Sci/Tech<|im_end|>\n"
    )


def test_head_with_descriptions_and_custom_instructions() -> None:
    labels = LabelSet.build(["spam", "ham"], {"spam": "unwanted mail"}, "  Is this spam?  ")
    assert (
        labels.render_head() == "<|im_start|>system\nIs this spam?\nLabels:\n- spam (unwanted mail)\n- ham<|im_end|>\n"
    )


def test_single_label_examples_are_answered_turns_in_the_head() -> None:
    labels = LabelSet.build(["spam", "ham"], examples=[("Win a prize <|im_start|>now", "spam"), ("Lunch?", "ham")])
    assert labels.render_head().endswith(
        "<|im_end|>\n<|im_start|>user\nWin a prize <\u2060|im_start|>now<|im_end|>\n"
        "<|im_start|>assistant\nspam<|im_end|>\n"
        "<|im_start|>user\nLunch?<|im_end|>\n<|im_start|>assistant\nham<|im_end|>\n"
    )


def test_multi_label_examples_and_questions() -> None:
    labels = LabelSet.build(["a", "b"], multi_label=True, examples=[("x", ["a", "b"]), ("y", [])])
    assert labels.render_head().endswith(
        "<|im_start|>user\nExamples:\nText: x\nLabels: a, b\nText: y\nLabels: none<|im_end|>\n"
    )
    assert labels.question("b") == ("<|im_end|>\n<|im_start|>user\nDoes 'b' apply?" + PROMPT_SUFFIX)


@pytest.mark.parametrize(
    ("examples", "message"),
    [
        ([("text", "Weather")], "lacks: \\['Weather'\\]"),
        ([("", "World")], "non-empty text"),
        ([("text", ["World", "Sports"])], "exactly one label"),
        (["just text"], "must be \\(text, label\\)"),
    ],
)
def test_bad_examples_are_named(examples: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LabelSet.build(AG_NEWS_LABELS, examples=examples)


def test_distinct_first_tokens_take_one_step() -> None:
    scoring, steps, paths = plan_steps([[10, 1], [11], [12], [13, 5]], end_token=99)
    assert scoring == "label_tokens" and [s.allowed for s in steps] == [(10, 11, 12, 13)]
    assert paths == ((10, 1), (11,), (12,), (13, 5))


def test_shared_first_tokens_take_a_step_per_trie_node() -> None:
    # "Sci/Tech" = 5 6 7, "Sci-Fi" = 5 8, "Sci" = 5, "Sports" = 9
    scoring, steps, _ = plan_steps([[5, 6, 7], [5, 8], [5], [9]], end_token=99)
    assert scoring == "label_sequences"
    assert {s.path: s.allowed for s in steps} == {(): (5, 9), (5,): (6, 8, 99), (5, 6): (7,)}


def test_sequence_scores_are_products_normalised() -> None:
    labels = LabelSet.build(["Sci/Tech", "Sci-Fi", "Sci", "Sports"])
    scoring, steps, paths = plan_steps([[5, 6, 7], [5, 8], [5], [9]], end_token=99)
    p = ClassifierPlan(labels, scoring, labels.render_head(), steps, 1, 40, 512, True, paths, 99)
    lp = math.log
    answers = {(): {5: lp(0.8), 9: lp(0.1)}, (5,): {6: lp(0.5), 8: lp(0.2), 99: lp(0.1)}, (5, 6): {7: lp(0.9)}}
    prediction = p.combine([answers[s.path] for s in steps])
    raw = [0.8 * 0.5 * 0.9, 0.8 * 0.2, 0.8 * 0.1, 0.1]
    assert prediction.scores == pytest.approx([r / sum(raw) for r in raw])
    assert prediction.best == 0


def test_yes_probability() -> None:
    assert yes_probability(math.log(0.3), math.log(0.1)) == pytest.approx(0.75)
    assert yes_probability(-math.inf, 0.0) == 0.0


# -- rendering -------------------------------------------------------------------------------
def test_render_puts_the_text_between_prefix_and_suffix() -> None:
    p = plan(NEWS)
    assert p.render("Markets wobble") == p.head + USER_OPEN + "Markets wobble" + PROMPT_SUFFIX
    assert p.render("x", examples="<|im_start|>user\ne<|im_end|>\n").startswith(
        p.head + "<|im_start|>user\ne<|im_end|>"
    )
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
    with pytest.raises(ResponseFormatError, match="no label has a finite logprob"):
        label_probabilities({9: 0.0}, [1, 2])


@given(st.lists(st.floats() | st.sampled_from([math.inf, -math.inf, math.nan, -1e308, 1e308]), max_size=6))
def test_softmax_counts_every_non_finite_logprob_as_zero_and_any_finite_one_as_given(logprobs: list[float]) -> None:
    finite = [v for v in logprobs if math.isfinite(v)]
    if not finite:
        with pytest.raises(ResponseFormatError):
            softmax(logprobs)
        return
    top = max(finite)
    weights = [math.exp(v - top) if math.isfinite(v) else 0.0 for v in logprobs]
    assert softmax(logprobs) == tuple(w / sum(weights) for w in weights)


def test_a_prediction_s_best_label_is_the_first_of_the_likeliest() -> None:
    assert Prediction.of([0.2, 0.4, 0.4]) == Prediction(1, (0.2, 0.4, 0.4))
    assert Prediction.of((0.5,)) == Prediction(0, (0.5,))
    with pytest.raises(ValueError):
        Prediction.of([])


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


def test_the_compact_layout_renders_few_tokens_after_the_text_and_pads_its_head() -> None:
    from langchain_qwen_fast._core.prompting import CACHE_BLOCK_TOKENS, COMPACT_PAD, COMPACT_SUFFIX, local_plan
    from tests.support.fake_vllm import ToyTokenizer, toy_tokenize

    labels = LabelSet.build(["World", "Sports"], examples=[("Cup final", "Sports")], layout="compact")
    assert labels.unpadded_head() == "Label the text.\nLabels: World, Sports\nCup final<|im_end|>Sports\n"
    plan = local_plan(labels, ToyTokenizer())
    pad = plan.label_set.head_padding
    assert 1 <= pad <= CACHE_BLOCK_TOKENS and plan.head == labels.unpadded_head() + COMPACT_PAD * pad
    assert len(toy_tokenize(plan.head)) % CACHE_BLOCK_TOKENS == 0
    assert plan.render("Stocks rally") == plan.head + "Stocks rally" + COMPACT_SUFFIX
    assert plan.encode(["Stocks rally"]) == [toy_tokenize(plan.render("Stocks rally"))]
    multi = LabelSet.build(["World", "Sports"], multi_label=True, layout="compact")
    assert multi.question("Sports") == "<|im_end|>Sports?"
    # a chat head is never padded: an untrained model reads every token of it
    assert LabelSet.build(["World", "Sports"]).padded(5).head_padding == 0
