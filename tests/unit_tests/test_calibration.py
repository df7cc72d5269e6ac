"""Calibration arithmetic: temperature scaling and its fit, calibration error, abstention,
bootstrap intervals. Known answers come from data generated with a known temperature."""

from __future__ import annotations

import math
import random

import pytest

from langchain_qwen_fast import calibration
from langchain_qwen_fast._core.prompting import softmax


def test_temperature_one_is_the_identity_and_others_keep_the_order() -> None:
    scores = [0.7, 0.2, 0.1]
    assert calibration.apply_temperature(scores, 1.0) == scores
    soft = calibration.apply_temperature(scores, 2.0)
    sharp = calibration.apply_temperature(scores, 0.5)
    assert sum(soft) == pytest.approx(1.0) and sum(sharp) == pytest.approx(1.0)
    assert soft[0] < 0.7 < sharp[0]
    assert sorted(range(3), key=soft.__getitem__) == sorted(range(3), key=sharp.__getitem__)
    assert soft == pytest.approx(list(softmax([math.log(p) / 2.0 for p in scores])))


def test_temperature_leaves_zero_scores_at_zero() -> None:
    assert calibration.apply_temperature([0.9, 0.1, 0.0], 3.0)[2] == 0.0


def test_multi_label_temperature_scales_each_logit() -> None:
    scaled = calibration.apply_temperature([0.9, 0.5, 0.2], 2.0, multi_label=True)
    assert scaled[1] == pytest.approx(0.5)
    assert scaled[0] == pytest.approx(1 / (1 + math.exp(-math.log(9) / 2)))
    assert scaled[2] == pytest.approx(1 / (1 + math.exp(math.log(4) / 2)))


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_a_temperature_must_be_positive(bad: float) -> None:
    with pytest.raises(ValueError, match="temperature"):
        calibration.apply_temperature([0.5, 0.5], bad)


def _overconfident(true_temperature: float, n: int = 4000, k: int = 4, seed: int = 1) -> tuple[list, list]:
    """Items whose labels are drawn from softmax(z), reported as softmax(z / true_temperature):
    the scores are miscalibrated by exactly ``true_temperature``."""
    rng = random.Random(seed)
    rows, truth = [], []
    for _ in range(n):
        z = [rng.gauss(0, 1.5) for _ in range(k)]
        truth.append(rng.choices(range(k), weights=softmax(z))[0])
        rows.append(list(softmax([v / true_temperature for v in z])))
    return rows, truth


@pytest.mark.parametrize("true_temperature", [0.4, 1.0, 2.5])
def test_fit_recovers_a_known_temperature(true_temperature: float) -> None:
    rows, truth = _overconfident(true_temperature)
    # Reported scores are softmax(z / t); scaling by T gives softmax(z / (t T)): T = 1 / t.
    assert calibration.fit_temperature(rows, truth) == pytest.approx(1 / true_temperature, rel=0.1)


def test_the_fit_lowers_the_likelihood_and_the_calibration_error() -> None:
    rows, truth = _overconfident(0.4)
    fitted = calibration.fit_temperature(rows, truth)
    assert calibration.negative_log_likelihood(rows, truth, fitted) < calibration.negative_log_likelihood(
        rows, truth, 1.0
    )

    def ece(matrix: list[list[float]]) -> float:
        confidence = [max(r) for r in matrix]
        return calibration.expected_calibration_error(confidence, [r.index(max(r)) == t for r, t in zip(matrix, truth)])

    before, after = ece(rows), ece([calibration.apply_temperature(r, fitted) for r in rows])
    assert after < before / 3
    assert after < 0.03


def test_ece_of_known_bins() -> None:
    # 10 items at 0.9 of which 9 right: calibrated; 10 at 0.9 of which 5 right: off by 0.4.
    assert calibration.expected_calibration_error([0.9] * 10, [True] * 9 + [False]) == pytest.approx(0.0)
    assert calibration.expected_calibration_error([0.9] * 10, [True] * 5 + [False] * 5) == pytest.approx(0.4)
    bins = calibration.reliability_bins([0.05, 0.95, 0.97], [False, True, False], bins=10)
    assert [b.count for b in bins] == [1, 0, 0, 0, 0, 0, 0, 0, 0, 2]
    assert bins[9].accuracy == 0.5 and bins[9].mean_confidence == pytest.approx(0.96)


def test_coverage_curve_and_abstain_threshold() -> None:
    confidence = [0.99, 0.95, 0.9, 0.9, 0.6, 0.5]
    correct = [True, True, True, False, False, True]
    curve = calibration.coverage_curve(confidence, correct)
    assert [c for _, c, _ in curve] == pytest.approx([1 / 6, 2 / 6, 4 / 6, 5 / 6, 1.0])  # ties enter together
    assert curve[2][2] == pytest.approx(0.75)
    assert calibration.abstain_threshold(confidence, correct, 1.0) == pytest.approx((0.95, 2 / 6, 1.0))
    assert calibration.abstain_threshold(confidence, correct, 0.75)[0] == 0.9
    assert calibration.abstain_threshold([0.9, 0.8], [False, False], 0.5) is None


def test_a_threshold_of_one_is_fitted_and_the_classifier_takes_it() -> None:
    """Probabilities that round to exactly 1, all right, and the others not good enough: the fit
    answers those alone, and the classifier accepts that threshold and answers at 1."""
    from langchain_qwen_fast import QwenClassifier

    confidence = [1.0, 1.0, 1.0, 0.99, 0.98]
    correct = [True, True, True, False, False]
    assert calibration.abstain_threshold(confidence, correct, 0.98) == pytest.approx((1.0, 0.6, 1.0))
    classifier = QwenClassifier(labels=["a", "b"], base_url="http://127.0.0.1:9/v1", abstain_below=1.0)
    assert classifier.abstain_below == 1.0


def test_bootstrap_interval_brackets_the_estimate_and_is_reproducible() -> None:
    rng = random.Random(3)
    labels = ["a", "b", "c"]
    truth = [rng.choice(labels) for _ in range(500)]
    predicted = [t if rng.random() < 0.8 else rng.choice(labels) for t in truth]
    accuracy = sum(t == p for t, p in zip(truth, predicted)) / len(truth)
    first = calibration.bootstrap_interval(truth, predicted, labels, resamples=300, seed=5)
    assert first == calibration.bootstrap_interval(truth, predicted, labels, resamples=300, seed=5)
    low, high = first["accuracy"]
    assert low < accuracy < high
    assert 0.03 < high - low < 0.12  # about ±1.96 * sqrt(p(1-p)/n) = ±0.033
    f1_low, f1_high = first["macro_f1"]
    assert 0 < f1_low < f1_high < 1
