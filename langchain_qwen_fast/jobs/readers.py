"""Reading a job's input, row by row: one reader a table format, behind one interface.

:func:`table_reader` gives the :class:`TableReader` of a format: :class:`CsvReader`,
:class:`JsonlReader` or :class:`ParquetReader`. Reading never stops for one row: a row that
cannot be read as asked (bytes that are not UTF-8, a line that is not JSON, a JSONL object
without the text key, a CSV row with too few or too many fields) comes out as an
:class:`~.tables.InputRow` with its ``problem`` named and whatever of its content could be read
kept in its cells, in its place. A table none of whose columns holds the text (its text column,
else title and description) is refused before its first row (:class:`DataFileError` naming
the columns): a CSV header, a Parquet schema, or a JSONL file's keys where every line was
scanned for them.

* CSV: a header row names the columns, with one exception, AG News's layout
  (:func:`is_ag_news_row`). Text that is not UTF-8 is read with each bad byte as U+FFFD, and
  the row is marked.
* JSONL: one object per line (blank lines are skipped). A line that is not JSON keeps its raw
  text in the text column.
* Parquet: read a batch at a time (``pyarrow``, the ``jobs`` extra); from stdin, copied to a
  temporary file first, since its footer says where its rows are.

Each row carries a digest of what was read for it (:func:`~.tables.row_digest`): its raw bytes
(CSV: the lines of its record; JSONL: its line; without the line break), or a Parquet row's
values, so that a resumed job can tell whether its input is the one its finished chunks were
read from.
"""

from __future__ import annotations

import csv
import io
import itertools
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from langchain_qwen_fast.errors import ConfigurationError, DataFileError
from langchain_qwen_fast.jobs.tables import (
    STDIN,
    Format,
    InputRow,
    TextSource,
    require_parquet,
    row_digest,
    title_and_description,
    values_digest,
)

#: A JSONL input's columns, when its rows cannot be scanned first (stdin): the keys of its
#: first rows, this many. Parquet is read in batches of as many rows.
KEY_SCAN_ROWS = 1024
#: The columns of AG News's CSV files, which have no header row (:func:`is_ag_news_row`).
AG_NEWS_COLUMNS = ("class", "title", "description")


def is_ag_news_row(record: Sequence[str]) -> bool:
    """Whether a CSV file whose first record is ``record`` is in AG News's layout, without a
    header: class index, title, description. A header names columns, and a column named by a
    whole number is taken for AG News's class index instead.

    Such a file is read with :data:`AG_NEWS_COLUMNS` as its columns and its first record as its
    first row, and each row's text is its title and description joined
    (:func:`~.tables.title_and_description`), whatever the text column is: ``qwen-fast train`` and ``eval`` read
    the file the same way."""
    return bool(record) and record[0].strip().isdigit()


class TableReader(ABC):
    """The rows of one table, one at a time (:meth:`rows`); its columns once the first rows
    are read (:attr:`columns`); :meth:`count` counts the rows first where the source can be
    read twice.

    ``path``: the file, or ``-`` for stdin. ``stream``: read the rows from this open file
    instead (Ray Data's readers hand one over, from any filesystem); ``path`` then only names
    it in messages."""

    #: the table's format
    kind: Format
    #: a Parquet input's Arrow schema, once read (its columns keep their types in a Parquet
    #: output); None for the other formats
    arrow_schema: Any = None

    def __init__(self, path: str, text: TextSource, *, stream: IO[bytes] | None = None) -> None:
        if stream is None and path != STDIN and not Path(path).is_file():
            raise DataFileError(f"no such file: {path}")
        self.path = path
        self.text = text
        self.stream = stream
        #: the table's columns: known once the first rows are read (before the first comes)
        self.columns: list[str] | None = None

    @abstractmethod
    def count(self) -> int | None:
        """The number of rows, read cheaply before the job; None for stdin or a stream."""

    @abstractmethod
    def rows(self) -> Iterator[InputRow]:
        """Every row, in order; :attr:`columns` is set before the first one comes."""

    def _check_text_column(self, header: list[str], noun: str = "column") -> None:
        """:class:`DataFileError` when none of ``header`` holds the text: a misspelt
        ``--text-column`` would otherwise fail every row alike."""
        if self.text.column not in header and "title" not in header and "description" not in header:
            raise DataFileError(
                f"{self.path} has no {self.text.column!r} {noun} (nor title and description); {noun}s: {header} "
                "(--text-column names it)"
            )

    def _binary(self) -> IO[bytes]:
        """The source as bytes: the stream, stdin, or the file opened (the caller closes it)."""
        if self.stream is not None:
            return self.stream
        return sys.stdin.buffer if self.path == STDIN else open(self.path, "rb")

    def _owns(self, source: IO[bytes]) -> bool:
        """Whether ``source`` was opened here, to be closed here."""
        return source is not sys.stdin.buffer and source is not self.stream


class CsvReader(TableReader):
    """A CSV table: a header row, then a row a record (AG News's files have no header:
    :func:`is_ag_news_row`)."""

    kind: Format = "csv"
    #: whether the file is in AG News's layout, without a header: known once its first record
    #: is read
    ag_news = False

    def count(self) -> int | None:
        """CSV records, less the header."""
        if self.path == STDIN or self.stream is not None:
            return None
        plain = self._plain_count()
        if plain is not None:
            records, first = plain
            headerless = first is not None and is_ag_news_row(first)
            return records if headerless else max(0, records - 1)
        records = 0
        headerless = False
        with self._open_text() as f:
            for _, record in _csv_records(f):
                if record == []:
                    continue
                if not records:
                    headerless = not isinstance(record, csv.Error) and is_ag_news_row(record)
                records += 1
        return records if headerless else max(0, records - 1)

    def _plain_count(self) -> tuple[int, list[str] | None] | None:
        """The records of a file with no quote and no carriage return but before a line feed,
        where each record is a line and an empty line none, counted as lines (in C, no record
        parsed), and its first record; None for any other file (a record may take several
        lines: each is parsed)."""
        records = 0
        first: bytes | None = None
        tail = b""
        with open(self.path, "rb") as f:
            while block := f.read(_BLOCK):
                data = tail + block
                if b'"' in data or data.count(b"\r") - data.endswith(b"\r") != data.count(b"\r\n"):
                    return None
                end = data.rfind(b"\n") + 1
                tail = data[end:]
                if first is None:
                    heads = data[:end].split(b"\n", _FIRST_LINES)[:-1]
                    first = next((line for line in heads if line.strip(b"\r")), None)
                    if first is None and end:
                        return None  # a file that starts with many empty lines: parsed
                empty = data.startswith((b"\n", b"\r\n")) or any(data.find(gap, 0, end) >= 0 for gap in _EMPTY_LINES)
                if empty:  # its lines, less the empty ones (the last piece is after the last line)
                    lines = data[:end].split(b"\n")
                    records += len(lines) - lines.count(b"") - lines.count(b"\r")
                else:
                    records += data.count(b"\n", 0, end)
        if tail.endswith(b"\r"):
            return None
        if tail:
            records += 1
            first = tail if first is None else first
        if first is None:
            return records, None
        csv.field_size_limit(2**31 - 1)
        try:
            return records, next(csv.reader([first.decode("utf-8", errors="surrogateescape")]))
        except csv.Error:
            return records, None

    def rows(self) -> Iterator[InputRow]:
        with self._open_text() as f:
            header: list[str] | None = None
            column = self.text.column
            # The parser reads one copy of the lines; the other gives each record's own lines
            # once it is parsed (both in C: every row passes here).
            parsed, lines = itertools.tee(f)
            taken = 0
            for line, record in _csv_records(parsed):
                raw = "".join(itertools.islice(lines, line - taken))
                taken = line
                digest = row_digest(raw.encode("utf-8", errors="surrogateescape"))
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
                    header = self._header(record)
                    self.columns = header
                    if not self.ag_news:
                        continue  # the header is no row
                if len(record) == len(header) and not self.ag_news and raw.isascii():
                    cells = dict(zip(header, record))
                    if column in cells:  # the usual row: whole, readable, its text in its column
                        yield InputRow(f"line {line}", cells, cells[column], None, digest)
                        continue
                row = self._row(f"line {line}", header, record, raw.isascii())
                row.digest = digest
                yield row

    def _header(self, first: list[str]) -> list[str]:
        """The columns the file's first record gives: its names, or AG News's."""
        if is_ag_news_row(first):
            self.ag_news = True
            return list(AG_NEWS_COLUMNS)
        header = [_readable(name) for name in first]
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise DataFileError(f"{self.path}: the header repeats columns {repeated}")
        self._check_text_column(header)
        return header

    def _open_text(self) -> IO[str]:
        # Bytes that are not UTF-8 come through as lone surrogates (found and marked per row).
        csv.field_size_limit(2**31 - 1)  # an oversize text reaches the classifier's length check
        if self.stream is not None or self.path == STDIN:
            return io.TextIOWrapper(self._binary(), encoding="utf-8", errors="surrogateescape", newline="")
        return open(self.path, encoding="utf-8", errors="surrogateescape", newline="")

    def _row(self, place: str, header: list[str], record: list[str], ascii_only: bool = False) -> InputRow:
        """The row of ``record``; ``ascii_only``: its lines are ASCII, so no cell holds a byte
        that is not UTF-8 (no cell is searched for one)."""
        problems = []
        if not ascii_only and any(_undecodable(cell) for cell in record):
            problems.append("has bytes that are not UTF-8 (read as U+FFFD)")
            record = [_readable(cell) for cell in record]
        short = len(record) < len(header)
        if len(record) != len(header):
            extra = f": extra fields {record[len(header) :]!r}"[:300] if not short else ""
            problems.append(f"has {len(record)} fields, the header {len(header)}{extra}")
        cells: dict[str, Any] = dict(zip(header, record))
        if short:
            cells.update({name: None for name in header[len(record) :]})
        if self.ag_news:
            text, missing = title_and_description(cells), None
        elif short:
            text, missing = self.text.of({k: v for k, v in cells.items() if v is not None})
        else:
            text, missing = self.text.of(cells)  # every cell read: none is None
        if missing and not short:  # a short row's problem is named above
            problems.append(missing)
        return InputRow(place, cells, text, "; ".join(problems) or None)


class JsonlReader(TableReader):
    """A JSONL table: an object a line. Its columns are the keys of its rows: with
    ``scan_keys``, of all of them (read once in :meth:`count`); otherwise of the first
    :data:`KEY_SCAN_ROWS`."""

    kind: Format = "jsonl"

    def __init__(
        self, path: str, text: TextSource, *, stream: IO[bytes] | None = None, scan_keys: bool = False
    ) -> None:
        super().__init__(path, text, stream=stream)
        self.scan_keys = scan_keys and path != STDIN and stream is None
        self._scanned: list[str] | None = None

    def count(self) -> int | None:
        """Non-blank lines (parsed here for their keys with ``scan_keys``)."""
        if self.path == STDIN or self.stream is not None:
            return None
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

    def rows(self) -> Iterator[InputRow]:
        source = self._binary()
        try:
            buffered: list[InputRow] = []
            keys: dict[str, None] = dict.fromkeys(self._scanned or [])
            for number, line in enumerate(source, 1):
                if not line.strip():
                    continue
                row = self._row(f"line {number}", line)
                row.digest = row_digest(line)
                if self.columns is not None:
                    yield row
                    continue
                keys.update(dict.fromkeys(row.cells))
                buffered.append(row)
                if len(buffered) == KEY_SCAN_ROWS:
                    self.columns = list(keys)
                    if self._scanned is not None:  # every line's keys are in
                        self._check_text_column(self.columns, "key")
                    yield from buffered
                    buffered = []
            if self.columns is None:
                # Every line was read: a text key in none of them is a misspelt one.
                self.columns = list(keys) or [self.text.column]
                self._check_text_column(self.columns, "key")
                yield from buffered
        finally:
            if self._owns(source):
                source.close()

    def _row(self, place: str, line: bytes) -> InputRow:
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


class ParquetReader(TableReader):
    """A Parquet table, read a batch at a time; its columns keep their types
    (:attr:`arrow_schema`). Read from its path (its footer says where its rows are), not a
    stream; stdin is copied to a temporary file first."""

    kind: Format = "parquet"

    def __init__(self, path: str, text: TextSource, *, stream: IO[bytes] | None = None) -> None:
        if stream is not None:
            raise ConfigurationError("a Parquet table is read from its path, not a stream")
        super().__init__(path, text)
        require_parquet()

    def count(self) -> int | None:
        """The rows the file's footer counts."""
        if self.path == STDIN:
            return None
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(self.path).metadata.num_rows)

    def rows(self) -> Iterator[InputRow]:
        if self.path != STDIN:
            yield from self._file_rows(self.path)
            return
        # Disk, not memory: then read a batch at a time like any other file.
        import shutil
        import tempfile

        with tempfile.NamedTemporaryFile(prefix="qwen-fast-stdin-", suffix=".parquet") as spool:
            shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
            spool.flush()
            yield from self._file_rows(spool.name)

    def _file_rows(self, path: str) -> Iterator[InputRow]:
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


def table_reader(
    path: str, kind: Format, text: TextSource, *, scan_keys: bool = False, stream: IO[bytes] | None = None
) -> TableReader:
    """The reader of a table of format ``kind`` (see :class:`TableReader` for ``path`` and
    ``stream``). ``scan_keys``: a JSONL table's columns are the keys of all its rows
    (:class:`JsonlReader`); the other formats name their columns first."""
    if kind == "jsonl":
        return JsonlReader(path, text, stream=stream, scan_keys=scan_keys)
    if kind == "csv":
        return CsvReader(path, text, stream=stream)
    return ParquetReader(path, text, stream=stream)


def _csv_records(f: Iterable[str]) -> Iterator[tuple[int, list[str] | csv.Error]]:
    """Each CSV record with the line it ends on, or the error reading it raised (reading then
    goes on at the next line)."""
    records = csv.reader(f)
    while True:
        try:
            record: list[str] | csv.Error = next(records)
        except StopIteration:
            return
        except csv.Error as exc:
            record = exc
        yield records.line_num, record


def _keys_of(line: bytes) -> list[str]:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return []
    return list(value) if isinstance(value, dict) else []


#: The bytes a CSV file is counted by at a time.
_BLOCK = 1 << 20
#: The lines before a CSV file's first record that counting it looks through.
_FIRST_LINES = 64
#: An empty line after another line, ending in a line feed or a carriage return and a line feed.
_EMPTY_LINES = (b"\n\n", b"\n\r\n")

#: The characters ``surrogateescape`` reads a byte that is not UTF-8 as.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def _undecodable(cell: str) -> bool:
    """Whether a cell read with ``surrogateescape`` held bytes that are not UTF-8 (searched in
    C: every cell of every row passes here)."""
    return not cell.isascii() and _ESCAPED_BYTE.search(cell) is not None


def _readable(cell: str) -> str:
    """A cell read with ``surrogateescape``, each byte that is not UTF-8 as U+FFFD."""
    if not _undecodable(cell):
        return cell
    return cell.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")
