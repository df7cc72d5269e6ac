"""The Ray path's pure parts against a canned vLLM (no network, no Ray cluster): the stage's
actor (columns, errors in place, the servers' errors raised for Ray to retry), the reader's
tables and row ids, the output folder and its job record, the input's files, the report read
back from written rows, the options refused, and the missing extra."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.errors import ConfigurationError, DataFileError, MissingDependencyError, TransportError
from langchain_qwen_fast.jobs.columns import added_columns
from langchain_qwen_fast.jobs.job import ClassifyOptions
from langchain_qwen_fast.jobs.ray_data import BatchColumns, ClassifyActor, ClassifyStage, HTTPServers, VLLMInActor
from langchain_qwen_fast.jobs.ray_job import (
    JOB_FILE,
    Location,
    RayOptions,
    check_apart,
    check_options,
    classify_dataset,
    cluster_address,
    count_block,
    input_files,
    open_output,
    result_of,
)
from langchain_qwen_fast.jobs.ray_read import PROBLEM_COLUMN, ROW_ID_COLUMN, row_id, rows_table
from langchain_qwen_fast.jobs.readers import table_reader
from langchain_qwen_fast.jobs.review import ReviewOptions
from langchain_qwen_fast.jobs.summary import Counts
from langchain_qwen_fast.jobs.tables import InputRow, TextSource
from langchain_qwen_fast.testing.samples import headlines
from tests.support.fake_vllm import FakeVLLM, status

LABELS = ("World", "Sports", "Business", "Sci/Tech")
URL = "http://vllm.test/v1"


def classifier(fake: FakeVLLM, **kwargs: Any) -> QwenClassifier:
    return QwenClassifier(labels=list(LABELS), base_url=URL, http_transport=fake.transport, **kwargs)


def actor(fake: FakeVLLM, *, multi_label: bool = False, **kwargs: Any) -> Any:
    """The stage's actor over the canned server, as a function of a table."""
    stage = ClassifyStage(labels=LABELS, multi_label=multi_label, **kwargs)
    runner = ClassifyActor(stage, BatchColumns(LABELS, multi_label), classifier(fake, multi_label=multi_label))
    return lambda table: asyncio.run(runner(table))


def options(tmp_path: Path, **kwargs: Any) -> ClassifyOptions:
    settings: dict[str, Any] = {
        "input": str(tmp_path / "in.parquet"),
        "out": str(tmp_path / "out"),
        "labels": LABELS,
    }
    return ClassifyOptions(**{**settings, **kwargs})


# -- the stage's actor ------------------------------------------------------------------------
def test_a_batch_keeps_every_column_and_adds_the_job_columns_with_errors_in_place() -> None:
    fake = FakeVLLM()
    texts: list[Any] = headlines(40)
    texts[3], texts[17] = "  ", None
    table = pa.table({"id": list(range(40)), "text": texts, "score": [i / 2 for i in range(40)]})
    out = actor(fake)(table)
    assert out.column_names == ["id", "text", "score", *added_columns(LABELS, False)]
    assert out.column("id").to_pylist() == list(range(40)) and out.column("text").to_pylist() == texts
    assert out.schema.field("id").type == pa.int64() and out.schema.field("p_World").type == pa.float64()
    rows = out.to_pylist()
    assert rows[3]["error"] == "InvalidInputError: text is empty or whitespace only" and rows[3]["label"] is None
    assert rows[17]["error"] == "InvalidInputError: expected text (str), got None"
    good = [r for i, r in enumerate(rows) if i not in (3, 17)]
    assert all(r["error"] is None and r["label"] in LABELS for r in good)
    direct = classifier(fake).batch([t for i, t in enumerate(texts) if i not in (3, 17)])
    assert [r["label"] for r in good] == [d.label for d in direct]


def test_the_servers_errors_fail_the_batch_for_ray_to_retry_and_a_rows_own_stays_in_it() -> None:
    fake = FakeVLLM()
    texts = headlines(30)
    texts[5] = "word " * 2000  # past the fake server's 512-token context: the row's own error
    out = actor(fake)(pa.table({"text": texts})).to_pylist()
    assert out[5]["error"].startswith("ContextLengthError") and out[5]["label"] is None
    assert all(r["label"] in LABELS for i, r in enumerate(out) if i != 5)
    down = FakeVLLM()
    down.fail("/completions", *[status(503)] * 50)
    with pytest.raises(TransportError):
        actor(down)(pa.table({"text": headlines(4)}))


def test_a_read_problem_becomes_the_rows_error_and_its_column_is_dropped() -> None:
    table = pa.table({"text": ["Stocks rally", "{bad"], PROBLEM_COLUMN: [None, "is not JSON: x"]})
    out = actor(FakeVLLM())(table)
    assert out.column_names == ["text", *added_columns(LABELS, False)]
    rows = out.to_pylist()
    assert rows[0]["error"] is None and rows[1]["error"] == "DataFileError: the row is not JSON: x"


def test_multi_label_rows_get_the_labels_column_as_a_list_of_text() -> None:
    out = actor(FakeVLLM(), multi_label=True)(pa.table({"text": [*headlines(6), ""]}))
    assert out.column_names[1:] == added_columns(LABELS, True)
    assert out.schema.field("labels").type == pa.list_(pa.string())
    rows = out.to_pylist()
    assert all(set(r["labels"]) <= set(LABELS) and r["error"] is None for r in rows[:6])
    assert rows[6]["labels"] == [] and rows[6]["error"].startswith("InvalidInputError")


def test_input_columns_named_like_added_ones_are_kept_renamed_and_title_and_description_read() -> None:
    out = actor(FakeVLLM())(pa.table({"text": headlines(3), "label": ["a", "b", "c"]}))
    assert out.column_names[:2] == ["text", "input_label"] and out.column("input_label").to_pylist() == ["a", "b", "c"]
    joined = actor(FakeVLLM())(pa.table({"title": ["Stocks rally"], "description": ["Rates fall"]}))
    assert joined.column("error").to_pylist() == [None]
    missing = actor(FakeVLLM())(pa.table({"body": ["Stocks rally"]})).to_pylist()
    assert missing[0]["error"].startswith("DataFileError: the row has no 'text' column")


def test_an_empty_batch_gets_the_columns_and_no_request() -> None:
    fake = FakeVLLM()
    out = actor(fake)(pa.table({"text": pa.array([], pa.string())}))
    assert out.num_rows == 0 and out.column_names == ["text", *added_columns(LABELS, False)]
    assert not fake.calls("/completions")


def test_stage_settings_that_cannot_work_are_refused() -> None:
    for bad in (
        ClassifyStage(),
        ClassifyStage(labels=("A",)),
        ClassifyStage(labels=LABELS, concurrency=(3, 2)),
        ClassifyStage(labels=LABELS, batch_size=0),
        ClassifyStage(labels=LABELS, engine=VLLMInActor("m", num_gpus=2)),
        ClassifyStage(classifier="c.json", multi_label=True),
    ):
        with pytest.raises(ConfigurationError):
            bad.check()
    ClassifyStage(labels=LABELS, engine=VLLMInActor("m", num_gpus=0.25), concurrency=4).check()
    assert VLLMInActor("/models/q", vllm_args=("--dtype", "half")).args() == [
        "--model", "/models/q", "--served-model-name", "qwen3", "--dtype", "half"
    ]  # fmt: skip
    built = ClassifyStage(labels=LABELS, engine=HTTPServers("http://a/v1", "m")).build()
    assert (built.base_url, built.model) == ("http://a/v1", "m")


# -- reading ---------------------------------------------------------------------------------
def test_row_ids_come_from_the_file_and_the_place_and_fit_signed_64_bits() -> None:
    ids = {row_id(path, i) for path in ("a.jsonl", "b.jsonl") for i in range(1000)}
    assert len(ids) == 2000 and all(0 <= i < 2**63 for i in ids)
    assert row_id("a.jsonl", 7) == row_id("a.jsonl", 7)


def test_a_jsonl_stream_keeps_strings_and_a_bad_line_in_its_place() -> None:
    lines = b'{"text": "007", "n": 1}\n{"text": "b", "n": "x"}\nnot json\n\n{"text": "\xff\xfe"}\n'
    reader = table_reader("s3://bucket/a.jsonl", "jsonl", TextSource(), stream=io.BufferedReader(io.BytesIO(lines)))
    rows = list(reader.rows())
    table = rows_table(rows, reader.columns or [], "s3://bucket/a.jsonl", 0)
    got = table.to_pylist()
    assert [r["text"] for r in got[:3]] == ["007", "b", "not json"]
    assert [r["n"] for r in got] == ["1", '"x"', None, None] or [r["n"] for r in got] == ["1", "x", None, None]
    assert table.schema.field("n").type == pa.string()
    assert got[2][PROBLEM_COLUMN].startswith("is not JSON") and "not UTF-8" in got[3][PROBLEM_COLUMN]
    assert [r[ROW_ID_COLUMN] for r in got] == [row_id("s3://bucket/a.jsonl", i) for i in range(4)]


def test_a_column_of_one_type_keeps_its_type() -> None:
    rows = [InputRow("line 1", {"n": 1, "text": "a"}), InputRow("line 2", {"n": 2, "text": "b"})]
    table = rows_table(rows, ["n", "text"], "f.csv", 10)
    assert table.schema.field("n").type == pa.int64() and table.column(ROW_ID_COLUMN).to_pylist()[0] == row_id(
        "f.csv", 10
    )


# -- the input's files and the output folder --------------------------------------------------
def test_the_input_is_a_file_a_folders_files_of_its_kind_or_a_globs_matches(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    for name in ("a.jsonl", "b.ndjson", "sub/c.jsonl", "notes.txt", "_skip.jsonl", ".hidden.jsonl"):
        (folder / name).write_text("{}\n")
    _, files = input_files(options(tmp_path, input=str(folder)), "jsonl")
    assert [Path(f.path).name for f in files] == ["a.jsonl", "b.ndjson", "c.jsonl"]
    _, globbed = input_files(options(tmp_path, input=str(folder / "*.jsonl")), "jsonl")
    assert [Path(f.path).name for f in globbed] == ["a.jsonl"]
    with pytest.raises(DataFileError, match="no such file"):
        input_files(options(tmp_path, input=str(tmp_path / "nothing")), "jsonl")
    with pytest.raises(DataFileError, match="holds no parquet file"):
        input_files(options(tmp_path, input=str(folder)), "parquet")


def test_a_remote_out_stays_remote_and_a_local_one_is_made_absolute(tmp_path: Path) -> None:
    local = Location.of("relative/out")
    assert Path(local.path).is_absolute() and local.given == local.path
    on_uri = Location.of(f"file://{tmp_path}/out")
    assert on_uri.path == f"{tmp_path}/out" and on_uri.child("_job.json") == f"file://{tmp_path}/out/_job.json"


def record(**changes: Any) -> dict[str, Any]:
    return {"labels": list(LABELS), "text_column": "text", "files": [["/in/a.jsonl", 10, 1]], **changes}


def test_a_rerun_of_the_same_job_keeps_its_rows_and_another_job_is_refused(tmp_path: Path) -> None:
    out = Location.of(str(tmp_path / "out"))
    open_output(out, record(), fresh=False)
    (tmp_path / "out" / "part-1.parquet").write_bytes(b"done")
    open_output(out, record(), fresh=False)
    assert (tmp_path / "out" / "part-1.parquet").is_file()
    with pytest.raises(ConfigurationError, match="--text-column differ: text vs body"):
        open_output(out, record(text_column="body"), fresh=False)
    with pytest.raises(ConfigurationError, match="files differ"):
        open_output(out, record(files=[["/in/a.jsonl", 11, 2]]), fresh=False)
    open_output(out, record(files=[["/in/a.jsonl", 11, 2]]), fresh=True)
    assert not (tmp_path / "out" / "part-1.parquet").exists() and (tmp_path / "out" / JOB_FILE).is_file()
    assert json.loads((tmp_path / "out" / JOB_FILE).read_text())["job"]["files"] == [["/in/a.jsonl", 11, 2]]


def test_an_output_that_is_the_input_holds_it_or_lies_in_it_is_refused(tmp_path: Path) -> None:
    folder = Location.of(str(tmp_path / "in"))
    for out in ("in", "in/out", "."):
        with pytest.raises(ConfigurationError, match="overlap"):
            check_apart(folder, Location.of(str(tmp_path / out)))
    check_apart(folder, Location.of(str(tmp_path / "input-labelled")))
    check_apart(Location.of(str(tmp_path / "in" / "a.jsonl")), Location.of(str(tmp_path / "in" / "a.jsonl-out")))


def test_a_folder_of_other_files_and_a_file_as_output_are_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "theirs.parquet").write_bytes(b"?")
    with pytest.raises(ConfigurationError, match="no qwen-fast job"):
        open_output(Location.of(str(tmp_path / "out")), record(), fresh=False)
    assert (tmp_path / "out" / "theirs.parquet").is_file()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError, match="is a file"):
        open_output(Location.of(str(tmp_path / "file")), record(), fresh=False)


# -- the report ------------------------------------------------------------------------------
def test_the_report_counts_written_rows_as_the_job_counts_results() -> None:
    fake = FakeVLLM()
    texts: list[Any] = headlines(20)
    texts[4] = ""
    out = actor(fake)(pa.table({"id": list(range(20)), "text": texts}))
    written = out.to_pylist()
    review = ReviewOptions("r.csv", below=0.99, sample=3)
    part = count_block(out, LABELS, False, TextSource(), review, "id").to_pylist()[0]
    counts = Counts.from_json(json.loads(part["counts"]))
    expected = Counts()
    for row in written:
        expected.add(result_of(row, LABELS, False))
    assert counts == expected and counts.rows == 20 and counts.errors == 1
    assert counts.error_kinds == {"InvalidInputError": 1} and sum(counts.label_counts.values()) == 19
    entries = json.loads(part["review"])
    assert {e["row"] for e in entries} <= set(range(20)) - {4} and entries


# -- options ---------------------------------------------------------------------------------
def test_options_this_path_cannot_do_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="--max-error-rate is not done on Ray"):
        check_options(options(tmp_path, max_error_rate=0.1), RayOptions())
    with pytest.raises(ConfigurationError, match="not stdin"):
        check_options(options(tmp_path, input="-", input_format="csv"), RayOptions())
    with pytest.raises(ConfigurationError, match="--input-format"):
        check_options(options(tmp_path, input=str(tmp_path / "folder/")), RayOptions())
    with pytest.raises(ConfigurationError, match="--actors"):
        check_options(options(tmp_path), RayOptions(actors=(3, 1)))
    assert check_options(options(tmp_path, input_format="csv", output_format="jsonl"), RayOptions()) == (
        "csv",
        "jsonl",
    )
    assert cluster_address("local") is None and cluster_address("auto") == "auto"


def test_the_command_reads_actors_as_n_or_min_max() -> None:
    from langchain_qwen_fast.cli.classify import ray_options
    from langchain_qwen_fast.cli.main import build_parser

    parse = build_parser().parse_args
    base = ["classify", "in.jsonl", "--out", "o", "--labels", "A,B", "--ray", "local"]
    assert ray_options(parse([*base, "--actors", "2,8"])).actors == (2, 8)  # type: ignore[union-attr]
    got = ray_options(parse([*base, "--actors", "3", "--vllm-model", "m", "--vllm-arg=--dtype=half"]))
    assert got is not None and got.actors == (3, 3) and got.vllm_args == ("--dtype=half",)
    assert got.engine(options(Path("."))) == VLLMInActor("m", "qwen3", ("--dtype=half",), 1.0)


def test_without_ray_the_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # importlib finds no spec for it
    with pytest.raises(MissingDependencyError, match=r"pip install 'langchain-qwen-fast\[ray\]'"):
        classify_dataset(options(tmp_path))


# -- questions -------------------------------------------------------------------------------
def test_a_questions_stage_adds_the_answers_columns_with_errors_in_place_and_counts_them_back() -> None:
    from langchain_qwen_fast import QwenDecisionModel
    from langchain_qwen_fast.jobs.questions import load_questions, outcome_of, question_columns
    from tests.unit_tests.jobs.test_questions import QUESTIONS, tickets

    fake = FakeVLLM()
    questions = load_questions(QUESTIONS)
    stage = ClassifyStage(questions=QUESTIONS)
    stage.check()
    assert stage.columns() == BatchColumns((), False, questions)
    model = QwenDecisionModel(base_url=URL, model="qwen3", http_transport=fake.transport)
    runner = ClassifyActor(stage, stage.columns(), model)
    texts: list[Any] = tickets(12)
    texts[2], texts[7] = "", None
    out = asyncio.run(runner(pa.table({"id": list(range(12)), "text": texts})))
    assert out.column_names == ["id", "text", *question_columns(questions)]
    assert out.schema.field("team").type == pa.string() and out.schema.field("anger.p_1").type == pa.float64()
    rows = out.to_pylist()
    assert rows[2]["error"].startswith("InvalidInputError: state is empty") and rows[2]["team"] is None
    assert rows[7]["error"].startswith("InvalidInputError: state must be text")
    good = [t for i, t in enumerate(texts) if i not in (2, 7)]
    direct = model.batch([{"state": t, "questions": QUESTIONS} for t in good])
    answered = [r for i, r in enumerate(rows) if i not in (2, 7)]
    assert [r["team"] for r in answered] == [d.choices["team"].choice for d in direct]
    assert [r["urgent"] for r in answered] == pytest.approx([d.nouls["urgent"].noul for d in direct])
    part = count_block(out, (), False, TextSource(), None, "id", questions).to_pylist()[0]
    counts = Counts.from_json(json.loads(part["counts"]))
    expected = Counts()
    for row in rows:
        expected.add(outcome_of(row, questions))
    assert counts == expected and counts.errors == 2 and sum(counts.answer_counts["team"].values()) == 10
    down = FakeVLLM()
    down.fail("/completions", *[status(503)] * 50)
    broken = QwenDecisionModel(base_url=URL, model="qwen3", http_transport=down.transport, max_retries=0)
    with pytest.raises(TransportError):
        asyncio.run(ClassifyActor(stage, stage.columns(), broken)(pa.table({"text": tickets(3)})))


def test_a_questions_stage_refuses_a_classifier_and_a_bad_question_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="labels is for a classifier's labels; questions asks"):
        ClassifyStage(labels=LABELS, questions={"u": {"type": "noul", "instructions": "x"}}).check()
    with pytest.raises(ConfigurationError, match="question 'u' is not a Noul"):
        ClassifyStage(questions={"u": {"type": "nope"}}).check()
    with pytest.raises(ConfigurationError, match="--review-out is for a classifier's labels"):
        check_options(
            options(tmp_path, labels=None, questions={"u": {"type": "noul", "instructions": "x"}}, review_out="r.csv",
                    review_sample=2),
            RayOptions(),
        )  # fmt: skip


def test_the_counter_gives_the_steady_rate_from_when_every_actor_had_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pace: the time until the last actor's first batch, then the rows of the batches
    finished after it over the time to the last one; the rows finished until that moment are
    not in the rate."""
    import langchain_qwen_fast.jobs.ray_job as ray_job
    from langchain_qwen_fast.jobs.ray_job import BatchCounter, Pace

    clock = iter([100.0, 101.0, 103.0, 104.0, 105.0, 107.0])
    monkeypatch.setattr(ray_job.time, "monotonic", lambda: next(clock))
    counter = BatchCounter()  # started at 100
    assert counter.pace() == Pace(0, None, None)
    counter.add(10, 0, 50.0, "a")  # 101: a's first
    assert counter.pace() == Pace(1, 1.0, None)  # nothing after it yet
    counter.add(10, 1, 60.0, "b")  # 103: b's first: every actor has answered, 20 rows counted
    counter.add(30, 0, 55.0, "a")  # 104
    counter.add(30, 0, 55.0, "b")  # 105
    counter.add(20, 0, 55.0, "a")  # 107
    # After 103: 80 rows in 4 s.
    assert counter.pace() == Pace(2, 3.0, 20.0)
    assert counter.totals() == (100, 1, 60.0)
