"""The tables a job reads and writes: their formats, their rows and where a row's text is.

A job reads CSV, JSONL or Parquet (:mod:`.readers`) and writes any of them (:mod:`.writers`),
by the file's name or a flag (:func:`format_of`), ``-`` standing for stdin. Each row read is an
:class:`InputRow`, with a digest of what was read for it (:func:`row_digest`,
:func:`values_digest`). The text of a row is its text column (``text`` unless told otherwise),
else its title and description joined (``"title. description"``) as ``qwen-fast train`` reads
them (:class:`TextSource`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import orjson

from langchain_qwen_fast._extras import require_extra
from langchain_qwen_fast.errors import ConfigurationError

Format = Literal["csv", "jsonl", "parquet"]
#: The table kinds, and the file name endings that name each.
FORMATS: dict[str, Format] = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
#: Where a file's name says nothing, ``-`` stands for stdin.
STDIN = "-"
#: The character that joins a multi-label ``labels`` cell in CSV.
LABEL_SEPARATOR = "|"
#: Bytes in a row's digest (:func:`row_digest`).
ROW_DIGEST_BYTES = 16


def format_of(path: str, given: str | None, what: str) -> Format:
    """The table kind of ``path``: ``given`` (csv, jsonl or parquet) when set, else its ending.
    :class:`ConfigurationError` names the flag to give when neither says (``what``: the flag)."""
    if given is not None:
        if given not in FORMATS.values():
            raise ConfigurationError(f"{what} must be one of csv, jsonl, parquet, got {given!r}")
        return cast(Format, given)
    if path == STDIN:
        raise ConfigurationError(f"reading stdin ('-') needs {what} csv, jsonl or parquet")
    found = FORMATS.get(Path(path).suffix.lower())
    if found is None:
        raise ConfigurationError(f"cannot tell the kind of {path} from its name; give {what} csv, jsonl or parquet")
    return found


def require_parquet() -> None:
    """:class:`MissingDependencyError` naming the ``jobs`` extra when pyarrow is missing."""
    require_extra("jobs", "pyarrow", what="Parquet files")


@dataclass
class InputRow:
    """One input row: its cells (every input column, None where the row has none), the value
    to classify, and why it cannot be classified (None when it can)."""

    #: where the row is in its source, for messages: "line 7" (CSV, JSONL) or "row 7" (Parquet)
    place: str
    cells: dict[str, Any]
    text: Any = None
    problem: str | None = None
    #: what was read for the row, hashed (:func:`row_digest`)
    digest: bytes = b""


def row_digest(raw: bytes) -> bytes:
    """The digest of a row's raw bytes: its line break left out, so that a last line that
    gains one (a file appended to) is the same row."""
    return hashlib.blake2b(raw.rstrip(b"\r\n"), digest_size=ROW_DIGEST_BYTES).digest()


def values_digest(cells: dict[str, Any]) -> bytes:
    """The digest of a row read as values (Parquet): its cells in order, as JSON, with what
    JSON cannot hold (bytes, decimals) by type and ``repr``."""
    try:
        raw = orjson.dumps(cells, default=_tagged, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # integers past 64 bits
        raw = repr(cells).encode("utf-8", errors="surrogatepass")
    return row_digest(raw)


def _tagged(value: Any) -> str:
    return f"{type(value).__name__}:{value!r}"


@dataclass(frozen=True)
class TextSource:
    """Where a row's text is: ``column``, else its ``title`` and ``description`` joined."""

    column: str = "text"

    def of(self, cells: dict[str, Any], noun: str = "column") -> tuple[Any, str | None]:
        """The value to classify and, when there is none, why (naming the row's columns, or
        its keys with ``noun="key"``)."""
        if self.column in cells:
            return cells[self.column], None
        if "title" in cells or "description" in cells:
            return title_and_description(cells), None
        return None, f"has no {self.column!r} {noun} (nor title and description); {noun}s: {list(cells)}"


def title_and_description(cells: dict[str, Any]) -> str:
    """A row's title and description as one text, ``"title. description"``, as ``qwen-fast
    train`` joins them."""
    return f"{cells.get('title') or ''}. {cells.get('description') or ''}"
