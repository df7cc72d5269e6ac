"""The trainer's parts that need no model: the stratified split, the learning-rate schedule,
when a run counts as converged, the options and items it refuses before any model loads, and
the extra it names when part of it is missing."""

from __future__ import annotations

import importlib.util
from collections import Counter
from typing import Any

import pytest

from langchain_qwen_fast.errors import ConfigurationError, DataFileError, MissingDependencyError
from langchain_qwen_fast.training import TrainOptions, train
from langchain_qwen_fast.training.trainer import (
    checked_items,
    converged,
    learning_rate_factor,
    not_converged_warning,
    split,
)


def test_split_is_stratified_reproducible_and_loses_nothing() -> None:
    items = [(f"t{i}", "ab"[i % 2] if i < 90 else "c") for i in range(100)]
    train, val = split(items, 0.2, seed=1)
    assert sorted(train + val) == sorted(items)
    assert Counter(y for _, y in val) == {"a": 9, "b": 9, "c": 2}
    assert (train, val) == split(items, 0.2, seed=1)
    assert split(items, 0.2, seed=2) != (train, val)
    with pytest.raises(ConfigurationError, match="val_fraction"):
        split(items, 1.0, seed=0)


def test_the_warm_up_is_short_however_high_the_epoch_cap() -> None:
    three, fifty = learning_rate_factor(100, 3), learning_rate_factor(100, 50)
    assert three(0) == fifty(0) == pytest.approx(1 / 15)  # a run of three epochs warms up over 15 steps
    assert three(14) == pytest.approx(1.0) and fifty(14) == pytest.approx(1.0)  # and so does a long cap
    assert three(299) == pytest.approx(1 / 285) and fifty(299) > 0.9  # decays to zero at the cap
    assert fifty(4999) == pytest.approx(1 / 4985) and fifty(5000) == 0.0


def test_a_run_the_epoch_cap_ended_had_not_converged() -> None:
    assert converged(3, 3, 2, validated=True, finished=True) is False  # still improving at the cap
    assert converged(2, 3, 2, validated=True, finished=True) is False  # the cap came before the patience ran out
    assert converged(2, 4, 2, validated=True, finished=True) is True  # early stopping ended it
    assert converged(3, 3, 2, validated=False, finished=True) is None  # nothing to tell by
    assert converged(3, 3, 2, validated=True, finished=False) is None  # max_steps stopped it
    assert "the best epoch was the last one (epoch 3" in not_converged_warning(3, 3, 2)
    assert "had not converged; more epochs or a higher learning rate may help" in not_converged_warning(3, 3, 2)
    assert "at epoch 3, 1 after its best (epoch 2), before 2 epochs without" in not_converged_warning(2, 3, 2)


def test_without_validation_items_the_epochs_must_be_given() -> None:
    options = TrainOptions(method="head", base_model="/nonexistent", out="/nonexistent/out")
    assert options.epochs is None and options.epoch_cap == 50
    with pytest.raises(ConfigurationError, match=r"no validation items.*--epochs"):  # one item a label: no split
        train([("a", "x"), ("b", "y")], ["x", "y"], options)
    with pytest.raises(ConfigurationError, match="--epochs must be at least 1"):
        train([("a", "x"), ("b", "y")], ["x", "y"], TrainOptions(method="head", base_model="m", out="o", epochs=0))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"method": "sft", "lora": False, "export": "adapter"}, "needs LoRA"),
        ({"method": "head", "export": "adapter"}, "not as an adapter"),
        ({"method": "sft", "export": "generate"}, "for --method head"),
    ],
)
def test_export_choices_that_cannot_work_are_refused_before_training(changes: dict, message: str) -> None:
    options = TrainOptions(base_model="/nonexistent", out="/nonexistent/out", **changes)
    with pytest.raises(ConfigurationError, match=message):
        train([("a", "x"), ("b", "y")], ["x", "y"], options)


def test_a_multi_label_head_for_the_generate_runner_is_refused_before_training() -> None:
    options = TrainOptions(method="head", base_model="/nonexistent", out="/nonexistent/out", export="generate")
    with pytest.raises(ConfigurationError, match="single-label"):
        train([("a", ["x"]), ("b", [])], ["x", "y"], options)
    train_items, val = split([(f"t{i}", ("x", "y")[: i % 3]) for i in range(30)], 0.2, seed=0)
    assert Counter(y for _, y in val) == {(): 2, ("x",): 2, ("x", "y"): 2}  # stratified by combination
    assert len(train_items) == 24


def test_items_are_checked_before_any_model_loads() -> None:
    options = TrainOptions(method="sft", base_model="/nonexistent", out="/nonexistent/out")
    with pytest.raises(ConfigurationError, match="give every item a list"):
        train([("a", "x"), ("b", ["y"])], ["x", "y"], options)
    assert checked_items([("a", ["y", "x", "y"]), ("b", ())], ["x", "y"]) == ([("a", ("x", "y")), ("b", ())], True)
    with pytest.raises(DataFileError, match=r"\['z'\]"):
        checked_items([("a", ["z"])], ["x", "y"])
    with pytest.raises(DataFileError, match=r"\['z'\]"):
        checked_items([("a", "z")], ["x", "y"])


@pytest.mark.parametrize("missing", ["peft", "torch"])
def test_a_missing_part_of_the_train_extra_is_named(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    find_spec = importlib.util.find_spec

    def without(name: str, *args: Any) -> Any:
        return None if name == missing else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without)
    options = TrainOptions(method="sft", base_model="/nonexistent", out="/nonexistent/out")
    with pytest.raises(MissingDependencyError, match=rf"{missing}.*langchain-qwen-fast\[train\]"):
        train([("a", "x"), ("b", "y")], ["x", "y"], options)
