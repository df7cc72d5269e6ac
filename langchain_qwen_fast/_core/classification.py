"""What a classification gives back (``Classification``) and how an input becomes its text.

Imports no LangChain: its message types are imported only for an input that is neither text
nor a dict (only LangChain code makes prompt values and messages).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field

from langchain_qwen_fast._core.prompting import Scoring
from langchain_qwen_fast.errors import InvalidInputError


class Classification(BaseModel):
    """The label (or labels) for one input.

    Single-label: ``label`` is always one of the classifier's labels, except when the classifier
    has an ``abstain_below`` threshold and the best label's probability fell under it: then
    ``abstained`` is True and ``label`` is None. Multi-label: ``labels`` holds every label whose
    probability passed its threshold (possibly none) and ``label`` the likeliest of them.
    """

    model_config = ConfigDict(frozen=True)

    label: str | None
    """The chosen label (None when abstained, or when no label passed under multi-label)."""
    labels: list[str] = Field(default_factory=list)
    """Every chosen label: ``[label]`` for single-label (empty when abstained); under
    multi-label, each label whose probability reached its threshold, in label order."""
    scores: dict[str, float] | None = None
    """Probability of every label: summing to 1 for single-label, independent under
    multi-label (None under constrained choice)."""
    abstained: bool = False
    """True when the best probability was below the classifier's ``abstain_below``."""
    scoring: Scoring
    """How the labels were read: ``label_tokens`` (one decode step), ``label_sequences`` (a
    step per node of the labels' token trie), ``yes_no`` (a yes/no step per label, multi-label),
    ``constrained_choice`` (no probabilities) or ``head`` (a classification head)."""
    multi_label: bool = False
    """True when several labels may apply (``labels``, independent ``scores``)."""
    path: list[str] | None = None
    """Hierarchical labels: the label at each level, top first (``label`` is the last)."""
    path_scores: list[dict[str, float]] | None = None
    """Hierarchical labels: each level's label probabilities, top first."""

    @property
    def confidence(self) -> float | None:
        """Probability of the most likely label, when scores exist."""
        return max(self.scores.values()) if self.scores else None


#: The validator that :class:`Classification`'s constructor calls, given the fields as one
#: dict: a result made this way skips packing keyword arguments and filling an instance made
#: beforehand, a large part of each result's cost where the client makes one a text.
_validate_classification = Classification.__pydantic_validator__.validate_python


def classification_of(fields: dict[str, Any]) -> Classification:
    """``Classification(**fields)``, validated the same way, made faster."""
    return cast(Classification, _validate_classification(fields))


class Decided(BaseModel):
    """A decision request's results under one question set: a result per question, in the
    set's order (what the cache keeps for a state)."""

    model_config = ConfigDict(frozen=True)

    answers: list[Classification]


def validate_text(value: Any) -> str:
    """Return ``value`` as text to classify, or raise :class:`InvalidInputError` naming why."""
    if not isinstance(value, str):
        kind = "None" if value is None else type(value).__name__
        hint = " (decode bytes first)" if isinstance(value, (bytes, bytearray)) else ""
        raise InvalidInputError(f"expected text (str), got {kind}{hint}")
    if not value.strip():
        raise InvalidInputError("text is empty or whitespace only")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"text is not valid Unicode: lone surrogate at position {exc.start}") from None
    return value


def text_of(value: Any) -> str:
    """The text to classify from any accepted input shape, or :class:`InvalidInputError`."""
    if isinstance(value, str):
        return validate_text(value)
    if isinstance(value, Mapping):
        if "text" not in value:
            raise InvalidInputError(f"dict input needs a 'text' key; got keys {sorted(map(str, value))}")
        value = value["text"]
    else:
        value = _prompt_messages(value)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        value = _joined_texts(value)
    return validate_text(value)


def _prompt_messages(value: Any) -> Any:
    """A prompt value's messages; any other value as it is."""
    from langchain_core.prompt_values import PromptValue

    return value.to_messages() if isinstance(value, PromptValue) else value


def _joined_texts(messages: Sequence[Any]) -> str:
    """The texts of a list of messages, joined; :class:`InvalidInputError` for anything else."""
    from langchain_core.messages import BaseMessage

    if not messages or not all(isinstance(m, BaseMessage) for m in messages):
        raise InvalidInputError("expected text, a dict with 'text', a prompt value or messages")
    return "\n\n".join(m.text for m in messages)
