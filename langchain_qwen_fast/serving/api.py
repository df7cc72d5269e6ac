"""``qwen-fast api``: an HTTP classification service over a classifier, for any language.

    qwen-fast api models/news --base-url http://127.0.0.1:8000/v1 --port 8080
    curl -s localhost:8080/v1/classify -d '{"input": "Stocks rally as rates fall"}'

* ``POST /v1/classify`` takes ``{"input": "one text"}`` or ``{"input": ["a", "b", ...]}`` and
  answers each text's labels, probabilities and abstention. A list answers 200 with each bad
  item's error in its place; a single text that fails answers with the error's status (422 for
  bad input, 502/504 when the vLLM server failed).
* Single-text requests that arrive together (within ``max_wait_ms``, up to ``max_group``) are
  classified in one grouped request to vLLM: many clients each sending one text get batch
  throughput.
* ``GET /health``, ``GET /metrics`` (Prometheus: requests, latency, group sizes, errors) and
  OpenAPI docs at ``/docs``. With an API key, ``/v1/classify`` and ``/metrics`` need
  ``Authorization: Bearer <key>``. Binds 127.0.0.1 unless told otherwise.

In Python, :func:`serve_api` runs the service in the foreground and :func:`create_app` gives the
ASGI application. Needs the ``api`` extra (FastAPI, uvicorn, prometheus-client).
"""

# No ``from __future__ import annotations`` here: FastAPI reads the route functions'
# annotations at runtime, and they name classes defined inside create_app.
import hmac
import time
from pathlib import Path
from typing import Any

from langchain_qwen_fast import __version__
from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.classifiers import QwenClassifier
from langchain_qwen_fast.errors import (
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
        from fastapi.responses import JSONResponse, Response
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
    except ImportError as exc:
        raise _missing_api_extra(exc) from exc
    from pydantic import BaseModel, Field

    registry = CollectorRegistry()
    requests = Counter("qwen_fast_requests", "HTTP requests to /v1/classify", ["kind", "status"], registry=registry)
    latency = Histogram(
        "qwen_fast_request_seconds", "Latency of /v1/classify", ["kind"], buckets=_LATENCY_BUCKETS, registry=registry
    )
    groups = Histogram("qwen_fast_group_size", "Texts per grouped vLLM call", buckets=_GROUP_BUCKETS, registry=registry)
    errors = Counter("qwen_fast_item_errors", "Items answered with an error", ["type"], registry=registry)
    batcher = MicroBatcher(classifier, max_wait=max_wait_ms / 1000, max_group=max_group, on_group=groups.observe)

    class ClassifyRequest(BaseModel):
        input: str | list[Any] = Field(description="One text, or a list of texts")

    class Item(BaseModel):
        label: str | None = None
        labels: list[str] | None = None
        scores: dict[str, float] | None = None
        abstained: bool | None = None
        scoring: str | None = None
        multi_label: bool | None = None
        path: list[str] | None = None
        path_scores: list[dict[str, float]] | None = None
        error: dict[str, str] | None = Field(default=None, description="The item's typed error, instead of a result")

    class ClassifyResponse(BaseModel):
        result: Item | None = Field(default=None, description="The answer for a single text")
        results: list[Item] | None = Field(default=None, description="One answer per text, in order")

    def authorise(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
            raise HTTPException(status_code=401, detail="missing or wrong API key")

    app = FastAPI(
        title="qwen-fast classification service",
        description=f"Labels: {', '.join(classifier.label_names)}",
        version=__version__,
    )

    @app.get("/health")
    async def health() -> dict[str, str]:
        """The service is up (it does not call the vLLM server)."""
        return {"status": "ok"}

    @app.get("/metrics", dependencies=[Depends(authorise)])
    async def metrics() -> Response:
        """Prometheus metrics: requests, latency, group sizes, item errors."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/classify", response_model=ClassifyResponse, response_model_exclude_none=True)
    async def classify(body: ClassifyRequest, _: None = Depends(authorise)) -> Any:
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
) -> None:
    """Serve the classifier saved at ``config`` (``QwenClassifier.save``'s file or directory)
    over HTTP in the foreground until interrupted. ``base_url`` and ``model`` override the saved
    server(s) and served model name; with ``api_key``, clients must send it as a bearer token;
    ``max_wait_ms`` and ``max_group`` are :func:`create_app`'s."""
    uvicorn = _uvicorn()
    overrides: dict[str, Any] = {}
    if base_url is not None:
        overrides["base_url"] = base_url
    if model is not None:
        overrides["model"] = model
    classifier = QwenClassifier.load(config, **overrides)
    app = create_app(classifier, api_key=api_key, max_wait_ms=max_wait_ms, max_group=max_group)
    uvicorn.run(app, host=host, port=port, log_level="warning")


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
