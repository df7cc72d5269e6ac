"""What a classifier takes and what it gives back: :data:`ClassifierInput` and
:class:`Classification`.

:data:`ClassifierInput` names LangChain's message types: it is built (and LangChain imported)
when first asked for, so ``Classification`` alone imports no LangChain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from langchain_qwen_fast._core.classification import Classification, text_of, validate_text
from langchain_qwen_fast._core.prompting import Scoring

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langchain_core.prompt_values import PromptValue

    #: What a classifier accepts: the text, a dict with a ``"text"`` key, a prompt value or a
    #: list of messages (their texts are joined).
    ClassifierInput: TypeAlias = str | Mapping[str, Any] | PromptValue | Sequence[BaseMessage]


def __getattr__(name: str) -> object:
    if name != "ClassifierInput":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from langchain_core.messages import BaseMessage
    from langchain_core.prompt_values import PromptValue

    value = str | Mapping[str, Any] | PromptValue | Sequence[BaseMessage]
    globals()[name] = value
    return value


__all__ = ["Classification", "ClassifierInput", "Scoring", "text_of", "validate_text"]
