"""``QwenClassifier``: a LangChain runnable that labels text with Qwen3 on a vLLM server."""

from __future__ import annotations

import copy
import pickle
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from langchain_core.example_selectors import BaseExampleSelector
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from langchain_qwen_fast._core import saved
from langchain_qwen_fast._core.engine import BatchSlice, Engine, arun_slices, run_slices
from langchain_qwen_fast._core.labels import label_names, label_sets, thresholds
from langchain_qwen_fast._core.prompting import ClassifierPlan, PromptLayout
from langchain_qwen_fast._core.settings import EngineSettings, Rules
from langchain_qwen_fast._engine_fields import SECRET_FIELDS, EngineFields, configuration_error
from langchain_qwen_fast._runs import (
    abatch_with_runs,
    awith_run,
    max_concurrency_of,
    raise_unless,
    sizes_for,
    slice_config,
    unobserved,
    with_run,
)
from langchain_qwen_fast._selection import ExampleSelection
from langchain_qwen_fast.classification import Classification, ClassifierInput
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.routing import BatchConfig, ClassifierRouter, classifier_router, classifier_tool

if TYPE_CHECKING:
    from langchain_qwen_fast.chat_models import ChatQwenFast
    from langchain_qwen_fast.decision_models import ClassifierDecisionModel

#: The fields that are objects of the caller's rather than settings: never saved, shared (not
#: copied) by a deep copy, and pickled only where they can be.
_OBJECTS = ("example_selector", "cache", "http_transport")
#: What :meth:`QwenClassifier.save` never writes: the key, and what cannot be saved.
_NOT_SAVED = {*SECRET_FIELDS, *_OBJECTS}


class QwenClassifier(EngineFields, RunnableSerializable[ClassifierInput, Classification]):
    """Classify text into a fixed label set with Qwen3 served by vLLM.

    Each prompt is pre-rendered in Qwen3's chat format with thinking off and sent to
    ``/v1/completions`` without streaming, at temperature 0, with the output limited to the
    labels' tokens: one decode step when every label starts with a distinct token, a step per
    node of the labels' token trie when they do not, a yes/no step per label under
    ``multi_label``. Every label gets a probability. ``batch`` and ``abatch`` send many prompts
    per request, several requests in flight, in input order; identical texts are asked once.

    Example:
        .. code-block:: python

            classifier = QwenClassifier(
                labels=["World", "Sports", "Business", "Sci/Tech"],
                base_url="http://127.0.0.1:8000/v1",
                model="qwen3",
            )
            classifier.invoke("Stocks rally as rates fall").label
    """

    labels: list[str] | dict[str, Any]
    """The labels to choose from (at least two, distinct), or a hierarchy such as
    ``{"Sports": ["Football", "Tennis"], "Business": ["Markets", "Deals"]}``: the top level is
    chosen first, then a label among the chosen one's children (``Classification.path``)."""
    label_descriptions: dict[str, str] | None = None
    """Optional description per label, shown to the model next to the label."""
    instructions: str | None = None
    """Replaces the default instruction sentence at the top of the prompt."""
    prompt_layout: PromptLayout = "chat"
    """``chat``: Qwen3's chat format, for any chat model. ``compact``: fewer tokens a text, for
    a model trained in it (``qwen-fast train --prompt-layout compact``; docs/capabilities.md)."""
    multi_label: bool = False
    """Several labels may apply: each label gets an independent probability (a yes/no step per
    label, or a sigmoid head) and ``Classification.labels`` holds those over ``threshold``."""
    threshold: float | dict[str, float] = 0.5
    """Multi-label: the probability a label needs to be chosen, or one per label (labels not
    named keep 0.5)."""
    examples: list[tuple[str, str | list[str]]] | None = None
    """Few-shot examples, ``[(text, label), ...]`` (a list of labels per example under
    ``multi_label``), rendered once in the fixed, cached part of every prompt."""
    example_selector: BaseExampleSelector | None = Field(default=None, exclude=True)
    """Any LangChain example selector: its examples for each text (dicts with ``text`` and
    ``label`` or ``labels``) are rendered after the fixed part. Not saved by :meth:`save`."""
    mode: Literal["generate", "head"] = "generate"
    """``generate``: a chat model answers the label. ``head``: a
    ``Qwen3ForSequenceClassification`` checkpoint served by vLLM's pooling runner scores the
    text through ``/classify``; class i is ``labels[i]``. Same results, batching and errors."""
    client_processes: int = Field(default=1, ge=1)
    """Processes a large ``batch``/``abatch`` is spread over, each with its own event loop,
    connections and share of the requests in flight: worth it when one process's event loop,
    not the servers, limits a batch (several GPU servers; docs/performance.md). Batches under
    1,024 items a process, ``batch_as_completed`` parts and ``example_selector`` run here. The
    workers start on first use (or :meth:`prepare`) and stop with :meth:`close`; no ``cache``
    or ``http_transport`` with them, and scripts need an ``if __name__ == "__main__":`` guard."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _engine: Engine = PrivateAttr()
    _examples: ExampleSelection | None = PrivateAttr(default=None)

    def __init__(self, **settings: Any) -> None:
        """A classifier from ``settings`` (the fields above); settings that cannot work raise
        :class:`~langchain_qwen_fast.errors.ConfigurationError` naming the field."""
        try:
            super().__init__(**settings)
        except ValidationError as exc:
            raise configuration_error(exc) from exc

    @field_validator("threshold")
    @classmethod
    def _check_threshold(cls, value: float | dict[str, float]) -> float | dict[str, float]:
        for t in value.values() if isinstance(value, dict) else [value]:
            if not 0.0 <= t <= 1.0:
                raise ConfigurationError(f"a threshold must be a probability within 0..1, got {t}")
        return value

    @model_validator(mode="after")
    def _build(self) -> QwenClassifier:
        if isinstance(self.labels, dict) and (
            self.multi_label or self.mode == "head" or self.examples or self.example_selector
        ):
            raise ConfigurationError("hierarchical labels are single-label, generate mode, without examples")
        if self.multi_label and self.abstain_below is not None:
            raise ConfigurationError("abstain_below is for single-label classifiers; multi-label ones use threshold")
        if self.client_processes > 1 and self.example_selector is not None:
            raise ConfigurationError(
                f"client_processes={self.client_processes} classifies in other processes, where "
                "example_selector cannot go; use one or the other"
            )
        self._examples = ExampleSelection(self.example_selector) if self.example_selector is not None else None
        self._engine = Engine(self._engine_settings())
        return self

    def _engine_settings(self) -> EngineSettings:
        """The engine's settings: the shared fields as they are, the label sets and the rules
        derived from ours."""
        return self.engine_settings(
            label_sets=label_sets(
                self.labels,
                descriptions=self.label_descriptions or {},
                instructions=self.instructions,
                multi_label=self.multi_label,
                examples=self.examples or [],
                layout=self.prompt_layout,
            ),
            rules=Rules(self.abstain_below, self.temperature, thresholds(self.threshold, self.label_names)),
        )

    @property
    def engine(self) -> Engine:
        """The engine that does the work (no LangChain), as the HTTP service and jobs use it."""
        return self._engine

    @property
    def replica_count(self) -> int:
        """The vLLM servers (replicas) this classifier spreads its requests over."""
        return self._engine.replica_count

    @property
    def label_names(self) -> list[str]:
        """Every label, top level first for a hierarchy (each level in order)."""
        return label_names(self.labels)

    @classmethod
    def is_lc_serializable(cls) -> bool:
        """Not serialisable through LangChain's ``dumpd``; use :meth:`save`."""
        return False

    # -- copies: each one built afresh from its fields ---------------------------------------
    def _fields(self, memo: dict[int, Any] | None = None) -> dict[str, Any]:
        """Every field's value; deep copies where ``memo`` is given (a deep copy's), but for the
        caller's objects (:data:`_OBJECTS`), which a copy shares."""
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        if memo is None:
            return fields
        return {name: v if name in _OBJECTS else copy.deepcopy(v, memo) for name, v in fields.items()}

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A new classifier with this one's fields and ``update`` on top, validated and built
        afresh (an engine of its own, set up on first use), so that it behaves as its fields
        say. ``deep``: the fields are deep copies, but for ``example_selector``, ``cache`` and
        ``http_transport``, which the copy shares."""
        return type(self)(**{**self._fields({} if deep else None), **(update or {})})

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        """:meth:`model_copy` with ``deep=True``."""
        return type(self)(**self._fields({} if memo is None else memo))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its fields (rebuilt through validation, with a fresh engine); an
        example selector, cache or HTTP transport that cannot be pickled is named."""
        fields = self._fields()
        for name in _OBJECTS:
            value = fields[name]
            if value is None:
                continue
            try:
                pickle.dumps(value)
            except Exception as exc:
                raise ConfigurationError(
                    f"this QwenClassifier cannot be pickled: its {name} ({type(value).__name__}) cannot "
                    f"({type(exc).__name__}: {exc}); leave {name} out and give it to the copy again"
                ) from exc
        return (_rebuilt, (type(self), fields))

    @classmethod
    def from_chat_model(cls, chat: ChatQwenFast, labels: Sequence[str], **kwargs: Any) -> QwenClassifier:
        """A classifier on ``chat``'s server, model, key, timeout and retry settings."""
        timeout = chat.request_timeout if isinstance(chat.request_timeout, (int, float)) else None
        retries = 3 if chat.max_retries is None else chat.max_retries
        settings: dict[str, Any] = {"base_url": chat.openai_api_base, "model": chat.model_name}
        settings |= {"api_key": chat.openai_api_key}
        settings |= {"max_retries": retries}
        settings |= {"timeout": float(timeout)} if timeout else {}
        return cls(labels=list(labels), **{**settings, **kwargs})

    # -- save and load -----------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write this classifier's whole configuration (labels, descriptions, instructions,
        examples, thresholds, server settings) as JSON, never the API key. A directory gets a
        ``classifier.json`` inside it. An example selector, a cache or an HTTP transport cannot
        be saved: pass them to :meth:`load` again."""
        return saved.write(path, self.model_dump(mode="json", exclude=_NOT_SAVED))

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> QwenClassifier:
        """A classifier from :meth:`save`'s file (or a directory holding ``classifier.json``),
        with ``overrides`` (e.g. ``base_url``, ``model``, ``api_key``) applied on top."""
        return cls(**{**saved.read(path), **overrides})

    def as_router(
        self, routes: Mapping[str, Runnable | Any], *, default: Runnable | Any, outages_to_default: bool = False
    ) -> ClassifierRouter:
        """A runnable that sends each input to the branch for its label (every chosen label's
        branch under ``multi_label``; see :class:`~langchain_qwen_fast.routing.ClassifierRouter`);
        callables are wrapped. ``outages_to_default``: send an input whose classification
        failed for the servers' sake to ``default`` too, instead of raising."""
        return classifier_router(self, self.label_names, routes, default, outages_to_default=outages_to_default)

    def as_decision_model(self) -> ClassifierDecisionModel:
        """This classifier as a LangChain decision model that answers a ``Choice`` among its
        own labels with its own prompt, head, calibration and abstention, e.g. to route an
        agent with ``ModelRouterMiddleware`` (see
        :class:`~langchain_qwen_fast.decision_models.ClassifierDecisionModel`). Flat,
        single-label classifiers only."""
        from langchain_qwen_fast.decision_models import as_decision_model

        return as_decision_model(self)

    def as_tool(
        self,
        args_schema: Any = None,
        *,
        name: str | None = None,
        description: str | None = None,
        arg_types: Any = None,
        **kwargs: Any,
    ) -> BaseTool:
        """A LangChain tool that labels a text, for agents (see
        :func:`~langchain_qwen_fast.routing.classifier_tool`), named ``name`` (default
        ``classify_text``) and described by ``description``. Its one argument is the text:
        ``args_schema``, ``arg_types`` or any other argument is refused
        (:class:`~langchain_qwen_fast.errors.ConfigurationError`), never dropped."""
        given = {"args_schema": args_schema, "arg_types": arg_types, **kwargs}
        refused = [key for key, value in given.items() if value is not None]
        if refused:
            raise ConfigurationError(
                f"as_tool cannot honour {', '.join(refused)}: the classifier's tool takes one text, "
                "under a schema of its own; give name and description only"
            )
        return classifier_tool(self, labels=self.label_names, name=name or "classify_text", description=description)

    # -- set-up: decided once per classifier, from the server ---------------------------
    def prepare(self) -> ClassifierPlan:
        """Do the set-up now (it otherwise happens on first use) and return its plan for the
        top level: how labels are scored, the rendered prompt head, the decode steps and the
        context budget, all learnt once from the server. Raises what the set-up ran into.
        With ``client_processes``, also starts the workers and sets each one up."""
        return self._engine.prepare()

    async def aprepare(self) -> ClassifierPlan:
        """Async :meth:`prepare`."""
        return await self._engine.aprepare()

    # -- classification ------------------------------------------------------------------
    def _classify(self, inputs: list[Any], config: Any = None, piece: BatchSlice | None = None) -> list[Any]:
        examples = self._examples.select(inputs, self._engine.plans) if self._examples else None
        if isinstance(examples, Exception):
            return [examples] * len(inputs)
        return self._engine.classify(inputs, examples=examples, **sizes_for(config, piece))

    async def _aclassify(self, inputs: list[Any], config: Any = None, piece: BatchSlice | None = None) -> list[Any]:
        examples = await self._examples.aselect(inputs, self._engine.aplans) if self._examples else None
        if isinstance(examples, Exception):
            return [examples] * len(inputs)
        return await self._engine.aclassify(inputs, examples=examples, **sizes_for(config, piece))

    # -- Runnable interface ----------------------------------------------------------
    def invoke(self, input: ClassifierInput, config: RunnableConfig | None = None, **kwargs: Any) -> Classification:
        """Classify one input; raises the item's error (typed, see :mod:`~langchain_qwen_fast.errors`)."""
        return with_run(self, input, config, lambda cfg: self._classify([input], cfg)[0])

    async def ainvoke(
        self, input: ClassifierInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Classification:
        """Async :meth:`invoke`."""
        async with self._engine.ainvoke_gate():

            async def one(cfg: RunnableConfig) -> Any:
                return (await self._aclassify([input], cfg))[0]

            return await awith_run(self, input, config, one)

    def batch(
        self,
        inputs: Sequence[ClassifierInput],
        config: BatchConfig = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Classification]:
        """Classify ``inputs`` in grouped requests, in input order; each bad item keeps its own error
        (raised unless ``return_exceptions``)."""
        return raise_unless(return_exceptions, self._batch(list(inputs), config))

    def _batch(self, inputs: list[Any], config: Any, piece: BatchSlice | None = None) -> list[Any]:
        if not inputs:
            return []
        if unobserved(config):
            return self._classify(inputs, config, piece)

        def classify(items: list[Any], config: Any) -> list[Any]:
            return self._classify(items, config, piece)

        return self._batch_with_config(classify, inputs, config, return_exceptions=True)

    async def abatch(
        self,
        inputs: Sequence[ClassifierInput],
        config: BatchConfig = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Classification]:
        """Async :meth:`batch`."""
        return raise_unless(return_exceptions, await self._abatch(list(inputs), config))

    async def _abatch(self, inputs: list[Any], config: Any, piece: BatchSlice | None = None) -> list[Any]:
        if not inputs:
            return []
        if unobserved(config):
            return await self._aclassify(inputs, config, piece)
        return await abatch_with_runs(self, inputs, config, lambda items, cfgs: self._aclassify(items, cfgs, piece))

    def batch_as_completed(  # type: ignore[override]
        self,
        inputs: Sequence[ClassifierInput],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> Iterator[tuple[int, Classification | Exception]]:
        """Yield ``(index, result)`` as each slice of ``batch_size`` inputs lands: the same
        grouped requests as :meth:`batch`, with results as soon as their slice is done."""
        items = list(inputs)
        self._engine.try_setup()
        slices, at_once = self._engine.slices(len(items), max_concurrency_of(config))
        for index, result in run_slices(
            slices,
            at_once,
            lambda piece: self._batch(piece.of(items), slice_config(config, piece), piece),
        ):
            if isinstance(result, Exception) and not return_exceptions:
                raise result
            yield index, result

    async def abatch_as_completed(  # type: ignore[override]
        self,
        inputs: Sequence[ClassifierInput],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> AsyncIterator[tuple[int, Classification | Exception]]:
        """Async :meth:`batch_as_completed`."""
        items = list(inputs)
        await self._engine.atry_setup()
        slices, at_once = self._engine.slices(len(items), max_concurrency_of(config))

        async def run(piece: BatchSlice) -> list[Any]:
            return await self._abatch(piece.of(items), slice_config(config, piece), piece)

        async for index, result in arun_slices(slices, at_once, run):
            if isinstance(result, Exception) and not return_exceptions:
                raise result
            yield index, result

    def close(self) -> None:
        """Close the pooled sync connections and stop any client processes (both come back
        on next use)."""
        self._engine.close()

    async def aclose(self) -> None:
        """Close this event loop's pooled async connections."""
        await self._engine.aclose()


def _rebuilt(cls: type[QwenClassifier], fields: dict[str, Any]) -> QwenClassifier:
    """A classifier unpickled: built from its fields."""
    return cls(**fields)
