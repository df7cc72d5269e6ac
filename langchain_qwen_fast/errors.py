"""Typed errors, and the one rule that says whose failure each one is.

Every error this package raises is a :class:`QwenFastError` defined here. None ever carries
the API key. (:class:`CarriedError`, also here, is never raised: a row's error as a job's
other process receives it.) The tree::

    QwenFastError
    ├── InvalidInputError (ValueError)        the item's own: empty, not text, too long, ...
    │   ├── ContextLengthError                 does not fit the server's context window
    │   └── RequestTooLargeError               a service request's body past its limit
    ├── LabelParseError                        the model's reply maps to no label
    ├── AbstainedError                         the best answer fell under ``abstain_below``
    ├── DataFileError (ValueError)             a data file that cannot be read as asked
    ├── TransportError                         the servers, or the way to them
    │   ├── ServerConnectionError              refused, reset, closed early
    │   ├── ServerTimeoutError                 no answer within the timeout
    │   └── ServerStatusError                  an HTTP error status
    ├── ResponseFormatError                    a reply that is not the JSON asked for
    ├── ConfigurationError (ValueError)        options that cannot work (together)
    ├── MissingDependencyError (ImportError)   an optional extra is not installed
    ├── ServerStartError (RuntimeError)        a server that did not come up
    ├── MeasurementError (RuntimeError)        a benchmark that could not measure
    ├── Overloaded                             the service holds too much to take a request
    ├── DeadlineExceeded (TimeoutError)        a service request's deadline passed
    ├── RecordedError                          a job's row error, read back from its output
    └── JobStopped                             a job stopped before its end
        ├── InfrastructureFailure              ... because the servers failed
        ├── TooManyInputErrors                 ... because too many rows were bad
        └── JobInterrupted                     ... because it was interrupted (Ctrl-C)

The failure rule (:func:`blame`, :func:`is_input_error`, :func:`is_retryable`,
:func:`splits_group`) is the only place that decides what an error means. The transport
retries by it, the request procedure splits a refused group by it, the jobs write an item's
error in place or stop by it, the service picks its HTTP status by it, the router routes by
it and the chat model translates its SDK's errors into this tree before it applies.
"""

from __future__ import annotations

from typing import Literal

#: HTTP statuses by which a server refuses a request for its own content (the request, its
#: size, a value in it). Only these say that one of a group's prompts is bad; 401, 403, 404
#: and the like are the same for every prompt.
REQUEST_STATUSES = frozenset({400, 413, 422})

Blame = Literal["input", "infrastructure"]


def is_retryable_status(status_code: int) -> bool:
    """The one retry rule for HTTP answers: 429 and 5xx may pass on retry; any other 4xx is the
    request's own fault and will fail again."""
    return status_code == 429 or status_code >= 500


def blame(error: BaseException) -> Blame:
    """Whose failure ``error`` is.

    ``"input"``: the item's own, the same on any server and any try (an input that cannot be
    classified, a reply that names no label, a data row that cannot be read, a request the
    server refused for its content). A batch keeps it in the item's place, a job writes it in
    the row, the service answers 4xx, the router sends the item to its default branch.

    ``"infrastructure"``: the servers', the way to them, or this package's own (unreachable,
    timing out, an error status other than a refusal of content, a reply that cannot be read):
    it says nothing about the item and may pass later. A job stops on it, the service answers
    5xx, the router raises it.
    """
    if isinstance(error, ServerStatusError):
        return "input" if error.status_code in REQUEST_STATUSES else "infrastructure"
    if isinstance(error, (InvalidInputError, LabelParseError, DataFileError, AbstainedError)):
        return "input"
    return "infrastructure"


def is_input_error(error: BaseException) -> bool:
    """Whether ``error`` is the item's own (:func:`blame` is ``"input"``)."""
    return blame(error) == "input"


def is_retryable(error: BaseException) -> bool:
    """Whether another try of the same request may pass: a failed connection, a timeout, 429 or
    5xx. Never an error of the input, nor a reply that could not be read."""
    if isinstance(error, ServerStatusError):
        return is_retryable_status(error.status_code)
    return isinstance(error, (ServerConnectionError, ServerTimeoutError))


def splits_group(error: BaseException) -> bool:
    """Whether a group of prompts refused with ``error`` should be split to find the bad one:
    only a refusal of the request's content does (any other answer would be the same for every
    part, and splitting would only multiply the requests)."""
    return isinstance(error, ServerStatusError) and error.status_code in REQUEST_STATUSES


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


class RequestTooLargeError(InvalidInputError):
    """A service request's body passed the service's size limit (while it streamed in)."""


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


class DeadlineExceeded(QwenFastError, TimeoutError):
    """A request's deadline passed before its texts were answered (its texts left the line)."""


class Overloaded(QwenFastError):
    """The service holds too many texts to take a request's: refused whole, nothing queued.

    Attributes:
        queued: texts waiting or in flight when the request came.
        limit: the most the service holds.
        retry_after: whole seconds the caller should wait before trying again.
    """

    def __init__(self, *, asked: int, queued: int, limit: int, retry_after: int) -> None:
        super().__init__(
            f"the service holds {queued} texts (at most {limit}) and cannot take {asked} more; "
            f"retry after {retry_after} s"
        )
        self.queued = queued
        self.limit = limit
        self.retry_after = retry_after


class AbstainedError(QwenFastError):
    """A decision model abstained: a question's best answer fell under ``abstain_below``. The
    LangChain decision models raise it as LangChain's ``ModelRefusalError`` too."""


class RecordedError(QwenFastError):
    """A job's row error, read back from the row's ``error`` column: counted under the kind (the
    error's type name) its text begins with."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.kind = text.split(":", 1)[0]


class CarriedError(Exception):
    """A row's error as another process of the job gets it: its kind (:attr:`kind`, as the
    counts name it) and how its ``error`` column reads (:attr:`text`), whatever its type."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(kind, text)
        self.kind = kind
        self.text = text

    def __str__(self) -> str:
        return self.text


class JobStopped(QwenFastError):
    """The job stopped before its end. Its work folder keeps every chunk finished before the
    one that stopped it, which is not written. ``exit_code``: ``qwen-fast classify``'s."""

    exit_code = 3


class InfrastructureFailure(JobStopped):
    """The servers (or the way to them) failed: the set-up, or a row after the retries. Run
    again when they answer, the job carries on from its last whole chunk."""

    exit_code = 3


class TooManyInputErrors(JobStopped):
    """More rows failed for their input than ``max_error_rate`` allows, or a chunk's rows all
    failed alike (a systematic error): fix the input or options, or allow more errors."""

    exit_code = 4


class JobInterrupted(JobStopped):
    """The job was interrupted (``KeyboardInterrupt``: Ctrl-C, or a signal the application turns
    into one) and stopped cleanly: the commits under way were finished or left no trace, its
    table process ended and its work folder's lock was let go. It is raised in place of the
    interrupt so that a caller learns what is kept, which a bare ``KeyboardInterrupt`` cannot
    say. ``exit_code``: the shell's for Ctrl-C (128 + SIGINT).

    Attributes:
        rows: the rows the work folder holds committed (an earlier run's included): the same
            job, run again, carries on after them.
        folder: the work folder.
    """

    exit_code = 130

    def __init__(self, *, rows: int, folder: str) -> None:
        #: what is kept, in words: the message's, and the phrase ``qwen-fast classify`` prints
        self.saved = f"{rows} {'row is' if rows == 1 else 'rows are'} saved in {folder}" if rows else "no row is saved"
        super().__init__(f"interrupted: {self.saved}")
        self.rows = rows
        self.folder = folder
