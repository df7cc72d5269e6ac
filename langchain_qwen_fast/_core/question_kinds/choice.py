"""``choice``: one label of several, answered with each label's probability."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_qwen_fast._core.content import content_text, optional_text
from langchain_qwen_fast._core.prompting import neutralize_control_tokens
from langchain_qwen_fast._core.question_kinds.base import (
    AnsweredQuestion,
    AskedQuestion,
    QuestionKind,
    QuestionParts,
    WireDefinition,
    clamped,
)
from langchain_qwen_fast.errors import InvalidInputError


class Choice(QuestionKind):
    """One label of its criteria (label -> description, None for none). Its answer is the most
    probable label (refused under ``abstain_below``), its confidence that label's probability."""

    name = "choice"
    wire_name = "choice"
    wire_answers_field = "choices"
    chooses_label = True

    def parts(self, name: str, instructions: Any, criteria: Any) -> QuestionParts:
        where = f"question {name!r}"
        given: Mapping[Any, Any] = criteria
        labels = tuple(given)
        if not labels:
            raise InvalidInputError(f"{where}: a choice needs at least one label")
        for label in labels:
            if not isinstance(label, str) or not label.strip() or label != label.strip():
                raise InvalidInputError(f"{where}: label {label!r} must be non-empty text without surrounding spaces")
        descriptions = tuple(optional_text(given[x], f"{where} criteria[{x!r}]") for x in labels)
        return QuestionParts(content_text(instructions, f"{where} instructions"), labels, descriptions)

    def wire_definition(self, answers: Sequence[Any], where: str) -> WireDefinition:
        values = tuple(choice.value for choice in answers)
        _check_values(values, where)
        criteria = dict(zip(choice_labels(values), (described(c.description) for c in answers), strict=True))
        return WireDefinition(criteria, values)

    def answer_line(self, question: AskedQuestion) -> str:
        return "Answer with one of: " + ", ".join(map(neutralize_control_tokens, question.labels)) + "."

    def value(self, answered: AnsweredQuestion) -> str | None:
        return None if answered.refused else answered.choice

    def plain_answer(self, answered: AnsweredQuestion) -> dict[str, Any]:
        return {
            "choice": answered.choice,
            "probabilities": answered.by_label,
            "confidence": clamped(answered.confidence),
        }

    def wire_answer(self, answered: AnsweredQuestion, values: Sequence[str | bool]) -> dict[str, Any]:
        probabilities = [clamped(p) for p in answered.probabilities]
        chosen = answered.question.labels.index(answered.choice)
        return {
            "choice": values[chosen],
            "confidence": clamped(answered.confidence),
            "probabilities": [{"value": v, "probability": p} for v, p in zip(values, probabilities, strict=True)],
        }


def _check_values(values: Sequence[str | bool], where: str) -> None:
    seen: dict[tuple[bool, str | bool], int] = {}
    for j, value in enumerate(values):
        key = (isinstance(value, bool), value)  # typed: the string "true" is not the boolean true
        if key in seen:
            raise InvalidInputError(
                f"{where}.choices[{j}].value {value!r} is choices[{seen[key]}]'s too: "
                "a question's choice values must be distinct"
            )
        seen[key] = j


def choice_labels(values: Sequence[str | bool]) -> tuple[str, ...]:
    """A choice's labels for its (distinct, typed) wire values: a boolean as ``true``/``false``,
    text stripped; unless two would read alike or one is blank, when every value is its JSON
    (``"true"`` and ``true``), which is distinct for distinct values and never blank."""
    plain = [("true" if value else "false") if isinstance(value, bool) else value.strip() for value in values]
    if all(plain) and len(set(plain)) == len(plain):
        return tuple(plain)
    return tuple(json.dumps(value, ensure_ascii=False) for value in values)


def described(description: str | None) -> str | None:
    """A wire description, or None for none (a blank one says nothing)."""
    return description if description is not None and description.strip() else None


CHOICE = Choice()

__all__ = ["CHOICE", "Choice", "choice_labels", "described"]
