"""Reading a job's input with Ray Data: the ``ray`` extra.

Parquet goes through ``ray.data.read_parquet``. CSV and JSONL go through
:class:`TextTableDatasource`, a Ray Data file datasource that reads each file with the job's
own row readers (:mod:`.readers`): a row that cannot be read as asked (bytes that
are not UTF-8, a line that is not JSON, a CSV record with the wrong number of fields) stays in
its place with its problem in :data:`PROBLEM_COLUMN`, strings stay strings (``"007"`` is not
7), and ``.ndjson`` is JSONL. Files, folders, globs and remote filesystems (``s3://``,
``gs://``, through ``pyarrow.fs``) are all read on the workers, streaming, a block at a time.

Every row gets an id (:data:`ROW_ID_COLUMN`) derived from its file and its position in it,
the same on every read of the same files, so that Ray Data's checkpointing can tell the rows
already written from the others; an input with its own id column is read as it is.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.jobs.readers import table_reader
from langchain_qwen_fast.jobs.tables import Format, InputRow, TextSource

#: The derived row id's column (a name Ray Data's Parquet reader gives its own row hash).
ROW_ID_COLUMN = "row_hash"
#: The column naming why a row could not be read (None for a row that could), read by the
#: classification stage and dropped before the output is written.
PROBLEM_COLUMN = "_read_problem"
#: Rows per block a CSV or JSONL file is cut into as it is read.
BLOCK_ROWS = 4096
#: The file name endings read as each kind when a folder or glob is given.
EXTENSIONS: dict[Format, list[str]] = {
    "csv": ["csv"],
    "jsonl": ["jsonl", "ndjson", "json"],
    "parquet": ["parquet"],
}


def row_id(path: str, position: int) -> int:
    """The id of the row at ``position`` (from 0) of the file ``path``: 63 bits of a hash, so
    that it fits every reader's signed 64-bit integers."""
    digest = hashlib.blake2b(f"{path}\0{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def rows_table(rows: Sequence[InputRow], columns: Sequence[str], path: str, first: int) -> Any:
    """A ``pyarrow.Table`` of ``rows`` (the ``first``-th row of ``path`` onwards): the input
    columns, then the row id and the read problem. A column whose values pyarrow cannot hold
    in one type (a JSONL key that is a number in one row and text in another) is kept as
    JSON text, a string as itself."""
    import pyarrow as pa

    arrays: dict[str, Any] = {}
    for name in columns:
        values = [row.cells.get(name) for row in rows]
        try:
            arrays[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays[name] = pa.array([_as_text(value) for value in values], type=pa.string())
    arrays[ROW_ID_COLUMN] = pa.array([row_id(path, first + i) for i in range(len(rows))], type=pa.int64())
    arrays[PROBLEM_COLUMN] = pa.array([row.problem for row in rows], type=pa.string())
    return pa.table(arrays)


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _datasource_class() -> type:
    """:class:`TextTableDatasource`, built on first use: Ray is the ``ray`` extra's."""
    from ray.data.datasource import FileBasedDatasource

    class TextTableDatasource(FileBasedDatasource):
        """CSV or JSONL files read row by row (see the module docstring)."""

        def __init__(self, paths: str | list[str], kind: Format, text_column: str, **kwargs: Any) -> None:
            if kind == "parquet":
                raise ConfigurationError("Parquet is read with ray.data.read_parquet")
            super().__init__(paths, file_extensions=EXTENSIONS[kind], **kwargs)
            self.kind: Format = kind
            self.text = TextSource(text_column)

        def _read_stream(self, f: Any, path: str) -> Iterator[Any]:
            # A JSONL file is read line by line, which Arrow's own stream does not do.
            stream = io.BufferedReader(f) if self.kind == "jsonl" else f
            reader = table_reader(path, self.kind, self.text, stream=stream)
            block: list[InputRow] = []
            first = 0
            for row in reader.rows():
                block.append(row)
                if len(block) == BLOCK_ROWS:
                    yield rows_table(block, reader.columns or [], path, first)
                    first += len(block)
                    block = []
            if block:
                yield rows_table(block, reader.columns or [], path, first)

    return TextTableDatasource


def read_table(kind: Format, paths: str | list[str], text_column: str, **ray_args: Any) -> Any:
    """The lazy ``ray.data.Dataset`` of the files at ``paths`` (files, folders, globs, any
    filesystem ``pyarrow.fs`` reaches), each row with its :data:`ROW_ID_COLUMN`."""
    import ray.data

    if kind == "parquet":
        # Ray's own row hash: an unsigned 64-bit integer from the file and the row's place.
        return ray.data.read_parquet(paths, file_extensions=EXTENSIONS[kind], include_row_hash=True, **ray_args)
    return ray.data.read_datasource(_datasource_class()(paths, kind, text_column), **ray_args)
