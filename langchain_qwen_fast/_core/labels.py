"""A classifier's labels as the engine needs them: every name, each hierarchy node's label
set, each label's threshold; with the errors a bad label configuration gets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_qwen_fast._core.prompting import LabelSet, PromptLayout
from langchain_qwen_fast._core.settings import Node
from langchain_qwen_fast.errors import ConfigurationError

#: Labels: a list, or a hierarchy such as ``{"Sports": ["Football", "Tennis"], "Business": None}``.
LabelTree = Sequence[str] | Mapping[str, Any]


def label_names(tree: LabelTree) -> list[str]:
    """Every label, top level first for a hierarchy (each level in order)."""
    names: list[str] = list(tree)
    if isinstance(tree, Mapping):
        for children in tree.values():
            if children:
                names += label_names(children)
    return names


def label_sets(
    tree: LabelTree,
    *,
    descriptions: Mapping[str, str],
    instructions: str | None,
    multi_label: bool,
    examples: Sequence[tuple[str, Any]],
    layout: PromptLayout = "chat",
) -> dict[Node, LabelSet]:
    """The label set of each node of the hierarchy (only the top one for flat labels); the
    examples belong to the top level."""
    flat = label_names(tree)
    unknown = sorted(set(descriptions) - set(flat))
    if unknown:
        raise ConfigurationError(f"descriptions given for unknown labels: {unknown}")
    duplicates = sorted({x for x in flat if flat.count(x) > 1})
    if duplicates:
        raise ConfigurationError(f"labels must be distinct across the hierarchy; repeated: {duplicates}")
    sets: dict[Node, LabelSet] = {}

    def add(node: Node, level: LabelTree) -> None:
        names = list(level)
        sets[node] = LabelSet.build(
            names,
            {k: v for k, v in descriptions.items() if k in names},
            instructions,
            multi_label=multi_label,
            examples=[] if node else list(examples),
            layout=layout,
        )
        if isinstance(level, Mapping):
            for label, children in level.items():
                if children:
                    add((*node, label), children)

    add((), tree)
    return sets


def thresholds(threshold: float | Mapping[str, float], names: Sequence[str]) -> dict[str, float]:
    """Each label's multi-label threshold: ``threshold`` for all, or as given per label (the
    labels not named keep 0.5)."""
    if not isinstance(threshold, Mapping):
        return dict.fromkeys(names, threshold)
    unknown = sorted(set(threshold) - set(names))
    if unknown:
        raise ConfigurationError(f"threshold given for unknown labels: {unknown}")
    return {name: threshold.get(name, 0.5) for name in names}
