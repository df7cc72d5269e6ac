"""The job's table side: in a process of its own or in the job's, the same bytes; its failures
come back to the job; results and parts made a column at a time are what they were row by row."""

from __future__ import annotations

import csv
import io
import math
import os
import pickle
import random
import struct
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.errors import CarriedError, DataFileError, InvalidInputError
from langchain_qwen_fast.jobs import job as job_module
from langchain_qwen_fast.jobs import table_side
from langchain_qwen_fast.jobs.columns import (
    ClassifiedColumns,
    classified_table,
    error_text,
    result_columns,
    result_table,
)
from langchain_qwen_fast.jobs.job import classify_table
from langchain_qwen_fast.jobs.parts import WorkFolder, work_folder
from langchain_qwen_fast.jobs.summary import Counts
from langchain_qwen_fast.jobs.writers import OutputTable, _csv_cell, write_columns, write_part
from langchain_qwen_fast.testing.samples import headlines
from tests.support.fake_vllm import FakeVLLM
from tests.unit_tests.jobs.test_job import classifier, options, write_csv


@pytest.fixture
def fake() -> FakeVLLM:
    return FakeVLLM()


CELLS: list[Any] = [None, "", "plain", "a,b", 'say "hi"', "two\nlines", "cr\rhere", "\r\n", " lead", "tab\t",
                    "\x00", "é ü", "\u2028", 0.1, 1e-07, 1e16, -0.0, float("nan"), True, False, 3, 2**70,
                    ["World", "Sports"], [], {"k": [1, "x,y"]}]  # fmt: skip


def _written_by_csv_writer(path: Path, table: OutputTable, rows: list[dict[str, Any]]) -> None:
    """A CSV part as the job wrote it before parts were made a column at a time: each cell
    through ``_csv_cell``, each row through ``csv.writer``."""
    with path.open("w", newline="", encoding="utf-8") as text:
        csv.writer(text, lineterminator="\n").writerows([_csv_cell(row.get(n)) for n in table.header] for row in rows)


@pytest.mark.parametrize("seed", range(4))
def test_csv_parts_are_the_bytes_csv_writer_gives_cell_by_cell(tmp_path: Path, seed: int) -> None:
    shuffle = random.Random(seed)
    table = OutputTable("csv", ["a", "b", "c"], ["label", "p_x", "abstained", "error"])
    for trial in range(60):
        kind = trial % 3  # columns of text, of numbers, or of anything
        rows = []
        for _ in range(shuffle.randint(0, 6)):
            pool = [["x", "", None, "a,b", 'q"'], [0.5, None, 1e-09], CELLS][kind]
            rows.append({name: shuffle.choice(pool) for name in table.header if shuffle.random() < 0.9})
        expected, got = tmp_path / "expected.csv", tmp_path / "got.csv"
        _written_by_csv_writer(expected, table, rows)
        write_part(got, table, rows)
        assert got.read_bytes() == expected.read_bytes(), rows
        write_columns(got, table, {name: [row.get(name) for row in rows] for name in table.header})
        assert got.read_bytes() == expected.read_bytes(), rows


def test_jsonl_and_parquet_parts_from_rows_and_from_columns_agree(tmp_path: Path) -> None:
    rows = [
        {"a": "x,y", "label": "World", "p_x": 0.25, "abstained": False, "error": None},
        {"a": None, "label": None, "p_x": None, "abstained": True, "error": "InvalidInputError: empty"},
    ]
    jsonl = OutputTable("jsonl", ["a"], ["label", "p_x", "abstained", "error"])
    write_part(tmp_path / "p.jsonl", jsonl, rows)
    assert (tmp_path / "p.jsonl").read_bytes() == b"".join(orjson.dumps(row) + b"\n" for row in rows)
    parquet = OutputTable("parquet", ["a"], ["label", "p_x", "abstained", "error"])
    write_part(tmp_path / "rows.parquet", parquet, rows)
    write_columns(tmp_path / "columns.parquet", parquet, {n: [r[n] for r in rows] for n in parquet.header})
    assert (tmp_path / "rows.parquet").read_bytes() == (tmp_path / "columns.parquet").read_bytes()


def _classification(label: str | None, scores: dict[str, float] | None, *, multi: bool = False) -> Classification:
    chosen = [label] if label is not None else []
    return Classification(label=label, labels=chosen, scores=scores, abstained=label is None, scoring="label_tokens",
                          multi_label=multi)  # fmt: skip


@pytest.mark.parametrize("multi", [False, True])
def test_a_result_table_is_each_row_s_columns_a_column_at_a_time(multi: bool) -> None:
    labels = ["World", "Sports"]
    scored = _classification("World", {"World": 0.75, "Sports": 0.25}, multi=multi)
    partial = _classification(None, {"Sports": 0.5}, multi=multi)
    unscored = _classification("Sports", None, multi=multi)
    for results in ([scored, partial, unscored], [scored, InvalidInputError("text is empty"), unscored], []):
        table = result_table(results, labels, multi)
        rows = [result_columns(result, labels, multi) for result in results]
        assert table == {name: [row[name] for row in rows] for name in (rows[0] if rows else table)}
        assert all(list(row) == list(table) for row in rows)


def test_packed_results_give_the_same_columns_counts_and_error_text() -> None:
    labels = ["World", "Sports"]
    results: list[Any] = [
        _classification("World", {"World": 0.75, "Sports": 0.25}),
        _classification(None, {"World": 0.5, "Sports": 0.5}),
        InvalidInputError("text is empty"),
        DataFileError("line 9 is not CSV"),
    ]
    back = table_side.unpack(pickle.loads(pickle.dumps(table_side.pack(results))))
    assert [result_columns(r, labels, False) for r in back] == [result_columns(r, labels, False) for r in results]
    before, after = Counts(), Counts()
    for original, unpacked in zip(results, back, strict=True):
        before.add(original)
        after.add(unpacked)
    assert after == before and after.error_kinds == {"InvalidInputError": 1, "DataFileError": 1}
    carried = back[2]
    assert isinstance(carried, CarriedError) and error_text(carried) == "InvalidInputError: text is empty"


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_a_forked_table_side_writes_what_one_in_the_job_s_process_writes(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    texts = headlines(170)
    texts[3], texts[77] = "   ", 'a "quoted", text\r\nover lines'
    source = tmp_path / "in.csv"
    with source.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "label"])  # a column named like an added one: kept renamed
        writer.writerows([i, t, "given"] for i, t in enumerate(texts))
    outputs = []
    for forked in (True, False):
        monkeypatch.setattr(table_side, "forks", lambda forked=forked: forked)
        name = "forked" if forked else "local"
        out, review = tmp_path / f"{name}.{kind}", tmp_path / f"{name}-review.jsonl"
        given = options(source, out, review_out=str(review), review_below=0.9, review_sample=3)
        report = classify_table(given, classifier(fake.transport))
        assert report.rows == 170 and report.errors == 1 and not work_folder(out).exists()
        counts = (report.label_counts, report.abstained, report.error_kinds)
        outputs.append((out.read_bytes(), review.read_bytes(), counts))
    assert outputs[0] == outputs[1]


def test_a_failure_on_the_table_side_stops_the_job_with_its_error_and_keeps_the_chunks_before(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(300))
    out = tmp_path / "out.csv"
    write = job_module.write_columns

    def full_disk(path: Path, table: OutputTable, columns: Any) -> None:
        if path.name.endswith("000000000150.csv"):
            raise OSError(28, "No space left on device")
        write(path, table, columns)

    monkeypatch.setattr(job_module, "write_columns", full_disk)
    assert table_side.forks()
    with pytest.raises(OSError, match="No space left"):
        classify_table(options(source, out, chunks_in_flight=2), classifier(fake.transport))
    assert [chunk.start for chunk in WorkFolder(out, "csv").chunks()] == [0, 50, 100]
    monkeypatch.setattr(job_module, "write_columns", write)
    report = classify_table(options(source, out), classifier(fake.transport))
    assert report.resumed_rows == 150 and report.rows == 300


def test_a_table_process_that_ends_without_a_word_is_named(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(120))
    out = tmp_path / "out.csv"
    monkeypatch.setattr(job_module, "write_columns", lambda *_: os._exit(9))
    with pytest.raises(DataFileError, match=r"table process .* ended unexpectedly"):
        classify_table(options(source, out), classifier(fake.transport))
    assert not out.exists()


def test_the_quoting_found_is_csv_writer_s() -> None:
    from langchain_qwen_fast.jobs import writers

    quoting = writers._quoting()
    assert quoting is not None
    for cell in CELLS:
        if isinstance(cell, str):
            text = io.StringIO()
            csv.writer(text, lineterminator="\n").writerow([cell, "x"])
            assert text.getvalue() == f"{writers._quoted([cell], quoting)[0]},x\n"


def test_a_fork_that_fails_leaves_the_rows_to_the_job_s_process(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(120))
    expected = tmp_path / "expected.csv"
    classify_table(options(source, expected), classifier(fake.transport))

    def no_fork() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(table_side.os, "fork", no_fork)
    out = tmp_path / "out.csv"
    report = classify_table(options(source, out), classifier(fake.transport))
    assert report.rows == 120 and out.read_bytes() == expected.read_bytes()


@pytest.mark.parametrize("multi", [False, True])
def test_classifications_packed_as_columns_count_and_make_the_columns_they_make_row_by_row(multi: bool) -> None:
    labels = ["World", "Sports", "Business"]
    results: list[Any] = [
        _classification("World", {"World": 0.75, "Sports": 0.2, "Business": 0.05}, multi=multi),
        _classification(None, {"World": 0.4, "Sports": 0.3, "Business": 0.3}, multi=multi),
        _classification("Sports", {"World": 0.0, "Sports": 1.0, "Business": 0.0}, multi=multi),
        _classification("Business", {"Sports": 0.5}, multi=multi),
        _classification("World", None, multi=multi),
        _classification("Sports", {}, multi=multi),
        _classification("World", {"World": 0.951, "Sports": 0.03, "Business": 0.019}, multi=multi),
    ]
    for chunk in (results, results[:3], results[4:6]):
        packed = table_side.unpack(pickle.loads(pickle.dumps(table_side.pack(chunk))))
        assert isinstance(packed, ClassifiedColumns)
        by_rows, by_columns = Counts(), Counts()
        for result in chunk:
            by_rows.add(result)
        by_columns.add_classified(packed)
        assert orjson.dumps(by_columns.to_json()) == orjson.dumps(by_rows.to_json())
        expected = result_table(chunk, labels, multi)
        made = classified_table(packed, labels)
        assert list(made.items()) == list(expected.items())
        assert [result_columns(r, labels, multi) for r in packed.rows()] == [
            result_columns(r, labels, multi) for r in chunk
        ]


def test_a_chunk_with_an_error_or_of_mixed_kinds_is_packed_row_by_row() -> None:
    scored = _classification("World", {"World": 0.75, "Sports": 0.25})
    assert isinstance(table_side.pack([scored, InvalidInputError("text is empty")]), list)
    assert isinstance(table_side.pack([scored, _classification("World", None, multi=True)]), list)


@pytest.mark.parametrize(("kind", "multi"), [("csv", False), ("csv", True), ("parquet", False), ("jsonl", True)])
def test_chunks_committed_a_column_at_a_time_write_what_the_job_s_process_writes(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, multi: bool
) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(230))
    outputs = []
    for forked in (True, False):
        monkeypatch.setattr(table_side, "forks", lambda forked=forked: forked)
        out = tmp_path / f"{forked}.{kind}"
        report = classify_table(options(source, out), classifier(fake.transport, multi_label=multi))
        assert report.rows == 230 and report.errors == 0
        counts = [list(report.label_counts.items()), list((report.chosen_counts or {}).items()), report.abstained]
        outputs.append((out.read_bytes(), counts))
    assert outputs[0] == outputs[1]


def test_a_column_of_floats_is_written_as_repr_writes_each() -> None:
    from langchain_qwen_fast.jobs import writers

    assert writers._orjson_floats()  # else the columns below are written number by number
    shuffle = random.Random(7)
    bits = [struct.unpack("d", struct.pack("Q", shuffle.getrandbits(64)))[0] for _ in range(4000)]
    columns: list[list[Any]] = [
        [shuffle.random() for _ in range(4000)],
        [shuffle.random() ** shuffle.randint(1, 60) for _ in range(4000)],  # every small magnitude
        [shuffle.choice([None, 1e-05, 1.5e-05, -9.5e-05, 1e-04, 1e-06, 1e16, 9999999999999998.0]) for _ in range(500)],
        [value for value in bits if math.isfinite(value)],
        [shuffle.uniform(-1e17, 1e17) for _ in range(4000)],
        [0.25, float("nan"), None],
        [float("inf"), 0.5],
        [None, None],
        [],
    ]
    for column in columns:
        assert writers._csv_column(column) == [writers._csv_cell(value) for value in column]


def test_a_large_commit_sent_while_a_large_chunk_comes_back_does_not_wait_forever(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The job sends a chunk's results while the table process sends back the chunk read
    ahead: with both larger than the pipes hold, neither side may wait on the other for good
    (the table process reads its requests while it answers)."""
    import asyncio
    import threading

    from langchain_qwen_fast.jobs.tables import InputRow

    monkeypatch.setattr(table_side, "PIPE_BYTES", 4096)  # pipes of a page: both messages exceed them
    text = "x" * 400
    rows = iter([InputRow(f"line {i}", {"text": text}, text, None, b"") for i in range(4000)])
    results = [_classification("World", {"World": 0.5, "Sports": 0.5}) for _ in range(2000)]

    async def drive() -> None:
        # The commits happen in the table process: each leaves a file to be seen here.
        side = table_side.TableSide(rows, 0, lambda start, *_: (tmp_path / f"chunk-{start}").touch())
        tables = table_side.ForkedTables(side)
        try:
            first = await tables.read(2000)
            assert first is not None
            ahead = tables.read(2000)  # its reply: 2,000 texts of 400 characters
            await tables.commit(0, list(results))  # sent before that reply is read
            assert (await ahead) is not None
            await tables.commit(2000, list(results))
        finally:
            tables.reap()

    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(drive())
        except BaseException as exc:  # reported by the test
            failure.append(exc)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(30), "the job and its table process waited on each other"
    assert not failure and sorted(p.name for p in tmp_path.iterdir()) == ["chunk-0", "chunk-2000"]


@pytest.mark.parametrize("forked", [False, True])
def test_chunks_are_classified_while_commits_are_on_their_way(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forked: bool
) -> None:
    """Commits (writing and syncing parts) do not hold back the chunks after those in flight:
    the first commit waits until the last chunk read ahead of it has reached the server (the
    commits after it are on their way); the commits are then done in order."""
    import threading

    chunk_rows, in_flight = 50, 2
    marked = (in_flight + job_module.READ_AHEAD - 1) * chunk_rows
    texts = headlines(400)
    texts[marked] = "MARKER the first text of the last chunk read ahead of the first commit"
    source = write_csv(tmp_path / "in.csv", texts)
    asked = tmp_path / "marked-chunk-asked"  # a file: the commit may run in the table process
    order = tmp_path / "commit-order"

    def transport(request: Any) -> Any:
        if b"MARKER" in request.content:
            asked.touch()
        return fake(request)

    write = job_module.write_columns

    def first_commit_waits(path: Path, table: OutputTable, columns: Any) -> None:
        if path.name.endswith("000000000000.csv"):
            for _ in range(500):  # at most 5 s: a job that waits for this commit never asks
                if asked.exists():
                    break
                threading.Event().wait(0.01)
            else:
                raise OSError(5, "the marked chunk was not asked while the first was committed")
        with order.open("a") as f:
            f.write(path.name.split("-")[-1].split(".")[0] + "\n")
        write(path, table, columns)

    monkeypatch.setattr(job_module, "write_columns", first_commit_waits)
    monkeypatch.setattr(table_side, "forks", lambda: forked)
    out = tmp_path / "out.csv"
    given = options(source, out, chunk_rows=chunk_rows, chunks_in_flight=in_flight)
    report = classify_table(given, classifier(httpx.MockTransport(transport)))
    assert report.rows == 400 and asked.exists()
    assert [int(line) for line in order.read_text().split()] == list(range(0, 400, chunk_rows))


def test_a_job_sizing_its_chunks_starts_with_a_small_one(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(1500))
    starts: list[int] = []
    commit = WorkFolder.commit

    def recorded(folder: WorkFolder, start: int, *rest: Any) -> Any:
        starts.append(start)
        return commit(folder, start, *rest)

    monkeypatch.setattr(WorkFolder, "commit", recorded)
    monkeypatch.setattr(table_side, "forks", lambda: False)
    report = classify_table(options(source, tmp_path / "out.csv", chunk_rows=None), classifier(fake.transport))
    sizes = [b - a for a, b in zip(starts, [*starts[1:], 1500], strict=True)]
    # read before any answer came, the first chunks are the smallest; the next follow the windows
    assert report.rows == 1500 and sizes[0] == job_module.MIN_CHUNK_ROWS and max(sizes) > sizes[0]


def test_a_stopped_table_process_still_does_the_commits_sent(tmp_path: Path) -> None:
    """The job stops (and closes its pipes) while the table process is on a read it sent
    before a commit: the reply finds no reader, and the commit is done all the same."""
    import asyncio
    import time

    from langchain_qwen_fast.jobs.tables import InputRow

    def rows() -> Any:
        yield InputRow("line 1", {"text": "x"}, "x", None, b"")
        time.sleep(0.5)  # the second chunk's read: the job has stopped by its end
        yield InputRow("line 2", {"text": "y"}, "y", None, b"")

    async def drive() -> None:
        side = table_side.TableSide(rows(), 0, lambda start, *_: (tmp_path / f"chunk-{start}").touch())
        tables = table_side.ForkedTables(side)
        try:
            assert await tables.read(1) is not None
            tables.read(1)  # the slow read, before the commit
            tables.commit(0, [_classification("World", {"World": 0.5, "Sports": 0.5})])
            tables.close()
        finally:
            tables.reap()

    asyncio.run(drive())
    assert [p.name for p in tmp_path.iterdir()] == ["chunk-0"]
