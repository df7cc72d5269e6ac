"""Typed errors. Every error names the problem; none ever carries the API key."""

from __future__ import annotations


def is_retryable_status(status_code: int) -> bool:
    """The one retry rule for HTTP answers: 429 and 5xx may pass on retry; any other 4xx is the
    request's own fault and will fail again."""
    return status_code == 429 or status_code >= 500


class QwenFastError(Exception):
    """Base class of every error this package raises."""

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled with its attributes (errors come back from client processes): the default
        # calls ``cls(*args)``, which fails for errors with keyword-only fields.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[QwenFastError], args: tuple[object, ...], state: dict[str, object]) -> QwenFastError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class InvalidInputError(QwenFastError, ValueError):
    """An input cannot be classified (empty, not text, too long, ...); no request was sent."""


class ContextLengthError(InvalidInputError):
    """The text does not fit in the server's context window."""

    def __init__(self, message: str, *, tokens: int, limit: int) -> None:
        super().__init__(message)
        self.tokens = tokens
        self.limit = limit


class TransportError(QwenFastError):
    """The server could not be reached or answered with an error (after any retries)."""


class ServerConnectionError(TransportError):
    """Connecting to or talking with the server failed (refused, reset, closed early)."""


class ServerTimeoutError(TransportError):
    """The server did not answer within the request timeout."""


class ServerStatusError(TransportError):
    """The server answered with an HTTP error status.

    Attributes:
        status_code: the HTTP status.
        retry_after: seconds the server asked us to wait (``Retry-After``), if any.
    """

    def __init__(self, message: str, *, status_code: int, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """429 and 5xx may pass on retry; other 4xx are the request's fault and will not."""
        return is_retryable_status(self.status_code)


class ResponseFormatError(QwenFastError):
    """The server's reply was not the JSON we asked for (malformed, truncated, fields missing)."""


class LabelParseError(QwenFastError):
    """The model's reply maps to no label. We never guess a label."""

    def __init__(self, message: str, *, reply: str) -> None:
        super().__init__(message)
        self.reply = reply


class ConfigurationError(QwenFastError, ValueError):
    """Options that cannot work, or cannot work together (named in the message); nothing was run."""


class DataFileError(QwenFastError, ValueError):
    """A data file cannot be read as asked: missing, an unknown format or column, a bad row."""


class MissingDependencyError(QwenFastError, ImportError):
    """A tool needs an optional extra that is not installed; the message names the extra."""


class ServerStartError(QwenFastError, RuntimeError):
    """A server (vLLM, the router or the MPS daemon) exited or did not become healthy in time."""


class MeasurementError(QwenFastError, RuntimeError):
    """A benchmark could not measure what it was asked to: requests failed during a timed run,
    or a measuring subprocess exited with an error (the message gives its output)."""
