"""The raw-ASGI fast path in front of FastAPI for ``POST /v1/classify``: the key and the
body's size checked before the body is read, the body read within its limit and the request's
deadline, and the common request answered without FastAPI's routing, dependency and validation
layers, most of a small request's CPU in the service (docs/performance.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, TypeAdapter

from langchain_qwen_fast.errors import RequestTooLargeError
from langchain_qwen_fast.serving.service.answers import HTTPAnswer, RequestId, error_answer, service_error_answer
from langchain_qwen_fast.serving.service.auth import APIKey
from langchain_qwen_fast.serving.service.options import ServiceOptions
from langchain_qwen_fast.serving.service.schema import request_model

#: Bodies at least this large are parsed in a worker thread, so that the event loop keeps
#: answering other clients meanwhile. Parsing straight from the bytes (pydantic's own JSON
#: parser) takes a small fraction of a thread's hand-off for a list of the default size, so
#: only a body of several such lists goes to a thread.
PARSE_IN_THREAD_BYTES = 1024 * 1024
#: The scope key under which the fast path hands a request's deadline to FastAPI's route.
DEADLINE = "qwen_fast.deadline"


class ClassifyFastPath:
    """ASGI middleware in front of FastAPI for ``POST /v1/classify``.

    Checked in this order, each answered at once: the key (401, with the body unread), the
    ``Content-Length`` (413), the bytes as they stream in (413 as soon as they pass the limit;
    the rest is never read), the deadline while reading (408). The refusals close the
    connection, so that an unread body is not read to find the next request.

    Then a JSON body (``application/json``) that the route's model accepts is answered here
    with the route's own procedure (``respond``). Every other request (another path or method,
    another content type, a body that is not JSON or breaks the schema) goes on to FastAPI,
    body and all, which answers it as the OpenAPI document says. A large body is parsed in a
    worker thread. ``on_refused`` hears the status of each refusal but 401's."""

    def __init__(
        self,
        app: Any,
        respond: Callable[[Any, float], Awaitable[HTTPAnswer]],
        key: APIKey | None = None,
        options: ServiceOptions | None = None,
        request_type: type[BaseModel] | None = None,
        on_refused: Callable[[int], object] | None = None,
    ) -> None:
        self.app = app
        self._respond = respond
        self._key = key
        self._options = options or ServiceOptions()
        self._request = TypeAdapter(request_type or request_model(self._options))
        self._on_refused = on_refused

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/v1/classify":
            await self.app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self._options.request_timeout
        content_type, authorization, length = _headers(scope)
        if self._key is not None and not self._key.matches(authorization):
            await self._refuse(send, 401, "Unauthorized", "missing or wrong API key", {"www-authenticate": "Bearer"})
            return
        if length is not None and length.strip().isdigit() and int(length) > self._options.max_body_bytes:
            await self._send_refusal(send, error_answer(self._too_large(), RequestId()))
            return
        try:
            async with asyncio.timeout_at(deadline):
                body = await self._read(receive)
        except RequestTooLargeError as exc:
            await self._send_refusal(send, error_answer(exc, RequestId()))
            return
        except TimeoutError:
            message = f"the body did not arrive within the request's deadline ({self._options.request_timeout:g} s)"
            await self._refuse(send, 408, "RequestTimeout", message)
            return
        if body is None:  # the client went away
            return
        scope[DEADLINE] = deadline
        request = await self._parse_json(content_type, body)
        if request is not None:
            await send_answer(send, await self._respond(request, deadline))
            return
        await self.app(scope, _replaying(body, receive), send)

    async def _parse_json(self, content_type: bytes | None, body: bytes) -> Any:
        """The request a JSON body holds, or None where FastAPI should answer it (another
        content type, not JSON, or against the schema)."""
        if content_type is None or content_type.split(b";")[0].strip().lower() != b"application/json":
            return None
        if len(body) >= PARSE_IN_THREAD_BYTES:
            return await asyncio.to_thread(self._parse, body)
        return self._parse(body)

    def _parse(self, body: bytes) -> Any:
        """The request the body holds, or None where FastAPI should answer it (not JSON, or
        against the schema)."""
        try:
            return self._request.validate_json(body)
        except Exception:
            return None

    async def _read(self, receive: Any) -> bytes | None:
        """The body, or None when the client went away; :class:`RequestTooLargeError` as soon
        as it passes the limit, before more is read."""
        chunks = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._options.max_body_bytes:
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    def _too_large(self) -> RequestTooLargeError:
        return RequestTooLargeError(f"the body is over the service's limit of {self._options.max_body_bytes} bytes")

    async def _refuse(
        self, send: Any, status: int, kind: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        await self._send_refusal(send, service_error_answer(status, kind, message, headers=headers))

    async def _send_refusal(self, send: Any, answer: HTTPAnswer) -> None:
        if self._on_refused is not None and answer.status != 401:
            self._on_refused(answer.status)
        await send_answer(send, answer._replace(headers={**answer.headers, "connection": "close"}))


def _headers(scope: dict[str, Any]) -> tuple[bytes | None, bytes | None, bytes | None]:
    """The request's ``Content-Type``, ``Authorization`` and ``Content-Length``, each None when absent."""
    content_type = authorization = length = None
    for name, value in scope["headers"]:
        if name == b"content-type":
            content_type = value
        elif name == b"authorization":
            authorization = value
        elif name == b"content-length":
            length = value
    return content_type, authorization, length


async def send_answer(send: Any, answer: HTTPAnswer) -> None:
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


__all__ = ["DEADLINE", "ClassifyFastPath", "send_answer"]
