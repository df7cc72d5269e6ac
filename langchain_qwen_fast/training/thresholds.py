"""Multi-label decisions: the F1 scores they are judged by, and the per-label thresholds that
``qwen-fast train`` tunes on the validation split. A multi-label classifier answers a label
when its probability is at least the label's threshold (``QwenClassifier(threshold={...})``).

Pure: no model, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from langchain_qwen_fast.errors import InvalidInputError

#: The threshold of a label that the validation split cannot tune (no item has it).
DEFAULT_THRESHOLD = 0.5


def _f1(tp: int, fp: int, fn: int) -> float:
    """F1 from counts; 0 where nothing is predicted and nothing is true."""
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def best_threshold(scores: Sequence[float], truth: Sequence[bool]) -> tuple[float, float]:
    """The threshold with the best F1 for one label, and that F1: ``scores`` are the label's
    probabilities, ``truth`` whether it applies, item by item; an item is predicted when its
    score is at least the threshold.

    Every cut between two neighbouring distinct scores is tried; the threshold is the midpoint
    of the cut (above the lowest score predicted, below the next), so that scores near the
    validation ones fall on the same side. Among cuts of equal F1, the widest gap wins. A
    label that no item has keeps :data:`DEFAULT_THRESHOLD` (F1 0)."""
    if len(scores) != len(truth):
        raise InvalidInputError(f"{len(scores)} scores for {len(truth)} truth values")
    positives = sum(truth)
    if not positives:
        return DEFAULT_THRESHOLD, 0.0
    ranked = sorted(zip(scores, truth), key=lambda pair: -pair[0])
    distinct = sorted({s for s, _ in ranked}, reverse=True)
    best: tuple[float, float, float] = (-1.0, -1.0, DEFAULT_THRESHOLD)  # (F1, gap, threshold)
    tp = fp = 0
    at = 0
    for k, value in enumerate(distinct):
        while at < len(ranked) and ranked[at][0] == value:
            tp, fp = tp + ranked[at][1], fp + (not ranked[at][1])
            at += 1
        lower = distinct[k + 1] if k + 1 < len(distinct) else 0.0
        candidate = (_f1(tp, fp, positives - tp), value - lower, (value + lower) / 2)
        if candidate[:2] > best[:2]:
            best = candidate
    return min(1.0, max(0.0, best[2])), best[0]


def tune_thresholds(
    truth: Sequence[Collection[str]], scores: Sequence[Sequence[float]], labels: Sequence[str]
) -> dict[str, float]:
    """Each label's :func:`best_threshold` on validation items: ``truth`` holds each item's
    labels, ``scores`` each item's probabilities in ``labels`` order."""
    if len(truth) != len(scores):
        raise InvalidInputError(f"{len(scores)} score rows for {len(truth)} items")
    return {
        label: best_threshold([row[k] for row in scores], [label in given for given in truth])[0]
        for k, label in enumerate(labels)
    }


def multi_label_scores(
    truth: Sequence[Collection[str]],
    scores: Sequence[Sequence[float]],
    labels: Sequence[str],
    thresholds: float | Mapping[str, float] = DEFAULT_THRESHOLD,
) -> dict[str, float]:
    """Micro-F1 (counts pooled over labels), macro-F1 (the labels' F1 averaged) and subset
    accuracy (items whose predicted labels are exactly their labels) of ``scores`` (rows in
    ``labels`` order) against ``truth`` (each item's labels), a label predicted at or above
    its threshold (one for all, or one per label; a label not in the mapping: 0.5)."""
    if len(truth) != len(scores):
        raise InvalidInputError(f"{len(scores)} score rows for {len(truth)} items")
    cut = thresholds if isinstance(thresholds, Mapping) else dict.fromkeys(labels, thresholds)
    counts = {label: [0, 0, 0] for label in labels}  # tp, fp, fn
    exact = 0
    for given, row in zip(truth, scores):
        predicted = {label for k, label in enumerate(labels) if row[k] >= cut.get(label, DEFAULT_THRESHOLD)}
        exact += predicted == set(given)
        for label in labels:
            if label in predicted:
                counts[label][0 if label in given else 1] += 1
            elif label in given:
                counts[label][2] += 1
    tp, fp, fn = (sum(c[i] for c in counts.values()) for i in range(3))
    return {
        "micro_f1": _f1(tp, fp, fn),
        "macro_f1": sum(_f1(*c) for c in counts.values()) / len(labels) if labels else 0.0,
        "subset_accuracy": exact / len(truth) if truth else 0.0,
    }
