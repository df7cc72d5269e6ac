"""Reading and writing tables: each kind round trips through parts and their join, and a row
that cannot be read keeps its place, its content where it can, and its problem."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast.errors import ConfigurationError, DataFileError
from langchain_qwen_fast.jobs.readers import TableReader, is_ag_news_row, table_reader
from langchain_qwen_fast.jobs.tables import STDIN, TextSource, format_of
from langchain_qwen_fast.jobs.writers import OutputTable, join_parts, write_part

ADDED = ["label", "labels", "p_A", "p_B", "abstained", "error"]


def rows_of(path: Path, kind: str, column: str = "text") -> tuple[TableReader, list[Any]]:
    reader = table_reader(str(path), kind, TextSource(column), scan_keys=True)  # type: ignore[arg-type]
    reader.count()
    return reader, list(reader.rows())


def read_back(path: Path, kind: str) -> list[dict[str, Any]]:
    if kind == "jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    if kind == "csv":
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_format_from_the_name_or_the_flag() -> None:
    assert format_of("a/b.CSV", None, "--input-format") == "csv"
    assert format_of("b.ndjson", None, "--input-format") == "jsonl"
    assert format_of("whatever", "parquet", "--output-format") == "parquet"
    with pytest.raises(ConfigurationError, match="--input-format"):
        format_of(STDIN, None, "--input-format")
    with pytest.raises(ConfigurationError, match=r"cannot tell the kind of b\.txt"):
        format_of("b.txt", None, "--output-format")


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_parts_join_into_one_table_that_reads_back(tmp_path: Path, kind: str) -> None:
    table = OutputTable(kind, ["id", "text"], ADDED)  # type: ignore[arg-type]
    rows = [
        {"id": str(i), "text": f"text, \"quoted\" {i}\nsecond line", "label": "A", "labels": ["A", "B"][: i % 3],
         "p_A": 0.25 * (i % 4), "p_B": None, "abstained": i == 2, "error": None if i % 2 else "InvalidInputError: x"}
        for i in range(7)
    ]  # fmt: skip
    parts = []
    for k, start in enumerate(range(0, 7, 3)):
        parts.append(tmp_path / f"part{k}.{kind}")
        write_part(parts[-1], table, rows[start : start + 3])
    target = tmp_path / f"out.{kind}"
    join_parts(target, table, parts)
    back = read_back(target, kind)
    assert [r["text"] for r in back] == [r["text"] for r in rows]
    if kind == "csv":  # text cells; labels joined with "|", booleans as true/false, None empty
        assert [r["labels"] for r in back[:3]] == ["", "A", "A|B"]
        assert [r["abstained"] for r in back[:3]] == ["false", "false", "true"]
        assert back[1]["error"] == "" and back[0]["error"] == "InvalidInputError: x"
        assert float(back[3]["p_A"]) == 0.75 and back[3]["p_B"] == ""
    else:
        assert [r["labels"] for r in back] == [r["labels"] for r in rows]
        assert [r["abstained"] for r in back] == [r["abstained"] for r in rows]
        assert [r["p_A"] for r in back] == [r["p_A"] for r in rows]
        assert [r["error"] for r in back] == [r["error"] for r in rows]
    # and the job reads its own output again
    _, again = rows_of(target, kind)
    assert [r.text for r in again] == [r["text"] for r in rows]


def test_csv_bad_rows_keep_their_place_and_content(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(
        b"id,text,extra\n"
        b"1,fine,x\n"
        b"2,caf\xe9 latin-1,x\n"  # not UTF-8
        b"3,short\n"  # a field short
        b"4,long,x,y\n"  # a field too many
        b"\n"  # blank: not a row
        b'5,"two\nlines",x\n'
    )
    reader, rows = rows_of(path, "csv")
    assert reader.count() == 5 and reader.columns == ["id", "text", "extra"]
    assert [r.cells["id"] for r in rows] == ["1", "2", "3", "4", "5"]
    assert rows[0].problem is None and rows[0].text == "fine"
    assert rows[1].cells["text"] == "caf\ufffd latin-1" and "not UTF-8" in (rows[1].problem or "")
    assert rows[2].cells == {"id": "3", "text": "short", "extra": None}
    assert rows[2].problem == "has 2 fields, the header 3"
    assert "has 4 fields, the header 3" in (rows[3].problem or "") and "'y'" in (rows[3].problem or "")
    assert rows[4].text == "two\nlines" and rows[4].problem is None
    assert rows[2].place == "line 4"


def test_csv_title_and_description_and_ag_news_layout(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("title,description\nOil,prices rise\n")
    assert [r.text for r in rows_of(path, "csv")[1]] == ["Oil. prices rise"]
    ag = tmp_path / "ag.csv"
    ag.write_text('"3","Oil giant","reports profit"\n"2","Holders","through"\n')
    reader, rows = rows_of(ag, "csv")
    assert reader.columns == ["class", "title", "description"] and reader.count() == 2
    assert [r.text for r in rows] == ["Oil giant. reports profit", "Holders. through"]
    assert is_ag_news_row(["3", "Oil giant", "reports profit"]) and not is_ag_news_row(["class", "title"])
    # a file with a header of those names is read by its header, as any other
    named = tmp_path / "named.csv"
    named.write_text("class,title,description\n3,Oil giant,reports profit\n")
    reader, rows = rows_of(named, "csv", "title")
    assert reader.count() == 1 and [r.text for r in rows] == ["Oil giant"]


def test_csv_without_the_text_column_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,body\n1,x\n")
    with pytest.raises(DataFileError, match=r"no 'text' column .*columns: \['id', 'body'\]"):
        rows_of(path, "csv")
    assert [r.text for r in rows_of(path, "csv", "body")[1]] == ["x"]


def test_jsonl_bad_lines_keep_their_place_and_content(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b'{"id": 1, "text": "fine"}\n'
        b"not json at all\n"
        b'{"id": 3, "body": "no text key"}\n'
        b'{"id": 4, "text": "caf\xe9"}\n'
        b"\n"
        b"[1, 2]\n"
        b'{"id": 6, "text": 7, "late": true}\n'
    )
    reader, rows = rows_of(path, "jsonl")
    assert reader.count() == 6
    assert reader.columns == ["id", "text", "body", "late"]  # every key of every row
    assert rows[0].problem is None and rows[0].text == "fine"
    assert rows[1].cells == {"text": "not json at all"} and "is not JSON" in (rows[1].problem or "")
    assert rows[2].cells == {"id": 3, "body": "no text key"}
    assert "no 'text' key (nor title and description); keys: ['id', 'body']" in (rows[2].problem or "")
    assert rows[3].cells["text"] == "caf\ufffd" and "not UTF-8" in (rows[3].problem or "")
    assert "not an object" in (rows[4].problem or "") and rows[4].place == "line 6"
    assert rows[5].text == 7 and rows[5].problem is None  # not text: the job's text check names it


def test_parquet_keeps_its_types(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [1, 2], "text": ["a", None], "score": [0.5, 1.5]}), path)
    reader, rows = rows_of(path, "parquet")
    assert reader.count() == 2 and [r.text for r in rows] == ["a", None]
    table = OutputTable("parquet", reader.columns or [], ["label", "error"], reader.arrow_schema)
    schema = table.schema()
    assert str(schema.field("id").type) == "int64" and str(schema.field("score").type) == "double"


def test_parquet_from_stdin_is_read_through_a_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "in.parquet"
    texts = [f"headline {i}" for i in range(2500)]  # past one read batch
    pq.write_table(pa.table({"id": list(range(2500)), "text": texts}), path, row_group_size=1000)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    reader = table_reader(STDIN, "parquet", TextSource())
    assert reader.count() is None
    rows = list(reader.rows())
    assert [r.text for r in rows] == texts and [r.cells["id"] for r in rows] == list(range(2500))
    assert reader.columns == ["id", "text"] and str(reader.arrow_schema.field("id").type) == "int64"


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="no such file"):
        table_reader(str(tmp_path / "nope.csv"), "csv", TextSource())


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_values_that_are_not_text_are_written_as_text(tmp_path: Path, kind: str) -> None:
    import datetime as dt

    table = OutputTable(kind, ["when", "raw", "n"], ["label", "error"])  # type: ignore[arg-type]
    row = {"when": dt.date(2026, 12, 1), "raw": b"\x00\x01", "n": 2**70, "label": "A", "error": None}
    write_part(tmp_path / f"p.{kind}", table, [row])
    join_parts(tmp_path / f"out.{kind}", table, [tmp_path / f"p.{kind}"])
    (back,) = read_back(tmp_path / f"out.{kind}", kind)
    assert str(back["n"]).strip('"') == str(2**70) and "2026-12-01" in str(back["when"]) and back["label"] == "A"


# -- what a row was read from ---------------------------------------------------------------------
def digests(path: Path, kind: str) -> list[bytes]:
    return [row.digest for row in rows_of(path, kind)[1]]


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_each_row_s_digest_changes_with_that_row_alone(tmp_path: Path, kind: str) -> None:
    rows: list[dict[str, Any]] = [{"id": str(i), "text": f'text, "quoted" {i}\nsecond line'} for i in range(6)]
    path = tmp_path / f"in.{kind}"

    def write(rows: list[dict[str, Any]]) -> None:
        table = OutputTable(kind, ["id", "text"], [])  # type: ignore[arg-type]
        write_part(tmp_path / "part", table, rows)
        join_parts(path, table, [tmp_path / "part"])

    write(rows)
    before = digests(path, kind)
    assert len(set(before)) == 6 and all(len(d) == 16 for d in before)
    assert digests(path, kind) == before  # the same bytes, the same digests
    rows[3]["text"] += "!"
    write(rows)
    after = digests(path, kind)
    assert [a == b for a, b in zip(before, after)] == [True, True, True, False, True, True]


def test_a_row_s_digest_leaves_out_its_line_break(tmp_path: Path) -> None:
    for kind, content in [("csv", "id,text\n1,a\n2,b"), ("jsonl", '{"text": "a"}\n{"text": "b"}')]:
        path = tmp_path / f"in.{kind}"
        path.write_text(content)
        last = digests(path, kind)
        path.write_text(content + "\n")
        assert digests(path, kind) == last
        path.write_bytes((content.replace("\n", "\r\n") + "\r\n").encode())
        assert digests(path, kind) == last  # a line's break is no part of its row, whichever it is


def test_a_csv_row_s_digest_covers_its_raw_bytes_and_the_blank_lines_before_it(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text('id,text\n1,"a"\n2,b\n')
    quoted = digests(path, "csv")
    path.write_text("id,text\n1,a\n2,b\n")
    plain = digests(path, "csv")
    assert quoted[0] != plain[0] and quoted[1] == plain[1]  # what was read, not what it means
    path.write_text("id,text\n1,a\n\n2,b\n")
    assert digests(path, "csv") == plain  # a blank line is not a row


@pytest.mark.parametrize("scan", [True, False])
def test_a_jsonl_text_key_in_no_line_is_refused_naming_the_keys(tmp_path: Path, scan: bool) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1, "body": "a"}\n{"id": 2, "body": "b"}\n')
    reader = table_reader(str(path), "jsonl", TextSource("txt"), scan_keys=scan)
    reader.count()
    with pytest.raises(DataFileError, match=r"has no 'txt' key .*keys: \['id', 'body'\] \(--text-column"):
        list(reader.rows())
    path.write_text('{"id": 1, "body": "a"}\n{"id": 2, "txt": "b"}\n')  # a key some lines lack
    _, rows = rows_of(path, "jsonl", "txt")
    assert rows[0].problem is not None and rows[1].text == "b"


def test_a_parquet_text_column_in_no_row_is_refused_naming_the_columns(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [1], "body": ["a"]}), path)
    with pytest.raises(DataFileError, match=r"has no 'text' column .*columns: \['id', 'body'\]"):
        rows_of(path, "parquet")


@pytest.mark.parametrize("block", [1, 2, 3, 8, 1 << 20])
def test_a_csv_file_s_records_counted_as_lines_are_those_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    from langchain_qwen_fast.jobs import readers

    monkeypatch.setattr(readers, "_BLOCK", block)
    shuffle = random.Random(block)
    cells = ["text", "a", "b c", " ", "1", "2,World news,a description", "x,y", "é", "", "", ""]
    counted_as_lines = 0
    for trial in range(400):
        lines = [shuffle.choice(cells) for _ in range(shuffle.randint(0, 14))]
        ends = ["\n", "\r\n", "\r"] if trial % 3 == 0 else ["\n", "\r\n"]
        text = "".join(line + shuffle.choice(ends) for line in lines)
        if trial % 4 == 0:
            text = text.rstrip("\r\n")
        if trial % 10 == 0:
            text += '"quoted\nover lines"\n'
        path = tmp_path / "t.csv"
        path.write_text(text, encoding="utf-8", newline="")
        reader = readers.CsvReader(str(path), TextSource("text"))
        counted_as_lines += reader._plain_count() is not None
        counted = reader.count()
        with monkeypatch.context() as parsed:
            parsed.setattr(readers.CsvReader, "_plain_count", lambda self: None)
            assert counted == readers.CsvReader(str(path), TextSource("text")).count(), repr(text)
    assert counted_as_lines > 100
