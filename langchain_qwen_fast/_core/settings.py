"""What an engine is made of, declared once: :class:`EngineSettings`.

The classifier builds its engine from these fields and nothing else: a field of the same name
on ``QwenClassifier`` is handed over as it is (the classifier derives the list from
:func:`dataclasses.fields`), the rest (the label sets, the rules, the URLs as a tuple, the key
in clear) it derives. A client worker process is sent the same settings to build its own
engine. The transport's part (:class:`~langchain_qwen_fast._core.transport.TransportSettings`)
is the chat model's too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from langchain_qwen_fast._core.caches import ClassificationCache
from langchain_qwen_fast._core.prompting import LabelSet
from langchain_qwen_fast._core.transport import TransportSettings

#: A node of a label hierarchy: () for the top level, (parent,) for its children, ...
Node = tuple[str, ...]

#: How the classifier asks: a chat model answers the label, or a classification head scores it.
Mode = Literal["generate", "head"]


@dataclass(frozen=True)
class Rules:
    """How predictions become results: thresholds, abstention."""

    abstain_below: float | None = None
    #: calibration temperature applied to the scores (1: none)
    temperature: float = 1.0
    #: multi-label: per-label probability a label needs
    thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class EngineSettings(TransportSettings):
    """Everything an engine is made of: how to reach the servers (the fields it takes from
    :class:`TransportSettings`), what to ask them and how much at once. In a client worker
    process ``cache`` and ``http_transport`` are None: they cannot travel. A field counts as
    changing answers (in cache keys and a job's restart identity) unless
    :data:`~langchain_qwen_fast._core.fingerprints.ANSWER_NEUTRAL` names it."""

    model: str
    mode: Mode = "generate"
    #: label sets by hierarchy node (a flat classifier has only the top node)
    label_sets: Mapping[Node, LabelSet]
    rules: Rules = dataclasses.field(default_factory=Rules)
    #: prompts per request; None: as the transport cuts them (``dispatch.Dispatch``)
    batch_size: int | None = None
    #: requests in flight; None: ``Engine.max_concurrency``'s default
    max_concurrency: int | None = None
    #: the served model's tokenizer, to send prompts as token ids
    tokenizer_path: str | None = None
    cache: ClassificationCache | None = None
    client_processes: int = 1


__all__ = ["EngineSettings", "Mode", "Node", "Rules"]
