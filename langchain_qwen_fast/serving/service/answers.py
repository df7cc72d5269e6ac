"""What the service answers for each outcome: the HTTP status an error gets (by the package's
failure rule, :func:`~langchain_qwen_fast.errors.blame`), the error body, and a result or a
list of results rendered as JSON.

The status of an error: the service's own refusals have theirs (a body over the limit 413, a
full line 429, a passed deadline 504); an upstream 429 or 503 is passed on with its
``Retry-After`` (the vLLM server asked for time); otherwise an error of the input answers 422
and one of the infrastructure 502 (504 for a vLLM server that did not answer in time). Anything
that is not a :class:`~langchain_qwen_fast.errors.QwenFastError` is a bug: 500.

An error the package found in the text itself (an :class:`InvalidInputError`) keeps its message,
which says what is wrong with the text; any other says what failed in plain words and carries a
request id (also the ``x-request-id`` header) in place of the details, which go to the log
under that id: upstream addresses and messages stay there.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from langchain_qwen_fast.errors import (
    DeadlineExceeded,
    InvalidInputError,
    LabelParseError,
    Overloaded,
    QwenFastError,
    RequestTooLargeError,
    ResponseFormatError,
    ServerConnectionError,
    ServerStatusError,
    ServerTimeoutError,
    is_input_error,
)

if TYPE_CHECKING:
    from langchain_qwen_fast.classification import Classification

logger = logging.getLogger(__name__)

#: Results of a list rendered between two turns of the event loop.
RENDER_SLICE = 256

#: The statuses of the service's own refusals, and the error types their bodies name.
_REFUSALS: dict[type[QwenFastError], tuple[int, str]] = {
    RequestTooLargeError: (413, "PayloadTooLarge"),
    Overloaded: (429, "Overloaded"),
    DeadlineExceeded: (504, "DeadlineExceeded"),
}


class HTTPAnswer(NamedTuple):
    """An answer, rendered: status, JSON body and headers."""

    status: int
    body: bytes
    headers: dict[str, str]


def dumps(value: Any) -> bytes:
    """JSON as Starlette's ``JSONResponse`` renders it, so both paths answer the same bytes."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


class RequestId:
    """A request's id, made the first time an answer needs one."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: str | None = None

    def __call__(self) -> str:
        if self.value is None:
            self.value = secrets.token_hex(8)
        return self.value


def passed_on(exc: BaseException) -> bool:
    """An upstream 429 or 503: the vLLM server asked for time, and the client is told so."""
    return isinstance(exc, ServerStatusError) and exc.status_code in (429, 503)


def error_status(exc: BaseException) -> int:
    """The HTTP status for a request's (or a single text's) error."""
    for kind, (status, _) in _REFUSALS.items():
        if isinstance(exc, kind):
            return status
    if isinstance(exc, ServerStatusError) and passed_on(exc):
        return exc.status_code
    if not isinstance(exc, QwenFastError):
        return 500
    if is_input_error(exc):
        return 422
    if isinstance(exc, ServerTimeoutError):
        return 504
    return 502  # the server failed, or answered what cannot be read


def error_type(exc: BaseException) -> str:
    """The error's kind as its body names it: its class, or the refusal's HTTP name."""
    for kind, (_, name) in _REFUSALS.items():
        if isinstance(exc, kind):
            return name
    return type(exc).__name__


def keeps_message(exc: BaseException) -> bool:
    """Whether the answer shows the error's own message: only for what the service or the
    classifier found in the request itself (its message names no internals)."""
    return isinstance(exc, (InvalidInputError, Overloaded))


def error_body(exc: BaseException, request_id: str | None = None) -> dict[str, Any]:
    """An error as JSON: its type and message (see the module docstring)."""
    body = {"type": error_type(exc), "message": str(exc) if keeps_message(exc) else _plain(exc)}
    if request_id is not None and not keeps_message(exc):
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


def result_body(result: Classification | BaseException, request_id: str | None = None) -> dict[str, Any]:
    """One item's answer: the classification's fields, or its error."""
    if isinstance(result, BaseException):
        return error_body(result, request_id)
    return result.model_dump(mode="json", exclude_none=True)


def service_error_answer(
    status: int, kind: str, message: str, request_id: str | None = None, headers: dict[str, str] | None = None
) -> HTTPAnswer:
    """An error answer of the service's own, of no error class (a missing key, a body that
    did not arrive, a service that is not ready, a bug)."""
    error: dict[str, Any] = {"type": kind, "message": message}
    headers = dict(headers or {})
    if request_id is not None:
        error["request_id"] = request_id
        headers["x-request-id"] = request_id
    return HTTPAnswer(status, dumps({"error": error}), headers)


def error_answer(exc: BaseException, request_id: RequestId) -> HTTPAnswer:
    """A request's (or a single text's) error as its answer; a failure that is not the
    request's own goes to the log in full under a request id, and the answer carries only the
    id. A passed deadline carries an id too, with nothing to log."""
    status = error_status(exc)
    if isinstance(exc, Overloaded):
        return HTTPAnswer(status, dumps(error_body(exc)), {"retry-after": str(exc.retry_after)})
    if keeps_message(exc):
        return HTTPAnswer(status, dumps(error_body(exc)), {})
    if isinstance(exc, DeadlineExceeded):
        return service_error_answer(status, error_type(exc), str(exc), request_id())
    rid = request_id()
    log_failure(rid, exc)
    headers = {"x-request-id": rid}
    if isinstance(exc, ServerStatusError) and passed_on(exc) and exc.retry_after is not None:
        headers["retry-after"] = str(math.ceil(exc.retry_after))
    return HTTPAnswer(status, dumps(error_body(exc, rid)), headers)


def log_failure(request_id: str, exc: BaseException, count: int = 1) -> None:
    """Log a failure under the request id its answer gives: ours as a warning, anything else
    (a bug) as an error with its traceback."""
    times = f" ({count} texts)" if count > 1 else ""
    if isinstance(exc, QwenFastError):
        logger.warning("request %s: %s%s: %s", request_id, type(exc).__name__, times, exc)
    else:
        logger.error("request %s: %s%s", request_id, type(exc).__name__, times, exc_info=exc)


async def render_list(results: Sequence[Any], request_id: RequestId) -> bytes:
    """``{"results": [...]}`` for a list, a slice at a time with the event loop's other work
    between slices, so that a long list does not hold up other clients; each distinct failure
    that is not the text's own is logged once under the request id. The classifications of a
    slice are serialised together by pydantic (one call for a run of them, not a dict and a
    ``json.dumps`` a text); an error between them is rendered as :func:`error_body` says."""
    from langchain_qwen_fast.classification import Classification

    failures: dict[tuple[str, str], tuple[BaseException, int]] = {}
    parts: list[bytes] = []
    run: list[Classification] = []
    for start in range(0, len(results), RENDER_SLICE):
        if start:
            await asyncio.sleep(0)
        for result in results[start : start + RENDER_SLICE]:
            if type(result) is Classification:
                run.append(result)
                continue
            if run:
                parts.append(_classifications(run))
                run = []
            rid = None
            if isinstance(result, BaseException) and not keeps_message(result):
                rid = request_id()
                key = (type(result).__name__, str(result))
                failures[key] = (result, failures.get(key, (result, 0))[1] + 1)
            parts.append(dumps(result_body(result, rid)))
        if run:
            parts.append(_classifications(run))
            run = []
    for exc, count in failures.values():
        log_failure(request_id(), exc, count)
    return b'{"results":[' + b",".join(parts) + b"]}"


@functools.cache
def _classifications_adapter() -> Any:
    from pydantic import TypeAdapter

    from langchain_qwen_fast.classification import Classification

    return TypeAdapter(list[Classification])


def _classifications(run: list[Classification]) -> bytes:
    """Classifications as the items of a JSON array (without its brackets), each as
    :func:`result_body` has it: its fields, none of them null."""
    rendered: bytes = _classifications_adapter().dump_json(run, exclude_none=True)
    return rendered[1:-1]


__all__ = [
    "HTTPAnswer",
    "RequestId",
    "dumps",
    "error_answer",
    "error_body",
    "error_status",
    "log_failure",
    "passed_on",
    "render_list",
    "result_body",
    "service_error_answer",
]
