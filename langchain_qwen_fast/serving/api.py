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

Needs the ``api`` extra (FastAPI, uvicorn, prometheus-client).
"""

# No ``from __future__ import annotations`` here: FastAPI reads the route functions'
# annotations at runtime, and they name classes defined inside create_app.
import argparse
import asyncio
import hmac
import os
import time
from typing import Any

from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.classifiers import QwenClassifier
from langchain_qwen_fast.errors import InvalidInputError, QwenFastError, ServerTimeoutError

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


class MicroBatcher:
    """Groups single texts that arrive together into one ``abatch`` call.

    The first text of a group waits at most ``max_wait`` seconds for company; a group closes
    at ``max_group`` texts. Groups run concurrently; each text's future gets its own result
    or exception.
    """

    def __init__(self, classifier: QwenClassifier, *, max_wait: float, max_group: int, on_group: Any = None) -> None:
        self.classifier = classifier
        self.max_wait = max_wait
        self.max_group = max_group
        self._on_group = on_group
        self._queue: asyncio.Queue[tuple[Any, asyncio.Future[Any]]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def classify(self, value: Any) -> "Classification":
        """The classification of one input, grouped with others arriving at the same time."""
        if self._queue is None or self._worker is None or self._worker.done():
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._collect(self._queue))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._queue.put((value, future))
        result: Classification = await future
        return result

    async def _collect(self, queue: asyncio.Queue[tuple[Any, asyncio.Future[Any]]]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            group = [await queue.get()]
            deadline = loop.time() + self.max_wait
            while len(group) < self.max_group:
                timeout = deadline - loop.time()
                if timeout <= 0:
                    break
                try:
                    group.append(await asyncio.wait_for(queue.get(), timeout))
                except asyncio.TimeoutError:
                    break
            task = asyncio.create_task(self._run(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, group: list[tuple[Any, asyncio.Future[Any]]]) -> None:
        if self._on_group is not None:
            self._on_group(len(group))
        results: list[Any]
        try:
            results = await self.classifier.abatch([value for value, _ in group], return_exceptions=True)
        except Exception as exc:  # the group itself failed: every caller hears why
            results = [exc] * len(group)
        for (_, future), result in zip(group, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)


def create_app(
    classifier: QwenClassifier,
    *,
    api_key: str | None = None,
    max_wait_ms: float = 2.0,
    max_group: int = 256,
) -> Any:
    """The FastAPI application serving ``classifier`` (see the module docstring)."""
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse, Response
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
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
        version=_version(),
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
        import socket
        import threading

        import uvicorn

        if not port:
            with socket.socket() as sock:
                sock.bind((host, 0))
                port = int(sock.getsockname()[1])
        self.url = f"http://{host}:{port}"
        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> "BackgroundService":
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the service did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)


def _version() -> str:
    from langchain_qwen_fast import __version__

    return __version__


def add_parser(sub: Any) -> None:
    """Add the ``api`` subcommand to the ``qwen-fast`` parser."""
    parser = sub.add_parser(
        "api",
        help="serve a classifier over HTTP (POST /v1/classify, /health, /metrics)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", help="a saved classifier (QwenClassifier.save's file or directory)")
    parser.add_argument("--base-url", help="the vLLM server(s), overriding the saved ones", nargs="+")
    parser.add_argument("--model", help="the served model name, overriding the saved one")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8080, help="port (default: %(default)s)")
    parser.add_argument(
        "--api-key-env",
        default="QWEN_FAST_API_KEY",
        help="environment variable holding the key clients must send (default: %(default)s; unset: no key)",
    )
    parser.add_argument("--max-wait-ms", type=float, default=2.0, help="how long a single text waits for company")
    parser.add_argument("--max-group", type=int, default=256, help="most single texts grouped into one call")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``qwen-fast api``."""
    import uvicorn

    overrides: dict[str, Any] = {}
    if args.base_url:
        overrides["base_url"] = args.base_url if len(args.base_url) > 1 else args.base_url[0]
    if args.model:
        overrides["model"] = args.model
    classifier = QwenClassifier.load(args.config, **overrides)
    app = create_app(
        classifier,
        api_key=os.environ.get(args.api_key_env) or None,
        max_wait_ms=args.max_wait_ms,
        max_group=args.max_group,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
