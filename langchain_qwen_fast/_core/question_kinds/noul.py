"""``noul``: a yes/no question, answered with the probability of yes (``predicate`` on the wire)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_qwen_fast._core.content import content_text, optional_text
from langchain_qwen_fast._core.question_kinds.base import (
    AnsweredQuestion,
    AskedQuestion,
    QuestionKind,
    QuestionParts,
    clamped,
)

#: A ``noul``'s answers: the probability of the first is the answer.
NOUL_LABELS = ("yes", "no")


class Noul(QuestionKind):
    """A yes/no question; its criteria (``{"true": ..., "false": ...}``, either None, or None
    for both) describe what counts as each. Its answer is the probability of yes: no
    confidence, one column."""

    name = "noul"
    wire_name = "predicate"
    has_confidence = False

    def parts(self, name: str, instructions: Any, criteria: Any) -> QuestionParts:
        where = f"question {name!r}"
        given: Mapping[str, Any] = criteria or {}
        return QuestionParts(
            content_text(instructions, f"{where} instructions"),
            NOUL_LABELS,
            (
                optional_text(given.get("true"), f"{where} criteria.true"),
                optional_text(given.get("false"), f"{where} criteria.false"),
            ),
        )

    def answer_line(self, question: AskedQuestion) -> str:
        return "Answer yes or no."

    def value(self, answered: AnsweredQuestion) -> float:
        return answered.yes

    def plain_answer(self, answered: AnsweredQuestion) -> dict[str, Any]:
        return {"noul": clamped(answered.yes)}

    def wire_answer(self, answered: AnsweredQuestion, values: Sequence[str | bool]) -> dict[str, Any]:
        return {"probability": clamped(answered.yes)}

    def read_row(self, question: AskedQuestion, row: Mapping[str, Any]) -> tuple[tuple[float, ...], bool]:
        yes = float(row.get(question.name) or 0.0)
        return (yes, 1.0 - yes), False


NOUL = Noul()

__all__ = ["NOUL", "NOUL_LABELS", "Noul"]
