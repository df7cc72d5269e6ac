"""A questions job (``qwen-fast classify --questions FILE``) against a canned vLLM (no network):
the file's refusals before anything is sent, the answers' columns, rows in place and in order,
the answers the decision model gives in process, a resume after a kill, a restart with other
questions refused naming the question."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from langchain_core.decisions import Choice, Noul, Score

from langchain_qwen_fast import QwenDecisionModel
from langchain_qwen_fast._core.decisions import Answered, DecisionOutcome, DecisionQuestion, QuestionSet, TokenUsage
from langchain_qwen_fast.cli import classify as command
from langchain_qwen_fast.errors import ConfigurationError, InvalidInputError
from langchain_qwen_fast.jobs.job import ClassifyOptions, classify_table
from langchain_qwen_fast.jobs.parts import WorkFolder, work_folder
from langchain_qwen_fast.jobs.questions import (
    answer_columns,
    load_questions,
    outcome_of,
    question_columns,
)
from langchain_qwen_fast.jobs.summary import Counts, render
from tests.support.cli import parse_command
from tests.support.fake_vllm import FakeVLLM
from tests.unit_tests.jobs.test_job import Killed, dying_after, read_csv, write_csv

URL = "http://vllm.test/v1"
QUESTIONS: dict[str, Any] = {
    "team": {
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": {"billing": "Payments and invoices.", "technical": "Bugs.", "sales": None},
    },
    "urgent": {"type": "noul", "instructions": "Is this urgent?", "criteria": {"true": "Something is down."}},
    "anger": {"type": "score", "instructions": "How angry is the customer?", "criteria": ["Calm.", "Annoyed.", "Mad."]},
}
COLUMNS = [
    "team", "team.confidence", "team.p_billing", "team.p_technical", "team.p_sales",
    "urgent",
    "anger", "anger.confidence", "anger.p_0", "anger.p_1", "anger.p_2",
    "error",
]  # fmt: skip


@pytest.fixture
def fake() -> FakeVLLM:
    return FakeVLLM()


def model(transport: Any, **kwargs: Any) -> QwenDecisionModel:
    return QwenDecisionModel(base_url=URL, model="qwen3", http_transport=transport, **kwargs)


def questions_file(path: Path, questions: Any = QUESTIONS) -> Path:
    path.write_text(json.dumps(questions))
    return path


def options(source: Path, out: Path, questions: Any, **kwargs: Any) -> ClassifyOptions:
    settings: dict[str, Any] = {"progress": False, "histogram": False, "chunk_rows": 20}
    return ClassifyOptions(str(source), str(out), questions=str(questions), **{**settings, **kwargs})


def tickets(n: int) -> list[str]:
    return [f"Ticket {i}: invoice {i * 7} is wrong and the app crashes on page {i % 5}" for i in range(n)]


# -- the file -------------------------------------------------------------------------------------
def test_the_file_is_read_as_langchain_s_questions(tmp_path: Path) -> None:
    questions = load_questions(str(questions_file(tmp_path / "q.json")))
    assert [(q.name, q.kind, q.labels) for q in questions.questions] == [
        ("team", "choice", ("billing", "technical", "sales")),
        ("urgent", "noul", ("yes", "no")),
        ("anger", "score", ("0", "1", "2")),
    ]
    # LangChain's question objects, or their dicts, given in Python are the same questions
    objects = {
        "team": Choice(**{k: v for k, v in QUESTIONS["team"].items() if k != "type"}),
        "urgent": Noul(instructions="Is this urgent?", criteria={"true": "Something is down.", "false": None}),
        "anger": Score(instructions="How angry is the customer?", criteria=["Calm.", "Annoyed.", "Mad."]),
    }
    assert load_questions(objects) == load_questions(QUESTIONS) == questions


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not JSON"),
        ("[]", "must be a JSON object of answer ids to questions"),
        ("{}", "must be a JSON object of answer ids to questions"),
        ({"team": {"type": "poll", "instructions": "x"}}, "question 'team' is not a Noul, Choice, Score or Box"),
        ({"ok": QUESTIONS["urgent"], "bad": {"type": "noul"}}, "question 'bad' is not a Noul.*Field required"),
        ({"where": {"type": "box", "instructions": "Find the cat"}}, "question 'where': a Box locates"),
        (
            {"team": {"type": "choice", "instructions": "x", "criteria": {}}},
            "question 'team' is not a Noul.*at least 1 item",
        ),
        ({"team": {"type": "choice", "instructions": "x", "criteria": {" a": None, "b": None}}}, "label ' a'"),
        (
            {"anger": {"type": "score", "instructions": "x", "criteria": ["one"]}},
            "question 'anger' is not a Noul.*at least 2 items",
        ),
        ({"urgent": {"type": "noul", "instructions": "  "}}, "question 'urgent' instructions is empty"),
        ({"error": QUESTIONS["urgent"]}, "question 'error' has a column 'error', which is the error column"),
        (
            {"a": QUESTIONS["anger"], "a.confidence": QUESTIONS["urgent"]},
            "question 'a.confidence' has a column 'a.confidence', which is question 'a''s too",
        ),
    ],
)
def test_a_bad_file_is_refused_before_anything_is_sent_naming_the_question(
    fake: FakeVLLM, tmp_path: Path, content: Any, message: str
) -> None:
    path = tmp_path / "q.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    source = write_csv(tmp_path / "in.csv", tickets(3))
    with pytest.raises(ConfigurationError, match=message) as refused:
        classify_table(options(source, tmp_path / "out.csv", path), decisions=model(fake.transport))
    assert f"--questions {path}" in str(refused.value)
    assert fake.calls("/v1/completions") == [] and fake.calls("/v1/models") == []
    assert not (tmp_path / "out.csv").exists() and not work_folder(tmp_path / "out.csv").exists()


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"--questions .*nope\.json cannot be read"):
        load_questions(str(tmp_path / "nope.json"))


def test_the_classifier_s_flags_are_refused_with_questions(tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", tickets(2))
    path = questions_file(tmp_path / "q.json")
    for kwargs, flag in [
        ({"labels": ("A", "B")}, "--labels"),
        ({"classifier": "m"}, "--classifier"),
        ({"multi_label": True}, "--multi-label"),
        ({"mode": "head"}, "--mode"),
        ({"review_out": str(tmp_path / "r.csv"), "review_sample": 3}, "--review-out"),
    ]:
        with pytest.raises(ConfigurationError, match=f"{flag} is for a classifier's labels; --questions"):
            classify_table(options(source, tmp_path / "out.csv", path, **kwargs))


def test_the_command_takes_questions_instead_of_labels(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_command(command, ["in.csv", "--out", "o.csv", "--questions", "q.json", "--abstain-below", "0.4"])
    assert command.classify_options(args) == ClassifyOptions("in.csv", "o.csv", questions="q.json", abstain_below=0.4)
    with pytest.raises(SystemExit):
        parse_command(command, ["in.csv", "--out", "o.csv", "--questions", "q.json", "--labels", "A,B"])
    assert "not allowed with argument" in capsys.readouterr().err


# -- the columns ----------------------------------------------------------------------------------
def test_the_columns_of_each_question_in_the_file_s_order() -> None:
    questions = load_questions(QUESTIONS)
    assert question_columns(questions) == COLUMNS
    failed = answer_columns(InvalidInputError("state is empty"), questions)
    assert list(failed) == COLUMNS and failed["error"] == "InvalidInputError: state is empty"
    assert all(failed[c] is None for c in COLUMNS[:-1])


def test_answers_read_back_from_their_columns_count_alike() -> None:
    questions = QuestionSet(
        (
            DecisionQuestion.choice("team", "Which?", {"a": None, "b": None}),
            DecisionQuestion.noul("urgent", "Urgent?"),
            DecisionQuestion.score("anger", "How angry?", ["calm", "mad"]),
        )
    )
    answers = (
        Answered(questions.questions[0], (0.25, 0.75)),
        Answered(questions.questions[1], (0.5, 0.5)),
        Answered(questions.questions[2], (0.875, 0.125)),
    )
    outcome = DecisionOutcome(answers, TokenUsage())
    refused = DecisionOutcome((Answered(questions.questions[0], (0.5, 0.5), True), *answers[1:]), TokenUsage())
    counted, read_back = Counts(), Counts()
    for result in (outcome, refused, InvalidInputError("x")):
        counted.add(result)
        read_back.add(outcome_of(answer_columns(result, questions), questions))
    assert counted == read_back
    assert counted.answer_counts == {"team": {"b": 1, "(none)": 1}} and counted.abstained == 1
    assert counted.errors == 1 and sorted(counted.histogram) == ["anger", "team"]


# -- the job --------------------------------------------------------------------------------------
def test_every_row_gets_the_decision_model_s_answers_in_place(fake: FakeVLLM, tmp_path: Path) -> None:
    texts = tickets(50)
    texts[4] = "   "
    texts[30] = "word " * 2000  # past the fake server's 512-token context
    source = write_csv(tmp_path / "in.csv", texts)
    out = tmp_path / "out.csv"
    report = classify_table(options(source, out, questions_file(tmp_path / "q.json")), decisions=model(fake.transport))
    rows = read_csv(out)
    assert list(rows[0]) == ["id", "text", *COLUMNS]
    assert [r["id"] for r in rows] == [str(i) for i in range(50)] and [r["text"] for r in rows] == texts
    assert rows[4]["error"].startswith("InvalidInputError: state is empty") and rows[4]["team"] == ""
    assert rows[30]["error"].startswith("ContextLengthError")
    good = [(i, r) for i, r in enumerate(rows) if i not in (4, 30)]
    for _, row in good:
        assert row["error"] == "" and row["team"] in ("billing", "technical", "sales")
        for name, labels in (("team", ("billing", "technical", "sales")), ("anger", ("0", "1", "2"))):
            assert math.isclose(sum(float(row[f"{name}.p_{x}"]) for x in labels), 1.0, abs_tol=1e-3)
    direct = model(fake.transport).batch([{"state": texts[i], "questions": QUESTIONS} for i, _ in good[:6]])
    for (_, row), response in zip(good, direct):
        team, urgent, anger = response.choices["team"], response.nouls["urgent"], response.scores["anger"]
        assert row["team"] == team.choice and float(row["team.confidence"]) == pytest.approx(team.confidence)
        assert float(row["team.p_sales"]) == pytest.approx(team.probabilities["sales"])
        assert float(row["urgent"]) == pytest.approx(urgent.noul)
        assert float(row["anger"]) == pytest.approx(anger.score)
        assert float(row["anger.p_2"]) == pytest.approx(anger.probabilities[2])
    assert report.rows == 50 and report.errors == 2
    assert report.error_kinds == {"InvalidInputError": 1, "ContextLengthError": 1}
    assert report.answer_counts is not None and sum(report.answer_counts["team"].values()) == 48
    assert report.label_counts == {} and report.rows_per_s > 0
    saved = json.loads(Path(report.report).read_text())
    assert saved["answer_counts"] == report.answer_counts and saved["options"]["questions"] == str(tmp_path / "q.json")
    assert "team distribution:" in render(report) and "label distribution" not in render(report)


def test_json_rows_and_parquet_output(fake: FakeVLLM, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"text": "The app crashes"}\n{"text": {"subject": "refund", "body": "twice billed"}}\n{"text": 5}\n'
    )
    out = tmp_path / "out.parquet"
    classify_table(options(source, out, questions_file(tmp_path / "q.json")), decisions=model(fake.transport))
    import pyarrow.parquet as pq

    table = pq.read_table(out)
    assert str(table.schema.field("team").type) == "string" and str(table.schema.field("urgent").type) == "double"
    rows = table.to_pylist()
    assert rows[0]["error"] is None and rows[1]["error"] is None and isinstance(rows[1]["urgent"], float)
    assert rows[2]["error"].startswith("InvalidInputError: state must be text") and rows[2]["team"] is None


def test_an_interrupted_questions_job_resumes_with_every_row_once(fake: FakeVLLM, tmp_path: Path) -> None:
    texts = tickets(200)
    source = write_csv(tmp_path / "in.csv", texts)
    path = questions_file(tmp_path / "q.json")
    whole = tmp_path / "whole.csv"
    classify_table(options(source, whole, path), decisions=model(fake.transport))
    out = tmp_path / "out.csv"
    with pytest.raises(Killed):
        classify_table(options(source, out, path, chunks_in_flight=1), decisions=model(dying_after(fake, 130)))
    committed = WorkFolder(out, "csv").chunks()
    assert committed and not out.exists()
    report = classify_table(options(source, out, path), decisions=model(fake.transport))
    assert report.resumed_rows == sum(chunk.rows for chunk in committed) > 0
    assert report.resumed_rows + report.classified_rows == 200 == report.rows
    assert read_csv(out) == read_csv(whole)
    assert report.answer_counts == json.loads(Path(f"{whole}.report.json").read_text())["answer_counts"]


def test_a_restart_with_other_questions_is_refused_naming_the_question(fake: FakeVLLM, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", tickets(120))
    out = tmp_path / "out.csv"
    with pytest.raises(Killed):
        classify_table(
            options(source, out, questions_file(tmp_path / "q.json"), chunks_in_flight=1),
            decisions=model(dying_after(fake, 130)),
        )
    edited = {**QUESTIONS, "urgent": {**QUESTIONS["urgent"], "instructions": "Is this very urgent?"}}
    with pytest.raises(ConfigurationError, match="question 'urgent' differ") as refused:
        classify_table(
            options(source, out, questions_file(tmp_path / "q2.json", edited)), decisions=model(fake.transport)
        )
    assert "question 'team'" not in str(refused.value) and "--fresh" in str(refused.value)
    with pytest.raises(ConfigurationError, match="--labels differ"):
        classify_table(
            ClassifyOptions(str(source), str(out), labels=("A", "B"), progress=False, histogram=False, chunk_rows=20)
        )
    assert work_folder(out).exists()  # nothing was lost


def test_a_restart_with_another_temperature_is_refused_naming_it(fake: FakeVLLM, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", tickets(120))
    out = tmp_path / "out.csv"
    path = questions_file(tmp_path / "q.json")
    with pytest.raises(Killed):
        classify_table(options(source, out, path, chunks_in_flight=1), decisions=model(dying_after(fake, 130)))
    with pytest.raises(ConfigurationError, match=r"temperature differ: 1\.0 vs 2\.0") as refused:
        classify_table(options(source, out, path), decisions=model(fake.transport, temperature=2.0))
    assert "question '" not in str(refused.value)
    report = classify_table(options(source, out, path), decisions=model(fake.transport, timeout=5.0))
    assert report.resumed_rows > 0 and report.rows == 120


def test_abstain_below_refuses_a_choice_and_keeps_its_probabilities(fake: FakeVLLM, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", tickets(20))
    out = tmp_path / "out.jsonl"
    path = questions_file(tmp_path / "q.json")
    report = classify_table(
        options(source, out, path, abstain_below=1.0), decisions=model(fake.transport, abstain_below=1.0)
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["team"] is None and r["error"] is None and r["team.p_billing"] is not None for r in rows)
    assert report.abstained == 20 and report.answer_counts == {"team": {"(none)": 20}}
