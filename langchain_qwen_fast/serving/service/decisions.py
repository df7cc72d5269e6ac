"""``POST /v1/decisions``: OpenAI's Decisions wire format, answered by the package's decision
engine (:class:`~langchain_qwen_fast._core.deciding.Decider`) on the classifier's servers.

The real clients speak it unmodified: the ``openai`` client's ``decisions.create`` and
langchain-openai's ``OpenAIClassifier`` (``base_url`` the service's ``/v1``).

The conversion, both ways, is pure (:func:`decision_call`, :func:`answer_body`,
:func:`media_problem`):

* ``input``: text is the state as it is. Items are a conversation, one
  :class:`~langchain_qwen_fast._core.decisions.Turn` each, roles kept (``user``, ``system``,
  ``developer``, ``assistant``); parts' texts joined by line breaks, an ``input_json`` part as
  compact JSON (keys sorted), an assistant's ``refusal`` part as its text. A ``function_call``
  or ``custom_tool_call`` is the assistant's ``tool call {"args"|"input": ..., "name": ...}``,
  on a line of the assistant turn just before it when there is one (as the LangChain decision
  model renders an ``AIMessage`` with tool calls); a ``function_call_output`` or
  ``custom_tool_call_output`` is a ``tool`` turn. A lone user message of one ``input_json``
  part (how langchain-openai sends a dict state) is that JSON itself, as the LangChain decision
  model renders a dict: the same LangChain request gets the same prompt either way. Image and
  file parts are refused, named (``input[1].content[0] is an input_image part: ...``).
* ``questions``: a predicate is a yes/no question (its probability is yes's); a choice's
  values are its labels, a boolean as ``true``/``false`` and text stripped, unless two would
  read alike or one is blank: then every value of the question is its JSON (``"true"`` and
  ``true``), so typed values stay distinct. A score's levels are ``label: description``. An
  unnamed question gets a name of its own inside (``questions[2]``); answers carry the wire's
  name or null, in the questions' order.
* Refused before any work (422, naming the rule): repeated question names, repeated choice
  values, an input over ``max_text_chars`` characters as rendered, over ``max_questions`` or
  ``max_choices`` (also the schema's).

:class:`DecisionService` does the route's work under the service's rules: a request's prompts
(one per question) count against ``max_queued_texts`` (429 with ``Retry-After``), the request's
deadline (504), the engine's errors answered by :mod:`.answers`' rule, ``x-request-id`` on every
answer. :class:`DecisionsFastPath` puts the fast path's checks in front of the route.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_qwen_fast._core.deciding import Decider
from langchain_qwen_fast._core.decisions import (
    MEDIA_TYPES,
    Answered,
    DecisionOutcome,
    DecisionQuestion,
    QuestionSet,
    TokenUsage,
    Turn,
    render_state,
)
from langchain_qwen_fast._core.question_kinds import wire_kind
from langchain_qwen_fast._core.question_kinds.choice import choice_labels
from langchain_qwen_fast.errors import ConfigurationError, DeadlineExceeded, InvalidInputError, Overloaded
from langchain_qwen_fast.serving.service.answers import (
    HTTPAnswer,
    RequestId,
    dumps,
    error_answer,
    log_failure,
    service_error_answer,
)
from langchain_qwen_fast.serving.service.fast_path import ClassifyFastPath
from langchain_qwen_fast.serving.service.micro_batcher import MicroBatcher
from langchain_qwen_fast.serving.service.options import ServiceOptions
from langchain_qwen_fast.serving.service.schema import decisions_request_model

if TYPE_CHECKING:
    from langchain_qwen_fast.engine import EngineClassifier
    from langchain_qwen_fast.serving.service.auth import APIKey
    from langchain_qwen_fast.serving.service.metrics import ServiceMetrics

#: The route's path.
DECISIONS_PATH = "/v1/decisions"
#: The media part types, named when refused (the engine's, with OpenAI's file and audio parts).
_MEDIA = MEDIA_TYPES | {"input_file", "input_audio"}


# -- the wire to the engine -------------------------------------------------------------------
@dataclass(frozen=True)
class WireQuestion:
    """What an answer gives back of its question: its name on the wire (None: unnamed), its
    type there, and a choice's values (typed) or a score's level labels, in order."""

    name: str | None
    type: str
    values: tuple[str | bool, ...] = ()


@dataclass(frozen=True)
class DecisionCall:
    """A request in the engine's forms: the rendered state, its questions, and each
    question's wire form (for the answer)."""

    state: str
    questions: QuestionSet
    wire: tuple[WireQuestion, ...]

    @property
    def prompts(self) -> int:
        """The prompts the request takes: one per question (its one state)."""
        return len(self.wire)


def decision_call(request: Any, options: ServiceOptions) -> DecisionCall:
    """A validated ``POST /v1/decisions`` body (:func:`.schema.decisions_request_model`) in the
    engine's forms; :class:`InvalidInputError` names the first rule it breaks (see the module
    docstring), before anything is sent."""
    questions = list(request.questions)
    if len(questions) > options.questions_allowed:
        raise InvalidInputError(
            f"questions: {len(questions)} questions, over the service's limit of {options.questions_allowed} "
            "(max_questions)"
        )
    _check_names(questions)
    given = {q.name for q in questions if q.name is not None}
    asked, wire = [], []
    for i, question in enumerate(questions):
        name = question.name if question.name is not None else _inner_name(i, given)
        engine_question, wired = _question(question, name, f"questions[{i}]", options)
        asked.append(engine_question)
        wire.append(wired)
    state = render_state(input_state(request.input))
    if len(state) > options.max_text_chars:
        raise InvalidInputError(
            f"input renders to {len(state)} characters, over the service's limit of {options.max_text_chars} "
            "(max_text_chars)"
        )
    return DecisionCall(state, QuestionSet(tuple(asked)), tuple(wire))


def _check_names(questions: Sequence[Any]) -> None:
    seen: dict[str, int] = {}
    for i, question in enumerate(questions):
        if question.name is None:
            continue
        if question.name in seen:
            raise InvalidInputError(
                f"questions[{i}].name {question.name!r} is questions[{seen[question.name]}]'s too: "
                "question names must be distinct"
            )
        seen[question.name] = i


def _inner_name(index: int, given: set[str]) -> str:
    """An unnamed question's name inside (the engine's messages show it): its place, primed
    until no given name is the same."""
    name = f"questions[{index}]"
    while name in given:
        name += "'"
    return name


def _question(question: Any, name: str, where: str, options: ServiceOptions) -> tuple[DecisionQuestion, WireQuestion]:
    instructions = instructions_text(question.instructions)
    kind = wire_kind(question.type)
    field = kind.wire_answers_field
    answers = getattr(question, field) if field is not None else ()
    if len(answers) > options.max_choices:
        raise InvalidInputError(
            f"{where}.{field}: {len(answers)} {field}, over the service's limit of {options.max_choices} (max_choices)"
        )
    criteria, values = kind.wire_definition(answers, where)
    return DecisionQuestion.of(kind.name, name, instructions, criteria), WireQuestion(
        question.name, question.type, values
    )


def instructions_text(instructions: str | Sequence[Any]) -> str:
    """A question's instructions as the prompt's text: text as it is; parts in order, a blank
    line between, an ``input_json`` part as compact JSON (as the LangChain decision model
    renders JSON instructions)."""
    if isinstance(instructions, str):
        return instructions
    return "\n\n".join(_part_text(part) for part in instructions)


def input_state(value: Any) -> str | list[Turn]:
    """The ``input`` as the engine's state: text, or a conversation of turns (see the module
    docstring)."""
    if isinstance(value, str):
        return value
    if len(value) == 1 and getattr(value[0], "role", None) == "user":
        content = value[0].content
        if not isinstance(content, str) and len(content) == 1 and content[0].type == "input_json":
            return _json_text(content[0].data)
    turns: list[Turn] = []
    for item in value:
        role = getattr(item, "role", None)
        if role is not None:
            text = item.content if isinstance(item.content, str) else "\n".join(map(_part_text, item.content))
            turns.append(Turn(role, text))
        elif item.type in ("function_call", "custom_tool_call"):
            call = _call_text(item)
            if turns and turns[-1].role == "assistant":
                turns[-1] = Turn("assistant", f"{turns[-1].text}\n{call}" if turns[-1].text else call)
            else:
                turns.append(Turn("assistant", call))
        else:
            output = item.output
            turns.append(Turn("tool", output if isinstance(output, str) else "\n".join(map(_part_text, output))))
    return turns


def _call_text(item: Any) -> str:
    """A tool call as the LangChain decision model writes an ``AIMessage``'s tool calls."""
    if item.type == "custom_tool_call":
        return "tool call " + json.dumps({"name": item.name, "input": item.input}, sort_keys=True)
    try:
        args = json.loads(item.arguments)
    except ValueError:  # not JSON: the arguments as they came
        args = item.arguments
    return "tool call " + json.dumps({"name": item.name, "args": args}, sort_keys=True)


def _part_text(part: Any) -> str:
    if part.type == "input_json":
        return _json_text(part.data)
    if part.type == "refusal":
        return str(part.refusal)
    return str(part.text)


def _json_text(data: Any) -> str:
    """JSON as the engine renders a JSON state: compact, keys sorted."""
    return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def media_problem(body: Any) -> str | None:
    """The first image, audio or file part of a raw ``POST /v1/decisions`` body, named (this
    model reads text only), or None. The schema has no such parts, so a body with one breaks
    it; this says which part, where the schema's errors would list every type it could be."""
    if not isinstance(body, dict):
        return None
    places: list[tuple[str, Any]] = []
    items = body.get("input")
    if isinstance(items, list):
        for i, item in enumerate(items):
            if isinstance(item, dict):
                places += [(f"input[{i}].{key}", item.get(key)) for key in ("content", "output")]
    questions = body.get("questions")
    if isinstance(questions, list):
        places += [(f"questions[{i}].instructions", q.get("instructions")) for i, q in enumerate(questions)
                   if isinstance(q, dict)]  # fmt: skip
    for where, parts in places:
        if not isinstance(parts, list):
            continue
        for j, part in enumerate(parts):
            kind = part.get("type") if isinstance(part, dict) else None
            if isinstance(kind, str) and kind in _MEDIA:
                article = "an" if kind[0] in "aeiou" else "a"
                return f"{where}[{j}] is {article} {kind} part: this model reads text only"
    return None


# -- the engine to the wire -------------------------------------------------------------------
def answer_body(call: DecisionCall, outcome: DecisionOutcome, model: str) -> dict[str, Any]:
    """The engine's outcome as the wire's ``Decision``: an answer per question in order (a
    refused choice as a ``refusal``), ``model`` and the usage."""
    answers = [_answer(wire, answered) for wire, answered in zip(call.wire, outcome.answers, strict=True)]
    return {"answers": answers, "model": model, "usage": usage_body(outcome.usage)}


def _answer(wire: WireQuestion, answered: Answered) -> dict[str, Any]:
    if answered.refused:
        return {"type": "refusal", "name": wire.name}
    return {"type": wire.type, "name": wire.name, **answered.question.kind_spec.wire_answer(answered, wire.values)}


def usage_body(usage: TokenUsage) -> dict[str, Any]:
    """The engine's token counts as the wire's usage (no cache writes, no reasoning tokens; the
    cached count 0 where the server reports none)."""
    return {
        "input_tokens": usage.prompt,
        "input_tokens_details": {"cached_tokens": usage.cached or 0, "cache_write_tokens": 0},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt + usage.output,
    }


def request_error(exc: Exception, call: DecisionCall) -> Exception:
    """The engine's error for a request, as the service answers it: a
    :class:`ConfigurationError` naming one of the request's questions (answers that share first
    tokens and that this server cannot score) is the request's own, the same on every try, and
    answered 422; any other is as it came."""
    names = {q.name for q in call.questions.questions}
    if isinstance(exc, ConfigurationError) and any(str(exc).startswith(f"question {n!r}:") for n in names):
        return InvalidInputError(str(exc))
    return exc


# -- the route's work ---------------------------------------------------------------------------
class DecisionGroups:
    """The decision engine as the grouping line's engine (:class:`MicroBatcher` takes any
    object with ``replica_count``, ``aprepare`` and ``aclassify``): a group of decisions
    requests is one :meth:`Decider.adecide` call, so requests with the same question set that
    arrive together share vLLM requests, as single texts do on ``/v1/classify``, and the
    requests in flight to vLLM stay few however many callers wait."""

    def __init__(self, decider: Decider) -> None:
        self.decider = decider

    @property
    def replica_count(self) -> int:
        """The vLLM servers the engine spreads over."""
        return self.decider.engine.replica_count

    async def aprepare(self) -> Any:
        """Nothing to learn ahead: the decider learns the server on its first call and sizes
        its own requests."""
        return _TakesPromptLists()

    async def aclassify(self, values: Sequence[Any], *, max_concurrency: int) -> list[Any]:
        """Each request's outcome or error, in order (the decider sets its own concurrency)."""
        return list(await self.decider.adecide(list(values)))


@dataclass(frozen=True)
class _TakesPromptLists:
    """What the grouping line asks of a set-up: a group goes as few requests as it can."""

    takes_prompt_lists: bool = True


class DecisionService:
    """``POST /v1/decisions`` over one classifier's engine: one :class:`Decider` (no rules:
    the classifier's calibration belongs to its labels) behind a grouping line of its own
    (:class:`DecisionGroups`, the classify line's options), the prompts held now counted with
    the classify line's texts against ``max_queued_texts``, metrics under kind ``decisions``."""

    def __init__(
        self, classifier: EngineClassifier, options: ServiceOptions, batcher: MicroBatcher, metrics: ServiceMetrics
    ) -> None:
        self.options = options
        self.decider = Decider(classifier.engine)
        self.model = classifier.model
        self.batcher = batcher
        #: the decisions requests' own grouping line
        self.line = MicroBatcher(
            DecisionGroups(self.decider),
            max_wait=options.max_wait_ms / 1000,
            max_group=options.max_group,
            groups_in_flight=options.groups_in_flight,
            max_queued=options.max_queued_texts,
        )
        self.metrics = metrics
        #: the prompts of the decisions requests in flight
        self.held = 0
        #: the body of ``POST /v1/decisions`` under the options' limits
        self.request_type = decisions_request_model(options)

    def close(self) -> None:
        """Stop the decisions line (the app's lifespan ends)."""
        self.line.close()

    async def respond(self, body: Any, deadline: float) -> HTTPAnswer:
        """The answer to a valid ``POST /v1/decisions`` by ``deadline`` (the event loop's clock),
        with an ``x-request-id`` header, counted in the metrics."""
        request_id = RequestId()
        try:
            answer = await self._answer(body, deadline, request_id)
        except Exception as exc:  # a bug: the client gets an id, the log the traceback
            log_failure(request_id(), exc)
            answer = service_error_answer(500, "InternalServerError", "the service failed", request_id())
        self.metrics.answered("decisions", answer.status)
        answer.headers.setdefault("x-request-id", request_id())
        return answer

    async def _answer(self, body: Any, deadline: float, request_id: RequestId) -> HTTPAnswer:
        try:
            call = decision_call(body, self.options)
            self._admit(call.prompts)
        except (InvalidInputError, Overloaded) as exc:
            return error_answer(exc, request_id)
        self.held += call.prompts
        try:
            (outcome,) = await self.line.classify_many([(call.state, call.questions)], deadline)
        except Overloaded as exc:
            return error_answer(exc, request_id)
        except DeadlineExceeded:
            message = f"no answer within the request's deadline ({self.options.request_timeout:g} s)"
            return error_answer(DeadlineExceeded(message), request_id)
        finally:
            self.held -= call.prompts
        if isinstance(outcome, Exception):
            self.metrics.item_failed(outcome)
            return error_answer(request_error(outcome, call), request_id)
        return HTTPAnswer(200, dumps(answer_body(call, outcome, self.model)), {})

    def _admit(self, prompts: int) -> None:
        """:class:`Overloaded` when ``prompts`` more would pass ``max_queued_texts``, counting
        the classify line's texts and the decisions' prompts held now."""
        held = self.batcher.queued + self.held
        if held + prompts > self.options.max_queued_texts:
            raise Overloaded(
                asked=prompts, queued=held, limit=self.options.max_queued_texts, retry_after=self.batcher.retry_after()
            )


class DecisionsFastPath:
    """ASGI middleware for ``POST /v1/decisions``: :class:`ClassifyFastPath`'s checks, in its
    order (the key before the body is read: 401; the ``Content-Length`` and the bytes as they
    stream in: 413; the body's deadline: 408), and its answer of a JSON body the request model
    takes with ``respond``; any other request goes on to FastAPI, body and all. Every answer on
    the path carries an ``x-request-id`` header (langchain-openai reads it as the response's id).

    :class:`ClassifyFastPath` serves the path ``/v1/classify``: a request is handed to it under
    that path, and what it hands on to FastAPI gets its own path back."""

    def __init__(
        self,
        app: Any,
        respond: Callable[[Any, float], Awaitable[HTTPAnswer]],
        key: APIKey | None,
        options: ServiceOptions,
        request_type: type[Any],
        on_refused: Callable[[int], object] | None = None,
    ) -> None:
        self.app = app
        self._checks = ClassifyFastPath(
            self._onward, respond=respond, key=key, options=options, request_type=request_type, on_refused=on_refused
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != DECISIONS_PATH:
            await self.app(scope, receive, send)
            return
        await self._checks({**scope, "path": "/v1/classify"}, receive, _with_request_id(send))

    async def _onward(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.app({**scope, "path": DECISIONS_PATH}, receive, send)


def _with_request_id(send: Any) -> Any:
    """An ASGI ``send`` that gives an answer without an ``x-request-id`` header one."""

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            if all(name.lower() != b"x-request-id" for name, _ in headers):
                headers.append((b"x-request-id", RequestId()().encode()))
                message = {**message, "headers": headers}
        await send(message)

    return sending


__all__ = [
    "DECISIONS_PATH",
    "DecisionCall",
    "DecisionService",
    "DecisionsFastPath",
    "WireQuestion",
    "answer_body",
    "choice_labels",
    "decision_call",
    "input_state",
    "instructions_text",
    "media_problem",
    "request_error",
    "usage_body",
]
