"""The user-level configuration of the engine's clients, validated, and the one derivation of
:class:`~langchain_qwen_fast._core.settings.EngineSettings` from it.

:class:`EngineFields` are the fields every client shares (how to reach the servers and how much
to ask of them at once); :class:`ClassifierConfig` adds a classifier's labels, prompt and rules,
:class:`DecisionConfig` a decision model's. ``QwenClassifier`` and ``QwenDecisionModel`` are
these with LangChain's interfaces on top; the apps (the service, the jobs) build their engines
from them without LangChain. A copy or a pickle of any of them is rebuilt from its fields, so
that it behaves as its fields say, with an engine of its own.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from langchain_qwen_fast._core import saved
from langchain_qwen_fast._core.base_urls import resolve_base_url
from langchain_qwen_fast._core.caches import ClassificationCache
from langchain_qwen_fast._core.deciding import Decider
from langchain_qwen_fast._core.engine import Engine
from langchain_qwen_fast._core.labels import label_names, label_sets, thresholds
from langchain_qwen_fast._core.prompting import PromptLayout
from langchain_qwen_fast._core.settings import EngineSettings, Rules
from langchain_qwen_fast._core.transport import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT
from langchain_qwen_fast.errors import ConfigurationError

#: Fields whose value an error message never shows.
SECRET_FIELDS = frozenset({"api_key"})
#: The environment variable the API key defaults to.
API_KEY_VARIABLE = "VLLM_API_KEY"


def _api_key_from_environment() -> SecretStr | None:
    key = os.environ.get(API_KEY_VARIABLE)
    return SecretStr(key) if key is not None else None


class EngineFields(BaseModel):
    """The engine's connection and sizing fields (see each one)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    #: The fields that are objects of the caller's rather than settings: never saved, shared
    #: (not copied) by a deep copy, and pickled only where they can be.
    SHARED_FIELDS: ClassVar[tuple[str, ...]] = ("cache", "http_transport")

    def __init__(self, **settings: Any) -> None:
        """A configuration from ``settings`` (the fields); settings that cannot work raise
        :class:`~langchain_qwen_fast.errors.ConfigurationError` naming the field."""
        try:
            super().__init__(**settings)
        except ValidationError as exc:
            raise configuration_error(exc) from exc

    base_url: str | list[str] = Field(default_factory=lambda: resolve_base_url(None))
    """The vLLM server's OpenAI-compatible base URL, or a list of replicas serving the same
    model (each request goes to the one with the fewest requests outstanding; a retry to
    another; a replica whose connection fails rests a few seconds), or a file listing them one
    per line (``qwen-fast serve --urls-file``). Default: ``QWEN_FAST_BASE_URL`` (one URL, or
    several separated by commas), else ``http://127.0.0.1:8000/v1``."""
    model: str = "qwen3"
    """The served model name."""
    api_key: SecretStr | None = Field(default_factory=_api_key_from_environment, exclude=True)
    """Bearer token, if the server requires one (default: ``VLLM_API_KEY``). Never saved."""
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    """Seconds a request waits for a server that answers nothing at all (neither it nor any
    other request) before it is given up, closed (vLLM aborts it) and retried; and seconds
    for a connection to open. A request waiting its turn behind other answers is not timed
    out: a slow server makes a batch slower, never lost."""
    max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0)
    """Retries after the first try, for connection errors, timeouts, 429 and 5xx (with
    exponential backoff and full jitter, or the server's ``Retry-After``)."""
    deadline: float | None = Field(default=None, gt=0)
    """The most seconds a call (``invoke``, ``batch``, ...) waits in all: at the deadline every
    item not yet answered gets :class:`~langchain_qwen_fast.errors.ServerTimeoutError` in its
    place, and no retry waits past it. None (default): a call waits as long as its servers
    answer."""
    batch_size: int | None = Field(default=None, ge=1)
    """Prompts per request in ``batch``/``abatch``. None (default): as each server's window
    allows (the flow control: it grows while answers come back quickly and shrinks when they
    slow down or fail), at most an equal share of the call's prompts for each request in
    flight, 16 to 128 (so a big batch goes in requests of 128 to a fast server and a small one
    still uses every replica)."""
    max_concurrency: int | None = Field(default=None, ge=1)
    """Requests in flight at most in ``batch``/``abatch`` unless the run config sets
    ``max_concurrency``; each server's window may hold fewer. None (default): 8 per replica in
    ``base_url``, or 256 per replica where the server takes one prompt a request (vLLM's Rust
    frontend: each prompt is a request of its own)."""
    abstain_below: float | None = Field(default=None, gt=0, le=1)
    """If set, a best-label probability below it gives an abstained result (label None); 1 is
    allowed (a confident model's probabilities often round to exactly 1)."""
    temperature: float = Field(default=1.0, gt=0)
    """Calibration temperature for every result's scores (``qwen-fast eval --calibrate`` fits
    it), applied before ``abstain_below`` and ``threshold``; not a sampling temperature."""
    tokenizer_path: str | None = None
    """The served model's tokenizer (its directory or ``tokenizer.json``): prompts are then sent
    as token ids, so the server's API process skips tokenising (worth it where that process is
    the bottleneck). Needs ``tokenizers``; checked against the server's at set-up."""
    cache: ClassificationCache | None = Field(default=None, exclude=True)
    """A :mod:`~langchain_qwen_fast.caches` cache of finished classifications (off by default):
    hits never touch the network. Not saved by :meth:`save`."""
    http_transport: Any = Field(default=None, exclude=True, repr=False)
    """An ``httpx`` transport to use instead of the network (e.g. ``httpx.MockTransport`` in
    tests, or a transport with custom TLS or proxies). Not saved."""

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_arguments(cls, data: Any) -> Any:
        """An unknown argument is an error naming the nearest valid one (never silently ignored)."""
        if isinstance(data, Mapping):
            known = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
            saved.check_arguments(cls.__name__, map(str, data), known)
        return data

    @field_validator("base_url", mode="before")
    @classmethod
    def _resolve_base_url(cls, value: Any) -> str | list[str]:
        return resolve_base_url(value)

    def engine_settings(self, **derived: Any) -> EngineSettings:
        """The engine's settings: every field the engine has by a name of ours, as it is; the
        URLs as a tuple and the key in clear; ``derived`` (the label sets, the rules, ...) on top."""
        names = {f.name for f in dataclasses.fields(EngineSettings)}
        taken = {n: getattr(self, n) for n in type(self).model_fields if n in names and n not in SECRET_FIELDS}
        return EngineSettings(
            **{
                **taken,
                "base_urls": tuple([self.base_url] if isinstance(self.base_url, str) else self.base_url),
                "api_key": self.api_key.get_secret_value() if self.api_key else None,
                **derived,
            }
        )

    # -- copies: each one built afresh from its fields ---------------------------------------
    def _fields(self, memo: dict[int, Any] | None = None) -> dict[str, Any]:
        """Every field's value; deep copies where ``memo`` is given (a deep copy's), but for the
        caller's objects (:attr:`SHARED_FIELDS`), which a copy shares."""
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        if memo is None:
            return fields
        shared = self.SHARED_FIELDS
        return {name: v if name in shared else copy.deepcopy(v, memo) for name, v in fields.items()}

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A new one with these fields and ``update`` on top, validated and built afresh (an
        engine of its own, set up on first use), so that it behaves as its fields say.
        ``deep``: the fields are deep copies, but for the caller's objects (``cache``,
        ``http_transport``, an ``example_selector``), which the copy shares."""
        return type(self)(**{**self._fields({} if deep else None), **(update or {})})

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        """:meth:`model_copy` with ``deep=True``."""
        return type(self)(**self._fields({} if memo is None else memo))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its fields (rebuilt through validation, with a fresh engine); a caller's
        object (a cache, an HTTP transport, ...) that cannot be pickled is named."""
        fields = self._fields()
        owner = type(self).__name__
        for name in self.SHARED_FIELDS:
            value = fields.get(name)
            if value is None:
                continue
            try:
                pickle.dumps(value)
            except Exception as exc:
                raise ConfigurationError(
                    f"this {owner} cannot be pickled: its {name} ({type(value).__name__}) cannot "
                    f"({type(exc).__name__}: {exc}); leave {name} out and give it to the copy again"
                ) from exc
        return (_rebuilt, (type(self), fields))


class ClassifierConfig(EngineFields):
    """A classifier's configuration (``QwenClassifier``'s settings but its example selector),
    validated; :meth:`engine_settings_of_labels` derives its engine's settings."""

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
    mode: Literal["generate", "head"] = "generate"
    """``generate``: a chat model answers the label. ``head``: a
    ``Qwen3ForSequenceClassification`` checkpoint served by vLLM's pooling runner scores the
    text through ``/classify``; class i is ``labels[i]``. Same results, batching and errors."""
    name: str | None = None
    """The classifier's name (LangChain's runnable name, kept in its saved file); the engine
    does not use it."""
    client_processes: int = Field(default=1, ge=1)
    """Processes a large ``batch``/``abatch`` is spread over, each with its own event loop,
    connections and share of the requests in flight: worth it when one process's event loop,
    not the servers, limits a batch (several GPU servers; docs/performance.md). Batches under
    1,024 items a process, ``batch_as_completed`` parts and ``example_selector`` run here. The
    workers start on first use (or :meth:`prepare`) and stop with :meth:`close`; no ``cache``
    or ``http_transport`` with them, and scripts need an ``if __name__ == "__main__":`` guard."""

    @field_validator("threshold")
    @classmethod
    def _check_threshold(cls, value: float | dict[str, float]) -> float | dict[str, float]:
        for t in value.values() if isinstance(value, dict) else [value]:
            if not 0.0 <= t <= 1.0:
                raise ConfigurationError(f"a threshold must be a probability within 0..1, got {t}")
        return value

    @model_validator(mode="after")
    def _check_label_set(self) -> Self:
        if isinstance(self.labels, dict) and (self.multi_label or self.mode == "head" or self.examples):
            raise ConfigurationError("hierarchical labels are single-label, generate mode, without examples")
        if self.multi_label and self.abstain_below is not None:
            raise ConfigurationError("abstain_below is for single-label classifiers; multi-label ones use threshold")
        return self

    @property
    def label_names(self) -> list[str]:
        """Every label, top level first for a hierarchy (each level in order)."""
        return label_names(self.labels)

    def classifier_settings(self) -> EngineSettings:
        """The engine's settings: the shared fields as they are, the label sets and the rules
        derived from the classifier's."""
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

    def new_engine(self) -> Engine:
        """A new engine of these settings (it sets itself up with the server on first use)."""
        return Engine(self.classifier_settings())

    def save(self, path: str | Path) -> Path:
        """Write this classifier's whole configuration (labels, descriptions, instructions,
        examples, thresholds, server settings) as JSON, never the API key. A directory gets a
        ``classifier.json`` inside it. An example selector, a cache or an HTTP transport cannot
        be saved: pass them to :meth:`load` again."""
        return saved.write(path, self.model_dump(mode="json", exclude={*SECRET_FIELDS, *self.SHARED_FIELDS}))

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> Self:
        """A classifier from :meth:`save`'s file (or a directory holding ``classifier.json``),
        with ``overrides`` (e.g. ``base_url``, ``model``, ``api_key``) applied on top."""
        return cls(**{**saved.read(path), **overrides})


class DecisionConfig(EngineFields):
    """A decision model's configuration (``QwenDecisionModel``'s settings), validated;
    :meth:`new_decider` builds its decision engine."""

    def new_decider(self) -> Decider:
        """A new decision engine of these settings, with their temperature and abstention."""
        rules = Rules(self.abstain_below, self.temperature)
        return Decider(Engine(self.engine_settings(label_sets={}, rules=rules)), rules)


def _rebuilt(cls: type[EngineFields], fields: dict[str, Any]) -> EngineFields:
    """A configuration (or a facade over one) unpickled: built from its fields."""
    return cls(**fields)


def configuration_error(error: ValidationError) -> ConfigurationError:
    """Pydantic's validation error as this package's, one readable problem per field; a secret
    field's value is never shown."""
    problems: dict[str, None] = {}
    for problem in error.errors():
        field = str(problem["loc"][0]) if problem["loc"] else ""
        cause = (problem.get("ctx") or {}).get("error")
        text = str(cause) if isinstance(cause, Exception) else problem["msg"]
        value = problem.get("input")
        shown = (
            isinstance(value, (int, float, str, type(None))) and len(repr(value)) <= 80 and field not in SECRET_FIELDS
        )
        got = f" (got {value!r})" if shown and not isinstance(cause, Exception) else ""
        problems[f"{field}: {text}{got}" if field else text] = None
    return ConfigurationError("; ".join(problems))


__all__ = ["SECRET_FIELDS", "ClassifierConfig", "DecisionConfig", "EngineFields", "configuration_error"]
