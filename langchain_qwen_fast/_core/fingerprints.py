"""Which settings change answers, declared once, and the fingerprint derived from them.

A classification's cache key and a job's restart identity both hold every engine setting that
changes answers (:func:`answer_settings`). Every field of
:class:`~langchain_qwen_fast._core.settings.EngineSettings`, and every field of the dataclasses
it holds (the label sets, the rules), changes answers unless :data:`ANSWER_NEUTRAL` names it: a
new setting counts from the moment it is added, so that forgetting to declare it costs cache
misses or a refused restart, never an old answer to a new question.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from langchain_qwen_fast._core.settings import EngineSettings
from langchain_qwen_fast.errors import ConfigurationError

#: The engine settings that never change an answer: how the servers are reached (their URLs
#: and key), how long and how often they are tried, how much is asked at once and in how many
#: processes, the caller's objects, and the local tokenizer, which sends the same tokens the
#: server would make (the set-up checks it against the server's). The key never enters a
#: fingerprint: it is one of these.
ANSWER_NEUTRAL = frozenset(
    {
        "base_urls",
        "api_key",
        "timeout",
        "max_retries",
        "deadline",
        "http_transport",
        "batch_size",
        "max_concurrency",
        "client_processes",
        "cache",
        "tokenizer_path",
    }
)


def answer_settings(settings: EngineSettings) -> dict[str, Any]:
    """Every setting of ``settings`` that changes answers, by its name, as a plain JSON value:
    a dataclass field by field (``rules.temperature``), a label set by its node
    (``label_sets.layout`` at the top, ``label_sets[('Sports',)].labels`` below it), mappings
    in sorted order, tuples and sets as lists. Equal settings give equal values, rendered alike
    in every process and release.

    Raises:
        ConfigurationError: a setting that changes answers holds a value with no plain rendering (an
            object of the caller's): it must be declared in :data:`ANSWER_NEUTRAL` or hold a
            plain value.
    """
    found: dict[str, Any] = {}
    for field in dataclasses.fields(settings):
        if field.name not in ANSWER_NEUTRAL:
            _flatten(field.name, getattr(settings, field.name), found)
    return found


def _flatten(name: str, value: Any, into: dict[str, Any]) -> None:
    """``value``'s parts into ``into`` by name: a dataclass's fields, or a mapping of
    dataclasses by key, each a setting of its own, so that a difference names the part."""
    if _is_dataclass(value):
        for field in dataclasses.fields(value):
            _flatten(f"{name}.{field.name}", getattr(value, field.name), into)
    elif isinstance(value, Mapping) and value and all(_is_dataclass(v) for v in value.values()):
        for key in sorted(value, key=repr):
            _flatten(f"{name}{_key_part(key)}", value[key], into)
    else:
        into[name] = _plain(name, value)


def _key_part(key: Any) -> str:
    """A mapping key in a setting's name: none for the top node ``()``, else ``[key]``."""
    return "" if key == () else f"[{key!r}]"


def _is_dataclass(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _plain(name: str, value: Any) -> Any:
    """``value`` as JSON values, rendered deterministically: mappings sorted by key, sets
    sorted, tuples as lists."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if _is_dataclass(value):
        return {f.name: _plain(name, getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value):
            return {k: _plain(name, value[k]) for k in sorted(value)}
        return sorted(([_plain(name, k), _plain(name, v)] for k, v in value.items()), key=json.dumps)
    if isinstance(value, (tuple, list)):
        return [_plain(name, v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(name, v) for v in value), key=json.dumps)
    raise ConfigurationError(
        f"setting {name} holds a {type(value).__name__}, which has no fingerprint: declare it in "
        "ANSWER_NEUTRAL if it never changes answers, or give it a plain value"
    )


__all__ = ["ANSWER_NEUTRAL", "answer_settings"]
