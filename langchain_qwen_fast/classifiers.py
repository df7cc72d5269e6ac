"""``QwenClassifier``: a LangChain runnable that labels text with Qwen3 on a vLLM server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from langchain_core.example_selectors import BaseExampleSelector
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from langchain_qwen_fast._core.engine import BatchSlice, arun_slices, run_slices
from langchain_qwen_fast._core.prompting import ClassifierPlan
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
from langchain_qwen_fast.engine import ClassifierConfig, EngineClassifier
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.routing import BatchConfig, ClassifierRouter, classifier_router, classifier_tool

if TYPE_CHECKING:
    from langchain_qwen_fast.chat_models import ChatQwenFast
    from langchain_qwen_fast.decision_models import ClassifierDecisionModel


class QwenClassifier(EngineClassifier, RunnableSerializable[ClassifierInput, Classification]):
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

    example_selector: BaseExampleSelector | None = Field(default=None, exclude=True)
    """Any LangChain example selector: its examples for each text (dicts with ``text`` and
    ``label`` or ``labels``) are rendered after the fixed part. Not saved by :meth:`save`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _examples: ExampleSelection | None = PrivateAttr(default=None)

    #: The caller's objects, which a copy shares and :meth:`save` leaves out.
    SHARED_FIELDS: ClassVar[tuple[str, ...]] = (*ClassifierConfig.SHARED_FIELDS, "example_selector")

    @model_validator(mode="after")
    def _build(self) -> QwenClassifier:
        if isinstance(self.labels, dict) and self.example_selector:
            raise ConfigurationError("hierarchical labels are single-label, generate mode, without examples")
        if self.client_processes > 1 and self.example_selector is not None:
            raise ConfigurationError(
                f"client_processes={self.client_processes} classifies in other processes, where "
                "example_selector cannot go; use one or the other"
            )
        self._examples = ExampleSelection(self.example_selector) if self.example_selector is not None else None
        return self

    @property
    def replica_count(self) -> int:
        """The vLLM servers (replicas) this classifier spreads its requests over."""
        return self.engine.replica_count

    @classmethod
    def is_lc_serializable(cls) -> bool:
        """Not serialisable through LangChain's ``dumpd``; use :meth:`save`."""
        return False

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
        return self.engine.prepare()

    async def aprepare(self) -> ClassifierPlan:
        """Async :meth:`prepare`."""
        return await self.engine.aprepare()

    # -- classification ------------------------------------------------------------------
    def _classify(self, inputs: list[Any], config: Any = None, piece: BatchSlice | None = None) -> list[Any]:
        examples = self._examples.select(inputs, self.engine.plans) if self._examples else None
        if isinstance(examples, Exception):
            return [examples] * len(inputs)
        return self.engine.classify(inputs, examples=examples, **sizes_for(config, piece))

    async def _aclassify(self, inputs: list[Any], config: Any = None, piece: BatchSlice | None = None) -> list[Any]:
        examples = await self._examples.aselect(inputs, self.engine.aplans) if self._examples else None
        if isinstance(examples, Exception):
            return [examples] * len(inputs)
        return await self.engine.aclassify(inputs, examples=examples, **sizes_for(config, piece))

    # -- Runnable interface ----------------------------------------------------------
    def invoke(self, input: ClassifierInput, config: RunnableConfig | None = None, **kwargs: Any) -> Classification:
        """Classify one input; raises the item's error (typed, see :mod:`~langchain_qwen_fast.errors`)."""
        return with_run(self, input, config, lambda cfg: self._classify([input], cfg)[0])

    async def ainvoke(
        self, input: ClassifierInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Classification:
        """Async :meth:`invoke`."""
        async with self.engine.ainvoke_gate():

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
        self.engine.try_setup()
        slices, at_once = self.engine.slices(len(items), max_concurrency_of(config))
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
        await self.engine.atry_setup()
        slices, at_once = self.engine.slices(len(items), max_concurrency_of(config))

        async def run(piece: BatchSlice) -> list[Any]:
            return await self._abatch(piece.of(items), slice_config(config, piece), piece)

        async for index, result in arun_slices(slices, at_once, run):
            if isinstance(result, Exception) and not return_exceptions:
                raise result
            yield index, result

    def close(self) -> None:
        """Close the pooled sync connections and stop any client processes (both come back
        on next use)."""
        self.engine.close()

    async def aclose(self) -> None:
        """Close this event loop's pooled async connections."""
        await self.engine.aclose()
