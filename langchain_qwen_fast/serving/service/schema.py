"""The service's OpenAPI models: the request body under the service's limits, the answers
under the classifier's labels, and what each error status means. A client generated from the
document they make knows every constraint the service enforces and every status it answers.

Pydantic models only: FastAPI reads them to build ``/openapi.json``, the fast path validates
bodies with the same request model."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WithJsonSchema, create_model

from langchain_qwen_fast._core.prompting import Scoring
from langchain_qwen_fast.serving.service.options import ServiceOptions

#: A character that is not whitespace by ``str.isspace``, what ``validate_text`` strips: a text
#: must hold one. Spelled out, not ``\\S``, since each regex engine (ECMAScript, Rust, Python) has
#: its own ``\\s``; a unit test checks it against every code point.
NON_BLANK = r"[^\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"

RETRY_AFTER_HEADER = {
    "schema": {"type": "integer", "minimum": 0},
    "description": "Seconds to wait before trying again",
}
REQUEST_ID_HEADER = {"schema": {"type": "string"}, "description": "The id the service's log gives the details under"}
WWW_AUTHENTICATE_HEADER = {"schema": {"type": "string"}, "description": "Bearer: send the key so"}


def request_model(options: ServiceOptions) -> type[BaseModel]:
    """The body of ``POST /v1/classify`` under ``options``' limits (the OpenAPI document's
    ``maxItems`` and ``maxLength``)."""
    Text = Annotated[
        str,
        Field(
            min_length=1,
            max_length=options.max_text_chars,
            pattern=NON_BLANK,
            description="One text, with at least one character that is not whitespace. It must also fit in "
            "the vLLM server's context beside the prompt, a token count that no schema can state: a longer "
            "one is answered 422 ContextLengthError.",
        ),
    ]
    Item = Annotated[str, Field(max_length=options.max_text_chars)]
    Texts = Annotated[list[Item], Field(max_length=options.max_texts)]

    class ClassifyRequest(BaseModel):
        """The body of POST /v1/classify."""

        input: Text | Texts = Field(
            description="One text, or a list of texts answered 200 in order, each with its result or, when it "
            "cannot be classified (empty, whitespace only, too long for the server), its error in its place"
        )

    return ClassifyRequest


class Error(BaseModel):
    type: str = Field(description="The error's kind, e.g. InvalidInputError or ServerStatusError")
    message: str = Field(description="What went wrong, in words")
    request_id: str | None = Field(
        default=None, description="On a failure of the service or the vLLM server: the log's id for its details"
    )


class ErrorResponse(BaseModel):
    """Every error answer's body."""

    error: Error


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready"]
    replicas: int = Field(ge=1, description="The vLLM servers the classifier spreads its requests over")
    answering: int = Field(ge=1, description="Those that answered the readiness check")


def answer_models(label_names: list[str]) -> tuple[type[BaseModel], type[BaseModel]]:
    """The answers to one text and to a list, for the OpenAPI document: the classifier's labels
    are their labels' enum. The model of one text's answer is made under the name
    ``Classification``, the document's name for it: it is a
    :class:`~langchain_qwen_fast.classification.Classification` on the wire, its labels named."""
    LabelName = Annotated[str, WithJsonSchema({"type": "string", "enum": list(label_names)})]
    Probability = Annotated[float, Field(ge=0, le=1)]
    fields: dict[str, Any] = {
        "label": (
            LabelName | None,
            Field(default=None, description="The chosen label; absent when abstained, or when no label passed"),
        ),
        "labels": (list[LabelName], Field(description="Every chosen label (several under multi-label)")),
        "scores": (
            dict[LabelName, Probability] | None,
            Field(default=None, description="Each label's probability; absent under constrained choice"),
        ),
        "abstained": (bool, Field(description="The best probability was under the classifier's abstain_below")),
        "scoring": (Scoring, Field(description="How the labels were read")),
        "multi_label": (bool, Field(description="Several labels may apply")),
        "path": (list[LabelName] | None, Field(default=None, description="Hierarchical labels: each level's label")),
        "path_scores": (
            list[dict[LabelName, Probability]] | None,
            Field(default=None, description="Hierarchical labels: each level's probabilities"),
        ),
    }
    labelled = create_model("Classification", **fields)

    class OneResult(BaseModel):
        result: labelled = Field(description="The answer for the one text")  # type: ignore[valid-type]

    class ListResults(BaseModel):
        results: list[labelled | ErrorResponse] = Field(  # type: ignore[valid-type]
            description="One answer per text, in order"
        )

    return OneResult, ListResults


def error_statuses(options: ServiceOptions) -> dict[int, str]:
    """What each error status means, as the OpenAPI document says it."""
    return {
        400: "The body could not be read: not UTF-8 text (type BadRequest)",
        401: "The API key is missing or wrong (type Unauthorized); checked before the body is read",
        408: "The body did not arrive within the request's deadline (type RequestTimeout)",
        413: f"The body is over {options.max_body_bytes} bytes (type PayloadTooLarge); refused from its "
        "Content-Length, or as soon as that many bytes arrived, before any work",
        422: "The request breaks the schema (over the texts or characters allowed, among others), or its one "
        "text cannot be classified: too long for the vLLM server's context beside the prompt, refused by the "
        "vLLM server for its content, or answered with what no label reads (types InvalidInputError, "
        "ContextLengthError, ServerStatusError, LabelParseError)",
        429: f"The service holds {options.max_queued_texts} texts already (type Overloaded), or the vLLM server "
        "answered 429 (type ServerStatusError): try again after Retry-After seconds",
        500: "The service itself failed on the text (a bug); the log has the details under the request id",
        502: "The vLLM server failed or answered what cannot be read (types ServerConnectionError, "
        "ServerStatusError, ResponseFormatError, ...); the log has the details under the request id",
        503: "The vLLM server answered 503 (type ServerStatusError): try again after Retry-After seconds, "
        "when it gave one",
        504: f"No answer within the request's deadline ({options.request_timeout:g} s by default; type "
        "DeadlineExceeded), or the vLLM server did not answer in time (type ServerTimeoutError)",
    }


def error_answers(options: ServiceOptions, *codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of the error statuses ``codes`` (and 401 with a key), each
    with its body and the headers its answers carry."""
    statuses = error_statuses(options)
    declared: dict[int | str, dict[str, Any]] = {}
    for code in (*codes, *([401] if options.api_key is not None else [])):
        headers: dict[str, Any] = {}
        if code == 401:
            headers["WWW-Authenticate"] = WWW_AUTHENTICATE_HEADER
        if code in (429, 503):
            headers["Retry-After"] = RETRY_AFTER_HEADER
        if code >= 500 or code == 422:
            headers["x-request-id"] = REQUEST_ID_HEADER
        declared[code] = {"model": ErrorResponse, "description": statuses[code]}
        if headers:
            declared[code]["headers"] = headers
    return dict(sorted(declared.items(), key=lambda item: int(item[0])))


__all__ = [
    "NON_BLANK",
    "REQUEST_ID_HEADER",
    "ErrorResponse",
    "Health",
    "Ready",
    "answer_models",
    "error_answers",
    "error_statuses",
    "request_model",
]
