"""The engine without LangChain: what the apps (the HTTP service, the jobs, evaluation,
training's export, the CLI) build their classifiers and decision engines from.

``QwenClassifier`` and ``QwenDecisionModel`` are LangChain's interfaces over the same pieces:
:class:`ClassifierConfig` and :class:`DecisionConfig` are their settings, validated the same way
and turned into :class:`EngineSettings` by the same derivation. An app takes an
:class:`EngineClassifier` (a classifier's settings and its :class:`Engine`) or an
:class:`EngineDecisions` (a decision model's and its :class:`Decider`); a ``QwenClassifier`` or
a ``QwenDecisionModel`` given by a caller has the same attributes and serves as well.
"""

from __future__ import annotations

from typing import Any, Protocol, Self

from pydantic import PrivateAttr, model_validator

from langchain_qwen_fast._core.classification import Classification
from langchain_qwen_fast._core.configuration import ClassifierConfig, DecisionConfig, EngineFields
from langchain_qwen_fast._core.deciding import Decider, DecisionRequest
from langchain_qwen_fast._core.decisions import DecisionOutcome, DecisionPlan, DecisionQuestion, QuestionSet
from langchain_qwen_fast._core.engine import Engine
from langchain_qwen_fast._core.settings import EngineSettings, Rules


class EngineClassifier(ClassifierConfig):
    """A classifier's settings (``QwenClassifier``'s, but an example selector) and the engine
    built from them: ``EngineClassifier.load(path, base_url=...)`` reads a saved classifier."""

    _engine: Engine = PrivateAttr()

    @model_validator(mode="after")
    def _build_engine(self) -> Self:
        self._engine = self.new_engine()
        return self

    @property
    def engine(self) -> Engine:
        """The engine that classifies."""
        return self._engine

    def close(self) -> None:
        """Close the pooled sync connections and stop any client processes."""
        self._engine.close()

    async def aclose(self) -> None:
        """Close this event loop's pooled async connections."""
        await self._engine.aclose()


class EngineDecisions(DecisionConfig):
    """A decision model's settings (``QwenDecisionModel``'s) and the decision engine built
    from them."""

    _decider: Decider = PrivateAttr()

    @model_validator(mode="after")
    def _build_decider(self) -> Self:
        self._decider = self.new_decider()
        return self

    @property
    def decider(self) -> Decider:
        """The decision engine, with these settings' temperature and abstention (and its
        question sets' plans), for callers that ask in the engine's forms, such as the jobs."""
        return self._decider

    @property
    def engine(self) -> Engine:
        """The engine under the decider (no LangChain), shared with the decision service."""
        return self._decider.engine

    def close(self) -> None:
        """Close the pooled sync connections (they come back on next use)."""
        self._decider.engine.close()

    async def aclose(self) -> None:
        """Close this event loop's pooled async connections."""
        await self._decider.engine.aclose()


class DecisionModelLike(Protocol):
    """What the apps ask of a decision model: an :class:`EngineDecisions`, or a caller's
    ``QwenDecisionModel``."""

    model: str
    abstain_below: float | None
    temperature: float

    @property
    def decider(self) -> Decider: ...

    def close(self) -> None: ...

    async def aclose(self) -> None: ...


def classifier_settings(**arguments: Any) -> EngineSettings:
    """The engine settings a ``QwenClassifier`` of ``arguments`` (its fields: ``labels``,
    ``base_url``, ``model``, ...) would run with; an argument that cannot work raises
    :class:`~langchain_qwen_fast.errors.ConfigurationError` naming it."""
    return ClassifierConfig(**arguments).classifier_settings()


__all__ = [
    "Classification",
    "ClassifierConfig",
    "Decider",
    "DecisionConfig",
    "DecisionModelLike",
    "DecisionOutcome",
    "DecisionPlan",
    "DecisionQuestion",
    "DecisionRequest",
    "Engine",
    "EngineClassifier",
    "EngineDecisions",
    "EngineFields",
    "EngineSettings",
    "QuestionSet",
    "Rules",
    "classifier_settings",
]
