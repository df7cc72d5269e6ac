"""``qwen-fast classify --questions`` end to end against the real vLLM server (the tiny model as
``qwen3``), run as a command: a noul, a choice and a score answered about every row, as
``QwenDecisionModel`` answers them in process, bad rows in place, and a SIGKILL and a restart
that ends with every row once."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

from langchain_qwen_fast import QwenDecisionModel
from langchain_qwen_fast.testing.samples import news_items
from tests.integration_tests.conftest import ROOT
from tests.integration_tests.jobs.test_classify import COMMAND, classify, killed_after_parts, table, write

QUESTIONS: dict[str, Any] = {
    "topic": {
        "type": "choice",
        "instructions": "Which section of the paper is this story for?",
        "criteria": {"World": "International news.", "Sports": None, "Business": "Markets and companies."},
    },
    "breaking": {"type": "noul", "instructions": "Is this breaking news?", "criteria": {"true": "It just happened."}},
    "tone": {"type": "score", "instructions": "How negative is the story?", "criteria": ["Neutral.", "Bad.", "Dire."]},
}
PROBABILITIES = {"topic": ("World", "Sports", "Business"), "tone": ("0", "1", "2")}


def questions_file(tmp_path: Path) -> Path:
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(QUESTIONS))
    return path


def in_process(server_url: str, states: list[str]) -> list[Any]:
    model = QwenDecisionModel(base_url=server_url, model="qwen3")
    try:
        return model.batch([{"state": state, "questions": QUESTIONS} for state in states])
    finally:
        model.close()


def assert_answers_of_the_model(rows: list[dict[str, Any]], responses: list[Any]) -> None:
    """Each row's answers are the decision model's for the same state (within 1e-3; a choice's
    label where its two best are apart by more)."""
    for row, response in zip(rows, responses, strict=True):
        assert not row["error"]
        topic, breaking, tone = response.choices["topic"], response.nouls["breaking"], response.scores["tone"]
        assert abs(float(row["breaking"]) - breaking.noul) < 1e-3
        assert abs(float(row["tone"]) - tone.score) < 1e-3 * 2
        assert abs(float(row["tone.confidence"]) - tone.confidence) < 1e-2
        assert abs(float(row["topic.confidence"]) - topic.confidence) < 1e-3
        for label, p in topic.probabilities.items():
            assert abs(float(row[f"topic.p_{label}"]) - p) < 1e-3
        for level, p in tone.probabilities.items():
            assert abs(float(row[f"tone.p_{level}"]) - p) < 1e-3
        best, second = sorted(topic.probabilities.values(), reverse=True)[:2]
        if best - second > 2e-3:
            assert row["topic"] == topic.choice


def test_a_noul_a_choice_and_a_score_about_every_row(server_url: str, tmp_path: Path) -> None:
    texts = news_items(40, 70_000)
    texts[6] = "   "
    texts[21] = "word " * 6000  # past the server's 4,096 tokens
    source = write(tmp_path / "in.csv", [{"id": str(i), "text": t} for i, t in enumerate(texts)])
    out = tmp_path / "out.jsonl"
    printed = classify(str(source), "--out", str(out), "--questions", str(questions_file(tmp_path)),
                       "--base-url", server_url, "--chunk-rows", "16").stdout  # fmt: skip
    rows = table(out)
    assert list(rows[0]) == [
        "id", "text", "topic", "topic.confidence", "topic.p_World", "topic.p_Sports", "topic.p_Business",
        "breaking", "tone", "tone.confidence", "tone.p_0", "tone.p_1", "tone.p_2", "error",
    ]  # fmt: skip
    assert [r["id"] for r in rows] == [str(i) for i in range(40)] and [r["text"] for r in rows] == texts
    assert rows[6]["error"].startswith("InvalidInputError: state is empty") and rows[6]["topic"] is None
    assert rows[21]["error"].startswith("ContextLengthError") and rows[21]["tone"] is None
    good = [i for i in range(40) if i not in (6, 21)]
    for i in good:
        for name, labels in PROBABILITIES.items():
            assert math.isclose(sum(rows[i][f"{name}.p_{x}"] for x in labels), 1.0, abs_tol=1e-3)
        assert 0.0 <= rows[i]["breaking"] <= 1.0 and rows[i]["topic"] in PROBABILITIES["topic"]
    assert_answers_of_the_model([rows[i] for i in good], in_process(server_url, [texts[i] for i in good]))
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["rows"] == 40 and report["errors"] == 2 and report["rows_per_s"] > 0
    assert report["error_kinds"] == {"InvalidInputError": 1, "ContextLengthError": 1}
    assert sum(report["answer_counts"]["topic"].values()) == 38
    assert Path(f"{out}.histogram.png").stat().st_size > 0
    assert "topic distribution:" in printed and "errors: 2" in printed


def test_a_questions_job_killed_and_started_again_ends_with_every_row_once(server_url: str, tmp_path: Path) -> None:
    texts = news_items(800, 71_000)
    source = write(tmp_path / "in.csv", [{"id": str(i), "text": t} for i, t in enumerate(texts)])
    out = tmp_path / "out.csv"
    args = ["--questions", str(questions_file(tmp_path)), "--base-url", server_url, "--chunk-rows", "32",
            "--chunks-in-flight", "1", "--no-progress", "--no-histogram"]  # fmt: skip
    folder = killed_after_parts(source, out, args, 2)

    printed = classify(str(source), "--out", str(out), *args).stdout
    assert "done by an earlier run" in printed
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["resumed_rows"] >= 64 and report["resumed_rows"] + report["classified_rows"] == 800
    rows = table(out)
    assert [r["id"] for r in rows] == [str(i) for i in range(800)]  # every row once, in input order
    assert [r["text"] for r in rows] == texts and not any(r["error"] for r in rows)
    assert sum(report["answer_counts"]["topic"].values()) == 800
    sample = list(range(0, 800, 89))  # rows from before the kill and after it
    assert_answers_of_the_model([rows[i] for i in sample], in_process(server_url, [texts[i] for i in sample]))
    assert not folder.exists()


def test_a_bad_questions_file_is_refused_naming_the_question(server_url: str, tmp_path: Path) -> None:
    source = write(tmp_path / "in.csv", [{"text": "Stocks rally"}])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**QUESTIONS, "where": {"type": "box", "instructions": "Find the ball"}}))
    argv = [
        *COMMAND,
        str(source),
        "--out",
        str(tmp_path / "out.csv"),
        "--questions",
        str(bad),
        "--base-url",
        server_url,
    ]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "question 'where': a Box locates something in an image" in done.stderr
    assert not (tmp_path / "out.csv").exists()
