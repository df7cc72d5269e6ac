"""``qwen-fast api``: an HTTP classification service over a classifier, for any language.

    qwen-fast api models/news --base-url http://127.0.0.1:8000/v1 --port 8080
    curl -s localhost:8080/v1/classify -H 'content-type: application/json' -d '{"input": "Stocks rally"}'

* ``POST /v1/classify`` takes ``{"input": "one text"}`` or ``{"input": ["a", "b", ...]}`` and
  answers each text's labels, probabilities and abstention. A list answers 200 with each bad
  item's error in its place; a single text that fails answers with the error's status (422 for
  bad input, 502/504 when the vLLM server failed, 429/503 with the server's ``Retry-After``
  when it asked for time).
* Declared limits, checked before any work: the body's bytes (413, from ``Content-Length`` and
  again while the body streams in, never read past the limit), the texts in a list and the
  characters in a text (422). With an API key, the key is checked before the body is read.
* Backpressure and deadlines: single texts and lists' texts wait in one bounded line
  (:class:`MicroBatcher`); a request that would overfill it is answered 429 with
  ``Retry-After``. Each request has a deadline (504 when it passes; its texts leave the line,
  its results are dropped).
* Every error answer is ``{"error": {"type", "message"}}``; a 5xx's also carries a request id
  (and the ``x-request-id`` header) in place of the internal details, which go to the log
  under that id. The OpenAPI document (``/openapi.json``) states each constraint the service
  enforces and each status it answers, so that clients generated from it agree with the
  service; ``tests/unit_tests/serving/test_api_schema.py`` fuzzes the service from it.
* Single texts are grouped: at most ``groups_in_flight`` groups go to vLLM at once, and texts
  that arrive while all are busy go together as the next (up to ``max_group``). Many clients
  each sending one text get batch throughput; a lone text goes at once.
* ``GET /health`` (liveness: never calls vLLM), ``GET /ready`` (readiness: the set-up is done
  and a vLLM server answers, within a short timeout), ``GET /metrics`` (Prometheus: requests,
  latency, group sizes, errors) and OpenAPI docs at ``/docs``. With an API key,
  ``/v1/classify`` and ``/metrics`` need ``Authorization: Bearer <key>``. Binds 127.0.0.1
  unless told otherwise.
* ``workers`` > 1 (``qwen-fast api --workers N``): N processes serve the one port, each with
  its own classifier, grouping and line, for more requests a second than one process's HTTP
  work allows; ``/metrics`` sums them all.

In Python, :func:`serve_api` runs the service in the foreground and :func:`create_app` gives the
ASGI application. Needs the ``api`` extra (FastAPI, uvicorn, prometheus-client).
"""

# No ``from __future__ import annotations`` here: FastAPI reads the route functions'
# annotations at runtime, and they name classes made inside create_app.
import asyncio
import contextlib
import dataclasses
import hmac
import ipaddress
import json
import logging
import math
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, Field, WithJsonSchema

from langchain_qwen_fast import __version__
from langchain_qwen_fast._core.prompting import Scoring
from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.classifiers import QwenClassifier
from langchain_qwen_fast.errors import (
    ConfigurationError,
    InvalidInputError,
    LabelParseError,
    MissingDependencyError,
    QwenFastError,
    ResponseFormatError,
    ServerConnectionError,
    ServerStartError,
    ServerStatusError,
    ServerTimeoutError,
)
from langchain_qwen_fast.serving.launcher import free_port
from langchain_qwen_fast.serving.micro_batcher import (
    DEFAULT_MAX_QUEUED_TEXTS,
    MicroBatcher,
    Overloaded,
    default_groups_in_flight,
)

logger = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
_GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

#: The largest request body by default, in bytes (TEI's ``--payload-limit`` is of this order).
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: The most texts in one request by default (TEI's ``--max-client-batch-size`` is the same idea).
DEFAULT_MAX_TEXTS = 1024
#: The most characters in one text by default: room for the longest contexts Qwen3 is served
#: with; a text's length in tokens is still the vLLM server's to judge (422 ContextLengthError).
DEFAULT_MAX_TEXT_CHARS = 65_536
#: A request's deadline by default, in seconds, from its arrival to its answer.
DEFAULT_REQUEST_TIMEOUT = 60.0
#: The most seconds ``GET /ready`` takes by default.
DEFAULT_READY_TIMEOUT = 2.0
#: Seconds a readiness answer is reused: probes from many balancers cost vLLM one call a second.
_READY_REUSE_SECONDS = 1.0
#: Bodies at least this large are parsed in a worker thread, so that the event loop keeps
#: answering other clients meanwhile.
_PARSE_IN_THREAD_BYTES = 64 * 1024
#: Results of a list rendered between two turns of the event loop.
_RENDER_SLICE = 256
#: The scope key under which the fast path hands a request's deadline to FastAPI's route.
_DEADLINE = "qwen_fast.deadline"


def _dumps(value: Any) -> bytes:
    """JSON as Starlette's ``JSONResponse`` renders it, so both paths answer the same bytes."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


class APIKey:
    """The service's bearer key, held so that no repr, log or error shows it: middleware
    settings and tracebacks print this object, not the key."""

    __slots__ = ("_key",)

    def __init__(self, key: str) -> None:
        if not isinstance(key, str) or not key:
            raise ConfigurationError("api_key is empty: give a key, or None for a service without one")
        self._key = key.encode()

    def matches(self, authorization: bytes | None) -> bool:
        """Whether an ``Authorization`` header value is ``Bearer <the key>`` (the scheme in any
        case, as FastAPI's ``HTTPBearer`` reads it), compared in constant time."""
        if authorization is None:
            return False
        scheme, _, token = authorization.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key)

    def matches_token(self, token: str | None) -> bool:
        """Whether a bearer token (FastAPI's ``HTTPBearer`` credentials) is the key, compared in
        constant time. Starlette decodes headers as latin-1: encoding back gives the bytes sent."""
        return token is not None and hmac.compare_digest(token.encode("latin-1", "replace"), self._key)

    def __repr__(self) -> str:
        return "APIKey(<hidden>)"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise ConfigurationError("the API key is not pickled")


@dataclasses.dataclass(frozen=True)
class Limits:
    """What the service takes and how long it waits (see :func:`create_app`)."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_texts: int = DEFAULT_MAX_TEXTS
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    max_queued_texts: int = DEFAULT_MAX_QUEUED_TEXTS
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    ready_timeout: float = DEFAULT_READY_TIMEOUT

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_texts", "max_text_chars", "max_queued_texts"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"{name} must be 1 or more, not {getattr(self, name)}")
        for name in ("request_timeout", "ready_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigurationError(f"{name} must be a positive number of seconds, not {getattr(self, name)}")
        if self.max_queued_texts < self.max_texts:
            raise ConfigurationError(
                f"max_queued_texts ({self.max_queued_texts}) must be at least max_texts ({self.max_texts}): "
                "a full list could never be taken"
            )


def error_body(exc: BaseException, request_id: str | None = None) -> dict[str, Any]:
    """An error as JSON: its type and message. An error of the request's own input keeps its
    message (it names what is wrong with the text); any other says what failed in words and
    gives ``request_id``, under which the log has the details (upstream addresses and
    messages stay there)."""
    body = {"type": type(exc).__name__, "message": str(exc) if isinstance(exc, InvalidInputError) else _plain(exc)}
    if request_id is not None and not isinstance(exc, InvalidInputError):
        body["message"] += f" (request id {request_id}: the service's log has the details)"
        body["request_id"] = request_id
    return {"error": body}


def _plain(exc: BaseException) -> str:
    """What failed, without the internals an exception's own message may hold."""
    if isinstance(exc, ServerStatusError):
        return f"the vLLM server answered HTTP {exc.status_code}"
    if isinstance(exc, ServerTimeoutError):
        return "the vLLM server did not answer in time"
    if isinstance(exc, ServerConnectionError):
        return "the vLLM server could not be reached"
    if isinstance(exc, (ResponseFormatError, LabelParseError)):
        return "the vLLM server's answer could not be read as a label"
    if isinstance(exc, QwenFastError):
        return "the classifier could not classify the text"
    return "the service failed on the text"


def _passed_on(exc: BaseException) -> bool:
    """An upstream 429 or 503: the vLLM server asked for time, and the client is told so."""
    return isinstance(exc, ServerStatusError) and exc.status_code in (429, 503)


def error_status(exc: BaseException) -> int:
    """The HTTP status for a single text's error."""
    if isinstance(exc, InvalidInputError):
        return 422
    if _passed_on(exc):
        return int(exc.status_code)  # type: ignore[attr-defined]
    if isinstance(exc, ServerTimeoutError):
        return 504
    if isinstance(exc, QwenFastError):  # the server failed, or answered what no label reads
        return 502
    return 500


def result_body(result: Classification | BaseException, request_id: str | None = None) -> dict[str, Any]:
    """One item's answer: the classification's fields, or its error."""
    if isinstance(result, BaseException):
        return error_body(result, request_id)
    return result.model_dump(mode="json", exclude_none=True)


#: A character that is not whitespace by ``str.isspace``, what ``validate_text`` strips: a text
#: must hold one. Spelled out, not ``\\S``, since each regex engine (ECMAScript, Rust, Python) has
#: its own ``\\s``; a unit test checks it against every code point.
NON_BLANK = r"[^\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"


def _error_statuses(limits: Limits) -> dict[int, str]:
    """What each error status means, as the OpenAPI document says it."""
    return {
        400: "The body could not be read: not UTF-8 text (type BadRequest)",
        401: "The API key is missing or wrong (type Unauthorized); checked before the body is read",
        408: "The body did not arrive within the request's deadline (type RequestTimeout)",
        413: f"The body is over {limits.max_body_bytes} bytes (type PayloadTooLarge); refused from its "
        "Content-Length, or as soon as that many bytes arrived, before any work",
        422: "The request breaks the schema (over the texts or characters allowed, among others), or its one "
        "text cannot be classified: too long for the vLLM server's context beside the prompt (types "
        "InvalidInputError, ContextLengthError)",
        429: f"The service holds {limits.max_queued_texts} texts already (type Overloaded), or the vLLM server "
        "answered 429 (type ServerStatusError): try again after Retry-After seconds",
        500: "The service itself failed on the text (a bug); the log has the details under the request id",
        502: "The vLLM server failed or answered what no label reads (types ServerConnectionError, "
        "ServerStatusError, ResponseFormatError, LabelParseError, ...); the log has the details under the "
        "request id",
        503: "The vLLM server answered 503 (type ServerStatusError): try again after Retry-After seconds, "
        "when it gave one",
        504: f"No answer within the request's deadline ({limits.request_timeout:g} s by default; type "
        "DeadlineExceeded), or the vLLM server did not answer in time (type ServerTimeoutError)",
    }


_RETRY_AFTER_HEADER = {
    "schema": {"type": "integer", "minimum": 0},
    "description": "Seconds to wait before trying again",
}
_REQUEST_ID_HEADER = {"schema": {"type": "string"}, "description": "The id the service's log gives the details under"}


def request_model(max_texts: int = DEFAULT_MAX_TEXTS, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS) -> type[BaseModel]:
    """The body of ``POST /v1/classify`` under these limits (the OpenAPI document's
    ``maxItems`` and ``maxLength``)."""
    Text = Annotated[
        str,
        Field(
            min_length=1,
            max_length=max_text_chars,
            pattern=NON_BLANK,
            description="One text, with at least one character that is not whitespace. It must also fit in "
            "the vLLM server's context beside the prompt, a token count that no schema can state: a longer "
            "one is answered 422 ContextLengthError.",
        ),
    ]
    Item = Annotated[str, Field(max_length=max_text_chars)]
    Texts = Annotated[list[Item], Field(max_length=max_texts)]

    class ClassifyRequest(BaseModel):
        """The body of POST /v1/classify."""

        input: Text | Texts = Field(
            description="One text, or a list of texts answered 200 in order, each with its result or, when it "
            "cannot be classified (empty, whitespace only, too long for the server), its error in its place"
        )

    return ClassifyRequest


#: The request body under the default limits.
ClassifyRequest = request_model()


class Error(BaseModel):
    type: str = Field(description="The error's kind, e.g. InvalidInputError or ServerStatusError")
    message: str = Field(description="What went wrong, in words")
    request_id: str | None = Field(
        default=None, description="On a failure of the service or the vLLM server: the log's id for its details"
    )


class ErrorResponse(BaseModel):
    """Every error answer's body."""

    error: Error


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready"]
    replicas: int = Field(ge=1, description="The vLLM servers the classifier spreads its requests over")
    answering: int = Field(ge=1, description="Those that answered the readiness check")


class Answer(NamedTuple):
    """An answer, rendered: status, JSON body and headers."""

    status: int
    body: bytes
    headers: dict[str, str]


def _answer_models(label_names: list[str]) -> tuple[type[BaseModel], type[BaseModel]]:
    """The answers to one text and to a list, for the OpenAPI document: the classifier's labels
    are their labels' enum."""
    LabelName = Annotated[str, WithJsonSchema({"type": "string", "enum": list(label_names)})]
    Probability = Annotated[float, Field(ge=0, le=1)]

    class Classification(BaseModel):
        label: LabelName | None = Field(
            default=None, description="The chosen label; absent when abstained, or when no label passed"
        )
        labels: list[LabelName] = Field(description="Every chosen label (several under multi-label)")
        scores: dict[LabelName, Probability] | None = Field(
            default=None, description="Each label's probability; absent under constrained choice"
        )
        abstained: bool = Field(description="The best probability was under the classifier's abstain_below")
        scoring: Scoring = Field(description="How the labels were read")
        multi_label: bool = Field(description="Several labels may apply")
        path: list[LabelName] | None = Field(default=None, description="Hierarchical labels: each level's label")
        path_scores: list[dict[LabelName, Probability]] | None = Field(
            default=None, description="Hierarchical labels: each level's probabilities"
        )

    class OneResult(BaseModel):
        result: Classification = Field(description="The answer for the one text")

    class ListResults(BaseModel):
        results: list[Classification | ErrorResponse] = Field(description="One answer per text, in order")

    return OneResult, ListResults


class _RequestId:
    """A request's id, made the first time an answer needs one."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: str | None = None

    def __call__(self) -> str:
        if self.value is None:
            self.value = secrets.token_hex(8)
        return self.value


def _error_answer(
    status: int, kind: str, message: str, request_id: str | None = None, headers: dict[str, str] | None = None
) -> Answer:
    """An error answer of the service's own (not a text's)."""
    error: dict[str, Any] = {"type": kind, "message": message}
    headers = dict(headers or {})
    if request_id is not None:
        error["request_id"] = request_id
        headers["x-request-id"] = request_id
    return Answer(status, _dumps({"error": error}), headers)


def _text_error_answer(exc: BaseException, request_id: _RequestId) -> Answer:
    """A single text's error as its answer; a failure that is not the text's own goes to the
    log in full under a request id, and the answer carries only the id."""
    status = error_status(exc)
    if isinstance(exc, InvalidInputError):
        return Answer(status, _dumps(error_body(exc)), {})
    rid = request_id()
    _log_failure(rid, exc)
    headers = {"x-request-id": rid}
    if _passed_on(exc) and exc.retry_after is not None:  # type: ignore[attr-defined]
        headers["retry-after"] = str(math.ceil(exc.retry_after))  # type: ignore[attr-defined]
    return Answer(status, _dumps(error_body(exc, rid)), headers)


def _log_failure(request_id: str, exc: BaseException, count: int = 1) -> None:
    times = f" ({count} texts)" if count > 1 else ""
    if isinstance(exc, QwenFastError):
        logger.warning("request %s: %s%s: %s", request_id, type(exc).__name__, times, exc)
    else:  # not one of ours: a bug, with its traceback
        logger.error("request %s: %s%s", request_id, type(exc).__name__, times, exc_info=exc)


async def _render_list(results: Sequence[Any], request_id: _RequestId) -> bytes:
    """``{"results": [...]}`` for a list, a slice at a time with the event loop's other work
    between slices, so that a long list does not hold up other clients; each distinct failure
    that is not an input's own is logged once under the request id."""
    failures: dict[tuple[str, str], tuple[BaseException, int]] = {}
    parts: list[str] = []
    for start in range(0, len(results), _RENDER_SLICE):
        if start:
            await asyncio.sleep(0)
        for result in results[start : start + _RENDER_SLICE]:
            rid = None
            if isinstance(result, BaseException) and not isinstance(result, InvalidInputError):
                rid = request_id()
                key = (type(result).__name__, str(result))
                failures[key] = (result, failures.get(key, (result, 0))[1] + 1)
            parts.append(json.dumps(result_body(result, rid), ensure_ascii=False, allow_nan=False,
                                    separators=(",", ":")))  # fmt: skip
    for exc, count in failures.values():
        _log_failure(request_id(), exc, count)
    return ('{"results":[' + ",".join(parts) + "]}").encode()


class _Readiness:
    """``GET /ready``: the set-up is done and at least one vLLM server answers ``/v1/models``,
    found out within ``timeout`` seconds. One check runs at a time and its answer is reused for
    a second; a set-up that takes longer goes on in the background and a later check sees it."""

    def __init__(self, engine: Any, batcher: MicroBatcher, timeout: float) -> None:
        self._engine = engine
        self._batcher = batcher
        self._timeout = timeout
        self._set_up = False
        self._setup_task: asyncio.Task[Any] | None = None
        self._check_task: asyncio.Task[tuple[bool, str, int]] | None = None
        self._known: tuple[float, bool, str, int] | None = None

    @property
    def replicas(self) -> int:
        return len(self._engine.settings.base_urls)

    async def state(self) -> tuple[bool, str, int]:
        """(ready, why not, servers answering)."""
        loop = asyncio.get_running_loop()
        if self._known is not None and loop.time() - self._known[0] < _READY_REUSE_SECONDS:
            return self._known[1:]
        if self._check_task is None or self._check_task.done():
            self._check_task = loop.create_task(self._check())
        try:
            # Shielded: a probe that gives up leaves the check (and the set-up) to go on.
            state = await asyncio.wait_for(asyncio.shield(self._check_task), self._timeout)
        except asyncio.TimeoutError:
            state = (False, f"the vLLM server did not answer within {self._timeout:g} s", 0)
        self._known = (loop.time(), *state)
        return state

    async def _check(self) -> tuple[bool, str, int]:
        if not (self._set_up or self._batcher.prepared):
            if self._setup_task is None or self._setup_task.done():
                self._setup_task = asyncio.create_task(self._engine.aprepare())
            try:
                await asyncio.shield(self._setup_task)
            except Exception as exc:
                logger.warning("readiness: the set-up failed: %s: %s", type(exc).__name__, exc)
                return False, "the set-up with the vLLM server failed", 0
            self._set_up = True
        answering = sum(await asyncio.gather(*(self._answers(url) for url in self._engine.settings.base_urls)))
        if not answering:
            return False, "no vLLM server answers", 0
        return True, "", answering

    async def _answers(self, base_url: str) -> bool:
        import httpx

        settings = self._engine.settings
        headers = {"authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        custom = settings.http_transport if isinstance(settings.http_transport, httpx.AsyncBaseTransport) else None
        try:
            async with httpx.AsyncClient(transport=custom, timeout=self._timeout) as http:
                return (await http.get(f"{base_url.rstrip('/')}/models", headers=headers)).status_code == 200
        except httpx.HTTPError:
            return False


def create_app(
    classifier: QwenClassifier,
    *,
    api_key: str | None = None,
    max_wait_ms: float = 0.0,
    max_group: int = 256,
    groups_in_flight: int | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_texts: int = DEFAULT_MAX_TEXTS,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    max_queued_texts: int = DEFAULT_MAX_QUEUED_TEXTS,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ready_timeout: float = DEFAULT_READY_TIMEOUT,
) -> Any:
    """The FastAPI application serving ``classifier`` (see the module docstring).

    ``api_key``: clients must send it as a bearer token (an empty key is refused; None: no key).
    ``max_wait_ms``, ``max_group`` and ``groups_in_flight`` are :class:`MicroBatcher`'s (the
    wait in milliseconds). The limits, each declared in the OpenAPI document: ``max_body_bytes``
    (413), ``max_texts`` a list and ``max_text_chars`` a text (422), ``max_queued_texts`` waiting
    or in flight over all requests (429 with ``Retry-After``), ``request_timeout`` seconds from
    a request's arrival to its answer (504), ``ready_timeout`` seconds for ``GET /ready``."""
    try:
        from fastapi import Depends, FastAPI, HTTPException, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse, Response
        from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
        from prometheus_client.multiprocess import MultiProcessCollector
        from starlette.exceptions import HTTPException as StarletteHTTPException
    except ImportError as exc:
        raise _missing_api_extra(exc) from exc

    if groups_in_flight is not None and groups_in_flight < 1:
        raise ConfigurationError(f"groups_in_flight must be 1 or more, not {groups_in_flight}")
    if max_group < 1:
        raise ConfigurationError(f"max_group must be 1 or more, not {max_group}")
    key = APIKey(api_key) if api_key is not None else None
    limits = Limits(max_body_bytes=max_body_bytes, max_texts=max_texts, max_text_chars=max_text_chars,
                    max_queued_texts=max_queued_texts, request_timeout=request_timeout,
                    ready_timeout=ready_timeout)  # fmt: skip
    registry = CollectorRegistry()
    requests = Counter("qwen_fast_requests", "HTTP requests to /v1/classify", ["kind", "status"], registry=registry)
    latency = Histogram(
        "qwen_fast_request_seconds", "Latency of /v1/classify", ["kind"], buckets=_LATENCY_BUCKETS, registry=registry
    )
    groups = Histogram("qwen_fast_group_size", "Texts per grouped vLLM call", buckets=_GROUP_BUCKETS, registry=registry)
    errors = Counter("qwen_fast_item_errors", "Items answered with an error", ["type"], registry=registry)
    latencies = {kind: latency.labels(kind) for kind in ("single", "list")}
    scraped = registry
    if os.environ.get(_METRICS_DIR):  # one of several workers: each writes its counts there
        scraped = CollectorRegistry()
        MultiProcessCollector(scraped)
    engine = classifier.engine
    batcher = MicroBatcher(engine, max_wait=max_wait_ms / 1000, max_group=max_group, groups_in_flight=groups_in_flight,
                           max_queued=limits.max_queued_texts, on_group=groups.observe)  # fmt: skip
    readiness = _Readiness(engine, batcher, limits.ready_timeout)
    body_model = request_model(limits.max_texts, limits.max_text_chars)
    one_result, list_results = _answer_models(classifier.label_names)
    bearer = HTTPBearer(auto_error=False, description="The service's API key, as a bearer token")
    statuses = _error_statuses(limits)

    def authorise(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        if key is not None and not key.matches_token(credentials.credentials if credentials is not None else None):
            raise HTTPException(
                status_code=401, detail="missing or wrong API key", headers={"WWW-Authenticate": "Bearer"}
            )

    guarded = [Depends(authorise)] if key is not None else []

    def errors_for(*codes: int) -> dict[int | str, dict[str, Any]]:
        declared: dict[int | str, dict[str, Any]] = {}
        for code in (*codes, *([401] if key is not None else [])):
            headers: dict[str, Any] = {}
            if code == 401:
                headers["WWW-Authenticate"] = {"schema": {"type": "string"}, "description": "Bearer: send the key so"}
            if code in (429, 503):
                headers["Retry-After"] = _RETRY_AFTER_HEADER
            if code >= 500:
                headers["x-request-id"] = _REQUEST_ID_HEADER
            declared[code] = {"model": ErrorResponse, "description": statuses[code]}
            if headers:
                declared[code]["headers"] = headers
        return dict(sorted(declared.items(), key=lambda item: int(item[0])))

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        yield
        batcher.close()

    app = FastAPI(
        title="qwen-fast classification service",
        description=f"Labels: {', '.join(classifier.label_names)}",
        version=__version__,
        lifespan=lifespan,
    )
    app.state.batcher = batcher  # for tests and operators: texts held now, their line

    # Every error the service answers has one shape, {"error": {"type", "message"}}, whatever
    # raised it: a body that breaks the request schema, a missing key, an unknown path.
    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        requests.labels("invalid", "422").inc()
        problems = "; ".join(f"{'.'.join(map(str, e['loc'][1:])) or 'body'}: {e['msg']}" for e in exc.errors())
        return JSONResponse({"error": {"type": "InvalidInputError", "message": problems}}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = HTTPStatus(exc.status_code).phrase.replace(" ", "")
        body = {"error": {"type": kind, "message": str(exc.detail)}}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> Response:
        rid = _RequestId()()
        _log_failure(rid, exc)
        answer = _error_answer(500, "InternalServerError", "the service failed", rid)
        return Response(answer.body, status_code=500, headers=answer.headers, media_type="application/json")

    @app.get("/health", response_model=Health)
    async def health() -> Any:
        """Liveness: the service answers (it does not call the vLLM server; see /ready)."""
        return {"status": "ok"}

    @app.get(
        "/ready",
        response_model=Ready,
        responses={
            503: {
                "model": ErrorResponse,
                "description": "Not ready (type NotReady): the set-up with the vLLM server is not done, or no "
                f"vLLM server answers, within {limits.ready_timeout:g} s",
                "headers": {"x-request-id": _REQUEST_ID_HEADER},
            }
        },
    )
    async def ready() -> Any:
        """Readiness: the set-up with the vLLM server is done and a vLLM server answers, found out
        within the readiness timeout (answers are reused for a second)."""
        is_ready, why, answering = await readiness.state()
        if is_ready:
            return {"status": "ready", "replicas": readiness.replicas, "answering": answering}
        answer = _error_answer(503, "NotReady", f"not ready: {why}", _RequestId()())
        return Response(answer.body, status_code=503, headers=answer.headers, media_type="application/json")

    @app.get(
        "/metrics",
        dependencies=guarded,
        response_class=Response,
        responses={
            200: {
                "description": "The metrics in the Prometheus text exposition format",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            **errors_for(),
        },
    )
    async def metrics() -> Response:
        """Prometheus metrics: requests, latency, group sizes, item errors."""
        return Response(generate_latest(scraped), media_type=CONTENT_TYPE_LATEST)

    @app.post(
        "/v1/classify",
        dependencies=guarded,
        response_model=one_result | list_results,
        response_description="The one text's result, or each listed text's result or error, in order",
        responses=errors_for(400, 408, 413, 422, 429, 500, 502, 503, 504),
    )
    async def classify(body: body_model, request: Request) -> Any:  # type: ignore[valid-type]
        """Classify one text or a list; a list keeps each bad item's error in its place."""
        deadline = request.scope.get(_DEADLINE) or asyncio.get_running_loop().time() + limits.request_timeout
        answer = await respond(body, deadline)
        return Response(answer.body, status_code=answer.status, headers=answer.headers, media_type="application/json")

    async def respond(body: Any, deadline: float) -> Answer:
        """The answer to a valid ``POST /v1/classify``, by ``deadline`` (the event loop's
        clock), counted in the metrics."""
        start = time.perf_counter()
        single = not isinstance(body.input, list)
        kind = "single" if single else "list"
        values = [body.input] if single else body.input
        request_id = _RequestId()
        try:
            try:
                results = await batcher.classify_many(values, deadline)
            except Overloaded as exc:
                answer = _error_answer(429, "Overloaded", str(exc), headers={"retry-after": str(exc.retry_after)})
            except TimeoutError:
                answer = _error_answer(504, "DeadlineExceeded", f"no answer within the request's deadline "
                                       f"({limits.request_timeout:g} s)", request_id())  # fmt: skip
            else:
                for result in results:
                    if isinstance(result, BaseException):
                        errors.labels(type(result).__name__).inc()
                if single:
                    (result,) = results
                    if isinstance(result, BaseException):
                        answer = _text_error_answer(result, request_id)
                    else:
                        answer = Answer(200, _dumps({"result": result_body(result)}), {})
                elif results and all(_passed_on(r) for r in results):
                    # Nothing classified because the vLLM server asked for time: the client is told so.
                    answer = _text_error_answer(results[0], request_id)
                else:
                    answer = Answer(200, await _render_list(results, request_id), {})
                    if request_id.value is not None:
                        answer.headers["x-request-id"] = request_id.value
        except Exception as exc:  # a bug: the client gets an id, the log the traceback
            _log_failure(request_id(), exc)
            answer = _error_answer(500, "InternalServerError", "the service failed", request_id())
        latencies[kind].observe(time.perf_counter() - start)
        counted(kind, answer.status).inc()
        return answer

    counts: dict[tuple[str, int], Any] = {}

    def counted(kind: str, status: int) -> Any:
        """The requests counter of this kind and status (looked up once each)."""
        counter = counts.get((kind, status))
        if counter is None:
            counter = counts[kind, status] = requests.labels(kind, str(status))
        return counter

    def refused(status: int) -> None:
        counted("invalid", status).inc()

    app.add_middleware(
        ClassifyFastPath, respond=respond, key=key, limits=limits, request_type=body_model, on_refused=refused
    )
    return app


class _TooLarge(QwenFastError):
    """The body passed the limit while it streamed in."""


class ClassifyFastPath:
    """ASGI middleware in front of FastAPI for ``POST /v1/classify``: it checks the key and the
    body's size before reading the body, reads it within the limit and the request's deadline,
    and answers the common request itself.

    Checked in this order, each answered at once: the key (401, with the body unread), the
    ``Content-Length`` (413), the bytes as they stream in (413 as soon as they pass the limit;
    the rest is never read), the deadline while reading (408). The refusals close the
    connection, so that an unread body is not read to find the next request.

    Then a JSON body (``application/json``) that the route's model accepts is answered here,
    skipping FastAPI's routing, dependency and validation layers, most of a small request's CPU
    in the service (docs/performance.md), with the route's own procedure (``respond``). Every
    other request (another path or method, another content type, a body that is not JSON or
    breaks the schema) goes on to FastAPI, body and all, which answers it as the OpenAPI
    document says. A large body is parsed in a worker thread."""

    def __init__(
        self,
        app: Any,
        respond: Callable[[Any, float], Awaitable[Answer]],
        key: APIKey | None = None,
        limits: Limits | None = None,
        request_type: type[BaseModel] = ClassifyRequest,
        on_refused: Callable[[int], object] | None = None,
    ) -> None:
        from pydantic import TypeAdapter

        self.app = app
        self._respond = respond
        self._key = key
        self._limits = limits or Limits()
        self._request = TypeAdapter(request_type)
        self._on_refused = on_refused

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/v1/classify":
            await self.app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self._limits.request_timeout
        content_type = authorization = length = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
            elif name == b"authorization":
                authorization = value
            elif name == b"content-length":
                length = value
        if self._key is not None and not self._key.matches(authorization):
            await self._refuse(send, 401, "Unauthorized", "missing or wrong API key", {"www-authenticate": "Bearer"})
            return
        if length is not None and length.strip().isdigit() and int(length) > self._limits.max_body_bytes:
            await self._too_large(send)
            return
        try:
            async with asyncio.timeout_at(deadline):
                body = await self._read(receive)
        except _TooLarge:
            await self._too_large(send)
            return
        except TimeoutError:
            message = f"the body did not arrive within the request's deadline ({self._limits.request_timeout:g} s)"
            await self._refuse(send, 408, "RequestTimeout", message)
            return
        if body is None:  # the client went away
            return
        scope[_DEADLINE] = deadline
        if content_type is not None and content_type.split(b";")[0].strip().lower() == b"application/json":
            request = (
                await asyncio.to_thread(self._parse, body) if len(body) >= _PARSE_IN_THREAD_BYTES else self._parse(body)
            )
            if request is not None:
                answer = await self._respond(request, deadline)
                await _send(send, answer)
                return
        await self.app(scope, _replaying(body, receive), send)

    def _parse(self, body: bytes) -> Any:
        """The request the body holds, or None where FastAPI should answer it (not JSON, or
        against the schema)."""
        try:
            return self._request.validate_python(json.loads(body))
        except Exception:
            return None

    async def _read(self, receive: Any) -> bytes | None:
        """The body, or None when the client went away; :class:`_TooLarge` as soon as it
        passes the limit, before more is read."""
        chunks = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._limits.max_body_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _too_large(self, send: Any) -> None:
        limit = self._limits.max_body_bytes
        await self._refuse(send, 413, "PayloadTooLarge", f"the body is over the service's limit of {limit} bytes")

    async def _refuse(
        self, send: Any, status: int, kind: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        if self._on_refused is not None and status != 401:
            self._on_refused(status)
        answer = _error_answer(status, kind, message, headers={**(headers or {}), "connection": "close"})
        await _send(send, answer)


async def _send(send: Any, answer: Answer) -> None:
    """Send a rendered answer as an ASGI response."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer.body)).encode())]
    headers += [(name.encode(), value.encode()) for name, value in answer.headers.items()]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


def _replaying(body: bytes, receive: Any) -> Any:
    """An ASGI ``receive`` that gives ``body`` again, then what ``receive`` gives."""
    replayed = False

    async def replay() -> dict[str, Any]:
        nonlocal replayed
        if replayed:
            return dict(await receive())
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


class BackgroundService:
    """An app served by uvicorn on a loopback port in a thread (for tests and benchmarks):
    ``with BackgroundService(app) as service: ... service.url``."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        import threading

        uvicorn = _uvicorn()
        port = port or free_port(host)
        self.url = f"http://{host}:{port}"
        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> "BackgroundService":
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise ServerStartError(f"the HTTP service at {self.url} did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)


#: The environment variable that hands :func:`serve_api`'s settings to its worker processes.
_WORKER_SETTINGS = "QWEN_FAST_API_WORKER_SETTINGS"
#: prometheus-client's own variable: where worker processes write their metrics to be summed.
_METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: it may resolve to any address
        return False


def serve_api(
    config: str | Path,
    *,
    base_url: str | list[str] | None = None,
    model: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8080,
    api_key: str | None = None,
    max_wait_ms: float = 0.0,
    max_group: int = 256,
    groups_in_flight: int | None = None,
    workers: int = 1,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_texts: int = DEFAULT_MAX_TEXTS,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    max_queued_texts: int = DEFAULT_MAX_QUEUED_TEXTS,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ready_timeout: float = DEFAULT_READY_TIMEOUT,
) -> None:
    """Serve the classifier saved at ``config`` (``QwenClassifier.save``'s file or directory)
    over HTTP in the foreground until interrupted. ``base_url`` and ``model`` override the saved
    server(s) and served model name; with ``api_key``, clients must send it as a bearer token
    (an empty key is refused; binding an address other than loopback without one is logged as
    a warning); the rest are :func:`create_app`'s.

    ``workers`` > 1 serves the port from that many processes (uvicorn's workers, one listening
    socket): each parses, groups and answers its own clients' requests with its own classifier,
    so the service's HTTP and JSON work is spread over as many cores. By default the workers
    share one process's groups in flight (at least one each), so that more workers do not
    make every group smaller; each has its own line of ``max_queued_texts``. ``/metrics`` then
    sums every worker's counts (prometheus-client's multiprocess mode)."""

    if workers < 1:
        raise ConfigurationError(f"workers must be 1 or more, not {workers}")
    if api_key is not None:
        APIKey(api_key)  # an empty key fails here, before anything starts
    Limits(max_body_bytes=max_body_bytes, max_texts=max_texts, max_text_chars=max_text_chars,
           max_queued_texts=max_queued_texts, request_timeout=request_timeout, ready_timeout=ready_timeout)  # fmt: skip
    uvicorn = _uvicorn()
    if api_key is None and not is_loopback(host):
        logger.warning(
            "serving on %s without an API key: anyone who reaches the address can classify and read /metrics "
            "(set QWEN_FAST_API_KEY or --api-key-file)",
            host,
        )
    overrides: dict[str, Any] = {}
    if base_url is not None:
        overrides["base_url"] = base_url
    if model is not None:
        overrides["model"] = model
    settings = {"config": str(config), "overrides": overrides, "api_key": api_key,
                "max_wait_ms": max_wait_ms, "max_group": max_group, "groups_in_flight": groups_in_flight,
                "max_body_bytes": max_body_bytes, "max_texts": max_texts, "max_text_chars": max_text_chars,
                "max_queued_texts": max_queued_texts, "request_timeout": request_timeout,
                "ready_timeout": ready_timeout}  # fmt: skip
    if workers == 1:
        uvicorn.run(_app_of(settings), host=host, port=port, log_level="warning")
        return
    import tempfile

    loaded = QwenClassifier.load(config, **overrides)  # a bad configuration fails here, not in each worker
    if groups_in_flight is None:  # each worker's share of what one process would keep in flight
        settings["groups_in_flight"] = default_groups_in_flight(loaded.replica_count, workers)
    with tempfile.TemporaryDirectory(prefix="qwen-fast-metrics-") as metrics:
        # The workers are spawned: they read both from the environment they inherit (only
        # this user's processes can read another's environment; the key is on no command line).
        os.environ[_WORKER_SETTINGS] = json.dumps(settings)
        os.environ[_METRICS_DIR] = metrics
        try:
            uvicorn.run(f"{__name__}:app_from_environment", factory=True, workers=workers, host=host, port=port,
                        log_level="warning")  # fmt: skip
        finally:
            del os.environ[_WORKER_SETTINGS], os.environ[_METRICS_DIR]


def app_from_environment() -> Any:
    """A worker process's application (see :func:`serve_api`): the settings its parent left in
    the environment."""

    return _app_of(json.loads(os.environ[_WORKER_SETTINGS]))


def _app_of(settings: dict[str, Any]) -> Any:
    settings = dict(settings)
    classifier = QwenClassifier.load(settings.pop("config"), **settings.pop("overrides"))
    return create_app(classifier, **settings)


def _uvicorn() -> Any:
    try:
        import uvicorn
    except ImportError as exc:
        raise _missing_api_extra(exc) from exc
    return uvicorn


def _missing_api_extra(exc: ImportError) -> MissingDependencyError:
    return MissingDependencyError(
        f"the HTTP service needs the 'api' extra ({exc.name} is missing): pip install 'langchain-qwen-fast[api]'"
    )
