"""Every example runs against the real server (fast settings), so none of them rots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


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


def test_accuracy_loop_example(tiny_model: Path, tmp_path: Path) -> None:
    """The README's four commands: train, serve, eval --calibrate --save-calibration, load."""
    printed = run_example("accuracy_loop.py", "--work", str(tmp_path))
    assert "calibrated classifier: temperature" in printed
    saved = json.loads((tmp_path / "model" / "classifier.json").read_text())["config"]
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert saved["temperature"] == report["calibration"]["temperature"] != 1.0
    assert report["accuracy"] >= 0.9  # trained on generated headlines, validated on others


def test_classify_file_example(server_url: str, tmp_path: Path) -> None:
    out = tmp_path / "labels.jsonl"
    printed = run_example(
        "classify_file.py", "examples/data/news_sample.csv", "--out", str(out), "--base-url", server_url
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and "wrote 12 rows" in printed
    assert rows[1]["text"].startswith("Holders through after late goal.")
    assert all(r["label"] in ("World", "Sports", "Business", "Sci/Tech") for r in rows)


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
    assert "wrote 2100 rows" in printed and "(1 could not be classified)" in printed
    assert [r["text"] for r in rows] == texts
    assert rows[5]["label"] is None and "InvalidInputError" in rows[5]["error"]
