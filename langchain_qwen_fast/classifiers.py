"""``QwenClassifier``: a LangChain runnable that labels text with Qwen3 on a vLLM server."""

from __future__ import annotations

import difflib
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.example_selectors import BaseExampleSelector
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.base import coerce_to_runnable
from langchain_core.tools import BaseTool
from langchain_core.utils import secret_from_env
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, field_validator, model_validator

from langchain_qwen_fast._core.base_urls import resolve_base_url
from langchain_qwen_fast._core.caches import ClassificationCache
from langchain_qwen_fast._core.engine import Engine, EngineSettings, Part, arun_parts, run_parts
from langchain_qwen_fast._core.procedure import Node, Rules
from langchain_qwen_fast._core.prompting import ClassifierPlan, LabelSet
from langchain_qwen_fast._runs import (
    abatch_with_runs,
    awith_run,
    max_concurrency_of,
    raise_unless,
    unobserved,
    with_run,
)
from langchain_qwen_fast._selection import ExampleSelection
from langchain_qwen_fast.classification import Classification, ClassifierInput
from langchain_qwen_fast.errors import ConfigurationError, DataFileError
from langchain_qwen_fast.routing import BatchConfig, ClassifierRouter, classifier_tool

if TYPE_CHECKING:
    from langchain_qwen_fast.chat_models import ChatQwenFast

_SAVED_FORMAT = "langchain-qwen-fast/classifier"
_SAVED_VERSION = 1


class QwenClassifier(RunnableSerializable[ClassifierInput, Classification]):
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
    base_url: str | list[str] = Field(default_factory=lambda: resolve_base_url(None))
    """The vLLM server's OpenAI-compatible base URL, or a list of replicas serving the same
    model (each request goes to the one with the fewest requests outstanding; a retry to
    another; a replica whose connection fails rests a few seconds), or a file listing them one
    per line (``qwen-fast serve --urls-file``). Default: ``QWEN_FAST_BASE_URL`` (one URL, or
    several separated by commas), else ``http://127.0.0.1:8000/v1``."""
    model: str = "qwen3"
    """The served model name."""
    mode: Literal["generate", "head"] = "generate"
    """``generate``: a chat model answers the label. ``head``: a
    ``Qwen3ForSequenceClassification`` checkpoint served by vLLM's pooling runner scores the
    text through ``/classify``; class i is ``labels[i]``. Same results, batching and errors."""
    api_key: SecretStr | None = Field(default_factory=secret_from_env("VLLM_API_KEY", default=None), exclude=True)
    """Bearer token, if the server requires one (default: ``VLLM_API_KEY``). Never saved."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds allowed for each HTTP request."""
    max_retries: int = Field(default=3, ge=0)
    """Retries after the first try, for connection errors, timeouts, 429 and 5xx."""
    retry_deadline: float = Field(default=60.0, gt=0)
    """No retry wait starts that would end more than this many seconds after the first try."""
    batch_size: int | None = Field(default=None, ge=1)
    """Prompts per request in ``batch``/``abatch``. None (default): picked per call, an equal
    share of the call's prompts for each request in flight, 16 to 128 (so a big batch goes in
    requests of 128 and a small one still uses every replica)."""
    max_concurrency: int | None = Field(default=None, ge=1)
    """Requests in flight in ``batch``/``abatch`` unless the run config sets
    ``max_concurrency``. None (default): 8 per replica in ``base_url``, or 256 per replica
    where the server takes one prompt a request (vLLM's Rust frontend: each prompt is a
    request of its own)."""
    abstain_below: float | None = Field(default=None, gt=0, le=1)
    """If set, a best-label probability below it gives an abstained result (label None). Any
    threshold ``qwen-fast eval --calibrate`` can fit, 1 included: a confident model gives many
    probabilities that round to exactly 1, and a target accuracy may be reached only by
    answering those alone."""
    temperature: float = Field(default=1.0, gt=0)
    """Calibration temperature applied to every result's scores (fit it with ``qwen-fast eval
    --calibrate``): single-label scores become a softmax of ``log p / temperature``, multi-label
    ones ``sigmoid(logit(p) / temperature)``; ``abstain_below`` and ``threshold`` then apply.
    Not a sampling temperature: the label is always read greedily."""
    tokenizer_path: str | None = None
    """The served model's tokenizer (its directory or ``tokenizer.json``). When set, prompts
    are tokenised here and sent as token ids, so the server's API process skips tokenising:
    worth it where that process is the bottleneck (a GPU server under batches), and text
    lengths are checked exactly without asking the server. Needs ``tokenizers``; the
    tokenizer is checked against the server's at set-up."""
    cache: ClassificationCache | None = Field(default=None, exclude=True)
    """A :mod:`~langchain_qwen_fast.caches` cache of finished classifications (off by default):
    hits never touch the network. Not saved by :meth:`save`."""
    http_transport: Any = Field(default=None, exclude=True, repr=False)
    """An ``httpx`` transport to use instead of the network (e.g. ``httpx.MockTransport`` in
    tests, or a transport with custom TLS or proxies). Not saved."""
    client_processes: int = Field(default=1, ge=1)
    """Processes a large ``batch``/``abatch`` is spread over, each classifying an equal share
    with its own event loop and connections (the call's requests in flight shared out): worth
    it when one process's event loop, not the servers, is what limits a batch, as on several
    GPU servers (about two processes per GPU; the figures are in docs/benchmarks.md).
    A batch runs in this process when it has fewer than 1,024 items per process, a fixed
    ``batch_size`` part (``batch_as_completed``) or an ``example_selector``. The workers start on first use
    (a few seconds; :meth:`prepare` starts them) and stop with :meth:`close`. Needs a
    configuration that can travel: no ``example_selector``, ``cache`` or ``http_transport``;
    a script that uses it needs an ``if __name__ == "__main__":`` guard (the workers are
    spawned)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _engine: Engine = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_arguments(cls, data: Any) -> Any:
        """An unknown argument is an error naming the nearest valid one (never silently ignored)."""
        if isinstance(data, Mapping):
            known = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
            unknown = sorted(set(map(str, data)) - known)
            if unknown:
                hints = []
                for name in unknown:
                    near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
                    hints.append(f"{name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
                raise ConfigurationError(f"QwenClassifier got unknown argument(s): {', '.join(hints)}")
        return data

    @field_validator("base_url", mode="before")
    @classmethod
    def _resolve_base_url(cls, value: Any) -> str | list[str]:
        return resolve_base_url(value)

    @field_validator("threshold")
    @classmethod
    def _check_threshold(cls, value: float | dict[str, float]) -> float | dict[str, float]:
        for t in value.values() if isinstance(value, dict) else [value]:
            if not 0.0 <= t <= 1.0:
                raise ConfigurationError(f"a threshold must be a probability within 0..1, got {t}")
        return value

    @model_validator(mode="after")
    def _build(self) -> QwenClassifier:
        label_sets = self._label_sets()
        flat = self.label_names
        if isinstance(self.threshold, dict):
            unknown = sorted(set(self.threshold) - set(flat))
            if unknown:
                raise ConfigurationError(f"threshold given for unknown labels: {unknown}")
        if self.multi_label and self.abstain_below is not None:
            raise ConfigurationError("abstain_below is for single-label classifiers; multi-label ones use threshold")
        if self.client_processes > 1 and self.example_selector is not None:
            raise ConfigurationError(
                f"client_processes={self.client_processes} classifies in other processes, where "
                "example_selector cannot go; use one or the other"
            )
        thresholds = self.threshold if isinstance(self.threshold, dict) else dict.fromkeys(flat, self.threshold)
        self._engine = Engine(
            EngineSettings(
                base_urls=tuple([self.base_url] if isinstance(self.base_url, str) else self.base_url),
                model=self.model,
                mode=self.mode,
                label_sets=label_sets,
                rules=Rules(abstain_below=self.abstain_below, temperature=self.temperature, thresholds=thresholds),
                api_key=self.api_key.get_secret_value() if self.api_key else None,
                timeout=self.timeout,
                max_retries=self.max_retries,
                retry_deadline=self.retry_deadline,
                batch_size=self.batch_size,
                max_concurrency=self.max_concurrency,
                tokenizer_path=self.tokenizer_path,
                cache=self.cache,
                http_transport=self.http_transport,
                client_processes=self.client_processes,
            )
        )
        return self

    def _label_sets(self) -> dict[Node, LabelSet]:
        """The label set of each node of the hierarchy (only the top one for flat labels)."""
        sets: dict[Node, LabelSet] = {}
        descriptions = self.label_descriptions or {}
        flat = self.label_names
        unknown = sorted(set(descriptions) - set(flat))
        if unknown:
            raise ConfigurationError(f"descriptions given for unknown labels: {unknown}")
        duplicates = sorted({x for x in flat if flat.count(x) > 1})
        if duplicates:
            raise ConfigurationError(f"labels must be distinct across the hierarchy; repeated: {duplicates}")

        def add(node: Node, tree: Any) -> None:
            names = list(tree)
            sets[node] = LabelSet.build(
                names,
                {k: v for k, v in descriptions.items() if k in names},
                self.instructions,
                multi_label=self.multi_label,
                examples=[] if node else (self.examples or []),
            )
            if isinstance(tree, Mapping):
                for label, children in tree.items():
                    if children:
                        add((*node, label), children)

        if isinstance(self.labels, dict) and (
            self.multi_label or self.mode == "head" or self.examples or self.example_selector
        ):
            raise ConfigurationError("hierarchical labels are single-label, generate mode, without examples")
        add((), self.labels)
        return sets

    @property
    def engine(self) -> Engine:
        """The engine that does the work (no LangChain): the HTTP service and the jobs call
        it directly."""
        return self._engine

    @property
    def replica_count(self) -> int:
        """The vLLM servers (replicas) this classifier spreads its requests over."""
        return self._engine.replica_count

    @property
    def label_names(self) -> list[str]:
        """Every label, top level first for a hierarchy (each level in order)."""
        names: list[str] = []

        def walk(tree: Any) -> None:
            names.extend(tree)
            if isinstance(tree, Mapping):
                for children in tree.values():
                    if children:
                        walk(children)

        walk(self.labels)
        return names

    @classmethod
    def is_lc_serializable(cls) -> bool:
        """Not serialisable through LangChain's ``dumpd``; use :meth:`save`."""
        return False

    @classmethod
    def from_chat_model(cls, chat: ChatQwenFast, labels: Sequence[str], **kwargs: Any) -> QwenClassifier:
        """A classifier on ``chat``'s server, model, key, timeout and retry settings."""
        timeout = chat.request_timeout if isinstance(chat.request_timeout, (int, float)) else None
        settings: dict[str, Any] = {
            "base_url": chat.openai_api_base,
            "model": chat.model_name,
            "api_key": chat.openai_api_key,
            "max_retries": 3 if chat.max_retries is None else chat.max_retries,
            "retry_deadline": chat.retry_deadline,
            **({"timeout": float(timeout)} if timeout else {}),
        }
        return cls(labels=list(labels), **{**settings, **kwargs})

    # -- save and load -----------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write this classifier's whole configuration (labels, descriptions, instructions,
        examples, thresholds, server settings) as JSON, never the API key. A directory gets a
        ``classifier.json`` inside it. An example selector, a cache or an HTTP transport cannot
        be saved: pass them to :meth:`load` again."""
        target = Path(path)
        if target.is_dir():
            target = target / "classifier.json"
        config = self.model_dump(mode="json", exclude={"api_key", "example_selector", "cache", "http_transport"})
        saved = {"format": _SAVED_FORMAT, "version": _SAVED_VERSION, "config": config}
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(saved, indent=1) + "\n")
        return target

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> QwenClassifier:
        """A classifier from :meth:`save`'s file (or a directory holding ``classifier.json``),
        with ``overrides`` (e.g. ``base_url``, ``model``, ``api_key``) applied on top."""
        source = Path(path)
        if source.is_dir():
            source = source / "classifier.json"
        try:
            saved = json.loads(source.read_text())
        except (OSError, ValueError) as exc:
            raise DataFileError(f"cannot read a saved classifier from {source}: {exc}") from None
        if not isinstance(saved, dict) or saved.get("format") != _SAVED_FORMAT:
            raise DataFileError(f"{source} is not a saved QwenClassifier (format {_SAVED_FORMAT!r})")
        if saved.get("version") != _SAVED_VERSION:
            raise DataFileError(f"{source} has version {saved.get('version')}; this release reads {_SAVED_VERSION}")
        return cls(**{**saved["config"], **overrides})

    # -- routing helpers (routing.py) ----------------------------------------------------
    def as_router(self, routes: Mapping[str, Runnable | Any], *, default: Runnable | Any) -> ClassifierRouter:
        """A runnable that sends each input to the branch for its label (every chosen label's
        branch under ``multi_label``; see :class:`~langchain_qwen_fast.routing.ClassifierRouter`);
        callables are wrapped."""
        unknown = sorted(set(routes) - set(self.label_names))
        if unknown:
            raise ConfigurationError(f"routes name labels the classifier does not have: {unknown}")
        return ClassifierRouter(
            classifier=self,
            routes={label: coerce_to_runnable(branch) for label, branch in routes.items()},
            default=coerce_to_runnable(default),
        )

    def as_tool(
        self, args_schema: Any = None, *, name: str | None = None, description: str | None = None, **_: Any
    ) -> BaseTool:
        """A LangChain tool that labels a text, for agents (see
        :func:`~langchain_qwen_fast.routing.classifier_tool`)."""
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
    def _classify(self, inputs: list[Any], config: Any = None, part: Part | None = None) -> list[Any]:
        examples = self._examples.select(inputs, self._engine.plans) if self._examples else None
        if isinstance(examples, Exception):
            return [examples] * len(inputs)
        return self._engine.classify(inputs, examples=examples, **_sizes(config, part))

    async def _aclassify(self, inputs: list[Any], config: Any = None, part: Part | None = None) -> list[Any]:
        examples = await self._examples.aselect(inputs, self._engine.aplans) if self._examples else None
        if isinstance(examples, Exception):
            return [examples] * len(inputs)
        return await self._engine.aclassify(inputs, examples=examples, **_sizes(config, part))

    @property
    def _examples(self) -> ExampleSelection | None:
        return ExampleSelection(self.example_selector) if self.example_selector is not None else None

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

    def _batch(self, inputs: list[Any], config: Any, part: Part | None = None) -> list[Any]:
        if not inputs:
            return []
        if unobserved(config):
            return self._classify(inputs, config, part)

        def classify(items: list[Any], config: Any) -> list[Any]:
            return self._classify(items, config, part)

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

    async def _abatch(self, inputs: list[Any], config: Any, part: Part | None = None) -> list[Any]:
        if not inputs:
            return []
        if unobserved(config):
            return await self._aclassify(inputs, config, part)
        return await abatch_with_runs(self, inputs, config, lambda items, cfgs: self._aclassify(items, cfgs, part))

    def batch_as_completed(  # type: ignore[override]
        self,
        inputs: Sequence[ClassifierInput],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> Iterator[tuple[int, Classification | Exception]]:
        """Yield ``(index, result)`` as each part of ``batch_size`` inputs lands: the same
        grouped requests as :meth:`batch`, with results as soon as their part is done."""
        items = list(inputs)
        self._engine.try_setup()
        parts, at_once = self._engine.parts(len(items), max_concurrency_of(config))
        run = lambda part: self._batch(items[part.span.start : part.span.stop], _part_config(config, part), part)  # noqa: E731
        for index, result in run_parts(parts, at_once, run):
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
        parts, at_once = self._engine.parts(len(items), max_concurrency_of(config))

        async def run(part: Part) -> list[Any]:
            return await self._abatch(items[part.span.start : part.span.stop], _part_config(config, part), part)

        async for index, result in arun_parts(parts, at_once, run):
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


def _sizes(config: Any, part: Part | None) -> dict[str, Any]:
    """The engine's sizes for a call: requests in flight from the run config (or the part),
    and a part's fixed size."""
    if part is None:
        return {"max_concurrency": max_concurrency_of(config), "batch_size": None}
    return {
        "max_concurrency": part.max_concurrency or max_concurrency_of(config),
        "batch_size": len(part.span),
    }


def _part_config(config: RunnableConfig | Sequence[RunnableConfig] | None, part: Part) -> Any:
    """A part's own slice of per-item configs (or the one config)."""
    if isinstance(config, Sequence):
        return list(config[part.span.start : part.span.stop])
    return config
