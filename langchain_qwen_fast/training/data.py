"""Labelled files, read one way by ``qwen-fast eval`` and ``qwen-fast train``.

CSV or JSONL. AG News's CSV layout (no header: class index, title, description) is read as
is; otherwise a header (CSV) or keys (JSONL) with a text column (or title and description)
and a label column. A label map turns the file's label values into the classifier's labels
(``1=World,2=Sports`` or a JSON object). Labels are the file's own strings: a file whose labels
are all numbers (class indices, as AG News's are) needs a label map that names them, or the
numbers given as the label set, since a number says nothing to a classifier that asks a model
which label fits.

Multi-label files (:class:`LabelLists`, ``qwen-fast train`` only) hold a list of labels per
row: a JSON list in JSONL, or a cell of labels joined with a separator (``|`` by default) in
CSV; an empty list or cell is a text that no label applies to.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_qwen_fast.errors import ConfigurationError, DataFileError

#: A labelled item: (text, label), or (text, labels) in multi-label data.
LabelledItem = tuple[str, str | Sequence[str]]
#: The default separator of labels in a multi-label CSV cell.
LABEL_SEPARATOR = "|"


@dataclass(frozen=True)
class LabelledFile:
    """A labelled file and how to read it; each field has an ``eval`` and ``train`` flag of the
    same name (``path`` is the positional argument)."""

    path: str
    #: the file's label values to the classifier's labels: ``1=World,2=Sports`` or JSON
    label_map: str | None = None
    text_column: str = "text"
    label_column: str = "label"

    def check(self) -> None:
        """Raise :class:`DataFileError` when there is no file at ``path``."""
        if not Path(self.path).is_file():
            raise DataFileError(f"no such file: {self.path}")

    def read(self, labels: Sequence[str] | None = None) -> tuple[list[tuple[str, str]], list[str]]:
        """The (text, label) pairs and the label set, as :func:`labelled_items` gives them."""
        self.check()
        return labelled_items(
            self.path, labels, self.label_map, text_column=self.text_column, label_column=self.label_column
        )


def parse_label_map(value: str | None) -> dict[str, str]:
    """``1=World,2=Sports`` or a JSON object; keys are the file's label values."""
    if not value:
        return {}
    if value.lstrip().startswith("{"):
        try:
            mapping = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"a label map is not valid JSON ({exc}): {value!r}") from None
        return {str(k): str(v) for k, v in mapping.items()}
    pairs = [item.split("=", 1) for item in value.split(",") if item.strip()]
    if any(len(pair) != 2 for pair in pairs):
        raise ConfigurationError(f"a label map must look like '1=World,2=Sports' or be JSON, got {value!r}")
    return {k.strip(): v.strip() for k, v in pairs}


def read_labelled(path: str | Path, text_column: str = "text", label_column: str = "label") -> list[tuple[str, str]]:
    """(text, raw label) pairs from CSV (AG News layout or with a header) or JSONL.
    :class:`DataFileError` names a missing column, a line that is not JSON, and a list of
    labels (multi-label data: :class:`LabelLists` reads it)."""
    rows = read_rows(path, text_column, label_column)
    lists = [number for number, (_, label) in enumerate(rows, 1) if isinstance(label, list)]
    if lists:
        raise DataFileError(
            f"{path} has lists of labels (item {lists[0]} and {len(lists) - 1} more): multi-label data, "
            "which qwen-fast train reads with --multi-label"
        )
    return [(text, str(label)) for text, label in rows]


def read_rows(path: str | Path, text_column: str = "text", label_column: str = "label") -> list[tuple[str, Any]]:
    """(text, raw label value) pairs as :func:`read_labelled` reads them, a JSONL value as it
    is (a list stays a list), a CSV cell as text."""
    path = Path(path)

    def text_of(row: dict[str, Any]) -> str:
        if row.get(text_column):
            return str(row[text_column])
        return f"{row.get('title', '')}. {row.get('description', '')}"

    if path.suffix == ".jsonl":
        lines = enumerate(path.read_text().splitlines(), 1)
        return [
            _jsonl_item(path, number, line, text_of, text_column, label_column)
            for number, line in lines
            if line.strip()
        ]
    with path.open(newline="") as f:
        table = list(csv.reader(f))
    if table and table[0] and table[0][0].strip().isdigit():  # AG News: index, title, description
        return [(f"{r[1]}. {r[2]}", r[0].strip()) for r in table]
    if not table:
        raise DataFileError(f"{path} is empty")
    header, *body = table
    missing = _missing_columns(header, text_column, label_column)
    if missing:
        raise DataFileError(f"{path} has no {missing} column; its columns: {header}")
    return [(text_of(dict(zip(header, r))), r[header.index(label_column)]) for r in body]


def _missing_columns(names: Sequence[str], text_column: str, label_column: str) -> str | None:
    """What ``names`` (a header's columns, a JSONL line's keys) lack, as an error names it:
    the label column, or the text column and the title and description that stand in for it."""
    lacking = []
    if label_column not in names:
        lacking.append(f"{label_column!r}")
    if text_column not in names and "title" not in names and "description" not in names:
        lacking.append(f"{text_column!r} (nor title and description)")
    return " and no ".join(lacking) or None


def _jsonl_item(
    path: Path,
    number: int,
    line: str,
    text_of: Callable[[dict[str, Any]], str],
    text_column: str,
    label_column: str,
) -> tuple[str, Any]:
    """Line ``number`` of a JSONL file as (text, raw label value)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{path}:{number} is not JSON: {exc}") from None
    if not isinstance(row, dict):
        raise DataFileError(f"{path}:{number} is JSON {type(row).__name__}, not an object with a {label_column!r} key")
    missing = _missing_columns(list(row), text_column, label_column)
    if missing:
        raise DataFileError(f"{path}:{number} has no {missing} key; its keys: {list(row)}")
    label = row[label_column]
    return text_of(row), [str(x) for x in label] if isinstance(label, list) else str(label)


def labelled_items(
    path: str | Path,
    labels: Sequence[str] | None = None,
    label_map: str | None = None,
    *,
    text_column: str = "text",
    label_column: str = "label",
) -> tuple[list[tuple[str, str]], list[str]]:
    """The file's (text, label) pairs with labels mapped, and the label set: ``labels`` when
    given, else the file's (mapped) labels sorted. :class:`DataFileError` names labels in the
    file that the label set lacks, and says how to name them when they are all numbers and
    neither a label map nor the label set is given."""
    rows = read_labelled(path, text_column, label_column)
    mapping, names = _label_set(path, {label for _, label in rows}, labels, label_map)
    return [(text, mapping.get(label, label)) for text, label in rows], names


def labelled_lists(
    path: str | Path,
    labels: Sequence[str] | None = None,
    label_map: str | None = None,
    *,
    separator: str = LABEL_SEPARATOR,
    text_column: str = "text",
    label_column: str = "label",
) -> tuple[list[tuple[str, tuple[str, ...]]], list[str]]:
    """A multi-label file's (text, labels) pairs, each text's labels mapped, once each and in
    the label set's order, and the label set (as :func:`labelled_items` picks it). A JSONL
    list is a text's labels; a text cell (CSV, or a JSONL string) is split at ``separator``,
    parts stripped, empty ones dropped. :class:`DataFileError` names labels in the file that
    the label set lacks."""
    if not separator:
        raise ConfigurationError("the label separator must not be empty")
    rows = read_rows(path, text_column, label_column)
    raw = [
        (text, [str(x).strip() for x in (label if isinstance(label, list) else str(label).split(separator))])
        for text, label in rows
    ]
    split = [(text, [x for x in values if x]) for text, values in raw]
    mapping, names = _label_set(path, {x for _, values in split for x in values}, labels, label_map)
    order = {name: k for k, name in enumerate(names)}
    items = []
    for text, values in split:
        mapped = {mapping.get(x, x) for x in values}
        items.append((text, tuple(sorted(mapped, key=order.__getitem__))))
    return items, names


def is_multi_label(items: Sequence[LabelledItem]) -> bool:
    """Whether ``items`` are multi-label: (text, labels) pairs rather than (text, label) ones.
    :class:`ConfigurationError` when some items have one label and others a list."""
    lists = [not isinstance(label, str) for _, label in items]
    if any(lists) and not all(lists):
        raise ConfigurationError("some items have one label and others a list of labels; give every item a list")
    return any(lists)


def _label_set(
    path: str | Path, raw: set[str], labels: Sequence[str] | None, label_map: str | None
) -> tuple[dict[str, str], list[str]]:
    """The label map to apply and the label set: ``labels`` when given, else the file's mapped
    labels sorted. :class:`DataFileError` names labels in the file that the label set lacks,
    and refuses a file of numbers for labels with neither a label map nor ``labels``."""
    mapping = parse_label_map(label_map)
    if not mapping and not labels and raw and all(label.isdigit() for label in raw):
        numbers = sorted(raw, key=int)
        example = ",".join([*(f"{n}=<name>" for n in numbers[:2]), *(["..."] if len(numbers) > 2 else [])])
        raise DataFileError(
            f"the labels in {path} are numbers ({', '.join(numbers)}), which tell a classifier nothing: "
            f"give a label map that names them (--label-map {example}, or label_map= in Python), "
            f"or keep the numbers by giving them as the label set (--labels {' '.join(numbers)})"
        )
    mapped = {mapping.get(label, label) for label in raw}
    names = list(labels) if labels else sorted(mapped)
    unknown = sorted(mapped - set(names))
    if unknown:
        raise DataFileError(
            f"labels in {path} that the label set lacks: {unknown}; "
            "give a label map from the file's labels to the label set (--label-map, or label_map= in Python)"
        )
    return mapping, names


@dataclass(frozen=True)
class LabelLists:
    """Whether a labelled file holds a list of labels per row, and how a CSV cell splits into
    them; each field has a ``qwen-fast train`` flag of the same name."""

    #: None: multi-label when the file is JSONL and a row's labels are a JSON list
    multi_label: bool | None = None
    #: what joins the labels in a CSV cell (or a JSONL string)
    label_separator: str = LABEL_SEPARATOR

    def is_multi_label(self, data: LabelledFile) -> bool:
        """Whether ``data`` is read as multi-label: as asked, or detected from JSONL lists."""
        if self.multi_label is not None:
            return self.multi_label
        data.check()
        if Path(data.path).suffix != ".jsonl":
            return False
        return any(isinstance(label, list) for _, label in read_rows(data.path, data.text_column, data.label_column))

    def read(self, data: LabelledFile, labels: Sequence[str] | None = None) -> tuple[list[LabelledItem], list[str]]:
        """``data``'s items and label set: (text, labels) pairs (:func:`labelled_lists`) when
        multi-label, else (text, label) pairs (:meth:`LabelledFile.read`)."""
        if not self.is_multi_label(data):
            single, names = data.read(labels)
            return list(single), names
        multi, names = labelled_lists(
            data.path,
            labels,
            data.label_map,
            separator=self.label_separator,
            text_column=data.text_column,
            label_column=data.label_column,
        )
        return list(multi), names


def write_labelled(path: str | Path, items: Sequence[LabelledItem], separator: str = LABEL_SEPARATOR) -> Path:
    """Write (text, label) pairs as CSV with a ``text,label`` header, or JSONL for ``.jsonl``;
    a list of labels (multi-label) is a JSON list in JSONL, joined with ``separator`` in CSV."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        lines = (json.dumps({"text": t, "label": y if isinstance(y, str) else list(y)}) + "\n" for t, y in items)
        path.write_text("".join(lines))
        return path
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows((t, y if isinstance(y, str) else separator.join(y)) for t, y in items)
    return path
