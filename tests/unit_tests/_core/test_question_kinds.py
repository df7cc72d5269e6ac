"""Question kinds: a fourth kind, registered in the test alone, is asked in the prompt,
answered, written as a job's columns and read back, counted in a job's summary, read from a
questions file and answered on the wire, with no edit anywhere else; and the three kinds keep
their names on the wire as the service's schema declares them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from langchain_qwen_fast._core.decisions import Answered, DecisionOutcome, DecisionQuestion, QuestionSet, TokenUsage
from langchain_qwen_fast._core.question_kinds import KINDS, QuestionKind, QuestionParts, wire_kind
from langchain_qwen_fast._core.question_kinds.base import WireDefinition
from langchain_qwen_fast.errors import InvalidInputError
from langchain_qwen_fast.jobs.questions import (
    answer_columns,
    load_questions,
    outcome_of,
    question_columns,
    text_columns,
)
from langchain_qwen_fast.jobs.summary import Counts
from langchain_qwen_fast.serving.service.decisions import DecisionCall, WireQuestion, answer_body


class Stance(QuestionKind):
    """A toy kind: two fixed labels, ``agree`` and ``disagree``, answered with the more
    probable one; its criteria optionally describe each."""

    name = "stance"
    wire_name = "stance"
    chooses_label = True

    def parts(self, name: str, instructions: Any, criteria: Any) -> QuestionParts:
        given = criteria or {}
        return QuestionParts(str(instructions), ("agree", "disagree"), (given.get("agree"), given.get("disagree")))

    def wire_definition(self, answers: Sequence[Any], where: str) -> WireDefinition:
        return WireDefinition(None, (True, False))

    def answer_line(self, question: DecisionQuestion) -> str:
        return "Answer agree or disagree."

    def value(self, answered: Answered) -> str | None:
        return None if answered.refused else answered.choice

    def plain_answer(self, answered: Answered) -> dict[str, Any]:
        return {"agrees": answered.probabilities[0]}

    def wire_answer(self, answered: Answered, values: Sequence[str | bool]) -> dict[str, Any]:
        return {"agrees": values[answered.question.labels.index(answered.choice)]}


@pytest.fixture
def stance() -> Iterator[DecisionQuestion]:
    """The toy kind registered for one test, and a question of it."""
    KINDS["stance"] = Stance()
    try:
        yield DecisionQuestion.of("stance", "view", "Does the author agree?", {"agree": "Says yes."})
    finally:
        del KINDS["stance"]


def test_a_registered_kind_is_asked_in_the_prompt(stance: DecisionQuestion) -> None:
    assert stance.kind == "stance" and stance.labels == ("agree", "disagree")
    head = QuestionSet((stance,)).render_head()
    assert "Question 1: Does the author agree?\nAnswer agree or disagree.\n- agree: Says yes.<|im_end|>" in head


def test_a_registered_kind_answers_and_writes_its_columns(stance: DecisionQuestion) -> None:
    questions = QuestionSet((stance,))
    outcome = DecisionOutcome((Answered(stance, (0.25, 0.75)),), TokenUsage())
    assert question_columns(questions) == ["view", "view.confidence", "view.p_agree", "view.p_disagree", "error"]
    assert text_columns(questions) == {"view", "error"}
    row = answer_columns(outcome, questions)
    assert row == {"view": "disagree", "view.confidence": 0.75, "view.p_agree": 0.25, "view.p_disagree": 0.75,
                   "error": None}  # fmt: skip
    assert outcome_of(row, questions) == outcome
    refused = answer_columns(DecisionOutcome((Answered(stance, (0.5, 0.5), refused=True),), TokenUsage()), questions)
    assert refused["view"] is None and outcome_of(refused, questions).answers[0].refused  # type: ignore[union-attr]


def test_a_registered_kind_is_counted_in_a_jobs_summary(stance: DecisionQuestion) -> None:
    counts = Counts()
    counts.add(DecisionOutcome((Answered(stance, (0.9, 0.1)),), TokenUsage()))
    counts.add(DecisionOutcome((Answered(stance, (0.5, 0.5), refused=True),), TokenUsage()))
    assert counts.answer_counts == {"view": {"agree": 1, "(none)": 1}}
    assert counts.abstained == 1 and sum(counts.histogram["view"]) == 2


def test_a_registered_kind_is_read_from_a_questions_file(stance: DecisionQuestion) -> None:
    questions = load_questions({"view": {"type": "stance", "instructions": "Does the author agree?",
                                         "criteria": {"agree": "Says yes."}}})  # fmt: skip
    assert questions.questions == (stance,)


def test_a_registered_kind_answers_on_the_wire(stance: DecisionQuestion) -> None:
    assert wire_kind("stance") is KINDS["stance"]
    call = DecisionCall("state", QuestionSet((stance,)), (WireQuestion("view", "stance", (True, False)),))
    body = answer_body(call, DecisionOutcome((Answered(stance, (0.9, 0.1)),), TokenUsage()), "qwen")
    assert body["answers"] == [{"type": "stance", "name": "view", "agrees": True}]


def test_an_unknown_kind_is_refused_naming_the_kinds() -> None:
    with pytest.raises(
        InvalidInputError, match=r"no question kind 'stance'; the kinds are \['choice', 'noul', 'score'\]"
    ):
        DecisionQuestion.of("stance", "view", "Does the author agree?")


def test_the_kinds_wire_names_are_the_schemas_question_types() -> None:
    from langchain_qwen_fast.serving.service.options import ServiceOptions
    from langchain_qwen_fast.serving.service.schema import decisions_request_model

    schema = decisions_request_model(ServiceOptions()).model_json_schema()
    declared = {
        definition["properties"]["type"]["const"]
        for definition in schema["$defs"].values()
        if "instructions" in definition.get("properties", {})
    }
    assert declared == {kind.wire_name for kind in KINDS.values()} == {"predicate", "choice", "score"}
