"""Labelled files, read one way by ``qwen-fast eval`` and ``qwen-fast train``.

CSV or JSONL. AG News's CSV layout (no header: class index 1-4, title, description) is read as
is; otherwise a header (CSV) or keys (JSONL) with a text column (or title and description)
and a label column. A label map turns the file's label values into the classifier's labels
(``1=World,2=Sports`` or a JSON object); AG News's indices map to World, Sports, Business,
Sci/Tech by default.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_qwen_fast.errors import ConfigurationError, DataFileError
from langchain_qwen_fast.testing.samples import AG_NEWS_INDEX, AG_NEWS_LABELS


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
    :class:`DataFileError` names a missing column or a line that is not JSON."""
    path = Path(path)

    def text_of(row: dict[str, Any]) -> str:
        if row.get(text_column):
            return str(row[text_column])
        return f"{row.get('title', '')}. {row.get('description', '')}"

    if path.suffix == ".jsonl":
        lines = enumerate(path.read_text().splitlines(), 1)
        return [_jsonl_item(path, number, line, text_of, label_column) for number, line in lines if line.strip()]
    with path.open(newline="") as f:
        table = list(csv.reader(f))
    if table and table[0] and table[0][0].strip().isdigit():  # AG News: index, title, description
        return [(f"{r[1]}. {r[2]}", r[0].strip()) for r in table]
    if not table:
        raise DataFileError(f"{path} is empty")
    header, *body = table
    if label_column not in header:
        raise DataFileError(f"{path} has no {label_column!r} column (columns: {header})")
    return [(text_of(dict(zip(header, r))), r[header.index(label_column)]) for r in body]


def _jsonl_item(
    path: Path, number: int, line: str, text_of: Callable[[dict[str, Any]], str], label_column: str
) -> tuple[str, str]:
    """Line ``number`` of a JSONL file as (text, raw label)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{path}:{number} is not JSON: {exc}") from None
    if not isinstance(row, dict) or label_column not in row:
        raise DataFileError(f"{path}:{number} has no {label_column!r} key")
    return text_of(row), str(row[label_column])


def labelled_items(
    path: str | Path,
    labels: Sequence[str] | None = None,
    label_map: str | None = None,
    *,
    text_column: str = "text",
    label_column: str = "label",
) -> tuple[list[tuple[str, str]], list[str]]:
    """The file's (text, label) pairs with labels mapped, and the label set: ``labels`` when
    given, AG News's four for a file of AG News indices, else the file's labels sorted.
    :class:`DataFileError` names labels in the file that the label set lacks."""
    rows = read_labelled(path, text_column, label_column)
    mapping = parse_label_map(label_map)
    raw = {label for _, label in rows}
    default: list[str] | None = None
    if not mapping and (labels is None or tuple(labels) == AG_NEWS_LABELS) and raw <= set(AG_NEWS_INDEX):
        mapping, default = AG_NEWS_INDEX, list(AG_NEWS_LABELS)
    items = [(text, mapping.get(label, label)) for text, label in rows]
    names = list(labels) if labels else default or sorted({label for _, label in items})
    unknown = sorted({label for _, label in items} - set(names))
    if unknown:
        raise DataFileError(f"labels in {path} that the label set lacks: {unknown}; give a label map")
    return items, names


def write_labelled(path: str | Path, items: Sequence[tuple[str, str]]) -> Path:
    """Write (text, label) pairs as CSV with a ``text,label`` header, or JSONL for ``.jsonl``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in items))
        return path
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(items)
    return path
