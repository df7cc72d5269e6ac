"""A result made from its fields' dict is the one the constructor makes, and is refused alike."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from langchain_qwen_fast._core.classification import Classification, classification_of

SCORES = {"World": 0.1, "Sports": 0.2, "Business": 0.3, "Sci/Tech": 0.4}
FIELDS: list[dict[str, Any]] = [
    {"label": "Sci/Tech", "labels": ["Sci/Tech"], "scores": SCORES, "scoring": "label_tokens"},
    {"label": "World", "labels": ["World"], "scoring": "constrained_choice"},
    {"label": None, "labels": [], "scores": SCORES, "abstained": True, "scoring": "label_tokens"},
    {"label": "Sports", "labels": ["Business", "Sports"], "scores": SCORES, "scoring": "yes_no", "multi_label": True},
]


@pytest.mark.parametrize("fields", FIELDS)
def test_a_result_of_its_fields_is_the_constructors(fields: dict[str, Any]) -> None:
    made = classification_of(dict(fields))
    assert type(made) is Classification
    assert made == Classification(**fields)
    assert made.model_fields_set == set(fields)
    assert made.model_dump() == Classification(**fields).model_dump()
    with pytest.raises(ValidationError):
        made.label = "World"  # type: ignore[misc]  # frozen, as the constructor's


@pytest.mark.parametrize(
    "bad",
    [
        {"label": "World", "labels": ["World"], "scoring": "no_such_scoring"},
        {"label": "World", "labels": ["World"], "scores": {"World": "high"}, "scoring": "label_tokens"},
        {"labels": ["World"], "scoring": "label_tokens"},
    ],
)
def test_fields_the_constructor_refuses_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Classification(**bad)
    with pytest.raises(ValidationError):
        classification_of(dict(bad))
