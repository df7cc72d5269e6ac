"""An interrupted job against a canned vLLM (no network): Ctrl-C stops it cleanly. The commits
already sent to the table side finish and count, the rows it says it saved are the rows the
work folder holds and the rows the progress bar shows, the table process has ended and the
lock is free; the rerun carries on from there to the output an uninterrupted run writes."""

from __future__ import annotations

import csv
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.errors import JobInterrupted
from langchain_qwen_fast.jobs import job as job_module
from langchain_qwen_fast.jobs import table_side
from langchain_qwen_fast.jobs.job import ClassifyOptions, classify_table
from langchain_qwen_fast.jobs.parts import WorkFolder, saved_rows, work_folder
from langchain_qwen_fast.testing.samples import headlines
from tests.support.fake_vllm import FakeVLLM, prompts_in

LABELS = ("World", "Sports", "Business", "Sci/Tech")
URL = "http://vllm.test/v1"


def classifier(transport: Any) -> QwenClassifier:
    return QwenClassifier(labels=list(LABELS), base_url=URL, http_transport=transport)


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


class Bar:
    """Stands for the progress bar: the rows it shows."""

    def __init__(self, done: int) -> None:
        self.n = done
        self.closed = False

    def update(self, rows: int) -> None:
        self.n += rows

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[Bar]:
    """Each job's bar, shown or not."""
    made: list[Bar] = []

    def progress(enabled: bool, expected: int | None, done: int) -> Bar:
        made.append(Bar(done))
        return made[-1]

    monkeypatch.setattr(job_module, "_progress", progress)
    return made


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[table_side.Tables]:
    """Each job's table side."""
    made: list[table_side.Tables] = []
    real = job_module.open_tables

    def recorded(side: table_side.TableSide, **kwargs: Any) -> table_side.Tables:
        made.append(real(side, **kwargs))
        return made[-1]

    monkeypatch.setattr(job_module, "open_tables", recorded)
    return made


def interrupting_after(fake: FakeVLLM, prompts: int) -> httpx.MockTransport:
    """A transport that sends this process SIGINT (Ctrl-C) at the first completions request
    past ``prompts`` prompts, then answers it."""
    seen = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/completions"):
            seen["n"] += prompts_in(request)
            if seen["n"] > prompts and seen["n"] - prompts_in(request) <= prompts:
                os.kill(os.getpid(), signal.SIGINT)
        return fake(request)

    return httpx.MockTransport(handler)


def assert_stopped_cleanly(out: Path, opened: list[table_side.Tables]) -> None:
    """The table process has ended (and was waited for) and the work folder's lock is free."""
    for tables in opened:
        if isinstance(tables, table_side.ForkedTables):
            with pytest.raises(ChildProcessError):
                os.waitpid(tables.pid, os.WNOHANG)
    again = WorkFolder(out, out.suffix[1:])
    again.lock()
    again.release()


@pytest.mark.parametrize("forked", [True, False])
def test_an_interrupt_finishes_the_commits_sent_and_says_what_the_folder_and_the_bar_hold(
    fake: FakeVLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bars: list[Bar],
    opened: list[table_side.Tables],
    forked: bool,
) -> None:
    texts = headlines(400)
    texts[60] = ""  # an input error among the rows saved
    source = write_csv(tmp_path / "in.csv", texts)
    whole = tmp_path / "whole.csv"
    classify_table(options(source, whole, chunks_in_flight=2), classifier(fake.transport))
    monkeypatch.setattr(table_side, "forks", lambda: forked)
    job_pid = os.getpid()
    commit = WorkFolder.commit

    def interrupting(folder: WorkFolder, start: int, *rest: Any) -> Any:
        if start == 100:  # on the table side (its own process where forked)
            os.kill(job_pid, signal.SIGINT)
            if os.getpid() != job_pid:  # the table process gets what a process group gets
                for stop in (signal.SIGINT, signal.SIGTERM):
                    os.kill(os.getpid(), stop)
            # The job is interrupted while this commit is on its way (the rows counted are the
            # same whenever the interrupt lands; this is the case where it must wait for one).
            time.sleep(0.2)
        return commit(folder, start, *rest)

    monkeypatch.setattr(WorkFolder, "commit", interrupting)
    out = tmp_path / "out.csv"
    with pytest.raises(JobInterrupted) as stopped:
        classify_table(options(source, out, chunks_in_flight=2), classifier(fake.transport))
    saved = stopped.value.rows
    folder = work_folder(out)
    assert saved >= 150  # the chunk being committed when the interrupt came is kept and counted
    assert saved == saved_rows(folder) == sum(chunk.rows for chunk in WorkFolder(out, "csv").chunks()) < 400
    assert bars[-1].n == saved and bars[-1].closed  # the bar shows what is saved
    assert str(stopped.value) == f"interrupted: {saved} rows are saved in {folder}"
    assert stopped.value.exit_code == 130 and stopped.value.folder == str(folder)
    assert_stopped_cleanly(out, opened)
    assert not out.exists()

    monkeypatch.setattr(WorkFolder, "commit", commit)
    report = classify_table(options(source, out, chunks_in_flight=2), classifier(fake.transport))
    assert report.resumed_rows == saved and report.rows == 400 and report.errors == 1
    assert bars[-1].n == 400
    assert read_csv(out) == read_csv(whole) and not folder.exists()


def test_an_interrupt_before_any_commit_saves_nothing_and_leaves_no_folder(
    fake: FakeVLLM, tmp_path: Path, opened: list[table_side.Tables]
) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(200))
    out = tmp_path / "out.csv"
    with pytest.raises(JobInterrupted, match="interrupted: no row is saved") as stopped:
        classify_table(options(source, out), classifier(interrupting_after(fake, 0)))
    assert stopped.value.rows == 0 and not work_folder(out).exists()
    assert_stopped_cleanly(out, opened)
    assert classify_table(options(source, out), classifier(fake.transport)).rows == 200


def test_an_interrupt_before_the_job_reads_its_folder_counts_what_the_folder_holds(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(300))
    out = tmp_path / "out.csv"
    with pytest.raises(JobInterrupted) as first:
        classify_table(options(source, out, chunks_in_flight=1), classifier(interrupting_after(fake, 120)))
    kept = first.value.rows
    assert kept >= 100 and kept == saved_rows(work_folder(out))
    # a temporary file and a digest without its rows, as a kill mid-commit leaves: not saved rows
    (work_folder(out) / f".tmp-1-x-{kept:012d}.csv").write_text("half a chunk")
    (work_folder(out) / f"{kept:012d}.digest.json").write_text('{"rows": 50}')

    def interrupted(*args: Any) -> Any:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(job_module, "build_answerer", interrupted)
        with pytest.raises(JobInterrupted) as second:
            classify_table(options(source, out))
    assert second.value.rows == kept
    report = classify_table(options(source, out), classifier(fake.transport))
    assert report.resumed_rows == kept and report.rows == 300


def test_an_interrupt_once_the_output_is_whole_returns_the_report(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(120))
    out = tmp_path / "out.csv"
    join = job_module.join_parts

    def joined_then_interrupted(*args: Any) -> None:
        join(*args)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(job_module, "join_parts", joined_then_interrupted)
    report = classify_table(options(source, out), classifier(fake.transport))
    assert report.rows == 120 and len(read_csv(out)) == 120 and not work_folder(out).exists()
