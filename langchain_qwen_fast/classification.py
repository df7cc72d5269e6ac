"""What a classifier takes and what it gives back: the input type and ``Classification``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import BaseMessage
from langchain_core.prompt_values import PromptValue
from pydantic import BaseModel, ConfigDict

from langchain_qwen_fast.errors import InvalidInputError

#: What a classifier accepts: the text, a dict with a ``"text"`` key, a prompt value or a
#: list of messages (their texts are joined).
ClassifierInput = str | Mapping[str, Any] | PromptValue | Sequence[BaseMessage]

#: How a label was read from the server.
Scoring = Literal["label_tokens", "letter_tokens", "constrained_choice", "head"]


class Classification(BaseModel):
    """The label for one input.

    ``label`` is always one of the classifier's labels, except when the classifier has an
    ``abstain_below`` threshold and the best label's probability fell under it: then
    ``abstained`` is True and ``label`` is None.
    """

    model_config = ConfigDict(frozen=True)

    label: str | None
    """The chosen label (None only when abstained)."""
    scores: dict[str, float] | None = None
    """Probability of every label, summing to 1 (None under constrained choice)."""
    abstained: bool = False
    """True when the best probability was below the classifier's ``abstain_below``."""
    scoring: Scoring
    """How the label was read: ``label_tokens`` or ``letter_tokens`` (one decode step with
    probabilities), ``constrained_choice`` (labels share a first token; no probabilities) or
    ``head`` (a classification head's probabilities)."""

    @property
    def confidence(self) -> float | None:
        """Probability of the most likely label, when scores exist."""
        return max(self.scores.values()) if self.scores else None


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
    if isinstance(value, Mapping):
        if "text" not in value:
            raise InvalidInputError(f"dict input needs a 'text' key; got keys {sorted(map(str, value))}")
        value = value["text"]
    elif isinstance(value, PromptValue):
        value = value.to_messages()
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        if not value or not all(isinstance(m, BaseMessage) for m in value):
            raise InvalidInputError("expected text, a dict with 'text', a prompt value or messages")
        value = "\n\n".join(m.text for m in value)
    return validate_text(value)
