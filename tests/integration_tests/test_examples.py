"""Every example runs against the real server (fast settings), so none of them rots. They run as
background jobs, queued before this module starts (see the conftest's ``BACKGROUND``); each test
waits for its example and checks what it printed and wrote."""

from __future__ import annotations

import functools
import itertools
import json
import re
import sys
from pathlib import Path

import pytest

from langchain_qwen_fast.testing.samples import headlines
from tests.integration_tests.conftest import BACKGROUND, SERVERS, background_work
from tests.support.background import Job

# Every example but the two long ones runs against the shared server.
pytestmark = pytest.mark.usefixtures("server_url")

ROOT = Path(__file__).resolve().parents[2]


def example_command(name: str, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / "examples" / name), *args]


EXAMPLES = [
    ("quickstart.py", "classifications/s"),
    ("lcel_chain.py", "LLMChain"),
    ("router.py", "general desk   <- ''"),
    ("agent_tool.py", "tool calls: 1"),
    ("langgraph_routing.py", "triage        <- ''"),
    ("multi_label_routing.py", "routes: {"),
    ("agent_model_router.py", "runs routed: 2"),
]
#: Rows of the classify-file example over client processes, and the one that cannot be classified.
PROCESS_ROWS, BLANK_ROW = 2100, 5


def _process_rows() -> list[str]:
    texts = [f"{i}: {t}" for i, t in zip(range(PROCESS_ROWS), itertools.cycle(headlines(175)))]
    texts[BLANK_ROW] = "   "  # cannot be classified: its error in its place
    return texts


@functools.cache
def background_jobs() -> dict[str, tuple[Job, ...]]:
    """Every example, as a background job (see the conftest's ``BACKGROUND``), by the test that
    reads what it printed and wrote: at a middle priority, since they send servers requests under
    timeouts. All but the two long ones (which train and start servers of their own) run against
    the shared server, once it answers. Their input files are written here, once."""
    work, url = background_work("examples"), SERVERS["server_url"].planned_url()

    def job(name: str, script: str, *args: str, own_servers: bool = False) -> Job:
        argv = example_command(script, *args) if own_servers else example_command(script, *args, "--base-url", url)
        return Job(name, argv, niceness=10, starts_servers=own_servers, waits_for=None if own_servers else url)

    source = work / "rows.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in _process_rows()))
    sample, latency = "examples/data/news_sample.csv", ["--items", "64", "--invoke-items", "3", "--out"]
    return {
        "test_example_runs": tuple(job(script, script) for script, _ in EXAMPLES),
        "test_classify_file_example": (
            job("classify-file", "classify_file.py", sample, "--out", f"{work}/labels.jsonl"),
        ),
        "test_latency_comparison_example": (job("latency", "latency_comparison.py", *latency, f"{work}/latency"),),
        "test_classify_file_example_over_client_processes": (
            job(
                "classify-processes",
                "classify_file.py",
                str(source),
                "--out",
                f"{work}/labels-2.jsonl",
                "--processes",
                "2",
            ),
        ),
        "test_accuracy_loop_example": (
            job("accuracy_loop", "accuracy_loop.py", "--work", str(background_work("accuracy_loop")), own_servers=True),
        ),
        "test_review_loop_example": (
            job("review_loop", "review_loop.py", "--work", str(background_work("review_loop")), own_servers=True),
        ),
    }


def printed(test: str, name: str | None = None) -> str:
    """What ``test``'s example (``name`` among several) printed, once it has ended."""
    (job,) = [j for j in background_jobs()[test] if name in (None, j.name)]
    return BACKGROUND.result(job).read_text()


@pytest.mark.parametrize(("name", "expect"), EXAMPLES)
def test_example_runs(name: str, expect: str) -> None:
    assert expect in printed("test_example_runs", name)


def test_classify_file_example() -> None:
    said = printed("test_classify_file_example")
    rows = [json.loads(line) for line in (background_work("examples") / "labels.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and "wrote 12 rows" in said and "label distribution" in said
    assert rows[1]["title"] == "Holders through after late goal"  # AG News layout: class, title, description
    assert all(r["label"] in ("World", "Sports", "Business", "Sci/Tech") and r["error"] is None for r in rows)


def test_latency_comparison_example() -> None:
    assert "classifier_batch_over_chat_batch" in printed("test_latency_comparison_example")
    out = background_work("examples") / "latency"
    report = json.loads((out / "results.json").read_text())
    assert {row["path"] for row in report["rows"]} >= {"QwenClassifier.invoke", "LLMChain(ChatOpenAI)"}
    assert (out / "chart.png").stat().st_size > 0


def test_classify_file_example_over_client_processes() -> None:
    said = printed("test_classify_file_example_over_client_processes")
    rows = [json.loads(line) for line in (background_work("examples") / "labels-2.jsonl").read_text().splitlines()]
    assert f"wrote {PROCESS_ROWS} rows" in said and "errors: 1 (InvalidInputError 1)" in said
    assert [r["text"] for r in rows] == _process_rows()
    assert rows[BLANK_ROW]["label"] is None and "InvalidInputError" in rows[BLANK_ROW]["error"]


def test_accuracy_loop_example() -> None:
    """The README's four commands: train, serve, eval --calibrate --save-calibration, load."""
    work = background_work("accuracy_loop")
    assert "calibrated classifier: temperature" in printed("test_accuracy_loop_example")
    saved = json.loads((work / "model" / "classifier.json").read_text())["config"]
    report = json.loads((work / "eval" / "report.json").read_text())
    assert saved["temperature"] == report["calibration"]["temperature"] != 1.0
    assert report["accuracy"] >= 0.9  # trained on generated headlines, validated on others


def test_review_loop_example() -> None:
    """Train on a few rows, classify a pool with the job, label its review queue, train again:
    held-out accuracy rises."""
    work, said = background_work("review_loop"), printed("test_review_loop_example")
    found = re.search(r"held-out accuracy: before ([0-9.]+), after ([0-9.]+)", said)
    assert found, said[-3000:]
    before, after = map(float, found.groups())
    assert after > before
    report = json.loads((work / "pool-labelled.parquet.report.json").read_text())
    assert report["rows"] == 2000 and report["errors"] == 0 and report["review"]["rows"] > 0
