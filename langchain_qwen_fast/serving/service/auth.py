"""The service's API key: held so that it shows nowhere, compared in constant time."""

from __future__ import annotations

import hmac
from typing import Any

from langchain_qwen_fast.errors import ConfigurationError


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


__all__ = ["APIKey"]
