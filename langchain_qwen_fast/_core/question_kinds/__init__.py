"""The question kinds a decision question can be, one class each (:class:`QuestionKind`), and
their registry :data:`KINDS`.

A new kind is one module (a :class:`QuestionKind` subclass: its definition, prompt, answer,
columns and wire answer) and its line in :data:`KINDS`; the decision engine, the jobs'
columns and summary and the service's answers then take it. What stays declared apart: the
OpenAPI models of ``POST /v1/decisions`` (``serving/service/schema.py``: the wire's question
and answer types, which the document lists) and LangChain's answer types (a table in
``decision_models.py``), both fixed by their formats.
"""

from __future__ import annotations

from langchain_qwen_fast._core.question_kinds.base import QuestionKind, QuestionParts, WireDefinition
from langchain_qwen_fast._core.question_kinds.choice import CHOICE
from langchain_qwen_fast._core.question_kinds.noul import NOUL, NOUL_LABELS
from langchain_qwen_fast._core.question_kinds.score import SCORE
from langchain_qwen_fast.errors import InvalidInputError

#: Every kind by its name: what a question's ``kind`` names.
KINDS: dict[str, QuestionKind] = {kind.name: kind for kind in (NOUL, CHOICE, SCORE)}


def kind_named(name: str) -> QuestionKind:
    """The kind called ``name``; :class:`InvalidInputError` for none."""
    try:
        return KINDS[name]
    except KeyError:
        raise InvalidInputError(f"no question kind {name!r}; the kinds are {sorted(KINDS)}") from None


def wire_kind(wire_name: str) -> QuestionKind:
    """The kind whose wire ``type`` is ``wire_name``; :class:`InvalidInputError` for none."""
    for kind in KINDS.values():
        if kind.wire_name == wire_name:
            return kind
    raise InvalidInputError(f"no question kind is {wire_name!r} on the wire")


__all__ = ["KINDS", "NOUL_LABELS", "QuestionKind", "QuestionParts", "WireDefinition", "kind_named", "wire_kind"]
