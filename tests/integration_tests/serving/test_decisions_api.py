"""``POST /v1/decisions`` on a real socket in front of the real vLLM server, driven by the real,
unmodified clients: the ``openai`` client's ``decisions.create`` (sync and async) and
langchain-openai's ``OpenAIClassifier``. Answers in order with their names and typed values,
distributions that sum to 1, usage, the request id; the same LangChain request answered alike
through the service and by the in-process decision model; the key, an image part, too many
questions, and the document. One service for the module, key on."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from langchain_core.decisions import Choice, ClassifierResponse, Noul, Score
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_openai.decisions import OpenAIClassifier

from langchain_qwen_fast import QwenClassifier, QwenDecisionModel
from langchain_qwen_fast.serving.service import ServiceOptions, create_app
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS
from langchain_qwen_fast.testing.service import BackgroundService

KEY = "sk-decisions-api-8"
MAX_QUESTIONS = 5
STATE = "Production has been down for an hour and we were billed twice for March. Fix it now!"
QUESTIONS: list[Any] = [
    {"type": "predicate", "name": "urgent", "instructions": "Is this request urgent?"},
    {
        "type": "choice",
        "name": "team",
        "instructions": "Which team should handle this request?",
        "choices": [
            {"value": "billing", "description": "Payments and invoices."},
            {"value": "technical"},
            {"value": "sales"},
        ],
    },
    {
        "type": "choice",  # unnamed, with typed values: the boolean true and the string "true" differ
        "instructions": "Is the customer right?",
        "choices": [{"value": True}, {"value": False}, {"value": "true", "description": "The word itself."}],
    },
    {
        "type": "score",
        "name": "anger",
        "instructions": "How angry is the customer?",
        "levels": [{"label": "Calm."}, {"label": "Annoyed."}, {"label": "Furious.", "description": "Shouting."}],
    },
]
LC_QUESTIONS = {
    "team": Choice(
        instructions="Which team should handle this request?",
        criteria={"billing": "Payments and invoices.", "technical": "Bugs and outages.", "sales": None},
    ),
    "anger": Score(instructions="How angry is the customer?", criteria=["Calm.", "Annoyed.", "Furious."]),
    "urgent": Noul(instructions="Is this request urgent?"),
}


@pytest.fixture(scope="module")
def service(server_url: str) -> Iterator[BackgroundService]:
    classifier = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url=server_url, max_retries=1)
    with BackgroundService(create_app(classifier, ServiceOptions(api_key=KEY, max_questions=MAX_QUESTIONS))) as s:
        yield s


@pytest.fixture(scope="module")
def client(service: BackgroundService) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{service.url}/v1", api_key=KEY, max_retries=0)


def check_answers(decision: Any) -> None:
    """Every question answered in order, with its name (None unnamed), its distribution whole."""
    assert [a.type for a in decision.answers] == ["predicate", "choice", "choice", "score"]
    assert [a.name for a in decision.answers] == ["urgent", "team", None, "anger"]
    urgent, team, right, anger = decision.answers
    assert 0.0 <= urgent.probability <= 1.0
    assert [p.value for p in team.probabilities] == ["billing", "technical", "sales"]
    values = [p.value for p in right.probabilities]
    assert values == [True, False, "true"] and [type(v) for v in values] == [bool, bool, str]
    best = max(range(len(values)), key=lambda i: right.probabilities[i].probability)
    assert right.choice == values[best] and type(right.choice) is type(values[best])
    assert [(p.value, p.label) for p in anger.probabilities] == [(0, "Calm."), (1, "Annoyed."), (2, "Furious.")]
    for answer in (team, right, anger):
        assert math.isclose(sum(p.probability for p in answer.probabilities), 1.0, abs_tol=1e-3)
        assert 0.0 <= answer.confidence <= 1.0
    assert team.choice in ("billing", "technical", "sales") and 0.0 <= anger.score <= 2.0
    assert decision.model == "qwen3"
    usage = decision.usage
    assert usage.input_tokens > 0 and usage.output_tokens >= 4
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cache_write_tokens == 0 and usage.output_tokens_details.reasoning_tokens == 0


def test_the_openai_client_gets_every_answer_in_order_with_a_request_id(client: openai.OpenAI) -> None:
    raw = client.decisions.with_raw_response.create(model="qwen3", input=STATE, questions=QUESTIONS)
    assert raw.status_code == 200 and len(raw.headers["x-request-id"]) == 16
    check_answers(raw.parse())


async def test_the_async_openai_client_gets_the_same_answers(client: openai.OpenAI, service: BackgroundService) -> None:
    expected = client.decisions.create(model="qwen3", input=STATE, questions=QUESTIONS)
    async with openai.AsyncOpenAI(base_url=f"{service.url}/v1", api_key=KEY, max_retries=0) as aclient:
        raw = await aclient.decisions.with_raw_response.create(model="any", input=STATE, questions=QUESTIONS)
    decision = raw.parse()
    assert "x-request-id" in raw.headers
    check_answers(decision)
    for got, want in zip(decision.answers, expected.answers, strict=True):
        if got.type == "predicate":
            assert got.probability == pytest.approx(want.probability, abs=1e-3)
        else:
            assert [p.probability for p in got.probabilities] == pytest.approx(
                [p.probability for p in want.probabilities], abs=1e-3
            )


def test_a_mixed_request_of_every_input_item_kind(client: openai.OpenAI) -> None:
    conversation: list[Any] = [
        {"role": "system", "content": "You triage support tickets."},
        {"role": "developer", "content": [{"type": "input_text", "text": "Tickets come from the web form."}]},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "My order:"},
                {"type": "input_json", "data": {"order": 1234, "paid": [20, 20]}},
            ],
        },
        {"role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup_order", "arguments": '{"order": 1234}'},
        {"type": "function_call_output", "call_id": "c1", "output": "two payments of 20 found"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "refund", "input": "order 1234, 20"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "refused"}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot refund this."}]},
    ]
    raw = client.decisions.with_raw_response.create(
        model="qwen3",
        input=conversation,
        questions=QUESTIONS,
        prompt_cache_key="tickets",
        safety_identifier="user-7",
        prompt_cache_options={"mode": "implicit", "ttl": "30m"},
    )
    assert raw.status_code == 200
    check_answers(raw.parse())


def test_langchain_openai_s_classifier_gets_what_the_in_process_decision_model_answers(
    service: BackgroundService, server_url: str
) -> None:
    """OpenAIClassifier through the service and QwenDecisionModel in process ask the same
    prompts for these questions (a Noul without criteria, a Choice, a Score): the same
    answers, for text and for a conversation with a tool call."""
    remote = OpenAIClassifier(model="qwen3", base_url=f"{service.url}/v1", api_key=KEY, max_retries=0)
    local = QwenDecisionModel(base_url=server_url, model="qwen3")
    conversation = [
        HumanMessage("Where is my parcel? It is a week late."),
        AIMessage("Let me look.", tool_calls=[{"name": "track", "args": {"parcel": 7}, "id": "c1"}]),
        ToolMessage("lost in transit", tool_call_id="c1"),
    ]
    for state in (STATE, conversation):
        request = {"state": state, "questions": LC_QUESTIONS}
        got: ClassifierResponse = remote.invoke(request)
        want = local.invoke(request)
        assert list(got.answers) == ["team", "anger", "urgent"] and got.model == "qwen3"
        assert got.request_id and got.usage is not None and got.usage["input_tokens"] > 0
        for name in ("team", "anger"):
            answer = got.answers[name]
            assert math.isclose(sum(answer.probabilities.values()), 1.0, abs_tol=1e-3)  # type: ignore[union-attr]
            assert answer.probabilities == pytest.approx(want.answers[name].probabilities, abs=1e-3)  # type: ignore[union-attr]
        assert got.choices["team"].choice == want.choices["team"].choice
        assert got.nouls["urgent"].noul == pytest.approx(want.nouls["urgent"].noul, abs=1e-3)
        assert got.scores["anger"].legend == {0: "Calm.", 1: "Annoyed.", 2: "Furious."}


async def test_langchain_openai_s_classifier_async(service: BackgroundService) -> None:
    remote = OpenAIClassifier(model="qwen3", base_url=f"{service.url}/v1", api_key=KEY, max_retries=0)
    got = await remote.ainvoke({"state": {"ticket": STATE, "tier": "gold"}, "questions": LC_QUESTIONS})
    assert list(got.answers) == ["team", "anger", "urgent"] and got.request_id
    assert math.isclose(sum(got.scores["anger"].probabilities.values()), 1.0, abs_tol=1e-3)


def test_a_wrong_or_missing_key_is_401(service: BackgroundService) -> None:
    wrong = openai.OpenAI(base_url=f"{service.url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        wrong.decisions.create(model="qwen3", input=STATE, questions=QUESTIONS[:1])
    assert refused.value.status_code == 401 and "x-request-id" in refused.value.response.headers
    bare = httpx.post(f"{service.url}/v1/decisions", json={"model": "m", "input": "x", "questions": QUESTIONS[:1]})
    assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"


def test_an_image_part_is_422_naming_it(client: openai.OpenAI, service: BackgroundService) -> None:
    image = "data:image/png;base64,iVBORw0KGgo="
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        client.decisions.create(
            model="qwen3",
            input=[
                {
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Look:"}, {"type": "input_image", "image_url": image}],
                }
            ],
            questions=QUESTIONS[:1],
        )
    assert refused.value.body == {
        "type": "InvalidInputError",
        "message": "input[0].content[1] is an input_image part: this model reads text only",
    }
    remote = OpenAIClassifier(model="qwen3", base_url=f"{service.url}/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.UnprocessableEntityError, match=r"input\[0\]\.content\[1\] is an input_image part"):
        state = HumanMessage(
            content=[{"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": image}}]
        )
        remote.invoke({"state": state, "questions": {"urgent": LC_QUESTIONS["urgent"]}})


def test_too_many_questions_is_422(client: openai.OpenAI) -> None:
    questions = [{**QUESTIONS[0], "name": f"q{k}"} for k in range(MAX_QUESTIONS + 1)]
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        client.decisions.create(model="qwen3", input=STATE, questions=questions)
    assert refused.value.status_code == 422 and "questions" in refused.value.body["message"]  # type: ignore[index]
    assert len(client.decisions.create(model="qwen3", input=STATE, questions=questions[:-1]).answers) == MAX_QUESTIONS


def test_the_document_lists_the_route(service: BackgroundService) -> None:
    document = httpx.get(f"{service.url}/openapi.json").json()
    route = document["paths"]["/v1/decisions"]["post"]
    assert route["security"] and {"200", "401", "413", "422", "429", "504"} <= set(route["responses"])
    assert document["components"]["schemas"]["DecisionsRequest"]["properties"]["questions"]["maxItems"] == MAX_QUESTIONS
