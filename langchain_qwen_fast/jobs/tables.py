"""The tables a job reads and writes: CSV, JSONL and Parquet, row by row.

Reading never stops for one row: a row that cannot be read as asked (bytes that are not UTF-8,
a line that is not JSON, a JSONL object without the text key, a CSV row with too few or too
many fields) comes out as an :class:`InputRow` with its ``problem`` named and whatever of its
content could be read kept in its cells, in its place.

* CSV: a header row names the columns; a file whose first field is a number is read in AG
  News's layout (no header: class index, title, description). Text that is not UTF-8 is read
  with each bad byte as U+FFFD, and the row is marked.
* JSONL: one object per line (blank lines are skipped). A line that is not JSON keeps its raw
  text in the text column.
* Parquet: read a batch at a time (``pyarrow``, the ``jobs`` extra); from stdin, copied to a
  temporary file first, since its footer says where its rows are.

The text of a row is its text column (``text`` unless told otherwise), else its title and
description joined (``"title. description"``) as ``qwen-fast train`` reads them. A table none
of whose columns is either is refused before its first row (:class:`DataFileError` naming the
columns): a CSV header, a Parquet schema, or a JSONL file's keys where every line was scanned
for them.

Each row carries a digest of what was read for it (:func:`row_digest`): its raw bytes (CSV:
the lines of its record; JSONL: its line; without the line break), or a Parquet row's values,
so that a resumed job can tell whether its input is the one its finished parts were read from.

Written in chunks (:func:`write_part`): each part is a file of its own in the output's kind,
joined into the output at the end (:func:`join_parts`) without holding more than a part.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, cast

import orjson

from langchain_qwen_fast._extras import require_extra
from langchain_qwen_fast.errors import ConfigurationError, DataFileError

Format = Literal["csv", "jsonl", "parquet"]
#: The table kinds, and the file name endings that name each.
FORMATS: dict[str, Format] = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
#: Where a file's name says nothing, ``-`` stands for stdin.
STDIN = "-"
#: The character that joins a multi-label ``labels`` cell in CSV.
LABEL_SEPARATOR = "|"
#: A JSONL input's columns, when its rows cannot be scanned first (stdin): the keys of its
#: first rows, this many.
KEY_SCAN_ROWS = 1024
#: Bytes in a row's digest (:func:`row_digest`).
ROW_DIGEST_BYTES = 16
_AG_NEWS_COLUMNS = ["class", "title", "description"]


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
            return f"{cells.get('title') or ''}. {cells.get('description') or ''}", None
        return None, f"has no {self.column!r} {noun} (nor title and description); {noun}s: {list(cells)}"


class TableReader:
    """Rows of a table, one at a time: :meth:`rows`; its columns once the first rows are read
    (:attr:`columns`); :meth:`count` counts the rows first, where the source can be read twice."""

    def __init__(
        self,
        path: str,
        kind: Format,
        text: TextSource,
        *,
        scan_keys: bool = False,
        stream: IO[bytes] | None = None,
    ) -> None:
        """``scan_keys``: a JSONL file's columns are the keys of all its rows (read once in
        :meth:`count`); otherwise of the first :data:`KEY_SCAN_ROWS` rows. ``stream``: read
        the CSV or JSONL rows from this open file (Ray Data's readers hand one over, from any
        filesystem) instead of opening ``path``, which then only names it."""
        if stream is not None and kind == "parquet":
            raise ConfigurationError("a Parquet table is read from its path, not a stream")
        if stream is None and path != STDIN and not Path(path).is_file():
            raise DataFileError(f"no such file: {path}")
        self.stream = stream
        if kind == "parquet":
            require_parquet()
        self.path = path
        self.kind = kind
        self.text = text
        self.scan_keys = scan_keys and kind == "jsonl" and path != STDIN
        self.columns: list[str] | None = None
        #: Parquet input: the file's Arrow schema (its columns keep their types in Parquet output)
        self.arrow_schema: Any = None
        self._scanned: list[str] | None = None

    def count(self) -> int | None:
        """The number of rows, read cheaply before the job (None for stdin): CSV records,
        non-blank JSONL lines (parsed here when ``scan_keys``), Parquet's footer."""
        if self.path == STDIN:
            return None
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(self.path).metadata.num_rows)
        if self.kind == "jsonl":
            with open(self.path, "rb") as f:
                if not self.scan_keys:
                    return sum(1 for line in f if line.strip())
                keys: dict[str, None] = {}
                rows = 0
                for line in f:
                    if line.strip():
                        rows += 1
                        keys.update(dict.fromkeys(_keys_of(line)))
                self._scanned = list(keys)
                return rows
        with self._open_text() as f:
            records = sum(1 for _, record in _csv_records(f) if record != [])
        return records if self._ag_news() else max(0, records - 1)

    def rows(self) -> Iterator[InputRow]:
        """Every row, in order; :attr:`columns` is set before the first one comes."""
        if self.kind == "parquet":
            yield from self._parquet_rows()
        elif self.kind == "jsonl":
            yield from self._jsonl_rows()
        else:
            yield from self._csv_rows()

    # -- CSV ----------------------------------------------------------------------------
    def _open_text(self) -> IO[str]:
        # Bytes that are not UTF-8 come through as lone surrogates (found and marked per row).
        csv.field_size_limit(2**31 - 1)  # an oversize text reaches the classifier's length check
        if self.stream is not None or self.path == STDIN:
            source = sys.stdin.buffer if self.stream is None else self.stream
            return io.TextIOWrapper(source, encoding="utf-8", errors="surrogateescape", newline="")
        return open(self.path, encoding="utf-8", errors="surrogateescape", newline="")

    def _ag_news(self) -> bool:
        if self.path == STDIN:
            return False
        with self._open_text() as f:
            first = next(csv.reader(f), [])
        return bool(first) and first[0].strip().isdigit()

    def _csv_rows(self) -> Iterator[InputRow]:
        with self._open_text() as f:
            header: list[str] | None = None
            lines: list[str] = []  # the lines of the record just read
            for line, record in _csv_records(f, lines):
                digest = row_digest("".join(lines).encode("utf-8", errors="surrogateescape"))
                lines.clear()
                if isinstance(record, csv.Error):
                    if header is None:
                        raise DataFileError(f"{self.path}: the header cannot be read as CSV: {record}") from None
                    yield InputRow(
                        f"line {line}", dict.fromkeys(header), problem=f"is not CSV: {record}", digest=digest
                    )
                    continue
                if not record:
                    continue
                if header is None:
                    if record[0].strip().isdigit():
                        header = list(_AG_NEWS_COLUMNS)
                    else:
                        header = [_readable(name) for name in record]
                        repeated = sorted({name for name in header if header.count(name) > 1})
                        if repeated:
                            raise DataFileError(f"{self.path}: the header repeats columns {repeated}")
                        self._check_text_column(header)
                        self.columns = header
                        continue
                    self.columns = header
                row = self._csv_row(f"line {line}", header, record)
                row.digest = digest
                yield row

    def _check_text_column(self, header: list[str], noun: str = "column") -> None:
        """:class:`DataFileError` when none of ``header`` holds the text: a misspelt
        ``--text-column`` would otherwise fail every row alike."""
        if self.text.column not in header and "title" not in header and "description" not in header:
            raise DataFileError(
                f"{self.path} has no {self.text.column!r} {noun} (nor title and description); {noun}s: {header} "
                "(--text-column names it)"
            )

    def _csv_row(self, place: str, header: list[str], record: list[str]) -> InputRow:
        problems = []
        if any(_undecodable(cell) for cell in record):
            problems.append("has bytes that are not UTF-8 (read as U+FFFD)")
            record = [_readable(cell) for cell in record]
        if len(record) != len(header):
            extra = f": extra fields {record[len(header) :]!r}"[:300] if len(record) > len(header) else ""
            problems.append(f"has {len(record)} fields, the header {len(header)}{extra}")
        cells: dict[str, Any] = dict(zip(header, record))
        cells.update({name: None for name in header[len(record) :]})
        if header == _AG_NEWS_COLUMNS:
            text, missing = f"{cells['title'] or ''}. {cells['description'] or ''}", None
        else:
            text, missing = self.text.of({k: v for k, v in cells.items() if v is not None})
        if missing and len(record) >= len(header):  # a short row's problem is named above
            problems.append(missing)
        return InputRow(place, cells, text, "; ".join(problems) or None)

    # -- JSONL ----------------------------------------------------------------------------
    def _jsonl_rows(self) -> Iterator[InputRow]:
        source: IO[bytes]
        if self.stream is not None:
            source = self.stream
        else:
            source = sys.stdin.buffer if self.path == STDIN else open(self.path, "rb")  # noqa: SIM115
        try:
            buffered: list[InputRow] = []
            keys: dict[str, None] = dict.fromkeys(self._scanned or [])
            for number, line in enumerate(source, 1):
                if not line.strip():
                    continue
                row = self._jsonl_row(f"line {number}", line)
                row.digest = row_digest(line)
                if self.columns is None:
                    keys.update(dict.fromkeys(row.cells))
                    buffered.append(row)
                    if len(buffered) < KEY_SCAN_ROWS:
                        continue
                    self.columns = list(keys)
                    if self._scanned is not None:  # every line's keys are in
                        self._check_text_column(self.columns, "key")
                    yield from buffered
                    buffered = []
                    continue
                yield row
            if self.columns is None:
                # Every line was read: a text key in none of them is a misspelt one.
                self.columns = list(keys) or [self.text.column]
                self._check_text_column(self.columns, "key")
                yield from buffered
        finally:
            if source is not sys.stdin.buffer and source is not self.stream:
                source.close()

    def _jsonl_row(self, place: str, line: bytes) -> InputRow:
        problems = []
        try:
            decoded = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            decoded = line.decode("utf-8", errors="replace")
            problems.append(f"has bytes that are not UTF-8 (byte {exc.start}; read as U+FFFD)")
        decoded = decoded.rstrip("\r\n")
        try:
            value = orjson.loads(decoded)
        except orjson.JSONDecodeError as exc:
            return InputRow(place, {self.text.column: decoded}, problem="; ".join([*problems, f"is not JSON: {exc}"]))
        if not isinstance(value, dict):
            kind = type(value).__name__
            return InputRow(place, {self.text.column: decoded}, problem=f"is JSON {kind}, not an object")
        text, missing = self.text.of(value, noun="key")
        if missing:
            problems.append(missing)
        return InputRow(place, value, text, "; ".join(problems) or None)

    # -- Parquet ----------------------------------------------------------------------------
    def _parquet_rows(self) -> Iterator[InputRow]:
        if self.path != STDIN:
            yield from self._parquet_file_rows(self.path)
            return
        # Parquet's footer, at its end, says where its rows are: stdin is copied to a temporary
        # file first (disk, not memory), then read a batch at a time like any other file.
        import shutil
        import tempfile

        with tempfile.NamedTemporaryFile(prefix="qwen-fast-stdin-", suffix=".parquet") as spool:
            shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
            spool.flush()
            yield from self._parquet_file_rows(spool.name)

    def _parquet_file_rows(self, path: str) -> Iterator[InputRow]:
        import pyarrow.parquet as pq

        table = pq.ParquetFile(path)
        self.arrow_schema = table.schema_arrow
        self.columns = list(self.arrow_schema.names)
        self._check_text_column(self.columns)
        number = 0
        for batch in table.iter_batches(batch_size=KEY_SCAN_ROWS):
            for cells in batch.to_pylist():
                number += 1
                text, missing = self.text.of(cells)
                yield InputRow(f"row {number}", cells, text, missing, values_digest(cells))


def _csv_records(f: IO[str], lines: list[str] | None = None) -> Iterator[tuple[int, list[str] | csv.Error]]:
    """Each CSV record with the line it ends on, or the error reading it raised (reading then
    goes on at the next line). ``lines``: each line read is added to it (the reader takes the
    lines of one record at a time, so between two records it holds the lines of one)."""
    records = csv.reader(f if lines is None else _kept(f, lines))
    while True:
        try:
            record: list[str] | csv.Error = next(records)
        except StopIteration:
            return
        except csv.Error as exc:
            record = exc
        yield records.line_num, record


def _kept(f: IO[str], lines: list[str]) -> Iterator[str]:
    for line in f:
        lines.append(line)
        yield line


def _keys_of(line: bytes) -> list[str]:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return []
    return list(value) if isinstance(value, dict) else []


def _undecodable(cell: str) -> bool:
    """Whether a cell read with ``surrogateescape`` held bytes that are not UTF-8."""
    return any("\udc80" <= ch <= "\udcff" for ch in cell)


def _readable(cell: str) -> str:
    """A cell read with ``surrogateescape``, each byte that is not UTF-8 as U+FFFD."""
    if not _undecodable(cell):
        return cell
    return cell.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")


# -- writing --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """An output's columns: the input's (``arrow_schema``: a Parquet input's own types) and
    then the job's added ones."""

    kind: Format
    columns: list[str]
    #: the added columns' names, after the input's
    added: list[str]
    labels_column: bool
    arrow_schema: Any = None

    @property
    def header(self) -> list[str]:
        return [*self.columns, *self.added]

    def schema(self) -> Any:
        """The Arrow schema of a Parquet output: the input columns' own types where the input
        was Parquet, else text; the label text, the labels a list of text, probabilities
        float64, ``abstained`` bool, ``error`` text."""
        import pyarrow as pa

        given = {f.name: f for f in self.arrow_schema} if self.arrow_schema is not None else {}
        fields = [given.get(name, pa.field(name, pa.string())) for name in self.columns]
        for name in self.added:
            if name == "labels":
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


def write_part(path: Path, layout: Layout, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``rows`` (input cells and added columns) to ``path`` in the output's kind: CSV
    without its header (:func:`join_parts` writes it once), JSONL, or a Parquet file."""
    if layout.kind == "jsonl":
        with path.open("wb") as f:
            for row in rows:
                f.write(_json_line(row))
            _sync(f)
        return
    if layout.kind == "csv":
        header = layout.header
        with path.open("w", newline="", encoding="utf-8") as text:
            writer = csv.writer(text, lineterminator="\n")
            writer.writerows([_csv_cell(row.get(name)) for name in header] for row in rows)
            _sync(text)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = layout.schema()
    texts = {f.name for f in schema if pa.types.is_string(f.type)}
    columns = {
        name: [_text_cell(row.get(name)) if name in texts else row.get(name) for row in rows] for name in layout.header
    }
    table = pa.Table.from_pydict(columns, schema=schema)
    with path.open("wb") as f:
        pq.write_table(table, f)
        _sync(f)


def _json_line(row: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(row) + b"\n"
    except TypeError:  # what orjson does not take (integers past 64 bits, bytes): the standard encoder
        return (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode()


def _sync(f: IO[Any]) -> None:
    import os

    f.flush()
    os.fsync(f.fileno())


def join_parts(target: Path, layout: Layout, parts: Iterable[Path]) -> None:
    """Join the part files into ``target``, one part in memory at a time: CSV gets its header
    first; JSONL parts are copied; Parquet parts become the row groups of one file."""
    if layout.kind == "parquet":
        import pyarrow.parquet as pq

        with target.open("wb") as f:
            writer = pq.ParquetWriter(f, layout.schema())
            for part in parts:
                writer.write_table(pq.read_table(part))
            writer.close()
            _sync(f)
        return
    with target.open("wb") as f:
        if layout.kind == "csv":
            text = io.StringIO()
            csv.writer(text, lineterminator="\n").writerow(layout.header)
            f.write(text.getvalue().encode())
        for part in parts:
            with part.open("rb") as source:
                while block := source.read(1 << 20):
                    f.write(block)
        _sync(f)
