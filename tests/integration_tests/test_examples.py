"""Every example runs against the real server (fast settings), so none of them rots."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

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


@dataclass
class BackgroundExample:
    process: subprocess.Popen[bytes]
    work: Path
    output: Path

    def printed(self) -> str:
        """What the example printed, once it has ended (the hang guard of :func:`run_example`)."""
        code = self.process.wait(timeout=600)
        printed = self.output.read_text()
        assert code == 0, printed[-6000:]
        return printed


def in_background(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, script: str, test: str
) -> Iterator[BackgroundExample | None]:
    """``script`` started as this module starts, when ``test`` (which waits for it) was
    collected; stopped at the module's end if it is still running."""
    if not any(item.name == test for item in request.session.items):
        yield None
        return
    work = tmp_path_factory.mktemp(script.removesuffix(".py"))
    output = work / "printed.txt"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            example_command(script, "--work", str(work)), cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        yield BackgroundExample(process, work, output)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=120)


@pytest.fixture(scope="module", autouse=True)
def accuracy_loop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BackgroundExample | None]:
    """The accuracy loop example, started in the background: it trains and starts a server of
    its own, which keeps one core busy while the other examples run on the other. Its test,
    last in the module, waits for it and reads what it wrote."""
    yield from in_background(request, tmp_path_factory, "accuracy_loop.py", "test_accuracy_loop_example")


@pytest.fixture(scope="module", autouse=True)
def review_loop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BackgroundExample | None]:
    """The review loop example, started in the background as :func:`accuracy_loop` is (it trains
    twice and starts two servers of its own, one after the other); its test waits for it."""
    yield from in_background(request, tmp_path_factory, "review_loop.py", "test_review_loop_example")


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


def test_accuracy_loop_example(accuracy_loop: BackgroundExample | None) -> None:
    """The README's four commands: train, serve, eval --calibrate --save-calibration, load."""
    assert accuracy_loop is not None
    printed = accuracy_loop.printed()
    assert "calibrated classifier: temperature" in printed
    saved = json.loads((accuracy_loop.work / "model" / "classifier.json").read_text())["config"]
    report = json.loads((accuracy_loop.work / "eval" / "report.json").read_text())
    assert saved["temperature"] == report["calibration"]["temperature"] != 1.0
    assert report["accuracy"] >= 0.9  # trained on generated headlines, validated on others


def test_review_loop_example(review_loop: BackgroundExample | None) -> None:
    """Train on a few rows, classify a pool with the job, label its review queue, train again:
    held-out accuracy rises."""
    assert review_loop is not None
    printed = review_loop.printed()
    found = re.search(r"held-out accuracy: before ([0-9.]+), after ([0-9.]+)", printed)
    assert found, printed[-3000:]
    before, after = map(float, found.groups())
    assert after > before
    report = json.loads((review_loop.work / "pool-labelled.parquet.report.json").read_text())
    assert report["rows"] == 2000 and report["errors"] == 0 and report["review"]["rows"] > 0
