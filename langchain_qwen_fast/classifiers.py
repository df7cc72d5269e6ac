"""``QwenClassifier``: a LangChain runnable that labels text with Qwen3 on a vLLM server."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Literal

from langchain_core.example_selectors import BaseExampleSelector
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.base import coerce_to_runnable
from langchain_core.runnables.config import (
    ensure_config,
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
)
from langchain_core.tools import BaseTool
from langchain_core.utils import secret_from_env
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, field_validator, model_validator

from langchain_qwen_fast._core.base_urls import resolve_base_url
from langchain_qwen_fast._core.procedure import Node, Procedure, Rules, group_size
from langchain_qwen_fast._core.processes import ClientProcesses, merge, processes_for
from langchain_qwen_fast._core.prompting import ClassifierPlan, LabelSet, check_example
from langchain_qwen_fast._core.transport import RetryPolicy, Transport, adrive, drive
from langchain_qwen_fast.caches import ClassificationCache
from langchain_qwen_fast.chat_models import ChatQwenFast
from langchain_qwen_fast.classification import Classification, ClassifierInput, text_of
from langchain_qwen_fast.errors import (
    ConfigurationError,
    DataFileError,
    InvalidInputError,
    MissingDependencyError,
    QwenFastError,
)
from langchain_qwen_fast.routing import BatchConfig, ClassifierRouter, classifier_tool

# Per-item run bookkeeping in a big async batch is done in slices with a yield to the event
# loop between them, so the loop keeps serving other tasks (the soak in
# tests/integration_tests/reliability records its longest stall).
_RUNS_PER_SLICE = 512
#: Requests in flight per replica by default: enough that a server always has the next
#: requests queued while the client builds and parses others; more only wait in the server's
#: queue. The sweeps behind the choice are in docs/benchmarks.md.
IN_FLIGHT_PER_REPLICA = 8
#: The same for a server that takes one prompt a request (vLLM's Rust frontend): every prompt
#: is a request of its own, so as many are in flight as a grouped load has prompts in flight
#: (the measurements are in docs/benchmarks.md).
ONE_PROMPT_IN_FLIGHT_PER_REPLICA = 256
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
    A batch runs in this process when it has fewer than 1,024 items per process or a callback
    handler watches its items (their runs are opened here). The workers start on first use
    (a few seconds; :meth:`prepare` starts them) and stop with :meth:`close`. Needs a
    configuration that can travel: no ``example_selector``, ``cache`` or ``http_transport``;
    a script that uses it needs an ``if __name__ == "__main__":`` guard (the workers are
    spawned)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _procedure: Procedure = PrivateAttr()
    _transport: Transport = PrivateAttr()
    _plans: dict[Node, ClassifierPlan] | None = PrivateAttr(default=None)
    _plan_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _aplan_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = PrivateAttr(
        default_factory=weakref.WeakKeyDictionary
    )
    _ainvoke_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, asyncio.Semaphore]] = PrivateAttr(
        default_factory=weakref.WeakKeyDictionary
    )
    _processes: ClientProcesses | None = PrivateAttr(default=None)

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
        urls = [self.base_url] if isinstance(self.base_url, str) else self.base_url
        self._transport = Transport(
            urls,
            api_key=self.api_key.get_secret_value() if self.api_key else None,
            timeout=self.timeout,
            retry=RetryPolicy(max_attempts=self.max_retries + 1, deadline=self.retry_deadline),
            # Room for the most requests in flight of either kind of server: connections are
            # opened only as requests need them.
            pool_size=max(self.max_concurrency or 0, ONE_PROMPT_IN_FLIGHT_PER_REPLICA * len(urls)),
            http_transport=self.http_transport,
        )
        thresholds = self.threshold if isinstance(self.threshold, dict) else dict.fromkeys(flat, self.threshold)
        self._procedure = Procedure(
            model=self.model,
            mode=self.mode,
            batch_size=self.batch_size,
            rules=Rules(abstain_below=self.abstain_below, temperature=self.temperature, thresholds=thresholds),
            label_sets=label_sets,
            tokenizer=_load_tokenizer(self.tokenizer_path) if self.tokenizer_path is not None else None,
            tokenizer_path=self.tokenizer_path,
            cache=self.cache,
            servers=tuple(self._transport.base_urls),
        )
        if self.client_processes > 1:
            stay = [name for name in ("example_selector", "cache", "http_transport") if getattr(self, name) is not None]
            if stay:
                raise ConfigurationError(
                    f"client_processes={self.client_processes} classifies in other processes, where "
                    f"{stay[0]} cannot go; use one or the other"
                )
            config = self.model_dump(exclude={"api_key", "client_processes"})
            self._processes = ClientProcesses(
                type(self), {**config, "api_key": self.api_key, "client_processes": 1}, self.client_processes
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
    def replica_count(self) -> int:
        """The vLLM servers (replicas) this classifier spreads its requests over."""
        return self._transport.replicas.count

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
        plan = self._get_plans()[()]
        if self._processes is not None:
            self._processes.prepare()
        return plan

    async def aprepare(self) -> ClassifierPlan:
        """Async :meth:`prepare`."""
        plan = (await self._aget_plans())[()]
        if self._processes is not None:
            await asyncio.to_thread(self._processes.prepare)
        return plan

    def _get_plans(self) -> dict[Node, ClassifierPlan]:
        if self._plans is None:
            with self._plan_lock:
                if self._plans is None:
                    plans = drive(self._transport, self._procedure.setup_steps(), self._concurrency(None))
                    self._plans = self._fit_transport(plans)
        return self._plans

    async def _aget_plans(self) -> dict[Node, ClassifierPlan]:
        if self._plans is None:
            loop = asyncio.get_running_loop()
            lock = self._aplan_locks.setdefault(loop, asyncio.Lock())
            async with lock:
                if self._plans is None:
                    plans = await adrive(self._transport, self._procedure.setup_steps(), self._concurrency(None))
                    self._plans = self._fit_transport(plans)
        return self._plans

    def _fit_transport(self, plans: dict[Node, ClassifierPlan]) -> dict[Node, ClassifierPlan]:
        """``plans``, with the transport fitted to the server they were learnt from: where it
        takes one prompt a request, many small requests go in flight, and aiohttp sends those
        at a fraction of httpx's CPU per request (docs/benchmarks.md)."""
        if not plans[()].takes_prompt_lists:
            self._transport.use_aiohttp()
        return plans

    # -- classification: one procedure for sync and async ------------------------------
    def _concurrency(self, config: RunnableConfig | Sequence[RunnableConfig] | None) -> int:
        """Requests in flight: the run config's ``max_concurrency``, else the classifier's,
        else :meth:`_default_in_flight`."""
        first = config[0] if isinstance(config, Sequence) and config else config
        value = first.get("max_concurrency") if isinstance(first, Mapping) else None
        return int(value or self.max_concurrency or self._default_in_flight())

    def _one_prompt_server(self) -> bool:
        """Whether the set-up, once done, found a server that takes one prompt a request."""
        return self._plans is not None and not self._plans[()].takes_prompt_lists

    def _default_in_flight(self) -> int:
        """``IN_FLIGHT_PER_REPLICA`` for each replica, ``ONE_PROMPT_IN_FLIGHT_PER_REPLICA``
        once the set-up found a server that takes one prompt a request."""
        per_replica = ONE_PROMPT_IN_FLIGHT_PER_REPLICA if self._one_prompt_server() else IN_FLIGHT_PER_REPLICA
        return per_replica * self._transport.replicas.count

    def _selected(self, inputs: list[Any], plans: Mapping[Node, ClassifierPlan]) -> list[str | Exception] | None:
        """Each input's selected examples, rendered, or the error selecting them raised (that
        input's alone); None without a selector."""
        selector = self.example_selector
        if selector is None:
            return None
        selected: list[str | Exception] = []
        for value in inputs:
            text = _selectable_text(value)
            try:
                selected.append("" if text is None else self._render(plans, selector.select_examples({"text": text})))
            except Exception as exc:
                selected.append(_selector_failed(exc))
        return selected

    async def _aselected(self, inputs: list[Any], plans: Mapping[Node, ClassifierPlan]) -> list[str | Exception] | None:
        selector = self.example_selector
        if selector is None:
            return None

        async def one(value: Any) -> str | Exception:
            text = _selectable_text(value)
            try:
                return "" if text is None else self._render(plans, await selector.aselect_examples({"text": text}))
            except Exception as exc:
                return _selector_failed(exc)

        return list(await asyncio.gather(*(one(value) for value in inputs)))

    def _render(self, plans: Mapping[Node, ClassifierPlan], picked: Sequence[Any]) -> str:
        label_set = plans[()].label_set
        return label_set.render_examples([check_example(e, label_set.labels, label_set.multi_label) for e in picked])

    def _classify(self, inputs: list[Any], config: Any = None, group: int | None = None) -> list[Any]:
        try:
            plans = self._get_plans()
            examples = self._selected(inputs, plans)
        except Exception as exc:
            return [exc] * len(inputs)
        in_flight = self._concurrency(config)
        steps = self._procedure.classify_steps(inputs, plans, examples, in_flight=in_flight, group=group)
        return drive(self._transport, steps, in_flight)

    async def _aclassify(self, inputs: list[Any], config: Any = None, group: int | None = None) -> list[Any]:
        try:
            plans = await self._aget_plans()
            examples = await self._aselected(inputs, plans)
        except Exception as exc:
            return [exc] * len(inputs)
        in_flight = self._concurrency(config)
        steps = self._procedure.classify_steps(inputs, plans, examples, in_flight=in_flight, group=group)
        return await adrive(self._transport, steps, in_flight)

    # -- Runnable interface ----------------------------------------------------------
    # invoke/ainvoke open the run themselves rather than through Runnable._call_with_config:
    # that helper inspects the function's signature on every call, a cost beside a short
    # request, and nothing runs nested inside a classification that would need the child
    # config it sets up.
    def invoke(self, input: ClassifierInput, config: RunnableConfig | None = None, **kwargs: Any) -> Classification:
        """Classify one input; raises the item's error (typed, see :mod:`~langchain_qwen_fast.errors`)."""
        config = ensure_config(config)
        run = get_callback_manager_for_config(config).on_chain_start(
            None, input, name=config.get("run_name") or self.get_name(), run_id=config.pop("run_id", None)
        )
        try:
            result = self._classify([input], config)[0]
            if isinstance(result, Exception):
                raise result
        except BaseException as exc:
            run.on_chain_error(exc)
            raise
        run.on_chain_end(result)
        return result

    async def ainvoke(
        self, input: ClassifierInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Classification:
        # At most a batch's worth of requests in flight do their set-up at once: a thousand
        # simultaneous calls would otherwise all run their set-up back to back before any
        # awaited the network, holding the event loop, and no more would be in flight at once.
        """Async :meth:`invoke`."""
        async with self._ainvoke_gate():
            return await self._ainvoke(input, config)

    def _ainvoke_gate(self) -> asyncio.Semaphore:
        # A gate made before the set-up learnt that the server takes one prompt a request
        # gives way to a wider one.
        loop = asyncio.get_running_loop()
        size = max(16, self.max_concurrency or 0, self._default_in_flight())
        known = self._ainvoke_gates.get(loop)
        if known is None or known[0] != size:
            known = self._ainvoke_gates[loop] = (size, asyncio.Semaphore(size))
        return known[1]

    async def _ainvoke(self, input: ClassifierInput, config: RunnableConfig | None) -> Classification:
        config = ensure_config(config)
        run = await get_async_callback_manager_for_config(config).on_chain_start(
            None, input, name=config.get("run_name") or self.get_name(), run_id=config.pop("run_id", None)
        )
        try:
            result = (await self._aclassify([input], config))[0]
            if isinstance(result, Exception):
                raise result
        except BaseException as exc:
            await run.on_chain_error(exc)
            raise
        await run.on_chain_end(result)
        return result

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
        return _raise_unless(return_exceptions, self._batch_results(list(inputs), config, None))

    def _batch_results(self, inputs: list[Any], config: Any, group: int | None) -> list[Any]:
        """A batch, each item's result or error in its place; ``group``: prompts per request."""
        if not inputs:
            return []
        shares = self._shares(inputs, config, group)
        if shares is not None:
            self._try_setup()
            lost = shares.lost_inputs(shares.pool.classify(shares.texts, self._concurrency(config), shares.parts))
            return shares.results(self._classify(lost, config) if lost else [])
        if _unobserved(config):
            return self._classify(inputs, config, group)
        return self._batch_with_config(self._classify, inputs, config, return_exceptions=True, group=group)

    def _shares(self, inputs: list[Any], config: Any, group: int | None) -> _Shares | None:
        """The batch cut into shares for the client processes; None: it runs here (no client
        processes, a fixed group, too few items, or a callback handler watching its items)."""
        if self._processes is None or group is not None or not _unobserved(config):
            return None
        parts = processes_for(len(inputs), self.client_processes)
        return _Shares(self._processes, parts, inputs) if parts > 1 else None

    async def abatch(
        self,
        inputs: Sequence[ClassifierInput],
        config: BatchConfig = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Classification]:
        # Like Runnable._abatch_with_config (a run per item, same callbacks), but the per-item
        # run bookkeeping is done in slices with a yield between them: done in one go for a
        # large batch it would hold the event loop long enough to stall every other task.
        """Async :meth:`batch`."""
        return _raise_unless(return_exceptions, await self._abatch(list(inputs), config, None))

    async def _abatch(self, inputs: list[Any], config: BatchConfig, group: int | None) -> list[Any]:
        if not inputs:
            return []
        shares = self._shares(inputs, config, group)
        if shares is not None:
            await self._atry_setup()
            outcomes = await shares.pool.aclassify(shares.texts, self._concurrency(config), shares.parts)
            lost = shares.lost_inputs(outcomes)
            return shares.results(await self._aclassify(lost, config) if lost else [])
        if _unobserved(config):
            return await self._aclassify(inputs, config, group)
        configs = config if isinstance(config, list) else None
        runs: list[Any] = []
        item_configs: list[RunnableConfig] = []
        for start in range(0, len(inputs), _RUNS_PER_SLICE):
            part = range(start, min(start + _RUNS_PER_SLICE, len(inputs)))
            sliced = [ensure_config(configs[i] if configs else _single(config)) for i in part]
            runs += await asyncio.gather(
                *(
                    get_async_callback_manager_for_config(c).on_chain_start(
                        None, inputs[i], name=c.get("run_name") or self.get_name(), run_id=c.pop("run_id", None)
                    )
                    for i, c in zip(part, sliced)
                )
            )
            item_configs += sliced
            await asyncio.sleep(0)
        results = await self._aclassify(inputs, item_configs, group)
        for start in range(0, len(results), _RUNS_PER_SLICE):
            await asyncio.gather(
                *(
                    run.on_chain_error(r) if isinstance(r, Exception) else run.on_chain_end(r)
                    for run, r in zip(runs[start : start + _RUNS_PER_SLICE], results[start : start + _RUNS_PER_SLICE])
                )
            )
            await asyncio.sleep(0)
        return results

    def batch_as_completed(  # type: ignore[override]
        self,
        inputs: Sequence[ClassifierInput],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> Iterator[tuple[int, Classification | Exception]]:
        """Yield ``(index, result)`` as each group of ``batch_size`` inputs lands: the same
        grouped requests as :meth:`batch`, with results as soon as their group is done."""
        self._try_setup()
        chunks, workers = self._as_completed_chunks(inputs, config)
        with ThreadPoolExecutor(workers, thread_name_prefix="qwen-fast-group") as pool:
            futures = {pool.submit(self._batch_results, part, cfg, len(part)): start for start, part, cfg in chunks}
            for future in as_completed(futures):
                for offset, result in enumerate(future.result()):
                    if isinstance(result, Exception) and not return_exceptions:
                        raise result
                    yield futures[future] + offset, result

    async def abatch_as_completed(  # type: ignore[override]
        self,
        inputs: Sequence[ClassifierInput],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> AsyncIterator[tuple[int, Classification | Exception]]:
        """Async :meth:`batch_as_completed`."""
        await self._atry_setup()
        chunks, at_once = self._as_completed_chunks(inputs, config)
        gate = asyncio.Semaphore(at_once)

        async def run(start: int, part: list[Any], cfg: Any) -> tuple[int, list[Any]]:
            async with gate:
                return start, await self._abatch(part, cfg, len(part))

        tasks = [asyncio.ensure_future(run(*chunk)) for chunk in chunks]
        try:
            for next_done in asyncio.as_completed(tasks):
                start, results = await next_done
                for offset, result in enumerate(results):
                    if isinstance(result, Exception) and not return_exceptions:
                        raise result
                    yield start + offset, result
        finally:
            for task in tasks:
                task.cancel()

    def _as_completed_chunks(
        self, inputs: Sequence[Any], config: RunnableConfig | Sequence[RunnableConfig] | None
    ) -> tuple[list[tuple[int, list[Any], Any]], int]:
        """The groups :meth:`batch_as_completed` classifies (start, inputs, config) and how
        many run at once. Against a server that takes one prompt a request, each group's
        prompts are requests of their own: the groups running at once share the requests in
        flight between them."""
        in_flight = self._concurrency(_first(config))
        chunks = _chunks(list(inputs), config, self.batch_size or group_size(len(inputs), in_flight))
        at_once = max(1, min(in_flight, len(chunks)))
        if self._one_prompt_server():
            share = max(1, in_flight // at_once)
            chunks = [(start, part, _with_concurrency(cfg, share)) for start, part, cfg in chunks]
        return chunks, at_once

    def _try_setup(self) -> None:
        """The set-up, done now where it can be, before the requests in flight are counted
        (their default depends on what it learns); its failure reaches each item later."""
        with contextlib.suppress(Exception):
            self._get_plans()

    async def _atry_setup(self) -> None:
        """Async :meth:`_try_setup`."""
        with contextlib.suppress(Exception):
            await self._aget_plans()

    def close(self) -> None:
        """Close the pooled sync connections and stop any client processes (both come back
        on next use)."""
        self._transport.close()
        if self._processes is not None:
            self._processes.close()

    async def aclose(self) -> None:
        """Close this event loop's pooled async connections."""
        await self._transport.aclose()


def _load_tokenizer(path: str) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise MissingDependencyError("tokenizer_path needs the tokenizers package: pip install tokenizers") from None
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise ConfigurationError(f"tokenizer_path: no tokenizer.json at {path}")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:
        raise ConfigurationError(f"tokenizer_path: cannot load {file}: {exc}") from None


def _selectable_text(value: Any) -> str | None:
    """An input's text for the example selector; None for an invalid input (its error comes
    from the classification)."""
    try:
        return text_of(value)
    except InvalidInputError:
        return None


def _selector_failed(exc: Exception) -> QwenFastError:
    """The error an input gets when the example selector failed on it."""
    return QwenFastError(f"the example selector failed: {type(exc).__name__}: {exc}")


class _Shares:
    """A batch spread over the client processes: the valid inputs' texts go to the workers
    (each invalid input keeps its error), and the texts of a share whose worker died are
    classified here."""

    def __init__(self, pool: ClientProcesses, parts: int, inputs: list[Any]) -> None:
        self.pool = pool
        self.parts = parts
        self.inputs = inputs
        #: the valid inputs' texts, and each one's place in the batch
        self.texts: list[str] = []
        self.places: list[int] = []
        self._results: list[Any] = [None] * len(inputs)
        for i, value in enumerate(inputs):
            try:
                self.texts.append(text_of(value))
                self.places.append(i)
            except InvalidInputError as exc:
                self._results[i] = exc
        self._shared: list[Any] = []
        self._lost: list[int] = []

    def lost_inputs(self, outcomes: Sequence[list[Any] | None]) -> list[Any]:
        """Take the workers' outcomes (one per share, None for a lost one); the inputs of the
        lost shares, to classify here."""
        self._shared, self._lost = merge(len(self.texts), outcomes)
        return [self.inputs[self.places[i]] for i in self._lost]

    def results(self, redone: Sequence[Any]) -> list[Any]:
        """Every input's result or error in its place, with ``redone`` (the results of
        :meth:`lost_inputs`) for the lost shares' texts."""
        again = dict(zip(self._lost, redone, strict=True))
        for i, (place, result) in enumerate(zip(self.places, self._shared, strict=True)):
            self._results[place] = again.get(i, result)
        return self._results


def _raise_unless(return_exceptions: bool, results: list[Any]) -> list[Any]:
    """``results``, or the first item's error raised when errors are not to be returned."""
    if not return_exceptions:
        for result in results:
            if isinstance(result, Exception):
                raise result
    return results


def _unobserved(config: RunnableConfig | Sequence[RunnableConfig] | None) -> bool:
    """True when no callback handler would see a batch's per-item runs: none in its config(s)
    and none set up globally or by the environment (tracing, ``set_debug``). The runs are then
    skipped: opening and closing one per item costs more client CPU than the classification."""
    configs = list(config) if isinstance(config, Sequence) else [config]
    if any(c and c.get("callbacks") for c in configs):
        return False
    return not get_callback_manager_for_config(ensure_config(configs[0] if configs else None)).handlers


def _with_concurrency(config: Any, in_flight: int) -> Any:
    """``config`` (one config or a list of them) with ``max_concurrency`` set to ``in_flight``."""
    if isinstance(config, list):
        return [{**(c or {}), "max_concurrency": in_flight} for c in config]
    return {**(config or {}), "max_concurrency": in_flight}


def _single(config: BatchConfig) -> RunnableConfig | None:
    return None if isinstance(config, list) else config


def _first(config: RunnableConfig | Sequence[RunnableConfig] | None) -> RunnableConfig | None:
    if isinstance(config, Sequence):
        return config[0] if config else None
    return config


def _chunks(
    inputs: list[Any], config: RunnableConfig | Sequence[RunnableConfig] | None, size: int
) -> list[tuple[int, list[Any], Any]]:
    """(start, inputs, config) per group of ``size`` inputs, each with its own configs."""
    chunks = []
    for start in range(0, len(inputs), size):
        part = inputs[start : start + size]
        cfg = list(config[start : start + size]) if isinstance(config, Sequence) else config
        chunks.append((start, part, cfg))
    return chunks
