"""Ray Data against the real vLLM server (the tiny model as ``qwen3``), on a local Ray (2 CPUs,
a small object store, no dashboard): the stage in a user's own pipeline, and ``qwen-fast
classify --ray`` writing from the workers a dataset that pyarrow and pandas open: rows in =
rows out, each id once, the labels and probabilities of ``QwenClassifier.batch``, input errors
in place; a folder of several files; an actor killed mid-run; an outage through the fault
proxy; the driver killed and the same command run again."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.jobs.job import ClassifyOptions
from langchain_qwen_fast.jobs.ray_data import ClassifyStage, HTTPServers, VLLMInActor
from langchain_qwen_fast.jobs.ray_job import CHECKPOINT_FOLDER, JOB_FILE, REPORT_FILE, RayOptions, classify_dataset
from langchain_qwen_fast.serving.profiles import drop_flags
from langchain_qwen_fast.testing.samples import news_items
from tests.integration_tests.conftest import NEWS_LABELS, ROOT
from tests.support.proxy import Fault, FaultProxy

ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")

#: Rows 5 and 61 have nothing to classify; they get their error in their row.
EMPTY_ROWS = (5, 61)
#: One actor on one CPU, two batches in flight: the other CPU is left to reading and writing.
LOCAL_CPUS = 4
ONE_ACTOR = RayOptions(actors=(1, 1), actor_cpus=1, batch_rows=16, batches_in_flight=2)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray for this module: 4 logical CPUs (the work waits on the server; with as
    many as the machine's 2 cores, an actor and a read task would leave none to the writes),
    a 200 MiB object store, no dashboard."""
    ray.init(
        num_cpus=LOCAL_CPUS,
        include_dashboard=False,
        object_store_memory=200 * 1024 * 1024,
        log_to_driver=False,
        configure_logging=False,
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield
    finally:
        ray.shutdown()


def rows_of(n: int) -> list[dict[str, Any]]:
    texts: list[Any] = news_items(n)
    for i in EMPTY_ROWS:
        if i < n:
            texts[i] = "  " if i % 2 else None
    return [{"id": i, "text": t, "label": f"given-{i}"} for i, t in enumerate(texts)]


def job(tmp_path: Path, source: Path | str, base_url: str, **kwargs: Any) -> ClassifyOptions:
    settings: dict[str, Any] = {"labels": tuple(NEWS_LABELS), "base_url": base_url, "model": "qwen3"}
    return ClassifyOptions(str(source), str(tmp_path / "out"), **{**settings, "progress": False, **kwargs})


def by_id(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    ids = [int(r["id"]) for r in rows]
    assert len(ids) == len(set(ids)), "a row was written twice"
    return {int(r["id"]): r for r in rows}


def assert_labels_of_batch(out: dict[int, dict[str, Any]], given: list[dict[str, Any]], base_url: str) -> None:
    """Every row's label and probabilities are ``QwenClassifier.batch``'s on the same text
    (within 1e-3), and the empty rows have their error in place."""
    good = [i for i in range(len(given)) if i not in EMPTY_ROWS]
    for i in EMPTY_ROWS:
        if i < len(given):
            assert out[i]["error"].startswith("InvalidInputError") and out[i]["label"] is None
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=base_url, model="qwen3")
    try:
        direct = classifier.batch([given[i]["text"] for i in good])
    finally:
        classifier.close()
    assert [out[i]["label"] for i in good] == [d.label for d in direct]
    for i, d in zip(good, direct):
        assert d.scores is not None and out[i]["error"] is None
        assert all(abs(out[i][f"p_{label}"] - d.scores[label]) < 1e-3 for label in NEWS_LABELS)


def data_files(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if not p.name.startswith(("_", ".")))


def committed_rows(out: Path) -> int:
    """The rows Ray Data's checkpoint records as written. A data file whose checkpoint is
    still pending may be torn by a kill: the next run deletes it, so it is not counted."""
    folder = out / CHECKPOINT_FOLDER
    if not folder.is_dir():
        return 0
    committed = [p for p in folder.glob("*.parquet") if not p.name.endswith(".pending.parquet")]
    return sum(pq.ParquetFile(p).metadata.num_rows for p in committed)


def test_the_stage_in_a_users_pipeline_adds_the_labels_of_batch(local_ray: None, server_url: str) -> None:
    given = rows_of(70)
    stage = ClassifyStage(
        labels=tuple(NEWS_LABELS), engine=HTTPServers(server_url, "qwen3"), concurrency=(1, 1), batch_size=16
    )
    dataset = ray.data.from_items(given)
    classified = stage(dataset)  # lazy: nothing has run yet
    out = by_id(classified.take_all())
    assert sorted(out) == list(range(70))
    assert [out[i]["text"] for i in range(70)] == [g["text"] for g in given]
    assert [out[i]["input_label"] for i in range(70)] == [g["label"] for g in given]
    assert_labels_of_batch(out, given, server_url)


def test_a_job_writes_from_the_workers_a_dataset_that_pyarrow_and_pandas_open(
    local_ray: None, server_url: str, tmp_path: Path
) -> None:
    given = rows_of(130)
    source = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(given), source)
    review = tmp_path / "review.csv"
    options = job(tmp_path, source, server_url, review_out=str(review), review_sample=8)
    report = classify_dataset(options, dataclasses.replace(ONE_ACTOR, id_column="id"))
    out_dir = tmp_path / "out"
    table = pq.read_table(out_dir)
    assert table.num_rows == 130 == pd.read_parquet(out_dir).shape[0]
    out = by_id(table.to_pylist())
    assert_labels_of_batch(out, given, server_url)
    assert (report.rows, report.errors, report.error_kinds) == (130, 2, {"InvalidInputError": 2})
    assert sum(report.label_counts.values()) == 128
    assert report.first_answers_seconds is not None and 0 < report.first_answers_seconds < report.pipeline_seconds
    assert report.start_seconds >= 0 and report.report_seconds > 0  # this module's Ray is started already
    assert report.steady_rows_per_s is not None and report.steady_rows_per_s > 0  # nine batches of 16 rows
    assert json.loads((out_dir / REPORT_FILE).read_text())["rows"] == 130
    assert (out_dir / JOB_FILE).is_file() and (out_dir / CHECKPOINT_FOLDER).is_dir()
    assert report.review is not None and report.review["sampled"] == 8
    assert len(pd.read_csv(review)) == 8
    # Run again: every row is there, nothing is classified or written again.
    files = data_files(out_dir)
    again = classify_dataset(options, dataclasses.replace(ONE_ACTOR, id_column="id"))
    assert data_files(out_dir) == files and again.rows == 130 and again.classified_rows == 0
    # Other options: refused, naming what differs.
    with pytest.raises(ConfigurationError, match="labels differ"):
        classify_dataset(
            job(tmp_path, source, server_url, labels=("A", "B")),
            dataclasses.replace(ONE_ACTOR, id_column="id"),
        )


def test_a_folder_of_files_keeps_strings_and_each_bad_line_in_its_row(
    local_ray: None, server_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    texts = news_items(30)
    (folder / "a.jsonl").write_text("".join(json.dumps({"code": "007", "text": t}) + "\n" for t in texts[:10]))
    (folder / "b.ndjson").write_text("".join(json.dumps({"code": "008", "text": t}) + "\n" for t in texts[10:20]))
    lines = [json.dumps({"code": "009", "text": t}).encode() + b"\n" for t in texts[20:30]]
    lines[3] = b"this line is not JSON\n"
    (folder / "c.jsonl").write_bytes(b"".join(lines))
    (folder / "notes.txt").write_text("not an input file")
    report = classify_dataset(job(tmp_path, str(folder) + "/", server_url, input_format="jsonl"), ONE_ACTOR)
    rows = pq.read_table(tmp_path / "out").to_pylist()
    assert report.rows == len(rows) == 30 and report.errors == 1
    assert len({r["row_hash"] for r in rows}) == 30
    assert {r["code"] for r in rows} == {"007", "008", "009", None}
    (bad,) = [r for r in rows if r["error"] is not None]
    assert bad["error"].startswith("DataFileError: the row is not JSON") and bad["text"] == "this line is not JSON"
    assert sorted(r["text"] for r in rows if r["error"] is None) == sorted(t for i, t in enumerate(texts) if i != 23)


def test_an_outage_retries_the_batches_and_leaves_no_error_rows(
    local_ray: None, proxy: FaultProxy, tmp_path: Path
) -> None:
    given = rows_of(96)
    source = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(given), source)
    proxy.standing(Fault.http(503), seconds=6)
    report = classify_dataset(job(tmp_path, source, proxy.base_url), ONE_ACTOR)
    out = by_id(pq.read_table(tmp_path / "out").to_pylist())
    assert sorted(out) == list(range(96))
    assert report.errors == len(EMPTY_ROWS)
    assert {out[i]["error"] is None for i in range(96) if i not in EMPTY_ROWS} == {True}
    assert proxy.calls("/completions"), "the outage was met"


def _classify_actor_pids() -> list[int]:
    """The processes of the classifier actors: Ray titles each ``ray::MapWorker(...ClassifyActor)``
    (the state API needs the dashboard, which this Ray has not)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                title = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if title.startswith(b"ray::") and b"ClassifyActor" in title:
                pids.append(int(entry.name))
    return pids


def test_an_actor_killed_mid_run_is_restarted_and_nothing_is_lost(
    local_ray: None, server_url: str, tmp_path: Path
) -> None:
    given = rows_of(400)
    source = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(given), source)
    out_dir = tmp_path / "out"
    reports: list[Any] = []
    runner = threading.Thread(
        target=lambda: reports.append(classify_dataset(job(tmp_path, source, server_url), ONE_ACTOR))
    )
    runner.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and runner.is_alive() and time.monotonic() < deadline:
        if out_dir.is_dir() and data_files(out_dir):
            pids = _classify_actor_pids()
            if pids:
                killed = pids[0]
                os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    runner.join(timeout=300)
    assert killed is not None, "the job ended before an actor could be killed"
    (report,) = reports
    out = by_id(pq.read_table(out_dir).to_pylist())
    assert sorted(out) == list(range(400)) and report.rows == 400 and report.errors == len(EMPTY_ROWS)


def test_the_driver_killed_then_the_same_command_resumes_with_no_row_twice(
    local_ray: None, server_url: str, tmp_path: Path
) -> None:
    """The first run starts a Ray of its own (``--ray local``) and is killed with it once a
    batch is committed, maybe mid-write of the next; the same command then runs again on
    another Ray, this module's, joined by its address, and leaves a folder that reads whole."""
    given = rows_of(600)
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in given))
    out_dir = tmp_path / "out"
    argv = [sys.executable, "-m", "langchain_qwen_fast.cli.main", "classify", str(source), "--out", str(out_dir)]
    argv += ["--labels", ",".join(NEWS_LABELS), "--base-url", server_url, "--id-column", "id"]
    argv += ["--actors", "1", "--batch-rows", "16", "--no-progress", "--no-histogram"]
    joined = [*argv, "--ray", ray.get_runtime_context().gcs_address]
    argv += ["--ray", "local"]
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    first = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while first.poll() is None and time.monotonic() < deadline:
            if committed_rows(out_dir):
                break
            time.sleep(0.1)
        assert first.poll() is None, "the job ended before it could be killed"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    assert 0 < committed_rows(out_dir) < 600
    second = subprocess.run(joined, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "wrote 600 rows" in second.stdout
    out = by_id(pq.read_table(out_dir).to_pylist())
    assert sorted(out) == list(range(600))
    assert [out[i]["error"] is not None for i in range(600)] == [i in EMPTY_ROWS for i in range(600)]


def test_vllm_inside_the_actor_gives_the_labels_of_batch_on_the_served_model(
    local_ray: None, server_url: str, tiny_model: Path
) -> None:
    """An engine of the same model inside the actor (vLLM's CPU build: no GPU reserved),
    configured as the session's server is: the same labels and probabilities within 1e-3."""
    from tests.integration_tests.serving.test_in_process import served_alike

    flags, env = served_alike(tiny_model)
    flags = drop_flags(flags[1:], ["--served-model-name"])  # the model comes first
    engine = VLLMInActor(str(tiny_model), "qwen3", tuple(flags), num_gpus=0, env_vars=env)
    stage = ClassifyStage(labels=tuple(NEWS_LABELS), engine=engine, concurrency=1, batch_size=32)
    given = rows_of(70)
    out = by_id(stage(ray.data.from_items(given)).take_all())
    assert sorted(out) == list(range(70))
    assert_labels_of_batch(out, given, server_url)


def test_the_ray_benchmark_times_the_job_on_ray_beside_the_job_without_it(
    local_ray: None, server_url: str, tmp_path: Path
) -> None:
    """``python -m benchmarks.ray_classify --base-url``, on this module's Ray (used, not shut
    down): one actor, two small rounds, every row of each path classified (the benchmark
    raises otherwise), the rates, their ratio and the memory reported; the figures themselves
    are the benchmark's (docs/performance.md), not this test's."""
    from benchmarks.ray_classify import RayBenchOptions, RayLoad, RayWay, run

    load = RayLoad(rows=128, rounds=2, actors=1, actor_cpus=1, batch_rows=32)
    result = run(RayBenchOptions(way=RayWay(base_url=server_url), load=load, out=tmp_path))
    assert ray.is_initialized()
    assert len(result.rounds) == 2
    assert result.job_rows_per_s is not None and result.ray_rows_per_s > 0 and result.job_rows_per_s > 0
    assert result.ray_over_job == pytest.approx(result.ray_rows_per_s / result.job_rows_per_s, rel=1e-2)
    assert result.driver_peak_rss_mib > 0 and result.actor_peak_rss_mib > 0
    # The steady rate apart from the fixed costs: four batches of one actor, three after its first.
    for timed in result.rounds:
        assert timed.ray_steady is not None and timed.ray_steady > 0
        assert timed.first_answers_seconds is not None and timed.first_answers_seconds > 0
        assert timed.start_seconds >= 0 and timed.report_seconds > 0
    assert result.ray_steady_rows_per_s is not None and result.steady_over_job is not None
    assert result.steady_over_job == pytest.approx(result.ray_steady_rows_per_s / result.job_rows_per_s, rel=1e-2)
    written = json.loads((tmp_path / "results.json").read_text())
    figures = ("ray_rows_per_s", "job_rows_per_s", "ray_over_job", "driver_peak_rss_mib", "actor_peak_rss_mib",
               "ray_steady_rows_per_s", "steady_over_job")  # fmt: skip
    assert {k: written[k] for k in figures} == {k: getattr(result, k) for k in figures}


def test_the_command_with_questions_on_ray_answers_every_row_as_the_decision_model(
    local_ray: None, server_url: str, tmp_path: Path
) -> None:
    """``qwen-fast classify --ray ADDRESS --questions FILE`` on this module's Ray (joined by its
    address, as ``--ray local`` would start one): every row once with the answers' columns,
    ``QwenDecisionModel``'s for the same state, an empty row's error in place, the counts in
    the report; the file read on the driver only."""
    from tests.integration_tests.jobs.test_questions import QUESTIONS, assert_answers_of_the_model, in_process

    given = rows_of(70)
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in given))
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    out_dir = tmp_path / "out"
    argv = [sys.executable, "-m", "langchain_qwen_fast.cli.main", "classify", str(source), "--out", str(out_dir)]
    argv += ["--questions", str(questions), "--base-url", server_url, "--id-column", "id", "--actors", "1"]
    argv += ["--batch-rows", "16", "--no-progress", "--ray", ray.get_runtime_context().gcs_address]
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrote 70 rows" in done.stdout and "topic distribution:" in done.stdout
    out = by_id(pq.read_table(out_dir).to_pylist())
    assert sorted(out) == list(range(70)) and [out[i]["text"] for i in range(70)] == [g["text"] for g in given]
    for i in EMPTY_ROWS:
        assert out[i]["error"].startswith("InvalidInputError") and out[i]["topic"] is None
    good = [i for i in range(70) if i not in EMPTY_ROWS]
    assert_answers_of_the_model([out[i] for i in good], in_process(server_url, [given[i]["text"] for i in good]))
    report = json.loads((out_dir / REPORT_FILE).read_text())
    assert report["rows"] == 70 and report["errors"] == 2 and sum(report["answer_counts"]["topic"].values()) == 68
    assert (out_dir / "_histogram.png").stat().st_size > 0
