"""Calibration of label probabilities: temperature scaling, calibration error, abstention.

Pure functions over lists of numbers (no I/O, no server). ``QwenClassifier(temperature=T)``
applies :func:`apply_temperature` to every result's scores; ``qwen-fast eval --calibrate``
fits ``T`` on a labelled file with :func:`fit_temperature` (minimum negative log-likelihood)
and reports :func:`expected_calibration_error` before and after, the reliability bins, the
coverage-accuracy curve and the :func:`abstain_threshold` that reaches a target accuracy.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_qwen_fast._core.temperature import apply_temperature
from langchain_qwen_fast.errors import ConfigurationError, InvalidInputError

#: log-temperatures searched by :func:`fit_temperature` (T from 1/50 to 50)
_LOG_T_BOUNDS = (-math.log(50.0), math.log(50.0))
_FLOOR = 1e-12  # probabilities are clipped here before logs


def negative_log_likelihood(scores: Sequence[Sequence[float]], truth: Sequence[int], temperature: float) -> float:
    """Mean negative log-likelihood of the true labels under ``scores`` scaled by ``temperature``."""
    total = 0.0
    for row, gold in zip(scores, truth, strict=True):
        total -= math.log(max(apply_temperature(row, temperature)[gold], _FLOOR))
    return total / len(truth)


def fit_temperature(scores: Sequence[Sequence[float]], truth: Sequence[int]) -> float:
    """The temperature that minimises the negative log-likelihood of the true labels (each
    row of ``scores``: a single-label distribution; ``truth``: the true label's index). The
    likelihood is convex in ``1/T``, so a bounded scalar search finds the minimum."""
    if not truth:
        raise InvalidInputError("fitting a temperature needs at least one labelled item")
    from scipy.optimize import minimize_scalar

    rows = [[max(p, _FLOOR) for p in row] for row in scores]
    result = minimize_scalar(
        lambda log_t: negative_log_likelihood(rows, truth, math.exp(log_t)),
        bounds=_LOG_T_BOUNDS,
        method="bounded",
        options={"xatol": 1e-5},
    )
    return float(math.exp(result.x))


@dataclass(frozen=True)
class Bin:
    """One reliability bin: confidences in [low, high)."""

    low: float
    high: float
    count: int
    mean_confidence: float
    accuracy: float


def reliability_bins(confidences: Sequence[float], correct: Sequence[bool], bins: int = 15) -> list[Bin]:
    """Equal-width confidence bins over [0, 1] with each bin's mean confidence and accuracy
    (empty bins included, with zeros)."""
    members: list[list[int]] = [[] for _ in range(bins)]
    for i, c in enumerate(confidences):
        members[min(int(c * bins), bins - 1)].append(i)
    out = []
    for b, idx in enumerate(members):
        n = len(idx)
        out.append(
            Bin(
                low=b / bins,
                high=(b + 1) / bins,
                count=n,
                mean_confidence=sum(confidences[i] for i in idx) / n if n else 0.0,
                accuracy=sum(bool(correct[i]) for i in idx) / n if n else 0.0,
            )
        )
    return out


def expected_calibration_error(confidences: Sequence[float], correct: Sequence[bool], bins: int = 15) -> float:
    """ECE: the count-weighted mean gap between confidence and accuracy over the bins."""
    n = len(confidences)
    if n == 0:
        raise InvalidInputError("no items")
    return sum(b.count * abs(b.accuracy - b.mean_confidence) for b in reliability_bins(confidences, correct, bins)) / n


def coverage_curve(confidences: Sequence[float], correct: Sequence[bool]) -> list[tuple[float, float, float]]:
    """(threshold, coverage, accuracy) for answering only items at or above each distinct
    confidence, from the highest threshold (fewest answered) to the lowest (all answered)."""
    order = sorted(range(len(confidences)), key=lambda i: -confidences[i])
    curve = []
    right = 0
    for rank, i in enumerate(order, 1):
        right += bool(correct[i])
        last = rank == len(order) or confidences[order[rank]] != confidences[i]
        if last:  # ties enter together: one threshold admits them all
            curve.append((confidences[i], rank / len(order), right / rank))
    return curve


def abstain_threshold(
    confidences: Sequence[float], correct: Sequence[bool], target_accuracy: float
) -> tuple[float, float, float] | None:
    """The lowest ``abstain_below`` whose answered items reach ``target_accuracy``, as
    (threshold, coverage, accuracy): the most coverage at that accuracy. None when no
    threshold reaches it."""
    if not 0.0 < target_accuracy <= 1.0:
        raise ConfigurationError(f"target accuracy must be within (0, 1], got {target_accuracy}")
    reached = [point for point in coverage_curve(confidences, correct) if point[2] >= target_accuracy]
    return max(reached, key=lambda point: point[1]) if reached else None


def bootstrap_interval(
    truth: Sequence[str],
    predicted: Sequence[str],
    labels: Sequence[str],
    *,
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap intervals (``level``) for accuracy and macro-F1: items resampled
    with replacement ``resamples`` times, reproducibly from ``seed``."""
    n = len(truth)
    if n == 0:
        raise InvalidInputError("no items")
    index = {label: k for k, label in enumerate(labels)}
    k = len(labels)
    gold = [index.get(t, -1) for t in truth]
    guess = [index.get(p, -1) for p in predicted]
    rng = random.Random(seed)
    accuracies, f1s = [], []
    for _ in range(resamples):
        tp, fp, fn = [0] * k, [0] * k, [0] * k
        right = 0
        for _ in range(n):
            i = rng.randrange(n)
            g, p = gold[i], guess[i]
            if g == p:
                right += 1
                if g >= 0:
                    tp[g] += 1
                continue
            if p >= 0:
                fp[p] += 1
            if g >= 0:
                fn[g] += 1
        accuracies.append(right / n)
        f1s.append(sum(2 * tp[c] / (2 * tp[c] + fp[c] + fn[c]) if tp[c] else 0.0 for c in range(k)) / k)
    return {"accuracy": _percentiles(accuracies, level), "macro_f1": _percentiles(f1s, level)}


def _percentiles(values: list[float], level: float) -> tuple[float, float]:
    values = sorted(values)
    tail = (1.0 - level) / 2
    low = values[math.floor(tail * (len(values) - 1))]
    high = values[math.ceil((1.0 - tail) * (len(values) - 1))]
    return (low, high)
