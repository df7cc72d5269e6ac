"""Question and state content as prompt text: text as it is, JSON as compact JSON, media
refused. Pure: shared by the decisions (:mod:`~langchain_qwen_fast._core.decisions`) and the
question kinds (:mod:`~langchain_qwen_fast._core.question_kinds`), which build a question's
text from it."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_qwen_fast.errors import InvalidInputError


@dataclass(frozen=True)
class Turn:
    """One message of a conversation, as text: its role (``user``, ``assistant``, ``system``,
    ``tool``) and its text."""

    role: str
    text: str


#: Content blocks that carry media rather than text, in LangChain's and OpenAI's formats.
MEDIA_TYPES = frozenset({"image", "image_url", "input_image", "audio", "input_audio", "video", "file", "input_file"})


def media_type(block: Mapping[str, Any]) -> str | None:
    """The media type a content block declares (its ``type``, one of :data:`MEDIA_TYPES`), or
    None: a block of any other type, or whose ``type`` is not text at all."""
    kind = block.get("type")
    return kind if isinstance(kind, str) and kind in MEDIA_TYPES else None


def json_value(value: Any, where: str) -> Any:
    """``value`` as plain JSON (turns as objects), or :class:`InvalidInputError` naming
    ``where`` the first value JSON cannot carry is."""
    if isinstance(value, Turn):
        return {"role": value.role, "content": value.text}
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"{where} is {value}, which JSON cannot carry")
        return value
    if isinstance(value, Mapping):
        if media_type(value):
            raise InvalidInputError(f"{where} is a {value['type']!r} block: this model reads text only")
        for key in value:
            if not isinstance(key, str):
                raise InvalidInputError(f"{where} has a key {key!r} that is not text")
        return {key: json_value(item, f"{where}[{key!r}]") for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [json_value(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise InvalidInputError(f"{where} is a {type(value).__name__}, which JSON cannot carry")


def content_text(content: Any, where: str) -> str:
    """Question content (text, or a JSON object or array) as prompt text; media blocks and
    empty text are refused, naming ``where``."""
    if isinstance(content, str):
        if not content.strip():
            raise InvalidInputError(f"{where} is empty")
        return content
    if isinstance(content, (Mapping, Sequence)) and not isinstance(content, (bytes, bytearray)):
        return json.dumps(json_value(content, where), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    raise InvalidInputError(f"{where} must be text or JSON, got {type(content).__name__}")


def optional_text(content: Any, where: str) -> str | None:
    """:func:`content_text`, with None (no description) kept."""
    return None if content is None else content_text(content, where)


__all__ = ["MEDIA_TYPES", "Turn", "content_text", "json_value", "media_type", "optional_text"]
