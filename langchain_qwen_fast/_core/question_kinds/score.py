"""``score``: a level ``0`` .. ``n-1`` of ordered levels, answered with the expected level."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from langchain_qwen_fast._core.content import content_text, json_value, optional_text
from langchain_qwen_fast._core.question_kinds.base import (
    AnsweredQuestion,
    AskedQuestion,
    QuestionKind,
    QuestionParts,
    WireDefinition,
    clamped,
    legend_line,
)
from langchain_qwen_fast._core.question_kinds.choice import described
from langchain_qwen_fast.errors import InvalidInputError


class Score(QuestionKind):
    """A level of its criteria (the levels' descriptions, in order; two at least), labelled
    ``0`` .. ``n-1``. Its answer is the expected level; its confidence ``1 - sd / sd_max``
    (see :mod:`~langchain_qwen_fast._core.decisions`)."""

    name = "score"
    wire_name = "score"
    wire_answers_field = "levels"

    def parts(self, name: str, instructions: Any, criteria: Any) -> QuestionParts:
        where = f"question {name!r}"
        levels: Sequence[Any] = criteria
        if len(levels) < 2:
            raise InvalidInputError(f"{where}: a score needs at least two levels, got {len(levels)}")
        descriptions = tuple(optional_text(level, f"{where} criteria[{i}]") for i, level in enumerate(levels))
        labels = tuple(str(i) for i in range(len(levels)))
        legend = json.dumps(json_value(list(levels), f"{where} criteria"), ensure_ascii=False)
        return QuestionParts(content_text(instructions, f"{where} instructions"), labels, descriptions, legend)

    def wire_definition(self, answers: Sequence[Any], where: str) -> WireDefinition:
        levels = [_level_text(level.label, level.description) for level in answers]
        return WireDefinition(levels, tuple(level.label for level in answers))

    def answer_line(self, question: AskedQuestion) -> str:
        return f"Answer with a level from 0 to {len(question.labels) - 1}:"

    def legend_lines(self, question: AskedQuestion) -> list[str]:
        """Every level, described or not: the levels are the answers."""
        return [legend_line(label, d) for label, d in zip(question.labels, question.descriptions, strict=True)]

    def confidence(self, probabilities: Sequence[float]) -> float:
        mean = _expected(probabilities)
        spread = math.sqrt(max(0.0, sum(p * (i - mean) ** 2 for i, p in enumerate(probabilities))))
        widest = (len(probabilities) - 1) / 2
        return min(1.0, max(0.0, 1.0 - spread / widest))

    def value(self, answered: AnsweredQuestion) -> float:
        return answered.score

    def plain_answer(self, answered: AnsweredQuestion) -> dict[str, Any]:
        return {
            "score": answered.score,
            "legend": dict(enumerate(json.loads(answered.question.legend))),
            "probabilities": dict(enumerate(answered.probabilities)),
            "confidence": clamped(answered.confidence),
        }

    def wire_answer(self, answered: AnsweredQuestion, values: Sequence[str | bool]) -> dict[str, Any]:
        probabilities = [clamped(p) for p in answered.probabilities]
        levels = [
            {"value": i, "label": label, "probability": p}
            for i, (label, p) in enumerate(zip(values, probabilities, strict=True))
        ]
        return {
            "score": min(float(len(levels) - 1), max(0.0, answered.score)),
            "confidence": clamped(answered.confidence),
            "probabilities": levels,
        }


def _expected(probabilities: Sequence[float]) -> float:
    return sum(i * p for i, p in enumerate(probabilities))


def _level_text(label: str, description: str | None) -> str | None:
    """A wire level as the prompt describes it: ``label: description``, either alone, or
    nothing when both are blank. A lone label is kept as given: langchain-openai sends a
    ``Score``'s criteria as the labels, which the LangChain decision model reads as they are."""
    text = described(description)
    if not label.strip():
        return text
    return label if text is None else f"{label}: {text}"


SCORE = Score()

__all__ = ["SCORE", "Score"]
