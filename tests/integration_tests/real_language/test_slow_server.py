"""At the defaults, against a real slow server (SmolLM2-135M-Instruct on this machine's CPU):
a batch or a job that holds more work than the server answers within one timeout is answered
whole, in one run.

The classifier's batch holds 1,024 prompts: what a batch had in flight at once before the
flow control (8 requests of 128), which takes this server longer than the timeout (30 s) to
answer, so that the requests waiting in its queue behind the others would have timed out. The
decision batch and the job ask three questions about each state or row. The prompts are new to
the server (its prefix cache would answer them faster). ``QWEN_FAST_SLOW_SERVER=full`` runs
the larger sizes, each past the timeout's worth before: 2,048 states x 3 questions, 8,192
texts, a job of 2,000 rows.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from langchain_core.decisions import Choice, ClassifierResponse, Noul, Score

from langchain_qwen_fast import Classification, QwenClassifier, QwenDecisionModel
from langchain_qwen_fast.testing.samples import headlines
from tests.integration_tests.conftest import record_seconds
from tests.integration_tests.real_language.conftest import LABELS, SMOLLM2_NAME, background_jobs

__all__ = ["background_jobs"]  # the integration conftest plans the package's training runs through it

pytestmark = pytest.mark.filterwarnings("ignore::langchain_core._api.beta_decorator.LangChainBetaWarning")

FULL = os.environ.get("QWEN_FAST_SLOW_SERVER") == "full"
#: Texts the classifier's batch holds.
TEXTS = 8192 if FULL else 1024
#: States the decision batch asks three questions about.
STATES = 2048 if FULL else 256
#: Rows the job answers three questions about.
ROWS = 2000 if FULL else 128
QUESTIONS = {
    "desk": Choice(
        instructions="Which desk handles this story?",
        criteria={"world": "World news.", "sports": "Sport.", "business": "Money and companies."},
    ),
    "breaking": Noul(instructions="Is this breaking news?"),
    "tone": Score(instructions="How negative is it?", criteria=["Neutral.", "Somewhat negative.", "Very negative."]),
}


def fresh(count: int) -> list[str]:
    """``count`` headlines, each new to the server."""
    run = uuid.uuid4().hex[:8]
    return [f"[{run}-{i}] {text}" for i, text in enumerate(headlines(count))]


async def test_a_decision_batch_of_three_questions_is_answered_whole(smollm2_url: str) -> None:
    model = QwenDecisionModel(base_url=smollm2_url, model=SMOLLM2_NAME)
    states = [{"state": state, "questions": QUESTIONS} for state in fresh(STATES)]
    start = time.perf_counter()
    answers = await model.abatch(states, return_exceptions=True)
    record_seconds(
        f"slow server: QwenDecisionModel.abatch of {STATES} states x 3 questions", time.perf_counter() - start
    )
    failed = [a for a in answers if not isinstance(a, ClassifierResponse)]
    assert not failed, failed[:3]


async def test_a_classifier_batch_of_more_than_a_timeout_s_work_is_answered_whole(smollm2_url: str) -> None:
    classifier = QwenClassifier(labels=LABELS, base_url=smollm2_url, model=SMOLLM2_NAME)
    start = time.perf_counter()
    results = await classifier.abatch(fresh(TEXTS), return_exceptions=True)
    record_seconds(f"slow server: QwenClassifier.abatch of {TEXTS} texts", time.perf_counter() - start)
    failed = [r for r in results if not isinstance(r, Classification)]
    assert not failed, failed[:3]


def test_a_questions_job_completes_in_one_run(smollm2_url: str, tmp_path: Path) -> None:
    rows = tmp_path / "rows.csv"
    with rows.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        writer.writerows(enumerate(fresh(ROWS)))
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps({name: q.model_dump() for name, q in QUESTIONS.items()}))
    out = tmp_path / "out.csv"
    command = [sys.executable, "-m", "langchain_qwen_fast.cli", "classify", str(rows), "--questions", str(questions)]
    command += ["--out", str(out), "--base-url", smollm2_url, "--model", SMOLLM2_NAME, "--no-progress"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    record_seconds(f"slow server: qwen-fast classify --questions, {ROWS} rows", time.perf_counter() - start)
    assert done.returncode == 0, done.stderr[-2000:]
    with out.open(newline="") as f:
        written = list(csv.DictReader(f))
    assert [r["id"] for r in written] == [str(i) for i in range(ROWS)]
    assert all(r["error"] == "" and r["desk"] in ("world", "sports", "business") for r in written)
