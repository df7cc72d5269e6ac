"""The service's OpenAPI models: the request bodies under the service's limits, the answers
under the classifier's labels, and what each error status means. A client generated from the
document they make knows every constraint the service enforces and every status it answers.

``POST /v1/decisions`` has models of its own, in OpenAI's Decisions wire format (the types of
the ``openai`` client's ``decisions.create``), narrowed to what a text model reads: no image or
file parts (:mod:`.decisions` names such a part in its 422).

Pydantic models only: FastAPI reads them to build ``/openapi.json``, the fast path validates
bodies with the same request model."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, StrictBool, StrictStr, Tag, WithJsonSchema, create_model

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

Probability = Annotated[float, Field(ge=0, le=1)]


def _ignored() -> Any:
    """A field taken and ignored."""
    return Field(default=None, description="Taken and ignored (vLLM's prefix cache needs no hints)")


def _text_or_list(value: Any) -> str | None:
    """Which side of a text-or-list union a value is on (None: neither), so that a bad value's
    error names its own side's problem, not every side's."""
    return "text" if isinstance(value, str) else "list" if isinstance(value, list) else None


def _item_kind(value: Any) -> str | None:
    """An input item's kind: a message's role, or another item's type."""
    if isinstance(value, dict):
        kind = value.get("role") or value.get("type")
    else:
        kind = getattr(value, "role", None) or getattr(value, "type", None)
    return kind if isinstance(kind, str) else None


#: The discriminator of a text-or-list union.
TEXT_OR_LIST = Discriminator(
    _text_or_list, custom_error_type="text_or_list", custom_error_message="Input should be text or a list"
)


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


# -- POST /v1/decisions ------------------------------------------------------------------------
#: A choice's value: text or a boolean, typed (the string "true" and the boolean true differ).
ChoiceValue = StrictStr | StrictBool


def decisions_request_model(options: ServiceOptions) -> type[BaseModel]:
    """The body of ``POST /v1/decisions`` under ``options``' limits: OpenAI's Decisions request
    (``input``, ``questions``, ``model``; ``prompt_cache_key``, ``prompt_cache_options`` and
    ``safety_identifier`` taken and ignored), its parts text and JSON only. Every text is at most
    ``max_text_chars`` characters (and the input rendered as text too, a rule stated in words),
    at most ``max_questions`` questions, ``max_choices`` choices or levels a question."""
    Text = Annotated[StrictStr, Field(max_length=options.max_text_chars)]
    Prose = Annotated[
        StrictStr,
        Field(
            min_length=1,
            max_length=options.max_text_chars,
            pattern=NON_BLANK,
            description="Text with at least one character that is not whitespace",
        ),
    ]
    JSONData = dict[str, Any] | list[dict[str, Any]]
    Parts = Field(discriminator="type")

    class InputText(BaseModel):
        type: Literal["input_text"]
        text: Text
        prompt_cache_breakpoint: dict[str, Any] | None = _ignored()

    class InputJSON(BaseModel):
        """A JSON object or an array of objects: the state carries it as compact JSON text, keys sorted."""

        type: Literal["input_json"]
        data: JSONData

    class OutputText(BaseModel):
        type: Literal["output_text"]
        text: Text

    class RefusalText(BaseModel):
        """An assistant's refusal: its text is the turn's."""

        type: Literal["refusal"]
        refusal: Text

    Message = Literal["message"] | None
    Status = Literal["in_progress", "completed", "incomplete"] | None

    UserPart = Annotated[InputText | InputJSON, Parts]
    AssistantPart = Annotated[OutputText | RefusalText, Parts]
    TextContent = Annotated[Annotated[Text, Tag("text")] | Annotated[list[InputText], Tag("list")], TEXT_OR_LIST]

    class UserMessage(BaseModel):
        role: Literal["user"]
        content: Annotated[Annotated[Text, Tag("text")] | Annotated[list[UserPart], Tag("list")], TEXT_OR_LIST]
        type: Message = None

    class DeveloperMessage(BaseModel):
        """A developer message: its turn keeps the role ``developer``."""

        role: Literal["developer"]
        content: TextContent
        type: Message = None

    class SystemMessage(BaseModel):
        role: Literal["system"]
        content: TextContent
        type: Message = None

    class AssistantMessage(BaseModel):
        role: Literal["assistant"]
        content: Annotated[Annotated[Text, Tag("text")] | Annotated[list[AssistantPart], Tag("list")], TEXT_OR_LIST]
        phase: Literal["commentary", "final_answer"] | None = None
        type: Message = None

    class ToolOutput(BaseModel):
        """What a tool call's item and its answer's share: the call id, the item's id and status."""

        call_id: Text
        id: Text | None = None
        status: Status = None

    class ToolCall(ToolOutput):
        """What a function call and a custom tool call share: the tool's name and namespace."""

        name: Text
        namespace: Text | None = None

    class FunctionCall(ToolCall):
        """An assistant's tool call: its turn is ``tool call {"args": ..., "name": ...}``."""

        type: Literal["function_call"]
        arguments: Text

    class FunctionCallOutput(ToolOutput):
        """A tool's answer: a ``tool`` turn."""

        type: Literal["function_call_output"]
        output: TextContent

    class CustomToolCall(ToolCall):
        """An assistant's custom tool call: its turn is ``tool call {"input": ..., "name": ...}``."""

        type: Literal["custom_tool_call"]
        input: Text

    class CustomToolCallOutput(ToolOutput):
        """A custom tool's answer: a ``tool`` turn."""

        type: Literal["custom_tool_call_output"]
        output: TextContent

    Item = Annotated[
        Annotated[UserMessage, Tag("user")]
        | Annotated[DeveloperMessage, Tag("developer")]
        | Annotated[SystemMessage, Tag("system")]
        | Annotated[AssistantMessage, Tag("assistant")]
        | Annotated[FunctionCall, Tag("function_call")]
        | Annotated[FunctionCallOutput, Tag("function_call_output")]
        | Annotated[CustomToolCall, Tag("custom_tool_call")]
        | Annotated[CustomToolCallOutput, Tag("custom_tool_call_output")],
        Discriminator(
            _item_kind,
            custom_error_type="input_item",
            custom_error_message="Input should be a message (with a role) or a tool call or output (with a type)",
        ),
    ]

    class QuestionText(BaseModel):
        type: Literal["input_text"]
        text: Prose

    QuestionPart = Annotated[QuestionText | InputJSON, Parts]
    Instructions = Annotated[
        Annotated[Prose, Tag("text")] | Annotated[list[QuestionPart], Field(min_length=1), Tag("list")],
        TEXT_OR_LIST,
        Field(description="What to answer: text, or text and JSON parts (read in order, a blank line between)"),
    ]
    Name = Annotated[
        Text | None,
        Field(default=None, description="The answer's name; names must be distinct (stated in words: 422)"),
    ]

    class Asked(BaseModel):
        """What every question has: what to answer and the answer's name."""

        instructions: Instructions
        name: Name

    class PredicateQuestion(Asked):
        """How likely a statement about the input is true: answered with its probability."""

        type: Literal["predicate"]

    class Choice(BaseModel):
        value: ChoiceValue = Field(
            description="Text or a boolean; a question's values must be distinct (stated in words: 422)"
        )
        description: Text | None = None

    class ChoiceQuestion(Asked):
        """One of the choices: answered with each one's probability."""

        type: Literal["choice"]
        # uniqueItems: identical choices are refused (their values repeat); choices whose values
        # repeat under different descriptions, a rule no schema keyword states, in words (422).
        choices: list[Choice] = Field(
            min_length=2, max_length=options.max_choices, json_schema_extra={"uniqueItems": True}
        )

    class Level(BaseModel):
        label: Text
        description: Text | None = None

    class ScoreQuestion(Asked):
        """A level of the ordered levels (0 first): answered with each one's probability."""

        type: Literal["score"]
        levels: list[Level] = Field(min_length=2, max_length=options.max_choices)

    Question = Annotated[PredicateQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]

    class DecisionsRequest(BaseModel):
        """The body of POST /v1/decisions."""

        model: StrictStr = Field(
            description="Any name: the service answers with its own model (the answer's model names it)"
        )
        input: Annotated[
            Annotated[Prose, Tag("text")] | Annotated[list[Item], Field(min_length=1), Tag("list")], TEXT_OR_LIST
        ] = Field(
            description="The input every question is about: text, or messages, tool calls and tool outputs in "
            f"order; text and JSON only. Rendered as text, at most {options.max_text_chars} characters (422)"
        )
        questions: list[Question] = Field(
            min_length=1,
            max_length=options.questions_allowed,
            description="The questions, answered in this order; each is one prompt of its own",
        )
        prompt_cache_key: StrictStr | None = _ignored()
        prompt_cache_options: dict[str, Any] | None = _ignored()
        safety_identifier: StrictStr | None = _ignored()

    return DecisionsRequest


AnswerName = Annotated[str | None, Field(description="The question's name, or null for an unnamed question")]


class PredicateAnswer(BaseModel):
    type: Literal["predicate"]
    name: AnswerName
    probability: Probability = Field(description="The probability that the statement is true")


class ChoiceProbability(BaseModel):
    value: ChoiceValue = Field(description="The choice's value, typed as it was asked")
    probability: Probability


class ChoiceAnswer(BaseModel):
    type: Literal["choice"]
    name: AnswerName
    choice: ChoiceValue = Field(description="The most probable choice's value (the first of equals)")
    confidence: Probability = Field(description="The chosen value's probability")
    probabilities: list[ChoiceProbability] = Field(description="Every choice's probability, in the choices' order")


class ScoreProbability(BaseModel):
    value: int = Field(ge=0, description="The level's index")
    label: str
    probability: Probability


class ScoreAnswer(BaseModel):
    type: Literal["score"]
    name: AnswerName
    score: float = Field(ge=0, description="The expected level, between 0 and the last level's index")
    confidence: Probability = Field(
        description="1 less the levels' spread relative to the widest it can be: 1 when one level has it all"
    )
    probabilities: list[ScoreProbability] = Field(description="Every level's probability, in the levels' order")


class RefusalAnswer(BaseModel):
    """The question was not answered (a choice under the abstention rule); the others were."""

    type: Literal["refusal"]
    name: AnswerName


class InputTokensDetails(BaseModel):
    cached_tokens: int = Field(ge=0, description="Prompt tokens vLLM's prefix cache held (0 where not reported)")
    cache_write_tokens: int = Field(ge=0, description="Always 0")


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = Field(ge=0, description="Always 0: no answer reasons aloud")


class DecisionUsage(BaseModel):
    input_tokens: int = Field(ge=0)
    input_tokens_details: InputTokensDetails
    output_tokens: int = Field(ge=0)
    output_tokens_details: OutputTokensDetails
    total_tokens: int = Field(ge=0)


class Decision(BaseModel):
    """The answer to POST /v1/decisions."""

    answers: list[
        Annotated[PredicateAnswer | ChoiceAnswer | ScoreAnswer | RefusalAnswer, Field(discriminator="type")]
    ] = Field(description="One answer per question, in the questions' order")
    model: str = Field(description="The model the service answered with (its configuration's served model)")
    usage: DecisionUsage


def decision_error_answers(options: ServiceOptions) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of ``POST /v1/decisions``: its error statuses, said of
    questions rather than texts where they differ, and the ``x-request-id`` header on every
    answer, the 200 too."""
    declared = error_answers(options, 400, 408, 413, 422, 429, 500, 502, 503, 504)
    declared[422]["description"] = (
        f"The request breaks the schema (over {options.questions_allowed} questions, {options.max_choices} choices "
        f"or levels a question, or {options.max_text_chars} characters a text; an input_image or file part, "
        "named: this model reads text only; among others), or a rule stated here in words: question names "
        f"distinct, a question's choice values distinct, the input rendered as text within "
        f"{options.max_text_chars} characters; or the vLLM server cannot answer it: the questions or the input "
        "too long for its context, answers that share first tokens which it cannot score, a refusal of its own "
        "(types InvalidInputError, ContextLengthError, ServerStatusError)"
    )
    declared[429]["description"] = (
        f"The service holds {options.max_queued_texts} prompts already (type Overloaded; each question is one, "
        "as each text of /v1/classify is), or the vLLM server answered 429 (type ServerStatusError): try "
        "again after Retry-After seconds"
    )
    for answer in declared.values():
        answer.setdefault("headers", {})["x-request-id"] = REQUEST_ID_HEADER
    return {200: {"headers": {"x-request-id": REQUEST_ID_HEADER}}, **declared}


__all__ = [
    "NON_BLANK",
    "REQUEST_ID_HEADER",
    "ChoiceAnswer",
    "ChoiceValue",
    "Decision",
    "DecisionUsage",
    "ErrorResponse",
    "Health",
    "PredicateAnswer",
    "Probability",
    "Ready",
    "RefusalAnswer",
    "ScoreAnswer",
    "answer_models",
    "decision_error_answers",
    "decisions_request_model",
    "error_answers",
    "error_statuses",
    "request_model",
]
