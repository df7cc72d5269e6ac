"""``qwen-fast api``: an HTTP classification service over a classifier, for any language.

    qwen-fast api models/news --base-url http://127.0.0.1:8000/v1 --port 8080
    curl -s localhost:8080/v1/classify -H 'content-type: application/json' -d '{"input": "Stocks rally"}'

* ``POST /v1/classify`` takes ``{"input": "one text"}`` or ``{"input": ["a", "b", ...]}`` and
  answers each text's labels, probabilities and abstention. A list answers 200 with each bad
  item's error in its place; a single text that fails answers with the error's status (422 for
  bad input, 502/504 when the vLLM server failed).
* Every error answer is ``{"error": {"type", "message"}}``. The OpenAPI document (``/openapi.json``)
  states each constraint the service enforces and each status it answers, so that clients
  generated from it agree with the service; ``tests/unit_tests/serving/test_api_schema.py`` fuzzes
  the service from it.
* Single-text requests that arrive together (within ``max_wait_ms``, up to ``max_group``) are
  classified in one grouped request to vLLM: many clients each sending one text get batch
  throughput.
* ``GET /health``, ``GET /metrics`` (Prometheus: requests, latency, group sizes, errors) and
  OpenAPI docs at ``/docs``. With an API key, ``/v1/classify`` and ``/metrics`` need
  ``Authorization: Bearer <key>``. Binds 127.0.0.1 unless told otherwise.
* ``workers`` > 1 (``qwen-fast api --workers N``): N processes serve the one port, each with
  its own classifier and grouping, for more requests a second than one process's HTTP work
  allows; ``/metrics`` sums them all.

In Python, :func:`serve_api` runs the service in the foreground and :func:`create_app` gives the
ASGI application. Needs the ``api`` extra (FastAPI, uvicorn, prometheus-client).
"""

# No ``from __future__ import annotations`` here: FastAPI reads the route functions'
# annotations at runtime, and they name classes imported inside create_app.
import hmac
import os
import time
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WithJsonSchema

from langchain_qwen_fast import __version__
from langchain_qwen_fast._core.prompting import Scoring
from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.classifiers import QwenClassifier
from langchain_qwen_fast.errors import (
    ConfigurationError,
    InvalidInputError,
    MissingDependencyError,
    QwenFastError,
    ServerStartError,
    ServerTimeoutError,
)
from langchain_qwen_fast.serving.launcher import free_port
from langchain_qwen_fast.serving.micro_batcher import MicroBatcher

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
_GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def error_body(exc: BaseException) -> dict[str, Any]:
    """An error as JSON: its type and message (never a secret: errors carry none)."""
    return {"error": {"type": type(exc).__name__, "message": str(exc)}}


def error_status(exc: BaseException) -> int:
    """The HTTP status for a single text's error."""
    if isinstance(exc, InvalidInputError):
        return 422
    if isinstance(exc, ServerTimeoutError):
        return 504
    if isinstance(exc, QwenFastError):  # the server failed, or answered what no label reads
        return 502
    return 500


def result_body(result: Classification | BaseException) -> dict[str, Any]:
    """One item's answer: the classification's fields, or its error."""
    if isinstance(result, BaseException):
        return error_body(result)
    return result.model_dump(mode="json", exclude_none=True)


#: A character that is not whitespace by ``str.isspace``, what ``validate_text`` strips: a text
#: must hold one. Spelled out, not ``\\S``, since each regex engine (ECMAScript, Rust, Python) has
#: its own ``\\s``; a unit test checks it against every code point.
NON_BLANK = r"[^\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"

#: What each error status means, as the OpenAPI document says it.
_ERROR_STATUSES = {
    400: "The body could not be read: not UTF-8 text (type BadRequest)",
    401: "The API key is missing or wrong (type Unauthorized)",
    422: "The request breaks the schema, or its one text cannot be classified: too long for the vLLM "
    "server's context beside the prompt (types InvalidInputError, ContextLengthError)",
    500: "The service itself failed on the text (a bug)",
    502: "The vLLM server failed or answered what no label reads "
    "(types ServerConnectionError, ServerStatusError, ResponseFormatError, LabelParseError, ...)",
    504: "The vLLM server did not answer in time (type ServerTimeoutError)",
}

Text = Annotated[
    str,
    Field(
        min_length=1,
        pattern=NON_BLANK,
        description="One text, with at least one character that is not whitespace. It must also fit in "
        "the vLLM server's context beside the prompt, a token count that no schema can state: a longer "
        "one is answered 422 ContextLengthError.",
    ),
]


class ClassifyRequest(BaseModel):
    """The body of POST /v1/classify."""

    input: Text | list[str] = Field(
        description="One text, or a list of texts answered 200 in order, each with its result or, when it "
        "cannot be classified (empty, whitespace only, too long), its error in its place"
    )


class Error(BaseModel):
    type: str = Field(description="The error's kind, e.g. InvalidInputError or ServerStatusError")
    message: str = Field(description="What went wrong, in words")


class ErrorResponse(BaseModel):
    """Every error answer's body."""

    error: Error


class Health(BaseModel):
    status: Literal["ok"]


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


def create_app(
    classifier: QwenClassifier,
    *,
    api_key: str | None = None,
    max_wait_ms: float = 2.0,
    max_group: int = 256,
) -> Any:
    """The FastAPI application serving ``classifier`` (see the module docstring)."""
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

    registry = CollectorRegistry()
    requests = Counter("qwen_fast_requests", "HTTP requests to /v1/classify", ["kind", "status"], registry=registry)
    latency = Histogram(
        "qwen_fast_request_seconds", "Latency of /v1/classify", ["kind"], buckets=_LATENCY_BUCKETS, registry=registry
    )
    groups = Histogram("qwen_fast_group_size", "Texts per grouped vLLM call", buckets=_GROUP_BUCKETS, registry=registry)
    errors = Counter("qwen_fast_item_errors", "Items answered with an error", ["type"], registry=registry)
    scraped = registry
    if os.environ.get(_METRICS_DIR):  # one of several workers: each writes its counts there
        scraped = CollectorRegistry()
        MultiProcessCollector(scraped)
    batcher = MicroBatcher(classifier, max_wait=max_wait_ms / 1000, max_group=max_group, on_group=groups.observe)
    one_result, list_results = _answer_models(classifier.label_names)
    keyed = api_key is not None
    bearer = HTTPBearer(auto_error=False, description="The service's API key, as a bearer token")

    def authorise(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        given = credentials.credentials if credentials is not None else ""
        if api_key is not None and not hmac.compare_digest(given.encode(), api_key.encode()):
            raise HTTPException(
                status_code=401, detail="missing or wrong API key", headers={"WWW-Authenticate": "Bearer"}
            )

    guarded = [Depends(authorise)] if keyed else []

    def errors_for(*statuses: int) -> dict[int | str, dict[str, Any]]:
        declared = {status: {"model": ErrorResponse, "description": _ERROR_STATUSES[status]} for status in statuses}
        if keyed:
            declared[401] = {
                "model": ErrorResponse,
                "description": _ERROR_STATUSES[401],
                "headers": {
                    "WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer: send the key so"}
                },
            }
        return dict(sorted(declared.items()))

    app = FastAPI(
        title="qwen-fast classification service",
        description=f"Labels: {', '.join(classifier.label_names)}",
        version=__version__,
    )

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

    @app.get("/health", response_model=Health)
    async def health() -> Any:
        """The service is up (it does not call the vLLM server)."""
        return {"status": "ok"}

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
        responses=errors_for(400, 422, 500, 502, 504),
    )
    async def classify(body: ClassifyRequest) -> Any:
        """Classify one text or a list; a list keeps each bad item's error in its place."""
        start = time.perf_counter()
        if isinstance(body.input, list):
            kind = "list"
            results = await classifier.abatch(body.input, return_exceptions=True) if body.input else []
            if results:
                groups.observe(len(results))
            for result in results:
                if isinstance(result, BaseException):
                    errors.labels(type(result).__name__).inc()
            answer: Any = {"results": [result_body(r) for r in results]}
            status = 200
        else:
            kind = "single"
            try:
                answer = {"result": result_body(await batcher.classify(body.input))}
                status = 200
            except Exception as exc:
                errors.labels(type(exc).__name__).inc()
                answer, status = error_body(exc), error_status(exc)
        latency.labels(kind).observe(time.perf_counter() - start)
        requests.labels(kind, str(status)).inc()
        return JSONResponse(answer, status_code=status)

    return app


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


def serve_api(
    config: str | Path,
    *,
    base_url: str | list[str] | None = None,
    model: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8080,
    api_key: str | None = None,
    max_wait_ms: float = 2.0,
    max_group: int = 256,
    workers: int = 1,
) -> None:
    """Serve the classifier saved at ``config`` (``QwenClassifier.save``'s file or directory)
    over HTTP in the foreground until interrupted. ``base_url`` and ``model`` override the saved
    server(s) and served model name; with ``api_key``, clients must send it as a bearer token;
    ``max_wait_ms`` and ``max_group`` are :func:`create_app`'s.

    ``workers`` > 1 serves the port from that many processes (uvicorn's workers, one listening
    socket): each parses, groups and answers its own clients' requests with its own classifier,
    so the service's HTTP and JSON work is spread over as many cores. ``/metrics`` then sums
    every worker's counts (prometheus-client's multiprocess mode)."""
    import json

    if workers < 1:
        raise ConfigurationError(f"workers must be 1 or more, not {workers}")
    uvicorn = _uvicorn()
    overrides: dict[str, Any] = {}
    if base_url is not None:
        overrides["base_url"] = base_url
    if model is not None:
        overrides["model"] = model
    settings = {"config": str(config), "overrides": overrides, "api_key": api_key,
                "max_wait_ms": max_wait_ms, "max_group": max_group}  # fmt: skip
    if workers == 1:
        uvicorn.run(_app_of(settings), host=host, port=port, log_level="warning")
        return
    import tempfile

    QwenClassifier.load(config, **overrides)  # a bad configuration fails here, not in each worker
    with tempfile.TemporaryDirectory(prefix="qwen-fast-metrics-") as metrics:
        # The workers are spawned: they read both from the environment they inherit.
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
    import json

    return _app_of(json.loads(os.environ[_WORKER_SETTINGS]))


def _app_of(settings: dict[str, Any]) -> Any:
    classifier = QwenClassifier.load(settings["config"], **settings["overrides"])
    return create_app(classifier, api_key=settings["api_key"], max_wait_ms=settings["max_wait_ms"],
                      max_group=settings["max_group"])  # fmt: skip


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
