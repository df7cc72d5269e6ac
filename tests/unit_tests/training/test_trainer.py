"""The training side's pure parts: the stratified split, and the prompt and answer tokens an
SFT model is trained on, which must be exactly what the classifier sends and reads."""

from __future__ import annotations

from collections import Counter

import pytest

from langchain_qwen_fast._core.prompting import PROMPT_SUFFIX, LabelSet, local_plan
from langchain_qwen_fast.training.trainer import split
from tests.support.fake_vllm import ToyTokenizer, toy_tokenize


def test_split_is_stratified_reproducible_and_loses_nothing() -> None:
    items = [(f"t{i}", "ab"[i % 2] if i < 90 else "c") for i in range(100)]
    train, val = split(items, 0.2, seed=1)
    assert sorted(train + val) == sorted(items)
    assert Counter(y for _, y in val) == {"a": 9, "b": 9, "c": 2}
    assert (train, val) == split(items, 0.2, seed=1)
    assert split(items, 0.2, seed=2) != (train, val)
    with pytest.raises(ValueError, match="val_fraction"):
        split(items, 1.0, seed=0)


def test_sft_prompt_is_the_classifiers_prompt_and_targets_the_first_label_token() -> None:
    tokenizer = ToyTokenizer()
    plan = local_plan(LabelSet.build(["World", "Sports", "Business"]), tokenizer)
    assert plan.scoring == "label_tokens"
    (ids,) = plan.encode(["Stocks rally"])
    assert ids == toy_tokenize(plan.render("Stocks rally"))
    assert plan.render("Stocks rally").endswith("Stocks rally" + PROMPT_SUFFIX)
    assert [plan.answer_tokens(i) for i in range(3)] == [(toy_tokenize(x)[0],) for x in ("World", "Sports", "Business")]


def test_labels_sharing_tokens_train_on_every_label_token_and_the_end() -> None:
    tokenizer = ToyTokenizer()
    plan = local_plan(LabelSet.build(["tech", "tech news", "sport"]), tokenizer)
    assert plan.scoring == "label_sequences"
    end = toy_tokenize("<|im_end|>")[0]
    assert plan.answer_tokens(0) == (*toy_tokenize("tech"), end)  # another label continues it
    assert plan.answer_tokens(1) == tuple(toy_tokenize("tech news"))
    assert plan.answer_tokens(2) == tuple(toy_tokenize("sport"))
    with pytest.raises(ValueError, match="single-label"):
        local_plan(LabelSet.build(["a", "b"], multi_label=True), tokenizer)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"method": "sft", "lora": False, "export": "adapter"}, "needs LoRA"),
        ({"method": "head", "export": "adapter"}, "not as an adapter"),
        ({"method": "sft", "export": "generate"}, "for --method head"),
    ],
)
def test_export_choices_that_cannot_work_are_refused_before_training(changes: dict, message: str) -> None:
    from langchain_qwen_fast.training.trainer import TrainOptions, train

    options = TrainOptions(base_model="/nonexistent", out="/nonexistent/out", **changes)
    with pytest.raises(ValueError, match=message):
        train([("a", "x"), ("b", "y")], ["x", "y"], options)


def test_a_head_for_the_generate_runner_needs_labels_with_distinct_first_tokens() -> None:
    import torch

    from langchain_qwen_fast.training.trainer import HeadTask, TrainOptions

    options = TrainOptions(method="head", base_model="m", out="o", export="generate")
    with pytest.raises(ValueError, match="first tokens differ"):
        HeadTask(options, ["tech", "tech news"], ToyTokenizer(), torch)
    task = HeadTask(options, ["World", "Sports"], ToyTokenizer(), torch)
    assert task.encode(["Stocks rally"]) == task.plan.encode(["Stocks rally"])  # the classifier's prompt
