"""``POST /v1/decisions``: OpenAI's Decisions wire format to the decision engine's forms and
back (pure: every input item kind, typed boolean choices, refusals, usage, the limits, media
parts named), then the route in process over the canned vLLM (answers as the engine gives
them, the key, the body's limit, the line's bound, the deadline, the engine's errors)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast._core.deciding import Decider
from langchain_qwen_fast._core.decisions import Answered, DecisionOutcome, DecisionQuestion, TokenUsage, render_state
from langchain_qwen_fast._core.flow import INITIAL_WINDOW, REQUESTS_PER_WINDOW
from langchain_qwen_fast.decision_models import engine_state
from langchain_qwen_fast.errors import ConfigurationError, InvalidInputError
from langchain_qwen_fast.serving.service import ServiceOptions, create_app
from langchain_qwen_fast.serving.service.decisions import (
    answer_body,
    choice_labels,
    decision_call,
    media_problem,
    request_error,
    usage_body,
)
from langchain_qwen_fast.serving.service.schema import Decision, decisions_request_model
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS
from tests.support.fake_vllm import FakeVLLM, status

OPTIONS = ServiceOptions()
KEY = "sk-decisions-2"
AUTHORISED = {"Authorization": f"Bearer {KEY}"}
URGENT = {"type": "predicate", "name": "urgent", "instructions": "Is this urgent?"}
TEAM = {
    "type": "choice",
    "name": "team",
    "instructions": "Which team handles this?",
    "choices": [{"value": "billing", "description": "Payments."}, {"value": "technical"}],
}
ANGER = {
    "type": "score",
    "name": "anger",
    "instructions": "How angry is the customer?",
    "levels": [{"label": "Calm."}, {"label": "Annoyed.", "description": "Short words."}, {"label": "Furious."}],
}


def parse(body: dict[str, Any], options: ServiceOptions = OPTIONS) -> Any:
    """A body as the route takes it: validated by the route's own model."""
    return decisions_request_model(options).model_validate({"model": "qwen3", **body})


def call_of(input: Any, *questions: dict[str, Any], options: ServiceOptions = OPTIONS) -> Any:
    return decision_call(parse({"input": input, "questions": list(questions or [URGENT])}, options), options)


def state_of(input: Any) -> str:
    return call_of(input).state


# -- the input -------------------------------------------------------------------------------
def test_text_is_the_state_as_it_is() -> None:
    assert state_of("Production is down.") == "Production is down."


def test_every_message_kind_is_a_turn_with_its_role_and_its_parts_text() -> None:
    items = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "input_text", "text": "Route tickets."}]},
        {
            "role": "user",
            "type": "message",
            "content": [
                {"type": "input_text", "text": "Billed twice:"},
                {"type": "input_json", "data": {"b": 2, "a": [1]}},
            ],
        },
        {
            "role": "assistant",
            "phase": "final_answer",
            "content": [
                {"type": "output_text", "text": "Looking."},
                {"type": "refusal", "refusal": "No refunds here."},
            ],
        },
    ]
    assert state_of(items) == (
        "system: Be brief.\n"
        "developer: Route tickets.\n"
        'user: Billed twice:\n{"a":[1],"b":2}\n'
        "assistant: Looking.\nNo refunds here."
    )


def test_tool_calls_are_the_assistant_s_and_their_outputs_tool_turns() -> None:
    items = [
        {"role": "user", "content": "Where is my parcel?"},
        {"role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "c1", "name": "track", "arguments": '{"id": 7}'},
        {"type": "function_call_output", "call_id": "c1", "output": "in transit"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "grep", "input": "parcel 7"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "found"}]},
        {"type": "function_call", "call_id": "c3", "name": "note", "arguments": "not json"},
    ]
    assert state_of(items) == (
        "user: Where is my parcel?\n"
        'assistant: Checking.\ntool call {"args": {"id": 7}, "name": "track"}\n'
        "tool: in transit\n"
        'assistant: tool call {"input": "parcel 7", "name": "grep"}\n'
        "tool: found\n"
        'assistant: tool call {"args": "not json", "name": "note"}'
    )


def test_the_same_conversation_renders_as_the_langchain_decision_model_renders_it() -> None:
    """What langchain-openai sends for LangChain messages (written out here) is the prompt's
    state the LangChain decision model gives the messages themselves: the same request is
    asked alike through the service and in process."""
    messages = [
        SystemMessage("Support desk."),
        HumanMessage("I was billed twice."),
        AIMessage("Let me look.", tool_calls=[{"name": "lookup", "args": {"id": 7}, "id": "c1"}]),
        ToolMessage("two charges found", tool_call_id="c1"),
    ]
    wire = [
        {"role": "system", "content": "Support desk."},
        {"role": "user", "content": "I was billed twice."},
        {"role": "assistant", "content": "Let me look."},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": json.dumps({"id": 7})},
        {"type": "function_call_output", "call_id": "c1", "output": "two charges found"},
    ]
    assert state_of(wire) == render_state(engine_state(messages, "state"))
    data = {"ticket": {"id": 7, "text": "billed twice"}, "tier": "gold"}
    lone_json = [{"role": "user", "content": [{"type": "input_json", "data": data}]}]  # langchain-openai's dict state
    assert state_of(lone_json) == render_state(engine_state(data, "state"))


def test_the_input_as_rendered_is_held_to_max_text_chars() -> None:
    options = ServiceOptions(max_text_chars=40)
    items = [{"role": "user", "content": "x" * 30}, {"role": "assistant", "content": "y" * 30}]
    with pytest.raises(InvalidInputError, match=r"input renders to 78 characters, over .* 40 \(max_text_chars\)"):
        call_of(items, options=options)
    assert call_of(items[:1], options=options).state == "user: " + "x" * 30


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "a"},
                            {"type": "input_image", "image_url": "data:,"},
                        ],
                    }
                ]
            },
            "input[0].content[1] is an input_image part",
        ),
        (
            {"input": ["x", {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_file"}]}]},
            "input[1].output[0] is an input_file part",
        ),
        (
            {"input": "x", "questions": [URGENT, {"type": "predicate", "instructions": [{"type": "input_image"}]}]},
            "questions[1].instructions[0] is an input_image part",
        ),
        ({"input": [{"role": "user", "content": [{"type": "image_url"}]}]}, "input[0].content[0] is an image_url part"),
    ],
)
def test_a_media_part_is_named_wherever_it_is(body: dict[str, Any], named: str) -> None:
    found = media_problem(body)
    assert found is not None and found.startswith(named) and found.endswith("this model reads text only")
    with pytest.raises(ValueError):  # and the schema has no such part
        parse({"questions": [URGENT], **body})


def test_text_only_bodies_have_no_media_problem() -> None:
    assert media_problem({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}]}]}) is None
    assert media_problem({"input": "an image of a cat", "questions": [URGENT]}) is None
    assert media_problem(["not", "a", "body"]) is None


# -- the questions ------------------------------------------------------------------------------
def test_each_question_type_becomes_the_engine_s() -> None:
    call = call_of("text", URGENT, TEAM, ANGER)
    urgent, team, anger = call.questions.questions
    assert (urgent.kind, urgent.labels, urgent.instructions) == ("noul", ("yes", "no"), "Is this urgent?")
    assert (team.kind, team.labels, team.descriptions) == ("choice", ("billing", "technical"), ("Payments.", None))
    assert anger.kind == "score" and anger.labels == ("0", "1", "2")
    assert anger.descriptions == ("Calm.", "Annoyed.: Short words.", "Furious.")
    assert [w.name for w in call.wire] == ["urgent", "team", "anger"] and call.prompts == 3


def test_instructions_parts_are_read_in_order_json_as_the_langchain_model_writes_it() -> None:
    parts = [
        {"type": "input_json", "data": {"b": 1, "a": "é"}},
        {"type": "input_text", "text": "Answer true if: down."},
    ]
    (question,) = call_of("x", {"type": "predicate", "instructions": parts}).questions.questions
    assert question.instructions == '{"a":"é","b":1}\n\nAnswer true if: down.'
    alone = DecisionQuestion.noul("q", {"b": 1, "a": "é"})  # a JSON instruction in the LangChain model
    (only,) = call_of("x", {"type": "predicate", "instructions": parts[:1]}).questions.questions
    assert only.instructions == alone.instructions


def test_unnamed_questions_get_distinct_names_inside_and_none_on_the_wire() -> None:
    call = call_of("x", URGENT, {**URGENT, "name": None}, {**URGENT, "name": "questions[2]"}, {**URGENT, "name": None})
    names = [q.name for q in call.questions.questions]
    assert len(set(names)) == 4 and names[1] == "questions[1]" and names[3] == "questions[3]"
    assert [w.name for w in call.wire] == ["urgent", None, "questions[2]", None]
    clash = call_of("x", {**URGENT, "name": None}, {**URGENT, "name": "questions[0]"})
    assert [q.name for q in clash.questions.questions] == ["questions[0]'", "questions[0]"]


def test_repeated_names_and_values_are_refused_naming_them() -> None:
    with pytest.raises(
        InvalidInputError, match=r"questions\[2\]\.name 'urgent' is questions\[0\]'s too: question names"
    ):
        call_of("x", URGENT, TEAM, URGENT)
    repeated = {**TEAM, "choices": [{"value": "a"}, {"value": True}, {"value": "a", "description": "again"}]}
    with pytest.raises(InvalidInputError, match=r"questions\[0\]\.choices\[2\]\.value 'a' is choices\[0\]'s too"):
        call_of("x", repeated)


@pytest.mark.parametrize(
    ("values", "labels"),
    [
        ([True, False], ("true", "false")),
        (["billing", "technical", False], ("billing", "technical", "false")),
        ([" yes ", "no"], ("yes", "no")),  # stripped, as labels must be
        ([True, "true"], ("true", '"true"')),  # typed: distinct labels
        (["a", " a"], ('"a"', '" a"')),
        (["", "x"], ('""', '"x"')),
        ([False, "False"], ("false", "False")),
    ],
)
def test_choice_labels_keep_typed_values_distinct(values: list[Any], labels: tuple[str, ...]) -> None:
    assert choice_labels(values) == labels
    assert all(label and label == label.strip() for label in labels)


def test_a_boolean_choice_answers_as_a_boolean_and_a_string_as_a_string() -> None:
    question = {**TEAM, "choices": [{"value": True}, {"value": "true"}, {"value": False}]}
    call = call_of("x", question)
    (asked,) = call.questions.questions
    outcome = DecisionOutcome((Answered(asked, (0.2, 0.5, 0.3)),), TokenUsage(10, 4, 1))
    (answer,) = answer_body(call, outcome, "qwen3")["answers"]
    assert answer["choice"] == "true" and isinstance(answer["choice"], str)
    values = [p["value"] for p in answer["probabilities"]]
    assert values == [True, "true", False] and [type(v) for v in values] == [bool, str, bool]
    outcome = DecisionOutcome((Answered(asked, (0.6, 0.1, 0.3)),), TokenUsage())
    assert answer_body(call, outcome, "qwen3")["answers"][0]["choice"] is True


def test_limits_on_questions_and_choices_are_checked_naming_the_limit() -> None:
    options = ServiceOptions(max_questions=2, max_choices=3)
    with pytest.raises(InvalidInputError, match=r"3 questions, over the service's limit of 2 \(max_questions\)"):
        decision_call(parse({"input": "x", "questions": [URGENT] * 3}), options)
    many = {**TEAM, "choices": [{"value": str(k)} for k in range(4)]}
    with pytest.raises(InvalidInputError, match=r"questions\[1\]\.choices: 4 choices, .* 3 \(max_choices\)"):
        decision_call(parse({"input": "x", "questions": [URGENT, many]}), options)
    levels = {**ANGER, "levels": [{"label": str(k)} for k in range(4)]}
    with pytest.raises(InvalidInputError, match=r"questions\[0\]\.levels: 4 levels"):
        decision_call(parse({"input": "x", "questions": [levels]}), options)
    # The schema states the same limits; the line's bound caps the questions too.
    with pytest.raises(ValueError, match="at most 2 items"):
        parse({"input": "x", "questions": [URGENT] * 3}, options)
    assert ServiceOptions(max_queued_texts=8, max_texts=8).questions_allowed == 8


# -- the answers ---------------------------------------------------------------------------------
def test_answers_in_order_with_names_probabilities_confidence_and_usage() -> None:
    call = call_of("x", URGENT, TEAM, {**ANGER, "name": None})
    urgent, team, anger = call.questions.questions
    outcome = DecisionOutcome(
        (Answered(urgent, (0.8, 0.2)), Answered(team, (0.3, 0.7)), Answered(anger, (0.1, 0.2, 0.7))),
        TokenUsage(prompt=120, cached=None, output=4),
    )
    body = answer_body(call, outcome, "qwen3")
    assert Decision.model_validate(body)  # the document's answer model
    assert body["answers"][0] == {"type": "predicate", "name": "urgent", "probability": 0.8}
    assert body["answers"][1] == {
        "type": "choice",
        "name": "team",
        "choice": "technical",
        "confidence": 0.7,
        "probabilities": [{"value": "billing", "probability": 0.3}, {"value": "technical", "probability": 0.7}],
    }
    score = body["answers"][2]
    assert score["type"] == "score" and score["name"] is None and math.isclose(score["score"], 1.6)
    assert [(p["value"], p["label"]) for p in score["probabilities"]] == [
        (0, "Calm."),
        (1, "Annoyed."),
        (2, "Furious."),
    ]
    assert math.isclose(score["confidence"], Answered(anger, (0.1, 0.2, 0.7)).confidence)
    assert body["model"] == "qwen3"
    assert body["usage"] == {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 124,
    }
    assert usage_body(TokenUsage(50, 32, 2))["input_tokens_details"]["cached_tokens"] == 32


def test_a_refused_choice_is_a_refusal_and_the_others_are_answered() -> None:
    call = call_of("x", TEAM, URGENT)
    team, urgent = call.questions.questions
    outcome = DecisionOutcome((Answered(team, (0.5, 0.5), refused=True), Answered(urgent, (0.1, 0.9))), TokenUsage())
    answers = answer_body(call, outcome, "qwen3")["answers"]
    assert answers[0] == {"type": "refusal", "name": "team"}
    assert answers[1]["type"] == "predicate"


def test_probabilities_a_hair_outside_0_1_are_kept_within() -> None:
    call = call_of("x", URGENT, ANGER)
    urgent, anger = call.questions.questions
    outcome = DecisionOutcome(
        (Answered(urgent, (1.0000001, 0.0)), Answered(anger, (0.0, 0.0, 1.0000001))), TokenUsage()
    )
    body = answer_body(call, outcome, "qwen3")
    assert body["answers"][0]["probability"] == 1.0 and body["answers"][1]["score"] == 2.0
    Decision.model_validate(body)


def test_a_question_the_server_cannot_score_is_the_request_s_own_error() -> None:
    call = call_of("x", TEAM)
    unscorable = ConfigurationError("question 'team': its labels share first tokens, and this server cannot ...")
    assert isinstance(request_error(unscorable, call), InvalidInputError)
    unserved = ConfigurationError("model 'qwen3' is not served at http://a/v1")
    assert request_error(unserved, call) is unserved


# -- the route, in process over the canned vLLM ------------------------------------------------------
class HeldVLLM(httpx.AsyncBaseTransport):
    """The canned vLLM, whose completions wait while ``held`` until ``release`` is set."""

    def __init__(self, fake: FakeVLLM) -> None:
        self.fake = fake
        self.held = False
        self.release = asyncio.Event()
        self.waiting = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        if self.held and request.url.path.endswith("/v1/completions"):
            self.waiting += 1
            try:
                await self.release.wait()
            finally:
                self.waiting -= 1
        return self.fake(request)


def service(upstream: Any, **kwargs: Any) -> tuple[QwenClassifier, Any, httpx.AsyncClient]:
    classifier = QwenClassifier(
        labels=list(AG_NEWS_LABELS), base_url="http://vllm.test/v1", http_transport=upstream, max_retries=0
    )
    app = create_app(classifier, ServiceOptions(api_key=KEY, **kwargs))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api.test", headers=AUTHORISED)
    return classifier, app, client


def wire_body(*questions: dict[str, Any], input: Any = "Production is down and I was billed twice!") -> dict[str, Any]:
    return {"model": "any-name", "input": input, "questions": list(questions)}


async def test_the_route_answers_what_the_engine_answers_with_a_request_id() -> None:
    fake = FakeVLLM()
    classifier, _, client = service(fake.transport)
    body = wire_body(URGENT, TEAM, ANGER)
    answer = await client.post("/v1/decisions", json=body)
    assert answer.status_code == 200 and len(answer.headers["x-request-id"]) == 16
    got = Decision.model_validate(answer.json())
    call = decision_call(parse(body), OPTIONS)
    (outcome,) = Decider(classifier.engine).decide([(call.state, call.questions)])
    assert not isinstance(outcome, Exception)
    assert answer.json()["answers"] == answer_body(call, outcome, "qwen3")["answers"]
    assert [a.name for a in got.answers] == ["urgent", "team", "anger"] and got.model == "qwen3"
    assert got.usage.input_tokens > 0 and got.usage.output_tokens >= 3
    for choice_or_score in got.answers[1:]:
        assert math.isclose(sum(p.probability for p in choice_or_score.probabilities), 1.0, abs_tol=1e-3)  # type: ignore[union-attr]
    metrics = (await client.get("/metrics")).text
    assert 'qwen_fast_requests_total{kind="decisions",status="200"} 1.0' in metrics


async def test_the_fast_path_and_fastapi_s_route_answer_alike() -> None:
    _, _, client = service(FakeVLLM().transport)
    body = json.dumps(wire_body(URGENT, TEAM)).encode()
    fast = await client.post("/v1/decisions", content=body, headers={"content-type": "application/json"})
    routed = await client.post("/v1/decisions", content=body, headers={"content-type": "application/vnd.api+json"})
    assert fast.status_code == routed.status_code == 200
    assert fast.json() == routed.json() and "x-request-id" in routed.headers


async def test_every_refusal_carries_a_request_id_and_is_answered_before_work() -> None:
    fake = FakeVLLM()
    _, _, client = service(fake.transport, max_body_bytes=2000, max_questions=2)
    refusals = [
        (await client.post("/v1/decisions", json=wire_body(URGENT), headers={"Authorization": "Bearer no"}), 401),
        (await client.post("/v1/decisions", json=wire_body(URGENT, input="x" * 3000)), 413),
        (await client.post("/v1/decisions", json=wire_body(URGENT, TEAM, ANGER)), 422),
        (await client.post("/v1/decisions", json=wire_body({**URGENT, "instructions": "  "})), 422),
        (await client.post("/v1/decisions", json=wire_body(URGENT, URGENT)), 422),
    ]
    for answer, code in refusals:
        assert answer.status_code == code and "x-request-id" in answer.headers, answer.text
    assert "questions" in refusals[2][0].json()["error"]["message"]
    assert "question names must be distinct" in refusals[4][0].json()["error"]["message"]
    image = wire_body(URGENT, input=[{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}])
    named = await client.post("/v1/decisions", json=image)
    assert named.status_code == 422 and named.json()["error"] == {
        "type": "InvalidInputError",
        "message": "input[0].content[0] is an input_image part: this model reads text only",
    }
    assert fake.calls("/v1/completions") == []  # none of them reached vLLM


async def test_a_request_s_questions_count_against_the_line_answered_429_with_retry_after() -> None:
    upstream = HeldVLLM(FakeVLLM())
    _, app, client = service(upstream, max_queued_texts=4, max_texts=4, groups_in_flight=1)
    assert (await client.post("/v1/decisions", json=wire_body(URGENT))).status_code == 200  # the set-up, done
    upstream.held = True
    three = asyncio.create_task(client.post("/v1/decisions", json=wire_body(URGENT, TEAM, ANGER)))
    await until(lambda: app.state.service.decisions.held == 3 and upstream.waiting > 0)
    refused = await client.post("/v1/decisions", json=wire_body(URGENT, TEAM))
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "Overloaded"
    assert int(refused.headers["retry-after"]) >= 1 and "x-request-id" in refused.headers
    upstream.release.set()
    assert (await three).status_code == 200
    assert app.state.service.decisions.held == 0
    assert (await client.post("/v1/decisions", json=wire_body(URGENT, TEAM))).status_code == 200


async def test_requests_arriving_together_share_vllm_requests_and_each_gets_its_own_answer() -> None:
    upstream = HeldVLLM(FakeVLLM())
    classifier, _, client = service(upstream, groups_in_flight=1)
    assert (await client.post("/v1/decisions", json=wire_body(TEAM))).status_code == 200  # the set-up
    upstream.held = True
    first = asyncio.ensure_future(client.post("/v1/decisions", json=wire_body(TEAM, input="first state")))
    await until(lambda: upstream.waiting == 1)  # the one group slot is busy
    states = [f"ticket {i}: the app is down" for i in range(20)]
    rest = [asyncio.ensure_future(client.post("/v1/decisions", json=wire_body(TEAM, input=s))) for s in states]
    await asyncio.sleep(0.05)
    before = len(upstream.fake.calls("/v1/completions"))
    upstream.release.set()
    answers = [await first, *[await r for r in rest]]
    assert all(a.status_code == 200 for a in answers)
    # the first's request, then the twenty that waited as one group, in requests of at least
    # an eighth of a new window: a request to vLLM a caller would be 21
    assert len(upstream.fake.calls("/v1/completions")) - before <= 1 + -(-20 // (INITIAL_WINDOW // REQUESTS_PER_WINDOW))
    for state, answer in zip(["first state", *states], answers, strict=True):
        call = decision_call(parse(wire_body(TEAM, input=state)), OPTIONS)
        (outcome,) = await Decider(classifier.engine).adecide([(call.state, call.questions)])
        assert not isinstance(outcome, Exception), outcome
        assert answer.json()["answers"] == answer_body(call, outcome, "qwen3")["answers"]


async def test_a_request_past_its_deadline_is_answered_504_and_lets_its_prompts_go() -> None:
    upstream = HeldVLLM(FakeVLLM())
    _, app, client = service(upstream, request_timeout=0.2)
    assert (await client.post("/v1/decisions", json=wire_body(URGENT))).status_code == 200
    upstream.held = True
    start = time.monotonic()
    answer = await client.post("/v1/decisions", json=wire_body(URGENT, TEAM))
    assert time.monotonic() - start < 3
    error = answer.json()["error"]
    assert answer.status_code == 504 and error["type"] == "DeadlineExceeded"
    assert error["request_id"] == answer.headers["x-request-id"]
    assert app.state.service.decisions.held == 0
    await until(lambda: upstream.waiting == 0)  # its requests to vLLM were dropped
    upstream.release.set()


@pytest.mark.parametrize(
    ("fault", "code", "kind"),
    [
        (status(500), 502, "ServerStatusError"),
        (status(503, {"Retry-After": "3"}), 503, "ServerStatusError"),
        (status(400), 422, "ServerStatusError"),
    ],
)
async def test_the_engine_s_failures_answer_by_the_failure_rule(fault: Any, code: int, kind: str) -> None:
    fake = FakeVLLM()
    _, _, client = service(fake.transport)
    assert (await client.post("/v1/decisions", json=wire_body(URGENT))).status_code == 200
    fake.fail("/v1/completions", *[fault] * 4)
    answer = await client.post("/v1/decisions", json=wire_body(URGENT, input="Another state"))
    error = answer.json()["error"]
    assert answer.status_code == code and error["type"] == kind
    assert error["request_id"] == answer.headers["x-request-id"] and "vllm.test" not in answer.text
    if code == 503:
        assert answer.headers["retry-after"] == "3"


async def test_answers_that_share_first_tokens_on_a_server_that_cannot_score_them_are_422() -> None:
    _, _, client = service(FakeVLLM(logprob_token_ids=False).transport)
    shared = {**TEAM, "choices": [{"value": "big deal"}, {"value": "big problem"}]}
    answer = await client.post("/v1/decisions", json=wire_body(shared))
    error = answer.json()["error"]
    assert answer.status_code == 422 and error["type"] == "InvalidInputError"
    assert error["message"].startswith("question 'team': its labels share first tokens")


def test_the_document_declares_the_route_its_limits_and_headers() -> None:
    classifier = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url="http://vllm.test/v1")
    options = ServiceOptions(max_questions=9, max_choices=7, max_text_chars=99, max_texts=10, max_queued_texts=1000)
    document = create_app(classifier, options).openapi()
    route = document["paths"]["/v1/decisions"]["post"]
    schemas = document["components"]["schemas"]
    request = schemas["DecisionsRequest"]["properties"]
    assert request["questions"]["maxItems"] == 9 and request["questions"]["minItems"] == 1
    assert schemas["ChoiceQuestion"]["properties"]["choices"]["maxItems"] == 7
    assert schemas["ScoreQuestion"]["properties"]["levels"]["maxItems"] == 7
    assert request["input"]["oneOf"][0]["maxLength"] == 99
    assert "input_image" not in json.dumps(schemas["DecisionsRequest"]) and "InputImage" not in schemas
    assert route["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Decision"
    }
    assert {"400", "408", "413", "422", "429", "500", "502", "503", "504"} <= set(route["responses"])
    assert all("x-request-id" in answer["headers"] for answer in route["responses"].values())
    assert "1000 prompts" in route["responses"]["429"]["description"]


async def until(condition: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.005)
