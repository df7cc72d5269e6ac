"""Per-label thresholds tuned for the best F1, and the multi-label scores they are judged by."""

from __future__ import annotations

import itertools
import random

import pytest

from langchain_qwen_fast.errors import InvalidInputError
from langchain_qwen_fast.training.thresholds import (
    DEFAULT_THRESHOLD,
    best_threshold,
    multi_label_scores,
    tune_thresholds,
)


def _f1(scores: list[float], truth: list[bool], threshold: float) -> float:
    tp = sum(s >= threshold and t for s, t in zip(scores, truth))
    fp = sum(s >= threshold and not t for s, t in zip(scores, truth))
    fn = sum(s < threshold and t for s, t in zip(scores, truth))
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def test_separable_scores_get_the_middle_of_the_gap() -> None:
    threshold, f1 = best_threshold([0.9, 0.8, 0.3, 0.1], [True, True, False, False])
    assert threshold == pytest.approx(0.55) and f1 == 1.0
    # A label whose probabilities all sit low still gets a cut between its classes.
    threshold, f1 = best_threshold([0.2, 0.05, 0.04, 0.01], [True, True, False, False])
    assert threshold == pytest.approx(0.045) and f1 == 1.0


def test_the_threshold_is_the_best_f1_of_every_possible_cut() -> None:
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 12)
        scores = [round(rng.random(), 1) for _ in range(n)]  # ties on purpose
        truth = [rng.random() < 0.5 for _ in range(n)]
        if not any(truth):
            continue
        threshold, f1 = best_threshold(scores, truth)
        cuts = [*sorted(set(scores)), 0.0, 1.01]
        assert f1 == pytest.approx(max(_f1(scores, truth, c) for c in cuts))
        assert _f1(scores, truth, threshold) == pytest.approx(f1)  # the threshold gives that F1
        assert 0.0 <= threshold <= 1.0


def test_a_label_no_item_has_keeps_the_default() -> None:
    assert best_threshold([0.9, 0.2], [False, False]) == (DEFAULT_THRESHOLD, 0.0)
    with pytest.raises(InvalidInputError, match="2 scores for 1"):
        best_threshold([0.9, 0.2], [True])


def test_thresholds_are_tuned_label_by_label() -> None:
    labels = ["a", "b"]
    truth = [("a",), ("a", "b"), (), ("b",)]
    scores = [[0.9, 0.1], [0.7, 0.35], [0.2, 0.3], [0.1, 0.4]]
    tuned = tune_thresholds(truth, scores, labels)
    assert tuned == {"a": pytest.approx(0.45), "b": pytest.approx(0.325)}
    assert multi_label_scores(truth, scores, labels, tuned) == {
        "micro_f1": 1.0,
        "macro_f1": 1.0,
        "subset_accuracy": 1.0,
    }


def test_multi_label_scores_count_as_defined() -> None:
    labels = ["a", "b", "c"]
    truth = [("a", "b"), ("c",), ()]
    scores = [[0.9, 0.2, 0.6], [0.1, 0.1, 0.7], [0.6, 0.1, 0.1]]
    # at 0.5: item 1 predicts a, c (tp a, fn b, fp c); item 2 predicts c (tp); item 3 predicts a (fp)
    got = multi_label_scores(truth, scores, labels)
    assert got["micro_f1"] == pytest.approx(2 * 2 / (2 * 2 + 2 + 1))
    per_label = [2 * 1 / (2 + 1), 0.0, 2 * 1 / (2 + 1)]  # a: tp 1 fp 1; b: fn 1; c: tp 1 fp 1
    assert got["macro_f1"] == pytest.approx(sum(per_label) / 3)
    assert got["subset_accuracy"] == pytest.approx(1 / 3)
    # per-label thresholds: "a" needs 0.95 and "c" 0.65, so only the second item's c is predicted
    strict = multi_label_scores(truth, scores, labels, {"a": 0.95, "b": 0.5, "c": 0.65})
    assert strict["subset_accuracy"] == pytest.approx(2 / 3)  # the first item is wrong
    assert strict["micro_f1"] == pytest.approx(2 * 1 / (2 * 1 + 0 + 2))


def test_every_combination_of_predictions_scores_between_zero_and_one() -> None:
    labels = ["a", "b"]
    truth = [("a",), ("b",)]
    for flat in itertools.product([0.0, 1.0], repeat=4):
        scores = [list(flat[:2]), list(flat[2:])]
        got = multi_label_scores(truth, scores, labels)
        assert all(0.0 <= v <= 1.0 for v in got.values())
    assert multi_label_scores(truth, [[1, 0], [0, 1]], labels)["micro_f1"] == 1.0
