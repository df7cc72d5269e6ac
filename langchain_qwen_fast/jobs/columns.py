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

import dataclasses
import functools
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter
from typing import Any, cast

# the probability columns' naming is the question kinds' too: one rule for both kinds of job
from langchain_qwen_fast._core.question_kinds.base import probability_column
from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.errors import CarriedError


def added_columns(labels: Sequence[str], multi_label: bool) -> list[str]:
    """The columns a job adds to each row, in order."""
    chosen = ["label", "labels"] if multi_label else ["label"]
    return [*chosen, *map(probability_column, labels), "abstained", "error"]


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
    return classified_table(ClassifiedColumns.of(classified, multi_label), labels)


class ClassifiedColumns:
    """Classifications of many rows (none an error), a list per field: what the added columns
    and the counts are made of a column at a time, and what one process of a job sends
    another (lists pickle for less than objects). ``labels`` (each row's chosen labels) is
    given under multi-label only."""

    __slots__ = ("abstained", "label", "labels", "multi_label", "scores")

    def __init__(
        self,
        label: list[str | None],
        labels: list[list[str]] | None,
        scores: list[dict[str, float] | None],
        abstained: list[bool],
        multi_label: bool,
    ) -> None:
        self.label = label
        self.labels = labels
        self.scores = scores
        self.abstained = abstained
        self.multi_label = multi_label

    @classmethod
    def of(cls, results: Sequence[Classification], multi_label: bool) -> ClassifiedColumns:
        """The columns of ``results`` (their ``multi_label`` as given)."""
        labels = [list(result.labels) for result in results] if multi_label else None
        return cls(
            list(map(_LABEL, results)), labels, list(map(_SCORES, results)), list(map(_ABSTAINED, results)), multi_label
        )

    def __len__(self) -> int:
        return len(self.label)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ClassifiedColumns, (self.label, self.labels, self.scores, self.abstained, self.multi_label))

    def rows(self) -> list[Classification]:
        """Each row as an object with a classification's fields (for what reads a row at a time)."""
        chosen = self.labels if self.labels is not None else [[]] * len(self.label)
        return [
            cast(Classification, ClassifiedRow(*fields))
            for fields in zip(self.label, chosen, self.scores, self.abstained, repeat(self.multi_label))
        ]


@dataclasses.dataclass(slots=True, eq=False)
class ClassifiedRow:
    """A classification as another process of a job gets it back (a row of
    :class:`ClassifiedColumns`, or one sent alone): the fields a row's columns, counts and
    review entry are made of, in that order."""

    label: str | None
    labels: list[str]
    scores: dict[str, float] | None
    abstained: bool
    multi_label: bool


def classified_table(chunk: ClassifiedColumns, labels: Sequence[str]) -> dict[str, list[Any]]:
    """:func:`result_table` of rows none of which failed, from their columns."""
    table: dict[str, list[Any]] = {"label": chunk.label}
    if chunk.multi_label:
        table["labels"] = [list(chosen) for chosen in chunk.labels or [[]] * len(chunk)]
    scores: list[Any] = chunk.scores
    if not all(scores):
        scores = [given or _NO_SCORES for given in scores]
    dicts = set(map(type, scores)) <= {dict}  # else each mapping's own get
    for label, column in _probability_columns(labels).items():
        if dicts:
            table[column] = list(map(dict.get, scores, repeat(label)))
        else:
            table[column] = [given.get(label) for given in scores]
    table["abstained"] = chunk.abstained
    table["error"] = [None] * len(chunk)
    return table


_LABEL = attrgetter("label")
_SCORES = attrgetter("scores")
_ABSTAINED = attrgetter("abstained")
_NO_SCORES: dict[str, float] = {}


def _probability_columns(labels: Sequence[str]) -> dict[str, str]:
    """Each label's probability column, in the labels' order (named once a label set: a job
    asks for every row's)."""
    return _named(tuple(labels))


@functools.lru_cache(maxsize=64)
def _named(labels: tuple[str, ...]) -> dict[str, str]:
    return {label: probability_column(label) for label in labels}
