"""The Ray path's pure parts against a canned vLLM (no network, no Ray): the batch callable's
columns and errors in place, shard naming, cutting and skipping, the job record, the options
it refuses, and the missing extra."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.errors import ConfigurationError, DataFileError, MissingDependencyError
from langchain_qwen_fast.jobs.columns import added_columns
from langchain_qwen_fast.jobs.job import ClassifyOptions
from langchain_qwen_fast.jobs.ray_data import (
    JOB_FILE,
    BatchColumns,
    QwenClassifierBatch,
    RayOptions,
    check_options,
    classify_dataset,
    cut_into_shards,
    job_record,
    open_output,
    pending_shards,
    shard_bounds,
    shard_files,
    shard_name,
)
from langchain_qwen_fast.testing.samples import headlines
from tests.support.fake_vllm import FakeVLLM

LABELS = ("World", "Sports", "Business", "Sci/Tech")
URL = "http://vllm.test/v1"


def classifier(fake: FakeVLLM, **kwargs: Any) -> QwenClassifier:
    return QwenClassifier(labels=list(LABELS), base_url=URL, http_transport=fake.transport, **kwargs)


def options(tmp_path: Path, **kwargs: Any) -> ClassifyOptions:
    settings: dict[str, Any] = {
        "input": str(tmp_path / "in"),
        "out": str(tmp_path / "out"),
        "labels": LABELS,
        "input_format": "parquet",
    }
    return ClassifyOptions(**{**settings, **kwargs})


def batch(fake: FakeVLLM, tmp_path: Path, *, multi_label: bool = False, **kwargs: Any) -> QwenClassifierBatch:
    columns = BatchColumns(LABELS, multi_label, kwargs.pop("renames", {}))
    return QwenClassifierBatch(options(tmp_path, **kwargs), columns, classifier(fake, multi_label=multi_label))


# -- the batch callable -------------------------------------------------------------------
def test_batch_keeps_every_column_and_adds_the_job_columns_with_errors_in_place(tmp_path: Path) -> None:
    fake = FakeVLLM()
    texts: list[Any] = headlines(40)
    texts[3], texts[17] = "  ", None
    table = pa.table({"id": list(range(40)), "text": texts, "score": [i / 2 for i in range(40)]})
    out = batch(fake, tmp_path)(table)
    assert out.column_names == ["id", "text", "score", *added_columns(LABELS, False)]
    assert out.column("id").to_pylist() == list(range(40)) and out.column("text").to_pylist() == texts
    assert out.schema.field("id").type == pa.int64() and out.schema.field("p_World").type == pa.float64()
    rows = out.to_pylist()
    assert rows[3]["error"] == "InvalidInputError: text is empty or whitespace only" and rows[3]["label"] is None
    assert rows[17]["error"] == "InvalidInputError: expected text (str), got None"
    assert rows[3]["p_World"] is None and rows[3]["abstained"] is False
    good = [r for i, r in enumerate(rows) if i not in (3, 17)]
    assert all(r["error"] is None and r["label"] in LABELS for r in good)
    assert all(abs(sum(r[f"p_{label}"] for label in LABELS) - 1) < 1e-6 for r in good)
    direct = classifier(fake).batch([t for i, t in enumerate(texts) if i not in (3, 17)])
    assert [r["label"] for r in good] == [d.label for d in direct]


def test_a_request_that_fails_fails_only_its_rows(tmp_path: Path) -> None:
    fake = FakeVLLM()
    texts = headlines(30)
    texts[5] = "word " * 2000  # past the fake server's 512-token context
    out = batch(fake, tmp_path)(pa.table({"text": texts})).to_pylist()
    assert out[5]["error"].startswith("ContextLengthError") and out[5]["label"] is None
    assert all(r["label"] in LABELS for i, r in enumerate(out) if i != 5)


def test_multi_label_rows_get_the_labels_column_as_a_list_of_text(tmp_path: Path) -> None:
    out = batch(FakeVLLM(), tmp_path, multi_label=True)(pa.table({"text": [*headlines(6), ""]}))
    assert out.column_names[1:] == added_columns(LABELS, True)
    assert out.schema.field("labels").type == pa.list_(pa.string())
    rows = out.to_pylist()
    assert all(set(r["labels"]) <= set(LABELS) and r["error"] is None for r in rows[:6])
    assert rows[6]["labels"] == [] and rows[6]["error"].startswith("InvalidInputError")


def test_input_columns_named_like_added_ones_are_kept_renamed(tmp_path: Path) -> None:
    table = pa.table({"text": headlines(3), "label": ["a", "b", "c"]})
    out = batch(FakeVLLM(), tmp_path, renames={"label": "input_label"})(table)
    assert out.column_names[:2] == ["text", "input_label"] and out.column("input_label").to_pylist() == ["a", "b", "c"]
    assert all(label in LABELS for label in out.column("label").to_pylist())


def test_rows_without_the_text_column_use_title_and_description_or_get_an_error(tmp_path: Path) -> None:
    fake = FakeVLLM()
    joined = batch(fake, tmp_path)(pa.table({"title": ["Stocks rally"], "description": ["Rates fall"]}))
    assert joined.column("error").to_pylist() == [None]
    missing = batch(fake, tmp_path)(pa.table({"body": ["Stocks rally"]})).to_pylist()
    assert missing[0]["error"].startswith("DataFileError: the row has no 'text' column")


def test_an_empty_batch_gets_the_columns_and_no_request(tmp_path: Path) -> None:
    fake = FakeVLLM()
    out = batch(fake, tmp_path)(pa.table({"text": pa.array([], pa.string())}))
    assert out.num_rows == 0 and out.column_names == ["text", *added_columns(LABELS, False)]
    assert not fake.calls("/completions")


# -- shards ---------------------------------------------------------------------------------
def test_shards_are_fixed_runs_named_by_index_in_sort_order() -> None:
    assert shard_bounds(25, 10) == [(0, 10), (10, 20), (20, 25)]
    assert shard_bounds(20, 10) == [(0, 10), (10, 20)] and shard_bounds(0, 10) == []
    names = [shard_name(i) for i in (0, 9, 10, 123456)]
    assert names[0] == "shard-000000.parquet" and names == sorted(names)
    with pytest.raises(ConfigurationError):
        shard_bounds(5, 0)


def test_only_shards_without_their_file_are_pending(tmp_path: Path) -> None:
    for i in (0, 2, 3):
        (tmp_path / shard_name(i)).write_bytes(b"x")
    (tmp_path / ".tmp-shard-000001.parquet").write_bytes(b"half")
    assert pending_shards(tmp_path, 5) == [1, 4]
    assert [p.name for p in shard_files(tmp_path)] == [shard_name(i) for i in (0, 2, 3)]


def test_the_ordered_stream_is_cut_into_the_shards_sizes() -> None:
    stream = [pa.table({"n": list(range(a, b))}) for a, b in [(0, 3), (3, 4), (4, 11), (11, 12)]]
    shards = list(cut_into_shards(iter(stream), [5, 5, 2]))
    assert [s.column("n").to_pylist() for s in shards] == [list(range(5)), list(range(5, 10)), [10, 11]]
    with pytest.raises(DataFileError, match="1 rows more"):
        list(cut_into_shards(iter(stream), [5, 6]))
    with pytest.raises(DataFileError, match="then nothing more"):
        list(cut_into_shards(iter(stream), [12, 3]))


# -- the output folder and its job record -----------------------------------------------------
def record(tmp_path: Path, fake: FakeVLLM, **kwargs: Any) -> dict[str, Any]:
    rows = kwargs.pop("rows", 100)
    shard_rows = kwargs.pop("shard_rows", 10)
    return job_record(options(tmp_path, **kwargs), classifier(fake), "parquet", rows, shard_rows)


def test_a_rerun_of_the_same_job_keeps_its_shards_and_another_job_is_refused(tmp_path: Path) -> None:
    fake, out = FakeVLLM(), tmp_path / "out"
    open_output(out, record(tmp_path, fake), fresh=False)
    (out / shard_name(0)).write_bytes(b"done")
    open_output(out, record(tmp_path, fake), fresh=False)
    assert (out / shard_name(0)).is_file()
    with pytest.raises(ConfigurationError, match="shard_rows differ: 10 vs 20"):
        open_output(out, record(tmp_path, fake, shard_rows=20), fresh=False)
    with pytest.raises(ConfigurationError, match="--text-column differ: text vs body"):
        open_output(out, record(tmp_path, fake, text_column="body"), fresh=False)
    open_output(out, record(tmp_path, fake, shard_rows=20), fresh=True)
    assert not shard_files(out) and (out / JOB_FILE).is_file()
    open_output(out, record(tmp_path, fake, shard_rows=20), fresh=False)


def test_shards_without_a_job_record_and_a_file_as_output_are_refused(tmp_path: Path) -> None:
    fake, out = FakeVLLM(), tmp_path / "out"
    out.mkdir()
    (out / shard_name(0)).write_bytes(b"?")
    with pytest.raises(ConfigurationError, match=f"without {JOB_FILE}"):
        open_output(out, record(tmp_path, fake), fresh=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError, match="is a file"):
        open_output(tmp_path / "file", record(tmp_path, fake), fresh=False)


# -- options --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"review_out": "r.csv", "review_below": 0.5}, "--review-out is not done on Ray"),
        ({"output_format": "csv"}, "folder of Parquet shards, not csv"),
        ({"input_format": None}, "--input-format"),
    ],
)
def test_options_this_path_cannot_do_are_refused_by_name(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        check_options(options(tmp_path, **changes), RayOptions())


def test_ray_options_that_cannot_work_are_refused(tmp_path: Path) -> None:
    assert check_options(options(tmp_path, input_format="csv"), RayOptions()) == "csv"
    for bad in (RayOptions(shard_rows=0), RayOptions(actors=0), RayOptions(actor_cpus=-1)):
        with pytest.raises(ConfigurationError):
            check_options(options(tmp_path), bad)
    with pytest.raises(ConfigurationError, match="not stdin"):
        check_options(options(tmp_path, input="-"), RayOptions())


def test_without_ray_the_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # importlib finds no spec for it
    with pytest.raises(MissingDependencyError, match=r"pip install 'langchain-qwen-fast\[ray\]'"):
        classify_dataset(options(tmp_path))
