"""LangChain's decision questions (``Noul``, ``Choice``, ``Score`` or their dict form) in the
engine's form: shared by the decision model and the jobs' questions files, with no facade."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.decisions import Box, Choice, Noul, Question, Score
from pydantic import BaseModel, TypeAdapter, ValidationError

from langchain_qwen_fast._core.decisions import DecisionQuestion, QuestionSet
from langchain_qwen_fast._core.question_kinds import KINDS
from langchain_qwen_fast.errors import InvalidInputError

_QUESTION = TypeAdapter(Question)
#: The question types LangChain has (and validates itself).
_LANGCHAIN_TYPES = frozenset({"noul", "choice", "score", "box"})


def question_set(questions: Any) -> QuestionSet:
    """LangChain's questions mapping in the engine's form; :class:`InvalidInputError` names the
    first question the model cannot answer."""
    if not isinstance(questions, Mapping) or not questions:
        raise InvalidInputError("questions must be a non-empty mapping of answer ids to questions")
    return QuestionSet(tuple(engine_question(str(name), question) for name, question in questions.items()))


def engine_question(name: str, question: Any) -> DecisionQuestion:
    """A LangChain question (or its dict form) as the engine asks it; the dict form of a
    question kind of the engine's own, which LangChain has no type for, as that kind reads it."""
    own = question.get("type") if isinstance(question, Mapping) else None
    if isinstance(own, str) and own in KINDS and own not in _LANGCHAIN_TYPES:
        return DecisionQuestion.of(own, name, question.get("instructions"), question.get("criteria"))
    try:
        parsed = question if isinstance(question, (Noul, Choice, Score, Box)) else _QUESTION.validate_python(question)
    except ValidationError as exc:
        raise InvalidInputError(
            f"question {name!r} is not a Noul, Choice, Score or Box: {exc.errors()[0]['msg']}"
        ) from None
    if isinstance(parsed, Box):
        raise InvalidInputError(
            f"question {name!r}: a Box locates something in an image, and this model reads text only"
        )
    # a criteria object (a Noul's) as its fields, the kinds' plain form
    criteria = dict(parsed.criteria) if isinstance(parsed.criteria, BaseModel) else parsed.criteria
    return DecisionQuestion.of(parsed.type, name, parsed.instructions, criteria)


__all__ = ["engine_question", "question_set"]
