"""Writing a job's output: a chunk's rows as a part file of the output's format
(:func:`write_part`), and the part files joined into the output at the end
(:func:`join_parts`), without holding more than a part in memory.

Every input column is kept (a Parquet input's with its own types), then the job's added columns
(:mod:`.columns`). Values that are not text (JSONL numbers, lists, objects; dates, bytes) are
written as their JSON text where the column holds text; CSV joins a multi-label ``labels``
cell with :data:`~.tables.LABEL_SEPARATOR`.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import orjson

from langchain_qwen_fast.jobs.tables import LABEL_SEPARATOR, Format


@dataclass(frozen=True)
class OutputTable:
    """The output's format and columns: the input's (``arrow_schema``: a Parquet input's, whose
    columns keep their types) and then the job's added ones."""

    kind: Format
    #: the input's columns, as the output names them
    columns: list[str]
    #: the added columns' names, after the input's
    added: list[str]
    arrow_schema: Any = None
    #: the added columns that hold text; None: a classifier's (``label``, ``error``)
    text_columns: frozenset[str] | None = None

    @property
    def header(self) -> list[str]:
        return [*self.columns, *self.added]

    def schema(self) -> Any:
        """The Arrow schema of a Parquet output: the input columns' own types where the input
        was Parquet, else text; the label text, the labels a list of text, probabilities
        float64, ``abstained`` bool, ``error`` text (or, where ``text_columns`` is given, those
        text and the others float64)."""
        import pyarrow as pa

        given = {f.name: f for f in self.arrow_schema} if self.arrow_schema is not None else {}
        fields = [given.get(name, pa.field(name, pa.string())) for name in self.columns]
        for name in self.added:
            if self.text_columns is not None:  # a questions job: text or a probability
                fields.append(pa.field(name, pa.string() if name in self.text_columns else pa.float64()))
            elif name == "labels":
                fields.append(pa.field(name, pa.list_(pa.string())))
            elif name == "abstained":
                fields.append(pa.field(name, pa.bool_()))
            elif name in ("label", "error"):
                fields.append(pa.field(name, pa.string()))
            else:
                fields.append(pa.field(name, pa.float64()))
        return pa.schema(fields)


def _text_cell(value: Any) -> str | None:
    """A non-text input value (JSONL numbers, lists, objects) as its JSON text, for CSV and
    for Parquet columns that hold text."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)  # dates, decimals, bytes: as text


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return LABEL_SEPARATOR.join(value)
    return cast(str, _text_cell(value))


def _csv_column(values: list[Any]) -> list[Any]:
    """A column's cells as :func:`_csv_cell` writes them, a column at a time: a column of one
    kind (text, numbers, each maybe missing) is converted in one pass, any other cell by cell."""
    kinds = set(map(type, values))
    if kinds <= _TEXT_KINDS:
        return ["" if v is None else v for v in values] if _NONE in kinds else values
    if kinds <= _FLOAT_KINDS:
        cells = _float_cells(values) if _orjson_floats() else None
        if cells is not None:
            return cells
        if _NONE not in kinds:
            return list(map(float.__repr__, values))
        return ["" if v is None else float.__repr__(v) for v in values]
    return list(map(_csv_cell, values))


def _float_cells(values: list[float | None]) -> list[str] | None:
    """A column of floats (each maybe missing: ``""``) as ``float.__repr__`` writes them, made in
    one pass by orjson, which writes the same shortest digits, its notation put as Python puts
    it; None where it cannot be (a NaN or an infinity, which JSON has no number for, or a
    notation not foreseen)."""
    if not values:
        return []
    text = orjson.dumps(values).decode()
    missing = values.count(None)
    if text.count("null") != missing:
        return None
    if missing:
        text = text.replace("null", "")
    if "e-" in text:
        text = _SHORT_EXPONENT.sub(r"e-0\1", text)
    if "0.0000" in text:
        text = _FIFTH_DIGITS.sub(r"\1.\2e-05", text)
        text = _FIFTH_DIGIT.sub(r"\1e-05", text)
        if _PLAIN_SMALL.search(text):
            return None
    cells = text[1:-1].split(",")
    return cells if len(cells) == len(values) else None


#: orjson's notation where Python's differs: a one-digit negative exponent (``1e-7`` for
#: ``1e-07``), and no exponent for a number from 1e-05 to 1e-04 (``0.0000123`` for
#: ``1.23e-05``); a number of fewer zeros after the point has none in Python either.
_SHORT_EXPONENT = re.compile(r"e-([0-9])(?![0-9])")
_FIFTH_DIGITS = re.compile(r"(?<![0-9.])0\.0000([1-9])([0-9]+)")
_FIFTH_DIGIT = re.compile(r"(?<![0-9.])0\.0000([1-9])(?![0-9])")
_PLAIN_SMALL = re.compile(r"(?<![0-9.])0\.0000")


@functools.cache
def _orjson_floats() -> bool:
    """Whether :func:`_float_cells` writes what ``float.__repr__`` does with this orjson,
    checked on numbers of every magnitude, sign and length of digits (else the column is
    written number by number)."""
    probes: list[float | None] = [0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, None]
    # Every exponent where the notations change (around 1e-05 and 1e+16), a few elsewhere.
    for exponent in [*range(-320, -30, 7), *range(-30, 31), *range(31, 309, 7)]:
        for digits in (1.0, 1.5, 2.2250738585072014, 9.999999999999998, 1.2345678901234567):
            value = digits * 10.0**exponent
            if math.isfinite(value):
                probes.extend((value, -value))
    probes.extend((0.1, 0.2 + 0.1, 1 / 3, 2 / 3, 1e16 - 2, 0.5, 1.0, 123456789012345.6))
    try:
        return _float_cells(probes) == ["" if value is None else float.__repr__(value) for value in probes]
    except Exception:  # an orjson that refuses a number: written number by number
        return False


_NONE = type(None)
_TEXT_KINDS = frozenset({str, _NONE})
_FLOAT_KINDS = frozenset({float, _NONE})


def _quoted(cells: list[str], quoting: re.Pattern[str]) -> list[str]:
    """A column's cells as ``csv.writer`` puts them in a row: in double quotes, each quote
    doubled, where ``quoting`` finds a character that needs it (each of them looked for once
    over the column first, a plain search of text: most columns have none)."""
    joined = "".join(cells)
    if not any(character in joined for character in _characters(quoting)):
        return cells
    search = quoting.search
    return ['"' + cell.replace('"', '""') + '"' if search(cell) else cell for cell in cells]


@functools.cache
def _characters(quoting: re.Pattern[str]) -> tuple[str, ...]:
    """The characters ``quoting`` (:func:`_quoting`'s) finds."""
    return tuple(character for character in ',"\n\r' if quoting.search(character))


@functools.cache
def _quoting() -> re.Pattern[str] | None:
    """The characters for which this Python's ``csv.writer`` (minimal quoting, ``\\n`` ending
    a line) quotes a cell of a row of several, found by asking it; None unless it quotes them
    as :func:`_quoted` does and nothing else, checked on every cell of up to two characters
    from those and others (then each part is written by ``csv.writer`` itself)."""

    def written(row: Sequence[str]) -> str:
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerow(row)
        return text.getvalue()

    quoted = [c for c in ',"\n\r' if written([f"a{c}b", "x"]).startswith('"')]
    if not quoted:
        return None
    quoting = re.compile(f"[{re.escape(''.join(quoted))}]")
    alphabet = [",", '"', "\n", "\r", " ", "\t", "\x00", "a", "\u00e9", "\u2028"]
    probes = ["", *alphabet, *(a + b for a in alphabet for b in alphabet)]
    for cell in probes:
        row = [cell, "x", cell]
        if written(row) != ",".join(_quoted([c], quoting)[0] for c in row) + "\n":
            return None
    return quoting


def write_part(path: Path, table: OutputTable, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``rows`` (input cells and added columns) to ``path`` in the output's kind: CSV
    without its header (:func:`join_parts` writes it once), JSONL, or a Parquet file."""
    if table.kind == "jsonl":
        try:
            lines = b"\n".join([orjson.dumps(row) for row in rows])
        except TypeError:  # a row orjson does not take: each line on its own
            lines = b"".join(map(_json_line, rows))[:-1]
        with path.open("wb") as f:
            if rows:
                f.write(lines + b"\n")
            _sync(f)
        return
    columns = {name: [row.get(name) for row in rows] for name in table.header}
    write_columns(path, table, columns)


def write_columns(path: Path, table: OutputTable, columns: Mapping[str, list[Any]]) -> None:
    """Write a CSV or Parquet part (as :func:`write_part` does) from its columns: each of the
    table's :attr:`~OutputTable.header`, a list of values, all of one length."""
    if table.kind == "csv":
        cells = [_csv_column(columns[name]) for name in table.header]
        quoting = _quoting() if len(cells) > 1 else None
        with path.open("w", newline="", encoding="utf-8") as text:
            if quoting is None:
                csv.writer(text, lineterminator="\n").writerows(zip(*cells))
            elif cells[0]:
                text.write("\n".join(map(",".join, zip(*(_quoted(column, quoting) for column in cells)))) + "\n")
            _sync(text)
        return
    # Only the table side calls this, and only for these two kinds (JSONL parts are rows).
    assert table.kind == "parquet", f"a {table.kind} part is written from its rows (write_part)"
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = table.schema()
    texts = {f.name for f in schema if pa.types.is_string(f.type)}
    arrow_table = pa.Table.from_pydict(
        {name: list(map(_text_cell, columns[name])) if name in texts else columns[name] for name in table.header},
        schema=schema,
    )
    with path.open("wb") as f:
        pq.write_table(arrow_table, f)
        _sync(f)


def _json_line(row: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(row) + b"\n"
    except TypeError:  # what orjson does not take (integers past 64 bits, bytes): the standard encoder
        return (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode()


def _sync(f: IO[Any]) -> None:
    f.flush()
    os.fsync(f.fileno())


def join_parts(target: Path, table: OutputTable, parts: Iterable[Path]) -> None:
    """Join the part files into ``target``, one part in memory at a time: CSV gets its header
    first; JSONL parts are copied; Parquet parts become the row groups of one file."""
    if table.kind == "parquet":
        import pyarrow.parquet as pq

        with target.open("wb") as f:
            writer = pq.ParquetWriter(f, table.schema())
            for part in parts:
                writer.write_table(pq.read_table(part))
            writer.close()
            _sync(f)
        return
    with target.open("wb") as f:
        if table.kind == "csv":
            text = io.StringIO()
            csv.writer(text, lineterminator="\n").writerow(table.header)
            f.write(text.getvalue().encode())
        for part in parts:
            with part.open("rb") as source:
                while block := source.read(1 << 20):
                    f.write(block)
        _sync(f)
