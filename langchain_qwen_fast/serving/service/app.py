"""The service's application: :class:`ClassifyService` does each route's work, and
:func:`create_app` wires it into FastAPI (routes, error handlers, the fast paths in front).

The work is reachable without an app: ``ClassifyService(classifier, options).respond(body,
deadline)`` is the answer to a valid ``POST /v1/classify``, and ``.decisions.respond(body,
deadline)`` to a valid ``POST /v1/decisions`` (:mod:`.decisions`), which both the fast paths
and FastAPI's routes give."""

# No ``from __future__ import annotations`` here: FastAPI reads the route functions'
# annotations at runtime, and the classify route's body is a model made per service.
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Annotated, Any

from pydantic import BaseModel

from langchain_qwen_fast._version import __version__
from langchain_qwen_fast.engine import EngineClassifier
from langchain_qwen_fast.errors import DeadlineExceeded, MissingDependencyError, Overloaded
from langchain_qwen_fast.serving.service.answers import (
    HTTPAnswer,
    RequestId,
    dumps,
    error_answer,
    log_failure,
    passed_on,
    render_list,
    result_body,
    service_error_answer,
)
from langchain_qwen_fast.serving.service.auth import APIKey
from langchain_qwen_fast.serving.service.decisions import (
    DECISIONS_PATH,
    DecisionService,
    DecisionsFastPath,
    media_problem,
)
from langchain_qwen_fast.serving.service.fast_path import DEADLINE, ClassifyFastPath
from langchain_qwen_fast.serving.service.metrics import ServiceMetrics
from langchain_qwen_fast.serving.service.micro_batcher import MicroBatcher
from langchain_qwen_fast.serving.service.options import ServiceOptions
from langchain_qwen_fast.serving.service.readiness import Readiness
from langchain_qwen_fast.serving.service.schema import (
    REQUEST_ID_HEADER,
    Decision,
    ErrorResponse,
    Health,
    Ready,
    answer_models,
    decision_error_answers,
    error_answers,
    request_model,
)


class ClassifyService:
    """The work behind the service's routes, over one classifier: the grouping line
    (:class:`MicroBatcher`), readiness, metrics and the answers; ``decisions`` answers
    ``POST /v1/decisions`` (:class:`DecisionService`). Made by :func:`create_app`; needs the
    ``api`` extra's prometheus-client."""

    def __init__(self, classifier: EngineClassifier, options: ServiceOptions) -> None:
        self.options = options
        self.prometheus = ServiceMetrics()
        engine = classifier.engine
        self.batcher = MicroBatcher(
            engine,
            max_wait=options.max_wait_ms / 1000,
            max_group=options.max_group,
            groups_in_flight=options.groups_in_flight,
            max_queued=options.max_queued_texts,
            on_group=self.prometheus.grouped,
        )
        self.readiness = Readiness(engine, self.batcher, options.ready_timeout)
        #: the body of ``POST /v1/classify`` under the options' limits
        self.request_type = request_model(options)
        self.decisions = DecisionService(classifier, options, self.batcher, self.prometheus)

    @contextlib.asynccontextmanager
    async def lifespan(self, _: Any) -> AsyncIterator[None]:
        """The app's lifespan: the line closes with it."""
        yield
        self.batcher.close()
        self.decisions.close()

    async def respond(self, body: Any, deadline: float) -> HTTPAnswer:
        """The answer to a valid ``POST /v1/classify``, by ``deadline`` (the event loop's
        clock), counted in the metrics."""
        start = time.perf_counter()
        single = not isinstance(body.input, list)
        request_id = RequestId()
        try:
            try:
                results = await self.batcher.classify_many([body.input] if single else body.input, deadline)
            except Overloaded as exc:
                answer = error_answer(exc, request_id)
            except TimeoutError:
                message = f"no answer within the request's deadline ({self.options.request_timeout:g} s)"
                answer = error_answer(DeadlineExceeded(message), request_id)
            else:
                answer = await self._answer(results, single, request_id)
        except Exception as exc:  # a bug: the client gets an id, the log the traceback
            log_failure(request_id(), exc)
            answer = service_error_answer(500, "InternalServerError", "the service failed", request_id())
        self.prometheus.answered("single" if single else "list", answer.status, time.perf_counter() - start)
        return answer

    async def _answer(self, results: list[Any], single: bool, request_id: RequestId) -> HTTPAnswer:
        """The answer to a request whose texts were classified (each a result or an error)."""
        for result in results:
            if isinstance(result, BaseException):
                self.prometheus.item_failed(result)
        if single:
            (result,) = results
            if isinstance(result, BaseException):
                return error_answer(result, request_id)
            return HTTPAnswer(200, dumps({"result": result_body(result)}), {})
        if results and all(passed_on(r) for r in results):
            # Nothing classified because the vLLM server asked for time: the client is told so.
            return error_answer(results[0], request_id)
        answer = HTTPAnswer(200, await render_list(results, request_id), {})
        if request_id.value is not None:
            answer.headers["x-request-id"] = request_id.value
        return answer

    # -- the routes -------------------------------------------------------------------------
    async def classify(self, body: Any, scope: Mapping[str, Any]) -> Any:
        """``POST /v1/classify`` through FastAPI's route (what the fast path hands on)."""
        deadline = scope.get(DEADLINE) or asyncio.get_running_loop().time() + self.options.request_timeout
        return _response(await self.respond(body, deadline))

    async def decide(self, body: Any, scope: Mapping[str, Any]) -> Any:
        """``POST /v1/decisions`` through FastAPI's route (what its fast path hands on)."""
        deadline = scope.get(DEADLINE) or asyncio.get_running_loop().time() + self.options.request_timeout
        return _response(await self.decisions.respond(body, deadline))

    async def health(self) -> Any:
        """Liveness: the service answers (it does not call the vLLM server; see /ready)."""
        return {"status": "ok"}

    async def ready(self) -> Any:
        """Readiness: the set-up with the vLLM server is done and a vLLM server answers, found out
        within the readiness timeout (answers are reused for a second)."""
        state = await self.readiness.state()
        if state.ready:
            return {"status": "ready", "replicas": self.readiness.replicas, "answering": state.answering}
        return _response(service_error_answer(503, "NotReady", f"not ready: {state.why_not}", RequestId()()))

    async def metrics(self) -> Any:
        """Prometheus metrics: requests, latency, group sizes, item errors."""
        from starlette.responses import Response

        page, content_type = self.prometheus.page()
        return Response(page, media_type=content_type)

    # -- every error in one shape, {"error": {"type", "message"}} ----------------------------
    async def invalid_request(self, request: Any, exc: Any) -> Any:
        """A body that breaks the request schema (FastAPI's ``RequestValidationError``): 422. An
        image or file part of a decisions request is named, rather than every part type the
        schema would take in its place."""
        self.prometheus.refused(422)
        named = media_problem(exc.body) if request.url.path == DECISIONS_PATH else None
        problems = named or "; ".join(f"{'.'.join(map(str, e['loc'][1:])) or 'body'}: {e['msg']}" for e in exc.errors())
        return _response(HTTPAnswer(422, dumps({"error": {"type": "InvalidInputError", "message": problems}}), {}))


async def http_error(request: Any, exc: Any) -> Any:
    """An HTTP error of Starlette's or FastAPI's (a missing key, an unknown path, ...)."""
    kind = HTTPStatus(exc.status_code).phrase.replace(" ", "")
    answer = HTTPAnswer(
        exc.status_code, dumps({"error": {"type": kind, "message": str(exc.detail)}}), exc.headers or {}
    )
    return _response(answer)


async def failed(request: Any, exc: Exception) -> Any:
    """Any other exception, a bug: the client gets an id, the log the traceback."""
    rid = RequestId()()
    log_failure(rid, exc)
    return _response(service_error_answer(500, "InternalServerError", "the service failed", rid))


def _response(answer: HTTPAnswer) -> Any:
    from starlette.responses import Response

    return Response(answer.body, status_code=answer.status, headers=answer.headers, media_type="application/json")


def missing_api_extra(exc: ImportError) -> MissingDependencyError:
    """The error for a missing package of the ``api`` extra."""
    return MissingDependencyError(
        f"the HTTP service needs the 'api' extra ({exc.name} is missing): pip install 'langchain-qwen-fast[api]'"
    )


def create_app(classifier: EngineClassifier, options: ServiceOptions | None = None) -> Any:
    """The FastAPI application serving ``classifier`` under ``options`` (see
    :class:`ServiceOptions`; its ``host``, ``port`` and ``workers`` are :func:`serve_api`'s).
    ``app.state.service`` is its :class:`ClassifyService`, ``app.state.batcher`` its line."""
    try:
        from fastapi import FastAPI
        from fastapi.exceptions import RequestValidationError
        from starlette.exceptions import HTTPException
    except ImportError as exc:
        raise missing_api_extra(exc) from exc
    options = options or ServiceOptions()
    service = ClassifyService(classifier, options)
    app = FastAPI(
        title="qwen-fast classification service",
        description=f"Labels: {', '.join(classifier.label_names)}",
        version=__version__,
        lifespan=service.lifespan,
    )
    app.state.service = service
    app.state.batcher = service.batcher  # for tests and operators: texts held now, their line
    app.add_exception_handler(RequestValidationError, service.invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, failed)
    _add_routes(app, service, classifier.label_names)
    app.add_middleware(
        ClassifyFastPath,
        respond=service.respond,
        key=options.key,
        options=options,
        request_type=service.request_type,
        on_refused=service.prometheus.refused,
    )
    app.add_middleware(
        DecisionsFastPath,
        respond=service.decisions.respond,
        key=options.key,
        options=options,
        request_type=service.decisions.request_type,
        on_refused=service.prometheus.refused,
    )
    return app


def _add_routes(app: Any, service: ClassifyService, label_names: list[str]) -> None:
    """The service's routes, as its OpenAPI document declares them."""
    from starlette.responses import Response

    options = service.options
    guarded = _key_guard(options.key)
    app.add_api_route("/health", service.health, methods=["GET"], response_model=Health)
    not_ready = {
        "model": ErrorResponse,
        "description": "Not ready (type NotReady): the set-up with the vLLM server is not done, or no vLLM "
        f"server answers, within {options.ready_timeout:g} s",
        "headers": {"x-request-id": REQUEST_ID_HEADER},
    }
    app.add_api_route("/ready", service.ready, methods=["GET"], response_model=Ready, responses={503: not_ready})
    page = {
        "description": "The metrics in the Prometheus text exposition format",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
    app.add_api_route("/metrics", service.metrics, methods=["GET"], dependencies=guarded, response_model=None,
                      response_class=Response, responses={200: page, **error_answers(options)})  # fmt: skip
    one_result, list_results = answer_models(label_names)
    app.add_api_route(
        "/v1/classify",
        _classify_route(service, service.request_type),
        methods=["POST"],
        dependencies=guarded,
        response_model=one_result | list_results,
        response_description="The one text's result, or each listed text's result or error, in order",
        responses=error_answers(options, 400, 408, 413, 422, 429, 500, 502, 503, 504),
    )
    app.add_api_route(
        DECISIONS_PATH,
        _decisions_route(service, service.decisions.request_type),
        methods=["POST"],
        dependencies=guarded,
        response_model=Decision,
        response_description="Each question's answer, in the questions' order (OpenAI's Decisions format)",
        responses=decision_error_answers(options),
    )


def _decisions_route(service: ClassifyService, body_model: type[BaseModel]) -> Callable[..., Awaitable[Any]]:
    """``POST /v1/decisions``' route function, its body's model made for this service's limits."""
    from starlette.requests import Request

    async def decisions(body: body_model, request: Request) -> Any:  # type: ignore[valid-type]
        """Answer predicate, choice and score questions about an input (text, messages, tool calls and
        outputs), in OpenAI's Decisions wire format."""
        return await service.decide(body, request.scope)

    return decisions


def _classify_route(service: ClassifyService, body_model: type[BaseModel]) -> Callable[..., Awaitable[Any]]:
    """``POST /v1/classify``'s route function: FastAPI reads the body's model from its
    annotation, made for this service's limits."""
    from starlette.requests import Request

    async def classify(body: body_model, request: Request) -> Any:  # type: ignore[valid-type]
        """Classify one text or a list; a list keeps each bad item's error in its place."""
        return await service.classify(body, request.scope)

    return classify


def _key_guard(key: APIKey | None) -> list[Any]:
    """The routes' dependencies that check the key (none without one): FastAPI's
    ``HTTPBearer``, so that the document names the scheme."""
    from fastapi import Depends, HTTPException
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

    if key is None:
        return []
    bearer = HTTPBearer(auto_error=False, description="The service's API key, as a bearer token")

    def authorise(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        if not key.matches_token(credentials.credentials if credentials is not None else None):
            raise HTTPException(
                status_code=401, detail="missing or wrong API key", headers={"WWW-Authenticate": "Bearer"}
            )

    return [Depends(authorise)]


__all__ = ["ClassifyService", "create_app", "missing_api_extra"]
