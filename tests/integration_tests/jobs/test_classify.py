"""``qwen-fast classify`` end to end against the real vLLM server (the tiny model as ``qwen3``),
run as a command: every kind of table in and out, stdin, bad rows, a SIGKILL and a restart, and
a review file that the training reader takes back."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast.jobs.parts import work_folder
from langchain_qwen_fast.testing.samples import news_items
from langchain_qwen_fast.training import LabelledFile
from tests.integration_tests.conftest import NEWS_LABELS, ROOT

LABELS = ",".join(NEWS_LABELS)
COMMAND = [sys.executable, "-m", "langchain_qwen_fast.cli", "classify"]


def classify(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*COMMAND, *args, "--no-progress"], cwd=ROOT, input=stdin.decode() if stdin else None,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done


def table(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    import pyarrow.parquet as pq

    return list(pq.read_table(path).to_pylist())


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".csv":
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize(("source", "target"), [("csv", "parquet"), ("jsonl", "csv"), ("parquet", "jsonl")])
def test_each_kind_in_and_out(server_url: str, tmp_path: Path, source: str, target: str) -> None:
    texts = news_items(300, 50_000)
    given = write(tmp_path / f"in.{source}", [{"id": str(i), "text": t} for i, t in enumerate(texts)])
    out = tmp_path / f"out.{target}"
    printed = classify(str(given), "--out", str(out), "--labels", LABELS, "--base-url", server_url,
                       "--chunk-rows", "64").stdout  # fmt: skip
    rows = table(out)
    assert [r["id"] for r in rows] == [str(i) for i in range(300)] and [r["text"] for r in rows] == texts
    assert all(r["label"] in NEWS_LABELS and not r["error"] for r in rows)
    assert all(abs(sum(float(r[f"p_{x}"]) for x in NEWS_LABELS) - 1) < 1e-4 for r in rows)
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["rows"] == 300 and sum(report["label_counts"].values()) == 300 and report["errors"] == 0
    assert Path(f"{out}.histogram.png").stat().st_size > 0
    assert f"wrote 300 rows to {out}" in printed and "rows/s" in printed and "label distribution" in printed


def test_stdin(server_url: str, tmp_path: Path) -> None:
    texts = news_items(40, 51_000)
    out = tmp_path / "out.csv"
    lines = "".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(texts)).encode()
    classify("-", "--input-format", "jsonl", "--out", str(out), "--labels", LABELS, "--base-url", server_url,
             stdin=lines)  # fmt: skip
    rows = table(out)
    assert [r["text"] for r in rows] == texts and [r["n"] for r in rows] == [str(i) for i in range(40)]


def test_bad_rows_get_their_error_in_place(server_url: str, tmp_path: Path) -> None:
    texts = news_items(6, 52_000)
    source = tmp_path / "in.jsonl"
    source.write_bytes(
        b"".join(json.dumps({"text": t}).encode() + b"\n" for t in texts[:2])
        + b'{"text": ""}\n'  # empty
        + json.dumps({"text": "word " * 6000}).encode() + b"\n"  # past the server's 4,096 tokens
        + b'{"text": "caf\xe9 \xff"}\n'  # bytes that are not UTF-8
        + b'{"title_only": "x"}\n'  # no text key
        + b"this line is not JSON\n"
        + b"".join(json.dumps({"text": t}).encode() + b"\n" for t in texts[2:])
    )  # fmt: skip
    out = tmp_path / "out.jsonl"
    printed = classify(str(source), "--out", str(out), "--labels", LABELS, "--base-url", server_url).stdout
    rows = table(out)
    assert len(rows) == 11
    errors = [r["error"] for r in rows]
    assert errors[2].startswith("InvalidInputError: text is empty")
    assert errors[3].startswith("ContextLengthError")
    assert "not UTF-8" in errors[4] and rows[4]["text"] == "caf\ufffd \ufffd"
    assert "line 6 has no 'text' key" in errors[5] and rows[5]["title_only"] == "x"
    assert "line 7 is not JSON" in errors[6] and rows[6]["text"] == "this line is not JSON"
    good = [r for i, r in enumerate(rows) if i not in range(2, 7)]
    assert [r["text"] for r in good] == texts and all(r["label"] in NEWS_LABELS and not r["error"] for r in good)
    assert "errors: 5" in printed


def test_killed_and_started_again_the_job_finishes_with_every_row_once_in_order(
    server_url: str, tmp_path: Path
) -> None:
    texts = news_items(1600, 60_000)
    source = write(tmp_path / "in.csv", [{"id": str(i), "text": t} for i, t in enumerate(texts)])
    args = ["--labels", LABELS, "--base-url", server_url, "--chunk-rows", "100", "--no-progress"]
    whole = tmp_path / "whole.csv"
    classify(str(source), "--out", str(whole), *args)

    out = tmp_path / "out.csv"
    folder = killed_after_parts(source, out, args, 3)

    printed = classify(str(source), "--out", str(out), *args).stdout
    assert "done by an earlier run" in printed
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["resumed_rows"] >= 300 and report["resumed_rows"] + report["classified_rows"] == 1600
    rows, reference = table(out), table(whole)
    assert [r["id"] for r in rows] == [str(i) for i in range(1600)]  # every row once, in input order
    assert [r["label"] for r in rows] == [r["label"] for r in reference]
    assert max(abs(float(a["p_World"]) - float(b["p_World"])) for a, b in zip(rows, reference)) < 1e-3
    assert not folder.exists()


def killed_after_parts(source: Path, out: Path, args: list[str], parts: int) -> Path:
    """Run the command on ``source`` into the CSV ``out``, SIGKILL it once ``parts`` parts are
    committed, and return its work folder (which holds them)."""
    job = subprocess.Popen([*COMMAND, str(source), "--out", str(out), *args], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    folder = work_folder(out)
    deadline = time.monotonic() + 300
    # Committed parts only: a part being written has a temporary name (".tmp-…"), which a
    # pattern of "*" matches too.
    while len(list(folder.glob("0*.csv"))) < parts and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.poll() is None, "the job ended before it could be killed"
    os.kill(job.pid, signal.SIGKILL)
    job.wait(30)
    assert len(list(folder.glob("0*.csv"))) >= parts and not out.exists()
    return folder


def test_review_file_goes_back_into_training(server_url: str, tmp_path: Path) -> None:
    texts = news_items(200, 53_000)
    source = write(tmp_path / "in.csv", [{"text": t} for t in texts])
    review = tmp_path / "review.csv"
    printed = classify(str(source), "--out", str(tmp_path / "out.parquet"), "--labels", LABELS, "--base-url",
                       server_url, "--review-below", "0.3", "--review-sample", "12", "--review-out",
                       str(review)).stdout  # fmt: skip
    assert "review queue:" in printed
    rows = table(review)
    assert all(r["label"] == "" and r["text"] == texts[int(r["row"])] for r in rows)
    under = [r for r in rows if float(r["model_probability"]) < 0.3]
    report = json.loads(Path(f"{tmp_path / 'out.parquet'}.report.json").read_text())
    # the tiny random model is unsure of most rows: the sample takes 12 of the others, or all
    assert report["review"]["below"] == len(under) and 0 < len(under) < 200
    assert report["review"]["sampled"] == len(rows) - len(under) == min(12, 200 - len(under))
    for r in rows:
        r["label"] = NEWS_LABELS[int(r["row"]) % 4]
    write(review, rows)
    items, labels = LabelledFile(str(review)).read()
    assert [t for t, _ in items] == [r["text"] for r in rows] and set(labels) <= set(NEWS_LABELS)
