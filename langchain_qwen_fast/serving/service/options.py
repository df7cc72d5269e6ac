"""The service's options: one dataclass that ``qwen-fast api`` builds from its flags (named
after its fields, with its defaults), :func:`~langchain_qwen_fast.serving.service.create_app`
takes, and :func:`~langchain_qwen_fast.serving.service.serve_api` hands to each worker process
whole. Standard library only, so that ``qwen-fast api --help`` imports nothing else."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving.service.auth import APIKey

#: The largest request body by default, in bytes (TEI's ``--payload-limit`` is of this order).
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: The most texts in one request by default (TEI's ``--max-client-batch-size`` is the same idea).
DEFAULT_MAX_TEXTS = 1024
#: The most texts in one group by default: a full list of the default size goes as one group
#: (the classifier sends it as requests of 128 prompts, several in flight), and one call of
#: that many texts costs the classifier less CPU a text than several smaller calls do.
DEFAULT_MAX_GROUP = DEFAULT_MAX_TEXTS
#: The most characters in one text by default: room for the longest contexts Qwen3 is served
#: with; a text's length in tokens is still the vLLM server's to judge (422 ContextLengthError).
DEFAULT_MAX_TEXT_CHARS = 65_536
#: Texts waiting or in flight by default, over all requests: beyond it a request is refused
#: at once (the service answers 429) rather than queued behind work it would wait minutes for.
DEFAULT_MAX_QUEUED_TEXTS = 4096
#: A request's deadline by default, in seconds, from its arrival to its answer.
DEFAULT_REQUEST_TIMEOUT = 60.0
#: The most seconds ``GET /ready`` takes by default.
DEFAULT_READY_TIMEOUT = 2.0
#: The most questions in one ``POST /v1/decisions`` request by default: each is a prompt of
#: its own, so a request's questions take that many places in the line.
DEFAULT_MAX_QUESTIONS = 64
#: The most choices of a choice question, or levels of a score, by default (OpenAI's
#: Decisions API takes 2 to 255 choices).
DEFAULT_MAX_CHOICES = 255

#: The options that must be whole numbers of at least 1.
_COUNTS = (
    "max_group",
    "workers",
    "max_body_bytes",
    "max_texts",
    "max_text_chars",
    "max_queued_texts",
    "max_questions",
    "max_choices",
)
#: The options that must be positive numbers of seconds.
_SECONDS = ("request_timeout", "ready_timeout")


@dataclass(frozen=True)
class ServiceOptions:
    """How the service listens, groups texts, and what it takes; checked when made (a
    :class:`ConfigurationError` names the option).

    The limits are each declared in the OpenAPI document and checked before any work:
    ``max_body_bytes`` a body (413), ``max_texts`` a list and ``max_text_chars`` a text (422),
    ``max_queued_texts`` waiting or in flight over all requests, a worker (429 with
    ``Retry-After``), ``request_timeout`` seconds from a request's arrival to its answer (504),
    ``ready_timeout`` seconds for ``GET /ready``. ``POST /v1/decisions`` takes at most
    ``max_questions`` questions (each a prompt, counted against ``max_queued_texts``, which
    bounds them too: :attr:`questions_allowed`), each
    with at most ``max_choices`` choices or levels (422), and its input rendered as text at most
    ``max_text_chars`` characters (422).
    """

    #: Clients must send it as a bearer token (an empty key is refused; None: no key). Never
    #: in a repr; ``qwen-fast api`` reads it from the environment or a file.
    api_key: str | None = dataclasses.field(default=None, repr=False)
    #: The address to bind (another than loopback without a key is warned about).
    host: str = "127.0.0.1"
    port: int = 8080
    #: Processes serving the port, each with its own classifier, grouping and line.
    workers: int = 1
    #: How long a group's first text waits for company, in milliseconds (0: it goes at once
    #: when a group slot is free).
    max_wait_ms: float = 0.0
    #: The most texts grouped into one call (single texts and lists' alike).
    max_group: int = DEFAULT_MAX_GROUP
    #: Groups sent to vLLM at once (None: two a vLLM server, shared among the workers).
    groups_in_flight: int | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_texts: int = DEFAULT_MAX_TEXTS
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    max_queued_texts: int = DEFAULT_MAX_QUEUED_TEXTS
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    ready_timeout: float = DEFAULT_READY_TIMEOUT
    #: ``POST /v1/decisions``: the most questions a request (each one prompt).
    max_questions: int = DEFAULT_MAX_QUESTIONS
    #: ``POST /v1/decisions``: the most choices of a choice question, or levels of a score.
    max_choices: int = DEFAULT_MAX_CHOICES

    def __post_init__(self) -> None:
        if self.api_key is not None:
            APIKey(self.api_key)  # an empty key fails here, before anything starts
        for name in _COUNTS:
            if getattr(self, name) < 1:
                raise ConfigurationError(f"{name} must be 1 or more, not {getattr(self, name)}")
        if self.groups_in_flight is not None and self.groups_in_flight < 1:
            raise ConfigurationError(f"groups_in_flight must be 1 or more, not {self.groups_in_flight}")
        for name in _SECONDS:
            if not getattr(self, name) > 0:
                raise ConfigurationError(f"{name} must be a positive number of seconds, not {getattr(self, name)}")
        if self.max_queued_texts < self.max_texts:
            raise ConfigurationError(
                f"max_queued_texts ({self.max_queued_texts}) must be at least max_texts ({self.max_texts}): "
                "a full list could never be taken"
            )
        if self.max_choices < 2:
            raise ConfigurationError(f"max_choices must be 2 or more (a choice needs two), not {self.max_choices}")

    @property
    def questions_allowed(self) -> int:
        """The most questions a decisions request may ask: ``max_questions``, and no more than
        ``max_queued_texts``, since a request of more prompts could never be taken."""
        return min(self.max_questions, self.max_queued_texts)

    @property
    def key(self) -> APIKey | None:
        """The key, held so that no repr, log or error shows it (None: a service without one)."""
        return APIKey(self.api_key) if self.api_key is not None else None


__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CHOICES",
    "DEFAULT_MAX_GROUP",
    "DEFAULT_MAX_QUESTIONS",
    "DEFAULT_MAX_QUEUED_TEXTS",
    "DEFAULT_MAX_TEXTS",
    "DEFAULT_MAX_TEXT_CHARS",
    "DEFAULT_READY_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "ServiceOptions",
]
