"""A job's questions (``qwen-fast classify --questions FILE``): a question set answered about
every row, with the answers' columns added instead of a classifier's.

The file is a JSON object of answer ids to questions, as LangChain's question types
(``langchain_core.decisions``) dump them::

    {
      "team":   {"type": "choice", "instructions": "Which team handles this?",
                 "criteria": {"billing": "Payments.", "technical": "Bugs.", "sales": null}},
      "urgent": {"type": "noul", "instructions": "Is this urgent?",
                 "criteria": {"true": "Something is down.", "false": null}},
      "anger":  {"type": "score", "instructions": "How angry is the customer?",
                 "criteria": ["Calm.", "Annoyed.", "Furious."]}
    }

It is checked whole before anything is sent: a question that is not a ``noul``, ``choice`` or
``score``, or whose answers the model cannot ask (a ``box``, labels with surrounding spaces,
repeated names, columns that would clash) is refused with a
:class:`~langchain_qwen_fast.errors.ConfigurationError` naming it.

Each row's state is its text column's value (text as it is; a JSONL object or array as compact
JSON, as :class:`~langchain_qwen_fast.QwenDecisionModel` renders a dict), and the columns
added per question, in the file's order, then ``error`` (:func:`question_columns`):

* ``noul`` Q: ``Q``, the probability of yes;
* ``choice`` Q: ``Q`` the most probable label (empty when refused under ``abstain_below``),
  ``Q.confidence``, and ``Q.p_<label>`` per label;
* ``score`` Q: ``Q`` the expected level, ``Q.confidence``, and ``Q.p_<level>`` per level
  ``0`` .. ``n-1``;
* ``error``: None, or why this row has no answers (every answer column is then empty).

LangChain (to validate the file) is imported only when a file is read.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from langchain_qwen_fast._core.deciding import DecisionRequest
from langchain_qwen_fast._core.decisions import (
    Answered,
    DecisionOutcome,
    DecisionQuestion,
    QuestionSet,
    TokenUsage,
    render_state,
)
from langchain_qwen_fast._core.fingerprints import answer_settings
from langchain_qwen_fast._core.question_kinds.base import CONFIDENCE
from langchain_qwen_fast._core.settings import Rules
from langchain_qwen_fast.errors import ConfigurationError, InvalidInputError, RecordedError
from langchain_qwen_fast.jobs.columns import error_text

if TYPE_CHECKING:
    from langchain_qwen_fast.engine import DecisionModelLike

#: What a job's questions may be given as: a questions file's path, the mapping of answer ids
#: to questions (LangChain's question objects or their dict form), or the engine's set.
GivenQuestions = str | Mapping[str, Any] | QuestionSet
#: The column of a row's error, as a classifier's job names it.
ERROR = "error"


def load_questions(given: GivenQuestions) -> QuestionSet:
    """The questions ``given`` (see :data:`GivenQuestions`), checked whole (see the module
    docstring); :class:`ConfigurationError` naming the file and the first question refused."""
    if isinstance(given, QuestionSet):
        return checked(given, "questions")
    where = "questions"
    data: Any = given
    if isinstance(given, str):
        where = f"--questions {given}"
        try:
            raw = Path(given).read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"{where} cannot be read: {exc.strerror or exc}") from None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ConfigurationError(f"{where} is not JSON: {exc}") from None
    if not isinstance(data, Mapping) or not data:
        raise ConfigurationError(
            f"{where} must be a JSON object of answer ids to questions "
            '({"name": {"type": "noul"|"choice"|"score", "instructions": ..., "criteria": ...}})'
        )
    from langchain_qwen_fast.decision_questions import question_set  # LangChain's question types

    try:
        questions = question_set(data)
    except InvalidInputError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    return checked(questions, where)


def checked(questions: QuestionSet, where: str) -> QuestionSet:
    """``questions``, once every question's answers can be asked and its columns are apart
    from every other's; :class:`ConfigurationError` naming the first that cannot."""
    try:
        for index in range(len(questions.questions)):
            questions.label_set(index)
    except InvalidInputError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    owner: dict[str, str] = {}
    for question in questions.questions:
        if question.name != question.name.strip() or not question.name:
            raise ConfigurationError(f"{where}: question {question.name!r}: a name is text without surrounding spaces")
        for column in _own_columns(question):
            if column == ERROR or column in owner:
                other = "the error column" if column == ERROR else f"question {owner[column]!r}'s"
                raise ConfigurationError(
                    f"{where}: question {question.name!r} has a column {column!r}, which is {other} too; rename it"
                )
            owner[column] = question.name
    return questions


def _own_columns(question: DecisionQuestion) -> list[str]:
    return question.kind_spec.columns(question)


def question_columns(questions: QuestionSet) -> list[str]:
    """The columns a questions job adds to each row, in order (see the module docstring)."""
    return [column for question in questions.questions for column in _own_columns(question)] + [ERROR]


def text_columns(questions: QuestionSet) -> frozenset[str]:
    """The added columns that hold text: each choice's label, and the error."""
    return frozenset([*(q.name for q in questions.questions if q.kind_spec.chooses_label), ERROR])


def answer_columns(result: DecisionOutcome | BaseException, questions: QuestionSet) -> dict[str, Any]:
    """The added columns of one row, from its answers or the error it got instead."""
    if isinstance(result, BaseException):
        row: dict[str, Any] = dict.fromkeys(question_columns(questions))
        row[ERROR] = error_text(result)
        return row
    row = {}
    for answered in result.answers:
        row.update(answered.question.kind_spec.row(answered))
    row[ERROR] = None
    return row


def outcome_of(row: Mapping[str, Any], questions: QuestionSet) -> DecisionOutcome | BaseException:
    """A written row's answers, read back from its columns (for the counts)."""
    if row.get(ERROR) is not None:
        return RecordedError(str(row[ERROR]))
    answers = []
    for question in questions.questions:
        probabilities, refused = question.kind_spec.read_row(question, row)
        answers.append(Answered(question, probabilities, refused))
    return DecisionOutcome(tuple(answers), TokenUsage())


def fingerprint(questions: QuestionSet) -> dict[str, Any]:
    """What of the questions a restart must find the same: their names in order, and each
    question as it is asked (so that a difference names the question)."""
    return {
        "questions": [q.name for q in questions.questions],
        **{f"question {q.name!r}": dataclasses.asdict(q) for q in questions.questions},
    }


def decision_model(
    base_url: str | None, model: str | None, abstain_below: float | None, **more: Any
) -> DecisionModelLike:
    """The decision model a job's questions are answered with (a setting given as None keeps
    the default)."""
    from langchain_qwen_fast.engine import EngineDecisions

    given = {"base_url": base_url, "model": model, "abstain_below": abstain_below, **more}
    return EngineDecisions(**{name: value for name, value in given.items() if value is not None})


class QuestionAsker:
    """Answers ``questions`` about rows' values on ``model``'s engine, with its temperature
    and abstention: the job's side of a questions job, as a classifier is a labels job's."""

    def __init__(self, model: DecisionModelLike, questions: QuestionSet) -> None:
        self.model = model
        self.questions = questions
        self.decider = model.decider
        self.added = question_columns(questions)
        self.text_columns: frozenset[str] | None = text_columns(questions)
        self.multi_label = False

    async def aprepare(self) -> None:
        """The set-up with the server for the questions (the model, its context, the answers'
        tokens); raises what it ran into."""
        await asyncio.to_thread(self.decider.plan, self.questions)

    def rows_in_flight(self) -> int:
        """Rows an engine call needs to keep every request in flight full: a row is a prompt
        for each question."""
        return max(1, self.decider.engine.rows_in_flight() // len(self.questions.questions))

    async def aanswer(self, values: Sequence[Any]) -> list[DecisionOutcome | BaseException]:
        """Each value's answers or its error, in order: a value that is already an error keeps
        it, one that is no state (a number, an empty text) gets its own, without a request."""
        requests: list[DecisionRequest | Exception] = []
        for value in values:
            if isinstance(value, Exception):
                requests.append(value)
                continue
            try:
                requests.append((render_state(value), self.questions))
            except InvalidInputError as exc:
                requests.append(exc)
        return list(await self.decider.adecide(requests))

    def columns(self, result: Any) -> dict[str, Any]:
        """One row's added columns."""
        return answer_columns(result, self.questions)

    def fingerprint(self) -> dict[str, Any]:
        """The questions and the model's settings that change answers, which a restart must
        find the same."""
        return {
            # the engine's settings with the decisions' own rules, which the model holds
            **answer_settings(
                dataclasses.replace(
                    self.model.decider.engine.settings,
                    rules=Rules(abstain_below=self.model.abstain_below, temperature=self.model.temperature),
                )
            ),
            **fingerprint(self.questions),
        }

    async def aclose(self) -> None:
        await self.model.aclose()

    def close(self) -> None:
        self.model.close()


__all__ = [
    "CONFIDENCE",
    "GivenQuestions",
    "QuestionAsker",
    "answer_columns",
    "checked",
    "decision_model",
    "fingerprint",
    "load_questions",
    "outcome_of",
    "question_columns",
    "text_columns",
]
