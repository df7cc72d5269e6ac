"""A dataset classified on a local Ray cluster (2 CPUs, a small object store, no dashboard)
against the real vLLM server (the tiny model as ``qwen3``): rows in = rows out in input order,
the labels and probabilities of ``QwenClassifier.batch`` on the same rows, errors in place, a
re-run that redoes only the shard whose file was deleted, and the job benchmark's Ray path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.jobs.job import ClassifyOptions
from langchain_qwen_fast.jobs.ray_data import RayOptions, classify_dataset, shard_files, shard_name
from langchain_qwen_fast.testing.samples import news_items
from tests.integration_tests.conftest import NEWS_LABELS

ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

#: Rows 5 and 61 have nothing to classify; they get their error in their row.
EMPTY_ROWS = (5, 61)
#: One actor on one CPU: the other CPU is left to Ray Data's read and split tasks.
ONE_ACTOR = RayOptions(shard_rows=40, actors=1, actor_cpus=1, batch_rows=16)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray for this module: 2 CPUs, a 100 MiB object store, no dashboard; shut down at
    the end of the module."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=100 * 1024 * 1024,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield
    finally:
        ray.shutdown()


def rows_of(n: int) -> list[dict[str, Any]]:
    texts: list[Any] = news_items(n)
    for i in EMPTY_ROWS:
        texts[i] = "  " if i % 2 else None
    return [{"id": i, "text": t, "label": f"given-{i}"} for i, t in enumerate(texts)]


def job(tmp_path: Path, source: Path, server_url: str, **kwargs: Any) -> ClassifyOptions:
    settings: dict[str, Any] = {"labels": tuple(NEWS_LABELS), "base_url": server_url, "model": "qwen3"}
    return ClassifyOptions(str(source), str(tmp_path / "out"), **{**settings, **kwargs})


def read_output(out: Path) -> list[dict[str, Any]]:
    return [row for path in shard_files(out) for row in pq.read_table(path).to_pylist()]


def test_rows_in_order_with_the_labels_of_batch_and_errors_in_place(
    local_ray: None, server_url: str, tmp_path: Path
) -> None:
    given = rows_of(130)
    source = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(given), source)
    report = classify_dataset(job(tmp_path, source, server_url), ONE_ACTOR)
    assert (report.rows, report.shards, report.written, report.skipped) == (130, 4, [0, 1, 2, 3], [])
    assert report.error_rows == len(EMPTY_ROWS)
    out = read_output(tmp_path / "out")
    assert [p.name for p in shard_files(tmp_path / "out")] == [shard_name(i) for i in range(4)]
    assert [r["id"] for r in out] == list(range(130)) and [r["text"] for r in out] == [g["text"] for g in given]
    assert [r["input_label"] for r in out] == [g["label"] for g in given]
    for i in EMPTY_ROWS:
        assert out[i]["error"].startswith("InvalidInputError") and out[i]["label"] is None
    good = [i for i in range(130) if i not in EMPTY_ROWS]
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=server_url, model="qwen3")
    direct = classifier.batch([given[i]["text"] for i in good])
    assert [out[i]["label"] for i in good] == [d.label for d in direct]
    for i, d in zip(good, direct):
        assert d.scores is not None and out[i]["error"] is None
        assert all(abs(out[i][f"p_{label}"] - d.scores[label]) < 1e-4 for label in NEWS_LABELS)


def test_a_rerun_redoes_only_the_shard_whose_file_was_deleted(local_ray: None, server_url: str, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows_of(100)))
    options = job(tmp_path, source, server_url)
    first = classify_dataset(options, ONE_ACTOR)
    assert first.written == [0, 1, 2] and first.rows == 100
    out = tmp_path / "out"
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in shard_files(out)}
    deleted = pq.read_table(out / shard_name(1)).to_pylist()
    assert [r["id"] for r in read_output(out)] == list(range(100))
    (out / shard_name(1)).unlink()
    again = classify_dataset(options, ONE_ACTOR)
    assert (again.written, again.skipped, again.classified_rows) == ([1], [0, 2], 40)
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in shard_files(out)}
    assert {k: v for k, v in after.items() if k != shard_name(1)} == {
        k: v for k, v in before.items() if k != shard_name(1)
    }
    redone = pq.read_table(out / shard_name(1)).to_pylist()
    assert [r["id"] for r in redone] == list(range(40, 80))
    assert [r["label"] for r in redone] == [r["label"] for r in deleted]
    done = classify_dataset(options, ONE_ACTOR)
    assert done.written == [] and done.skipped == [0, 1, 2]


def test_the_command_runs_the_job_on_ray(
    local_ray: None, server_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``qwen-fast classify --ray``: the Ray already started here is the one it uses."""
    from langchain_qwen_fast.cli.main import main

    given = rows_of(70)
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in given))
    argv = ["classify", str(source), "--out", str(tmp_path / "out"), "--labels", ",".join(NEWS_LABELS)]
    argv += [
        "--base-url",
        server_url,
        "--ray",
        "local",
        "--shard-rows",
        "40",
        "--actor-cpus",
        "1",
        "--batch-rows",
        "16",
    ]
    assert main(argv) == 0
    assert "wrote 2 shard(s)" in capsys.readouterr().out
    out = read_output(tmp_path / "out")
    assert [r["id"] for r in out] == list(range(70))
    assert [out[i]["error"] is not None for i in range(70)] == [i in EMPTY_ROWS for i in range(70)]
    assert main(argv) == 0  # again: every shard is there
    assert "wrote 0 shard(s) to" in capsys.readouterr().out


def test_the_job_benchmark_times_the_ray_path_beside_abatch(local_ray: None, server_url: str, tmp_path: Path) -> None:
    """``python -m benchmarks.classify_job --ray``: two actors over four shards, every row of
    each path classified (the benchmark raises otherwise) and the rates reported; the figures
    themselves are the benchmark's (docs/performance.md), not this test's."""
    from benchmarks.classify_job import JobBenchOptions, JobExtras, JobLoad, JobServer, run_speed

    options = JobBenchOptions(
        server=JobServer(base_url=server_url),
        load=JobLoad(rows=256, rounds=1),
        extras=JobExtras(ray="local", ray_actors=2),
        out=tmp_path,
    )
    result = run_speed(options)
    (rates,) = result.rounds
    assert rates.ray is not None and min(rates.abatch, rates.job, rates.ray) > 0
    assert result.ray_over_abatch == pytest.approx(rates.ray / rates.abatch, rel=1e-3)
    assert json.loads((tmp_path / "results.json").read_text())["ray_rows_per_s"] == result.ray_rows_per_s
