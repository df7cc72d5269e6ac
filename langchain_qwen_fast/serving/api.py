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
* Single-text requests are grouped: at most ``groups_in_flight`` groups go to vLLM at once,
  and texts that arrive while all are busy go together as the next (up to ``max_group``). Many
  clients each sending one text get batch throughput; a lone text goes at once.
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
import json
import os
import time
from collections.abc import Awaitable, Callable
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
from langchain_qwen_fast.serving.micro_batcher import MicroBatcher, default_groups_in_flight

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
    max_wait_ms: float = 0.0,
    max_group: int = 256,
    groups_in_flight: int | None = None,
) -> Any:
    """The FastAPI application serving ``classifier`` (see the module docstring).
    ``max_wait_ms``, ``max_group`` and ``groups_in_flight`` are :class:`MicroBatcher`'s (the
    wait in milliseconds)."""
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
    engine = classifier.engine
    batcher = MicroBatcher(engine, max_wait=max_wait_ms / 1000, max_group=max_group,
                           groups_in_flight=groups_in_flight, on_group=groups.observe)  # fmt: skip
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
        answer, status = await respond(body)
        return JSONResponse(answer, status_code=status)

    async def respond(body: ClassifyRequest) -> tuple[dict[str, Any], int]:
        """The answer to a valid ``POST /v1/classify`` and its status, counted in the metrics."""
        start = time.perf_counter()
        answer: dict[str, Any]
        if isinstance(body.input, list):
            kind = "list"
            results = await engine.aclassify(body.input)
            if results:
                groups.observe(len(results))
            for result in results:
                if isinstance(result, BaseException):
                    errors.labels(type(result).__name__).inc()
            answer, status = {"results": [result_body(r) for r in results]}, 200
        else:
            kind = "single"
            try:
                answer, status = {"result": result_body(await batcher.classify(body.input))}, 200
            except Exception as exc:
                errors.labels(type(exc).__name__).inc()
                answer, status = error_body(exc), error_status(exc)
        latency.labels(kind).observe(time.perf_counter() - start)
        requests.labels(kind, str(status)).inc()
        return answer, status

    app.add_middleware(ClassifyFastPath, respond=respond, api_key=api_key)
    return app


class ClassifyFastPath:
    """ASGI middleware that answers the common ``POST /v1/classify`` itself: a JSON body the
    schema accepts and, when the service has a key, the right bearer token. It skips FastAPI's
    routing, dependency and validation layers, most of a small request's CPU in the service
    (docs/performance.md), and answers what the route would: ``respond`` is the route's own
    procedure, the body is validated by the route's own model, the answer is the route's
    ``JSONResponse``. Every other request (another path or method, another content
    type, a missing or wrong key, a body that is not JSON or breaks the schema) goes on to
    FastAPI, body and all, which answers it as the OpenAPI document says."""

    def __init__(
        self,
        app: Any,
        respond: Callable[[ClassifyRequest], Awaitable[tuple[dict[str, Any], int]]],
        api_key: str | None,
    ) -> None:
        from pydantic import TypeAdapter
        from starlette.responses import JSONResponse

        self.app = app
        self._answer = JSONResponse
        self._respond = respond
        self._bearer = None if api_key is None else f"Bearer {api_key}".encode()
        self._request = TypeAdapter(ClassifyRequest)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not self._takes(scope):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            request = self._request.validate_python(json.loads(body))
        except Exception:  # FastAPI's answer, from the same bytes
            await self.app(scope, _replaying(body, receive), send)
            return
        answer, status = await self._respond(request)
        await self._answer(answer, status_code=status)(scope, receive, send)

    def _takes(self, scope: dict[str, Any]) -> bool:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/v1/classify":
            return False
        content_type = authorization = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
            elif name == b"authorization":
                authorization = value
        if content_type is None or content_type.split(b";")[0].strip().lower() != b"application/json":
            return False
        return self._bearer is None or (authorization is not None and hmac.compare_digest(authorization, self._bearer))


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
) -> None:
    """Serve the classifier saved at ``config`` (``QwenClassifier.save``'s file or directory)
    over HTTP in the foreground until interrupted. ``base_url`` and ``model`` override the saved
    server(s) and served model name; with ``api_key``, clients must send it as a bearer token;
    ``max_wait_ms``, ``max_group`` and ``groups_in_flight`` are :func:`create_app`'s.

    ``workers`` > 1 serves the port from that many processes (uvicorn's workers, one listening
    socket): each parses, groups and answers its own clients' requests with its own classifier,
    so the service's HTTP and JSON work is spread over as many cores. By default the workers
    share one process's groups in flight (at least one each), so that more workers do not
    make every group smaller. ``/metrics`` then sums
    every worker's counts (prometheus-client's multiprocess mode)."""

    if workers < 1:
        raise ConfigurationError(f"workers must be 1 or more, not {workers}")
    uvicorn = _uvicorn()
    overrides: dict[str, Any] = {}
    if base_url is not None:
        overrides["base_url"] = base_url
    if model is not None:
        overrides["model"] = model
    settings = {"config": str(config), "overrides": overrides, "api_key": api_key,
                "max_wait_ms": max_wait_ms, "max_group": max_group, "groups_in_flight": groups_in_flight}  # fmt: skip
    if workers == 1:
        uvicorn.run(_app_of(settings), host=host, port=port, log_level="warning")
        return
    import tempfile

    loaded = QwenClassifier.load(config, **overrides)  # a bad configuration fails here, not in each worker
    if groups_in_flight is None:  # each worker's share of what one process would keep in flight
        settings["groups_in_flight"] = default_groups_in_flight(loaded.replica_count, workers)
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

    return _app_of(json.loads(os.environ[_WORKER_SETTINGS]))


def _app_of(settings: dict[str, Any]) -> Any:
    classifier = QwenClassifier.load(settings["config"], **settings["overrides"])
    return create_app(classifier, api_key=settings["api_key"], max_wait_ms=settings["max_wait_ms"],
                      max_group=settings["max_group"], groups_in_flight=settings["groups_in_flight"])  # fmt: skip


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
