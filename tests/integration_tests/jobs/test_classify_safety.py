"""``qwen-fast classify``'s safety rules against the real vLLM server, run as a command: a job
through an outage (behind the fault proxy) stops with exit 3 and writes no row of it, a re-run
during the outage keeps what was done, and the re-run after it has every row once, in order,
with no error rows; a restart from stdin with another stream is refused; a misspelt text column
exits non-zero naming the columns; a second run on the same output is refused at once; a review
file that names the input is refused before anything is written.

The outage lasts until the job has stopped and a re-run during it has failed too (longer than
the job's retry deadline), or ``QWEN_FAST_OUTAGE_SECONDS`` from its start where that is longer:
the issue's 30-second figure is measured by running the outage test with it set to 30.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.jobs.parts import LOCK, work_folder
from langchain_qwen_fast.testing.samples import news_items
from tests.integration_tests.conftest import NEWS_LABELS, ROOT, record_seconds
from tests.support.proxy import Fault, FaultProxy

COMMAND = [sys.executable, "-m", "langchain_qwen_fast.cli", "classify", "--no-progress"]
#: The shortest the outage lasts (it lasts at least until the job and a re-run have failed).
OUTAGE_SECONDS = float(os.environ.get("QWEN_FAST_OUTAGE_SECONDS", "0"))
ROWS = 800
CHUNK_ROWS = 40
#: Generous bounds on waits that only end a test which would otherwise hang.
WAIT_SECONDS = 120


def saved_classifier(tmp_path: Path, base_url: str, timeout: float = 10.0) -> Path:
    """A classifier on ``base_url`` with small retry settings, saved for ``--classifier``."""
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=base_url, max_retries=2, timeout=timeout)
    return classifier.save(tmp_path / "classifier.json")


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], cwd=ROOT, input=stdin.decode() if stdin is not None else None,
        capture_output=True, text=True, timeout=WAIT_SECONDS * 2,
    )  # fmt: skip


def start(*args: str, stdin: bytes | None = None) -> subprocess.Popen[bytes]:
    """The command started in the background; ``stdin`` is fed to it through a pipe."""
    job = subprocess.Popen(
        [*COMMAND, *args], cwd=ROOT, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    if stdin is not None:
        assert job.stdin is not None
        threading.Thread(target=_feed, args=(job.stdin, stdin), daemon=True).start()
        job.stdin = None  # the feeder has it (and closes it): not for communicate()
    return job


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, OSError):  # the job stopped before it read everything
        pass


def finished_parts(out: Path) -> list[Path]:
    """The committed part files (a part being written has a temporary name, ``.tmp-…``)."""
    return sorted(work_folder(out).glob("0*.csv"))


def wait_for_parts(job: subprocess.Popen[bytes], out: Path, count: int) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while len(finished_parts(out)) < count and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert job.poll() is None, "the job ended before the outage began"
    assert len(finished_parts(out)) >= count


def table(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def rows_of_parts(out: Path) -> list[dict[str, str]]:
    header = ["id", "text", "label", *[f"p_{x}" for x in NEWS_LABELS], "abstained", "error"]
    rows: list[dict[str, str]] = []
    for part in finished_parts(out):
        with part.open(newline="") as f:
            rows.extend(dict(zip(header, record)) for record in csv.reader(f))
    return rows


@pytest.mark.parametrize(("fault", "from_stdin"), [("503", False), ("reset", True)])
def test_a_job_through_an_outage_stops_and_the_rerun_has_every_row_once_without_errors(
    proxy: FaultProxy, tmp_path: Path, fault: str, from_stdin: bool
) -> None:
    texts = news_items(ROWS, 70_000)
    lines = "".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)).encode()
    source = tmp_path / "in.jsonl"
    source.write_bytes(lines)
    given = ["-", "--input-format", "jsonl"] if from_stdin else [str(source)]
    stdin = lines if from_stdin else None
    out = tmp_path / "out.csv"
    args = ["--out", str(out), "--classifier", str(saved_classifier(tmp_path, proxy.base_url)),
            "--chunk-rows", str(CHUNK_ROWS), "--chunks-in-flight", "1"]  # fmt: skip

    job = start(*given, *args, stdin=stdin)
    wait_for_parts(job, out, 2)
    proxy.standing(Fault.http(503) if fault == "503" else Fault.reset())
    began = time.monotonic()
    _, stderr = job.communicate(timeout=WAIT_SECONDS)
    record_seconds(f"classify: exit after an outage ({fault}) began", time.monotonic() - began)
    message = stderr.decode()
    assert job.returncode == 3, message[-3000:]
    cause = "ServerStatusError" if fault == "503" else "ServerConnectionError"
    assert cause in message and "not of the row" in message and "Run the same command again" in message
    assert not out.exists()
    kept = rows_of_parts(out)
    assert len(kept) >= 2 * CHUNK_ROWS and all(not row["error"] for row in kept)  # no row holds the outage
    # Run again during the outage: the set-up fails, and what was done is kept as it was.
    again = run(*given, *args, stdin=stdin)
    assert again.returncode == 3 and "the set-up with the server failed" in again.stderr, again.stderr[-3000:]
    assert rows_of_parts(out) == kept

    time.sleep(max(0.0, began + OUTAGE_SECONDS - time.monotonic()))
    proxy.standing(None)  # the outage is over
    record_seconds(f"classify: the outage ({fault}) lasted", time.monotonic() - began)
    done = run(*given, *args, stdin=stdin)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"({len(kept)} done by an earlier run" in done.stdout
    rows = table(out)
    assert [r["id"] for r in rows] == [str(i) for i in range(ROWS)]  # every row once, in input order
    assert [r["text"] for r in rows] == texts
    assert all(r["label"] in NEWS_LABELS and not r["error"] for r in rows)  # no error rows
    assert rows[: len(kept)] == kept
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["errors"] == 0 and report["rows"] == ROWS and report["resumed_rows"] == len(kept)
    assert not work_folder(out).exists()


def test_a_restart_from_stdin_with_another_stream_is_refused_naming_the_row(proxy: FaultProxy, tmp_path: Path) -> None:
    texts = news_items(600, 73_000)
    stream = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    out = tmp_path / "out.csv"
    saved = str(saved_classifier(tmp_path, proxy.base_url))
    args = ["-", "--input-format", "jsonl", "--out", str(out), "--classifier", saved, "--chunk-rows", "20",
            "--chunks-in-flight", "1"]  # fmt: skip
    job = start(*args, stdin=stream)
    wait_for_parts(job, out, 1)
    proxy.standing(Fault.http(503))
    _, stderr = job.communicate(timeout=WAIT_SECONDS)
    assert job.returncode == 3, stderr.decode()[-3000:]
    proxy.standing(None)
    done = len(finished_parts(out)) * 20
    other = list(texts)
    other[done - 2] = "Another stream's row, not the one the job read."
    refused = run(*args, stdin="".join(json.dumps({"text": t}) + "\n" for t in other).encode())
    assert refused.returncode == 1
    assert f"stdin is not the input the interrupted job in {work_folder(out)} read: its row {done - 1} " in (
        refused.stderr
    )
    finished = run(*args, stdin=stream)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert [r["text"] for r in table(out)] == texts


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_misspelt_text_column_exits_non_zero_naming_the_columns(server_url: str, tmp_path: Path, kind: str) -> None:
    rows = [{"id": str(i), "body": t} for i, t in enumerate(news_items(50, 74_000))]
    source = tmp_path / f"in.{kind}"
    if kind == "jsonl":
        source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), source)
    out = tmp_path / "out.csv"
    done = run(str(source), "--out", str(out), "--labels", ",".join(NEWS_LABELS), "--base-url", server_url,
               "--text-column", "txt")  # fmt: skip
    noun = "key" if kind == "jsonl" else "column"
    assert done.returncode == 1 and f"has no 'txt' {noun}" in done.stderr and "['id', 'body']" in done.stderr
    assert not out.exists() and not work_folder(out).exists()


def test_a_second_run_on_the_same_output_is_refused_at_once(proxy: FaultProxy, tmp_path: Path) -> None:
    texts = news_items(400, 75_000)
    source = tmp_path / "in.csv"
    with source.open("w", newline="") as f:
        csv.writer(f).writerows([["text"], *[[t] for t in texts]])
    out = tmp_path / "out.csv"
    # A timeout past the longest the second run may take to start and be refused.
    saved = str(saved_classifier(tmp_path, proxy.base_url, timeout=WAIT_SECONDS))
    args = [str(source), "--out", str(out), "--classifier", saved, "--chunk-rows", "40"]
    first = start(*args)
    wait_for_parts(first, out, 1)
    # The first run's requests wait (within its timeout) while the second starts.
    stall = Fault.stall(WAIT_SECONDS)
    proxy.standing(stall)
    began = time.monotonic()
    second = run(*args)
    record_seconds("a second run on the same output refused", time.monotonic() - began)
    assert second.returncode == 1 and f"{work_folder(out)} is in use by another qwen-fast classify run" in (
        second.stderr
    )
    assert f"(process {first.pid})" in second.stderr
    assert (work_folder(out) / LOCK).exists() and first.poll() is None  # the first run's files are untouched
    # Ended by running out, which ends the stalls under way too (a stall that is no longer
    # the standing fault runs its whole length).
    proxy.standing(stall, 0)
    _, stderr = first.communicate(timeout=WAIT_SECONDS)
    assert first.returncode == 0, stderr.decode()[-3000:]
    assert [r["text"] for r in table(out)] == texts


def test_a_review_file_that_names_the_input_is_refused(server_url: str, tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text("text\nStocks rally\n")
    for review, what in [(source, "the input file"), (tmp_path / "out.csv", "the --out file")]:
        done = run(str(source), "--out", str(tmp_path / "out.csv"), "--labels", ",".join(NEWS_LABELS),
                   "--base-url", server_url, "--review-below", "0.5", "--review-out", str(review))  # fmt: skip
        assert done.returncode == 1 and f"--review-out is {what}" in done.stderr
    assert source.read_text() == "text\nStocks rally\n" and sorted(os.listdir(tmp_path)) == ["in.csv"]
