"""The classifier's results in its cache: each prompt body's key, the lookup and the store.

A key is a digest of the body and of everything else that decides its result (the engine's
answer settings and what the set-up learnt of the served model, :meth:`ResultCache.fingerprint`).
A cache only saves work: one that fails, or an entry that cannot be read, costs a batch no
result, only the requests it would have saved.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from langchain_qwen_fast._core.caches import ClassificationCache
from langchain_qwen_fast._core.classification import Classification, Decided
from langchain_qwen_fast._core.decisions import DecisionPlan
from langchain_qwen_fast._core.fingerprints import answer_settings
from langchain_qwen_fast._core.prompting import ClassifierPlan
from langchain_qwen_fast._core.settings import EngineSettings, Node

_log = logging.getLogger("langchain_qwen_fast")


@functools.cache
def _release() -> str:
    try:
        return metadata.version("langchain-qwen-fast")
    except metadata.PackageNotFoundError:  # a source tree never installed
        return "0.0.0"


class ResultCache:
    """The results of an engine's settings in their cache, if the settings have one (without,
    every body is a miss and nothing is stored).

    Args:
        settings: the engine's settings, ``settings.cache`` the cache.
    """

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.cache: ClassificationCache | None = settings.cache

    def keys(self, plan: ClassifierPlan, node: Node, bodies: list[str]) -> dict[str, str]:
        """Each body's cache key (none without a cache)."""
        if self.cache is None:
            return {}
        fingerprint = self.fingerprint(plan, node)
        return {b: hashlib.sha256(f"{fingerprint}\0{b}".encode()).hexdigest() for b in bodies}

    def lookup(self, plan: ClassifierPlan, keys: Mapping[str, str]) -> dict[str, Any]:
        """The cached results of the bodies of ``keys``; a corrupt entry is a miss."""
        if self.cache is None or not keys:
            return {}
        body_of = {k: b for b, k in keys.items()}
        found = {}
        for key, cached in _looked_up(self.cache, list(body_of)).items():
            try:
                found[body_of[key]] = _result_type(plan).model_validate(cached)
            except ValueError as exc:
                _log.warning("cache entry %s unreadable, asked again: %s", key[:12], exc)
        return found

    def store(self, keys: Mapping[str, str], asked: list[str], outcome: Mapping[str, Any]) -> None:
        """The asked bodies' fresh results into the cache, if any."""
        if self.cache is not None:
            fresh = [b for b in asked if isinstance(outcome[b], (Classification, Decided))]
            _stored(self.cache, {keys[b]: outcome[b].model_dump(mode="json") for b in fresh})

    def fingerprint(self, plan: ClassifierPlan, node: Node) -> str:
        """Everything but the text that decides a result: every setting that changes answers
        (:func:`~langchain_qwen_fast._core.fingerprints.answer_settings`; not the URLs, the
        key or the timeouts), and what the set-up learnt of the served model: the prompt
        head, the steps and how scores are read."""
        layout = {
            "settings": answer_settings(self.settings),
            "node": list(node),
            "scoring": plan.scoring,
            "head": plan.head,
            "steps": [[s.tail, s.path_text, list(s.allowed), list(s.path)] for s in plan.steps],
            "labels": list(plan.label_set.labels),
            "multi_label": plan.label_set.multi_label,
            "logprob_token_ids": plan.has_logprob_token_ids,
            # the served weights (as the server names them) and this release's procedure:
            # redeployed weights, or a release that reads scores differently, miss old entries
            "served": plan.served,
            "release": _release(),
        }
        return hashlib.sha256(json.dumps(layout, sort_keys=True).encode()).hexdigest()


def _result_type(plan: ClassifierPlan) -> type[Classification] | type[Decided]:
    """What a body's result under ``plan`` is (and its cache entry holds)."""
    return Decided if isinstance(plan, DecisionPlan) else Classification


def _looked_up(cache: ClassificationCache, keys: list[str]) -> dict[str, Any]:
    """The cache's entries for ``keys``; none (every key a miss) when the cache fails: a cache
    only saves work, it never costs a batch its results."""
    try:
        return cache.lookup(keys)
    except Exception as exc:
        _log.warning("cache lookup failed, %d texts asked again: %s: %s", len(keys), type(exc).__name__, exc)
        return {}


def _stored(cache: ClassificationCache, values: dict[str, Any]) -> None:
    """Store ``values`` in the cache; a failure is logged and the results go on."""
    try:
        cache.update(values)
    except Exception as exc:
        _log.warning("cache update failed, %d results not kept: %s: %s", len(values), type(exc).__name__, exc)


__all__ = ["ResultCache"]
