"""The job against a canned vLLM (no network): every row once and in order, bad rows in place,
resumed after an interruption from the chunks it committed, refused with other options."""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.cli import classify as command
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.jobs.job import ClassifyOptions, classify_table
from langchain_qwen_fast.jobs.parts import WorkFolder, work_folder
from langchain_qwen_fast.jobs.restart import differences
from langchain_qwen_fast.testing.samples import headlines
from tests.support.cli import parse_command
from tests.support.fake_vllm import FakeVLLM, prompts_in, prompts_of

LABELS = ("World", "Sports", "Business", "Sci/Tech")
URL = "http://vllm.test/v1"


def classifier(transport: Any, **kwargs: Any) -> QwenClassifier:
    return QwenClassifier(labels=list(kwargs.pop("labels", LABELS)), base_url=URL, http_transport=transport, **kwargs)


def options(source: Path, out: Path, **kwargs: Any) -> ClassifyOptions:
    settings: dict[str, Any] = {"labels": LABELS, "progress": False, "histogram": False, "chunk_rows": 50}
    return ClassifyOptions(str(source), str(out), **{**settings, **kwargs})


def write_csv(path: Path, texts: list[str]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        writer.writerows([i, t] for i, t in enumerate(texts))
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture
def fake() -> FakeVLLM:
    return FakeVLLM()


def test_every_row_once_in_order_with_bad_rows_in_place(fake: FakeVLLM, tmp_path: Path) -> None:
    texts = headlines(230)
    texts[7] = "   "
    texts[100] = "word " * 2000  # past the fake server's 512-token context
    source = write_csv(tmp_path / "in.csv", texts)
    out = tmp_path / "out.csv"
    report = classify_table(options(source, out), classifier(fake.transport))
    rows = read_csv(out)
    assert [r["id"] for r in rows] == [str(i) for i in range(230)] and [r["text"] for r in rows] == texts
    assert rows[7]["error"].startswith("InvalidInputError: text is empty") and rows[7]["label"] == ""
    assert rows[100]["error"].startswith("ContextLengthError")
    good = [r for i, r in enumerate(rows) if i not in (7, 100)]
    assert all(r["label"] in LABELS and r["error"] == "" for r in good)
    assert all(abs(sum(float(r[f"p_{label}"]) for label in LABELS) - 1) < 1e-6 for r in good)
    direct = classifier(fake.transport).batch(texts[:5])
    assert [r["label"] for r in rows[:5]] == [d.label for d in direct]
    assert report.rows == 230 and report.errors == 2 and report.resumed_rows == 0
    assert report.error_kinds == {"InvalidInputError": 1, "ContextLengthError": 1}
    assert sum(report.label_counts.values()) == 228
    assert json.loads(Path(report.report).read_text())["rows"] == 230
    assert not work_folder(out).exists()


def test_chunks_sized_from_the_engine_keep_every_request_in_flight_full(fake: FakeVLLM, tmp_path: Path) -> None:
    # Three servers, eight requests in flight each: once their windows have opened, a chunk of
    # at least 3 * 8 * 128 rows lets every request carry the most prompts a request the client
    # sends (128); chunks of 1,024 rows would have sent 43 a request.
    source = write_csv(tmp_path / "in.csv", headlines(7000))
    urls = ["http://a.test/v1", "http://b.test/v1", "http://c.test/v1"]
    job = QwenClassifier(labels=list(LABELS), base_url=urls, http_transport=fake.transport)
    for _ in range(2):  # the servers answer at once: their windows open fully
        job.batch(headlines(3 * 1024))
    before = len(fake.calls("/completions"))
    report = classify_table(options(source, tmp_path / "out.csv", chunk_rows=None), job)
    asked = [prompts_of(r.body["prompt"]) for r in fake.calls("/completions")[before:]]
    sizes = [len(prompts) for prompts, listed in asked if listed]
    assert report.rows == 7000 and sum(sizes) == 7000
    assert max(sizes) == 128 and sum(size for size in sizes if size >= 100) >= 0.75 * 7000


def test_rows_that_cannot_be_read_are_written_with_their_error(fake: FakeVLLM, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"text": "Stocks rally"}\n{oops\n{"body": "x"}\n{"text": "caf\xe9 opens"}\n{"text": 5}\n')
    out = tmp_path / "out.jsonl"
    report = classify_table(options(source, out), classifier(fake.transport))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5 and rows[0]["error"] is None and rows[0]["label"] in LABELS
    assert rows[1]["text"] == "{oops" and "line 2 is not JSON" in rows[1]["error"]
    assert rows[2]["body"] == "x" and "line 3 has no 'text' key" in rows[2]["error"]
    assert rows[3]["text"] == "caf\ufffd opens" and "not UTF-8" in rows[3]["error"]
    assert rows[4]["error"] == "InvalidInputError: expected text (str), got int"
    assert report.errors == 4


def test_input_columns_named_like_added_ones_are_kept_renamed(fake: FakeVLLM, tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text("text,label\nStocks rally,Business\n")
    out = tmp_path / "out.csv"
    classify_table(options(source, out), classifier(fake.transport))
    (row,) = read_csv(out)
    assert row["input_label"] == "Business" and row["label"] in LABELS


class Killed(BaseException):
    """Stands for the process being killed: nothing catches it on the way out."""


def dying_after(fake: FakeVLLM, prompts: int) -> httpx.MockTransport:
    """A transport whose process is killed at the first completions request past ``prompts``
    prompts."""
    seen = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/completions"):
            seen["n"] += prompts_in(request)
            if seen["n"] > prompts:
                raise Killed
        return fake(request)

    return httpx.MockTransport(handler)


def test_an_interrupted_job_resumes_from_its_committed_chunks(fake: FakeVLLM, tmp_path: Path) -> None:
    texts = headlines(400)
    texts[123] = ""
    source = write_csv(tmp_path / "in.csv", texts)
    whole = tmp_path / "whole.csv"
    classify_table(options(source, whole, chunks_in_flight=2), classifier(fake.transport))
    out = tmp_path / "out.csv"
    with pytest.raises(Killed):
        classify_table(options(source, out, chunks_in_flight=2), classifier(dying_after(fake, 250)))
    folder = work_folder(out)
    committed = WorkFolder(out, "csv").chunks()
    assert committed and not out.exists()
    # a kill in the middle of a commit leaves a temporary file or a digest without its rows
    (folder / ".tmp-000000000350.csv").write_text("half a chunk")
    (folder / "000000000350.digest.json").write_text('{"rows": 50}')
    report = classify_table(options(source, out, chunks_in_flight=2), classifier(fake.transport))
    assert report.resumed_rows == sum(chunk.rows for chunk in committed) > 0
    assert report.resumed_rows + report.classified_rows == 400 == report.rows
    assert read_csv(out) == read_csv(whole)
    assert (
        report.errors == 1
        and report.label_counts == json.loads(Path(f"{whole}.report.json").read_text())["label_counts"]
    )
    assert not folder.exists()


def test_a_restart_with_other_options_is_refused_naming_the_difference(fake: FakeVLLM, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(200))
    out = tmp_path / "out.csv"
    with pytest.raises(Killed):
        classify_table(options(source, out, labels=("A", "B")), classifier(dying_after(fake, 125), labels=("A", "B")))
    with pytest.raises(ConfigurationError, match="--labels differ: A,B vs A,C") as refused:
        classify_table(options(source, out, labels=("A", "C")), classifier(fake.transport, labels=("A", "C")))
    assert "--fresh" in str(refused.value)
    assert work_folder(out).exists()  # nothing was lost
    report = classify_table(
        options(source, out, labels=("A", "C"), fresh=True), classifier(fake.transport, labels=("A", "C"))
    )
    assert report.resumed_rows == 0 and report.rows == 200


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"prompt_layout": "compact"}, "prompt_layout differ: chat vs compact"),
        ({"instructions": "Pick the topic."}, "instructions differ"),
        ({"label_descriptions": {"World": "international news"}}, "label_descriptions differ"),
        ({"examples": [("Cup final", "Sports")]}, "examples differ"),
        ({"temperature": 1.5}, "temperature differ: 1.0 vs 1.5"),
        ({"abstain_below": 0.3}, "--abstain-below differ: none vs 0.3"),
    ],
    ids=["prompt_layout", "instructions", "label_descriptions", "examples", "temperature", "abstain_below"],
)
def test_a_restart_with_another_setting_that_changes_answers_is_refused_naming_it(
    fake: FakeVLLM, tmp_path: Path, change: dict[str, Any], named: str
) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(200))
    out = tmp_path / "out.csv"
    with pytest.raises(Killed):
        classify_table(options(source, out), classifier(dying_after(fake, 125), api_key="sk-secret"))
    with pytest.raises(ConfigurationError, match=re.escape(named)) as refused:
        classify_table(options(source, out), classifier(fake.transport, api_key="sk-secret", **change))
    assert "sk-secret" not in str(refused.value) and "--fresh" in str(refused.value)
    assert work_folder(out).exists()  # nothing was lost


def test_a_restart_with_other_servers_timeouts_and_sizes_resumes(fake: FakeVLLM, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(200))
    out = tmp_path / "out.csv"
    with pytest.raises(Killed):
        classify_table(options(source, out), classifier(dying_after(fake, 125)))
    committed = WorkFolder(out, "csv").chunks()
    reached_otherwise = QwenClassifier(
        labels=list(LABELS),
        base_url=["http://a.test/v1", "http://b.test/v1"],
        http_transport=fake.transport,
        api_key="sk-other",
        timeout=5.0,
        max_retries=0,
        batch_size=8,
        max_concurrency=2,
    )
    report = classify_table(options(source, out), reached_otherwise)
    assert report.resumed_rows == sum(chunk.rows for chunk in committed) > 0 and report.rows == 200


def test_differences_name_each_field_by_its_flag() -> None:
    saved = {"label_sets.labels": ["A", "B"], "rules.abstain_below": None, "input": "a.csv", "text_column": "text"}
    now = {"label_sets.labels": ["A", "B"], "rules.abstain_below": 0.5, "input": "b.csv", "text_column": "body"}
    assert differences(saved, now) == [
        "the input differ: a.csv vs b.csv",
        "--text-column differ: text vs body",
        "--abstain-below differ: none vs 0.5",
    ]


def test_a_changed_input_is_refused(fake: FakeVLLM, tmp_path: Path) -> None:
    texts = headlines(200)
    source = write_csv(tmp_path / "in.csv", texts)
    out = tmp_path / "out.csv"
    with pytest.raises(Killed):
        classify_table(options(source, out), classifier(dying_after(fake, 125)))
    assert WorkFolder(out, "csv").chunks()
    write_csv(source, [texts[0].upper(), *texts[1:]])
    with pytest.raises(ConfigurationError, match=r"its row 1 \(line 2\) differs"):
        classify_table(options(source, out), classifier(fake.transport))


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_other_output_kinds(fake: FakeVLLM, tmp_path: Path, kind: str) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(120))
    out = tmp_path / f"out.{kind}"
    classify_table(options(source, out, multi_label=True), classifier(fake.transport, multi_label=True))
    if kind == "jsonl":
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    else:
        import pyarrow.parquet as pq

        rows = pq.read_table(out).to_pylist()
    assert [r["id"] for r in rows] == [str(i) for i in range(120)]
    assert all(isinstance(r["labels"], list) and set(r["labels"]) <= set(LABELS) for r in rows)
    assert any(r["labels"] for r in rows)


def test_options_that_cannot_work_are_named(tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", ["x"])
    cases: list[tuple[dict[str, Any], str]] = [
        ({"labels": None}, "give --classifier DIR or --labels"),
        ({"review_below": 0.5}, "need --review-out"),
        ({"review_out": str(tmp_path / "r.csv")}, "needs --review-below"),
        ({"review_out": str(tmp_path / "r.parquet"), "review_sample": 3}, r"must be \.csv or \.jsonl"),
        ({"chunk_rows": 0}, "at least 1"),
        ({"max_error_rate": -0.1}, r"--max-error-rate must be within \[0, 1\]"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigurationError, match=message):
            classify_table(options(source, tmp_path / "out.csv", **kwargs))
    with pytest.raises(ConfigurationError, match="--out is the input file"):
        classify_table(options(source, source))


def test_the_command_parses_into_the_options() -> None:
    args = parse_command(command, ["in.csv", "--out", "o.parquet", "--labels", "A,B", "C", "--review-out", "r.csv",
                                   "--review-below", "0.7", "--review-sample", "9", "--no-progress", "--chunk-rows",
                                   "64"])  # fmt: skip
    got = command.classify_options(args)
    assert got == ClassifyOptions(
        "in.csv", "o.parquet", labels=("A", "B", "C"), review_out="r.csv", review_below=0.7, review_sample=9,
        progress=False, chunk_rows=64,
    )  # fmt: skip
    assert command.classify_options(parse_command(command, ["-", "--out", "o.csv", "--classifier", "m"])) == (
        ClassifyOptions("-", "o.csv", classifier="m")
    )


def test_output_is_written_whole_or_not_at_all(fake: FakeVLLM, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(60))
    out = tmp_path / "out.csv"
    classify_table(options(source, out), classifier(fake.transport))
    assert sorted(os.listdir(tmp_path)) == ["in.csv", "out.csv", "out.csv.report.json"]
