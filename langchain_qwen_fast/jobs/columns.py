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

import functools
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


class CarriedError(Exception):
    """A row's error as another process of the job gets it: its kind (:attr:`kind`, as the
    counts name it) and how its ``error`` column reads (:attr:`text`), whatever its type."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(kind, text)
        self.kind = kind
        self.text = text

    def __str__(self) -> str:
        return self.text


def error_text(error: BaseException) -> str:
    """How a row's error reads in its ``error`` column: the error's type and message."""
    if isinstance(error, CarriedError):
        return error.text
    return f"{type(error).__name__}: {error}"


def result_columns(result: Classification | BaseException, labels: Sequence[str], multi_label: bool) -> dict[str, Any]:
    """The added columns for one row, from its classification or the error it got instead."""
    names = _probability_columns(labels)
    if isinstance(result, BaseException):
        row: dict[str, Any] = {"label": None, "labels": []} if multi_label else {"label": None}
        row.update(dict.fromkeys(names.values()))
        row["abstained"] = False
        row["error"] = error_text(result)
        return row
    row = {"label": result.label, "labels": list(result.labels)} if multi_label else {"label": result.label}
    scores = result.scores
    if scores is None:
        row.update(dict.fromkeys(names.values()))
    else:
        row.update(zip(names.values(), map(scores.get, names)))
    row["abstained"] = result.abstained
    row["error"] = None
    return row


def result_table(
    results: Sequence[Classification | BaseException], labels: Sequence[str], multi_label: bool
) -> dict[str, list[Any]]:
    """The added columns of many rows, a list each, in :func:`added_columns`' order: what
    :func:`result_columns` gives row by row, made a column at a time."""
    if any(isinstance(result, BaseException) for result in results):
        rows = [result_columns(result, labels, multi_label) for result in results]
        return {name: [row[name] for row in rows] for name in added_columns(labels, multi_label)}
    classified: Sequence[Classification] = results  # type: ignore[assignment]
    table: dict[str, list[Any]] = {"label": [result.label for result in classified]}
    if multi_label:
        table["labels"] = [list(result.labels) for result in classified]
    scores = [result.scores or _NO_SCORES for result in classified]
    for label, column in _probability_columns(labels).items():
        table[column] = [given.get(label) for given in scores]
    table["abstained"] = [result.abstained for result in classified]
    table["error"] = [None] * len(classified)
    return table


_NO_SCORES: dict[str, float] = {}


def _probability_columns(labels: Sequence[str]) -> dict[str, str]:
    """Each label's probability column, in the labels' order (named once a label set: a job
    asks for every row's)."""
    return _named(tuple(labels))


@functools.lru_cache(maxsize=64)
def _named(labels: tuple[str, ...]) -> dict[str, str]:
    return {label: probability_column(label) for label in labels}
