"""Scores of predictions against the truth, checked against hand counts."""

from __future__ import annotations

import pytest

from langchain_qwen_fast.evaluation.metrics import classification_metrics
from langchain_qwen_fast.evaluation.report import NO_LABEL


def test_metrics_match_hand_counts_and_an_abstention_counts_as_wrong() -> None:
    truth = ["a", "a", "a", "b", "b", "c"]
    predicted = ["a", "a", "b", "b", NO_LABEL, "a"]
    report = classification_metrics(truth, predicted, ["a", "b", "c"])
    assert report["accuracy"] == pytest.approx(3 / 6)
    # a: tp 2, fp 1, fn 1 -> p 2/3, r 2/3; b: tp 1, fp 1, fn 1 -> 1/2, 1/2; c: nothing right
    assert report["per_class"]["a"] == pytest.approx({"precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3, "support": 3})
    assert report["per_class"]["b"] == pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2})
    assert report["per_class"]["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert report["macro_f1"] == pytest.approx((2 / 3 + 0.5 + 0.0) / 3)
    assert report["labels"] == ["a", "b", "c"]
    assert report["confusion_matrix"] == [[2, 1, 0], [0, 1, 0], [1, 0, 0]]  # rows: truth
