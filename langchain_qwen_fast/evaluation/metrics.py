"""Scores of predicted labels against the truth: accuracy, macro-F1, per-class precision,
recall and F1, and the confusion matrix, from scikit-learn (the ``eval`` extra). The bootstrap
intervals and the calibration error are :mod:`langchain_qwen_fast.calibration`'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def classification_metrics(truth: Sequence[str], predicted: Sequence[str], labels: Sequence[str]) -> dict[str, Any]:
    """Accuracy, macro-F1, per-class scores and the confusion matrix (rows: truth), in
    ``labels`` order. A prediction outside ``labels`` (an abstention) counts as wrong."""
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

    labels = list(labels)
    precision, recall, f1, support = precision_recall_fscore_support(truth, predicted, labels=labels, zero_division=0)
    return {
        "accuracy": float(accuracy_score(truth, predicted)),
        "macro_f1": float(f1_score(truth, predicted, labels=labels, average="macro", zero_division=0)),
        "per_class": {
            label: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for label, p, r, f, s in zip(labels, precision, recall, f1, support)
        },
        "labels": labels,
        "confusion_matrix": confusion_matrix(truth, predicted, labels=labels).tolist(),
    }
