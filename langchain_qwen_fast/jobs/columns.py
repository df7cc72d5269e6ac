"""What a dataset job adds to each row: the columns, one rule for every output kind and for the
Ray Data path alike.

Each input row keeps its columns and gains:

* ``label``: the chosen label (None when abstained, on error, or when no label passed under
  multi-label);
* ``labels``: multi-label only, every chosen label;
* ``p_<label>``: each label's probability (None on error or under constrained choice);
* ``abstained``: True when the best probability fell under ``abstain_below``;
* ``error``: None, or the reason this row has no label (``InvalidInputError: text is empty``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_qwen_fast.classification import Classification

#: The prefix of each label's probability column.
PROBABILITY_PREFIX = "p_"


def probability_column(label: str) -> str:
    """The column holding ``label``'s probability."""
    return f"{PROBABILITY_PREFIX}{label}"


def added_columns(labels: Sequence[str], multi_label: bool) -> list[str]:
    """The columns a job adds to each row, in order."""
    chosen = ["label", "labels"] if multi_label else ["label"]
    return [*chosen, *map(probability_column, labels), "abstained", "error"]


def error_text(error: BaseException) -> str:
    """How a row's error reads in its ``error`` column: the error's type and message."""
    return f"{type(error).__name__}: {error}"


def result_columns(result: Classification | BaseException, labels: Sequence[str], multi_label: bool) -> dict[str, Any]:
    """The added columns for one row, from its classification or the error it got instead."""
    if isinstance(result, BaseException):
        row: dict[str, Any] = {"label": None}
        if multi_label:
            row["labels"] = []
        row.update({probability_column(label): None for label in labels})
        row.update(abstained=False, error=error_text(result))
        return row
    row = {"label": result.label}
    if multi_label:
        row["labels"] = list(result.labels)
    scores = result.scores or {}
    row.update({probability_column(label): scores.get(label) for label in labels})
    row.update(abstained=result.abstained, error=None)
    return row
