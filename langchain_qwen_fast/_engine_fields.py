"""The fields every client of the engine shares: how to reach the servers and how much to ask
of them at once. ``QwenClassifier`` and ``QwenDecisionModel`` both take them, declared once
here, and hand them to one :class:`~langchain_qwen_fast._core.engine.Engine` the same way."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from langchain_core.utils import secret_from_env
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from langchain_qwen_fast._core import saved
from langchain_qwen_fast._core.base_urls import resolve_base_url
from langchain_qwen_fast._core.caches import ClassificationCache
from langchain_qwen_fast._core.settings import EngineSettings
from langchain_qwen_fast._core.transport import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT
from langchain_qwen_fast.errors import ConfigurationError

#: Fields whose value an error message never shows.
SECRET_FIELDS = frozenset({"api_key"})


class EngineFields(BaseModel):
    """The engine's connection and sizing fields (see each one)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_url: str | list[str] = Field(default_factory=lambda: resolve_base_url(None))
    """The vLLM server's OpenAI-compatible base URL, or a list of replicas serving the same
    model (each request goes to the one with the fewest requests outstanding; a retry to
    another; a replica whose connection fails rests a few seconds), or a file listing them one
    per line (``qwen-fast serve --urls-file``). Default: ``QWEN_FAST_BASE_URL`` (one URL, or
    several separated by commas), else ``http://127.0.0.1:8000/v1``."""
    model: str = "qwen3"
    """The served model name."""
    api_key: SecretStr | None = Field(default_factory=secret_from_env("VLLM_API_KEY", default=None), exclude=True)
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


__all__ = ["SECRET_FIELDS", "EngineFields", "configuration_error"]
