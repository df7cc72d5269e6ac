"""Every example runs against the real server (fast settings), so none of them rots."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration_tests.conftest import BACKGROUND, background_work
from tests.support.background import Job

ROOT = Path(__file__).resolve().parents[2]


def example_command(name: str, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / "examples" / name), *args]


def run_example(name: str, *args: str) -> str:
    done = subprocess.run(
        example_command(name, *args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


@functools.cache
def background_jobs() -> dict[str, tuple[Job, ...]]:
    """The two long examples, each training and starting servers of its own, as background jobs
    (see the conftest's ``BACKGROUND``); their tests, last here, wait for them and read what they
    wrote. A middle priority: they send their servers requests under timeouts."""

    def job(name: str) -> Job:
        argv = example_command(f"{name}.py", "--work", str(background_work(name)))
        return Job(name, argv, niceness=10, starts_servers=True)

    return {name: (job(name),) for name in ("accuracy_loop", "review_loop")}


def finished_example(name: str) -> tuple[str, Path]:
    """What the background example ``name`` printed, once it has ended, and its work folder."""
    (job,) = background_jobs()[name]
    return BACKGROUND.result(job).read_text(), background_work(name)


@pytest.fixture(scope="module")
def accuracy_loop() -> tuple[str, Path]:
    return finished_example("accuracy_loop")


@pytest.fixture(scope="module")
def review_loop() -> tuple[str, Path]:
    return finished_example("review_loop")


@pytest.mark.parametrize(
    ("name", "expect"),
    [
        ("quickstart.py", "classifications/s"),
        ("lcel_chain.py", "LLMChain"),
        ("router.py", "general desk   <- ''"),
        ("agent_tool.py", "tool calls: 1"),
        ("langgraph_routing.py", "triage        <- ''"),
        ("multi_label_routing.py", "routes: {"),
    ],
)
def test_example_runs(server_url: str, name: str, expect: str) -> None:
    assert expect in run_example(name, "--base-url", server_url)


def test_classify_file_example(server_url: str, tmp_path: Path) -> None:
    out = tmp_path / "labels.jsonl"
    printed = run_example(
        "classify_file.py", "examples/data/news_sample.csv", "--out", str(out), "--base-url", server_url
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and "wrote 12 rows" in printed and "label distribution" in printed
    assert rows[1]["title"] == "Holders through after late goal"  # AG News layout: class, title, description
    assert all(r["label"] in ("World", "Sports", "Business", "Sci/Tech") and r["error"] is None for r in rows)


def test_latency_comparison_example(server_url: str, tmp_path: Path) -> None:
    printed = run_example(
        "latency_comparison.py",
        "--base-url",
        server_url,
        "--items",
        "64",
        "--invoke-items",
        "3",
        "--out",
        str(tmp_path),
    )
    assert "QwenClassifier.batch / ChatOpenAI.batch" in printed
    report = json.loads((tmp_path / "results.json").read_text())
    assert {row["path"] for row in report["rows"]} >= {"QwenClassifier.invoke", "LLMChain(ChatOpenAI)"}
    assert (tmp_path / "chart.png").stat().st_size > 0


def test_classify_file_example_over_client_processes(server_url: str, news_texts: list[str], tmp_path: Path) -> None:
    source, out = tmp_path / "rows.jsonl", tmp_path / "labels.jsonl"
    texts = [f"{i}: {news_texts[i % len(news_texts)]}" for i in range(2100)]
    texts[5] = "   "  # cannot be classified: its error in its place
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    printed = run_example(
        "classify_file.py", str(source), "--out", str(out), "--processes", "2", "--base-url", server_url
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert "wrote 2100 rows" in printed and "errors: 1 (InvalidInputError 1)" in printed
    assert [r["text"] for r in rows] == texts
    assert rows[5]["label"] is None and "InvalidInputError" in rows[5]["error"]


def test_accuracy_loop_example(accuracy_loop: tuple[str, Path]) -> None:
    """The README's four commands: train, serve, eval --calibrate --save-calibration, load."""
    printed, work = accuracy_loop
    assert "calibrated classifier: temperature" in printed
    saved = json.loads((work / "model" / "classifier.json").read_text())["config"]
    report = json.loads((work / "eval" / "report.json").read_text())
    assert saved["temperature"] == report["calibration"]["temperature"] != 1.0
    assert report["accuracy"] >= 0.9  # trained on generated headlines, validated on others


def test_review_loop_example(review_loop: tuple[str, Path]) -> None:
    """Train on a few rows, classify a pool with the job, label its review queue, train again:
    held-out accuracy rises."""
    printed, work = review_loop
    found = re.search(r"held-out accuracy: before ([0-9.]+), after ([0-9.]+)", printed)
    assert found, printed[-3000:]
    before, after = map(float, found.groups())
    assert after > before
    report = json.loads((work / "pool-labelled.parquet.report.json").read_text())
    assert report["rows"] == 2000 and report["errors"] == 0 and report["review"]["rows"] > 0
