"""QwenDecisionModel against the real CPU vLLM server: every question type, mixed requests,
message and JSON states, answers independent of batching and order, the refusals, usage with
the prefix cache's share, LangChain's ModelRouterMiddleware under ``create_agent``, and a
classifier's own labels routing an agent."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelChoice, ModelRouterMiddleware
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.decisions import Box, Choice, ChoiceAnswer, ClassifierResponse, Noul, Score
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_qwen_fast import ChatQwenFast, InvalidInputError, QwenClassifier, QwenDecisionModel
from langchain_qwen_fast.testing.samples import headlines

pytestmark = pytest.mark.filterwarnings("ignore::langchain_core._api.beta_decorator.LangChainBetaWarning")

TEAM = Choice(
    instructions="Which team should handle this request?",
    criteria={"billing": "Payments, invoices, refunds.", "technical": "Bugs and outages.", "sales": "Pricing."},
)
URGENT = Noul(instructions="Does this need an answer today?", criteria={"true": "Something is down.", "false": None})
ANGER = Score(instructions="How angry is the customer?", criteria=["Calm.", "Annoyed.", "Furious.", "Abusive."])
SHARED = Choice(instructions="Which section?", criteria={"Sci/Tech": None, "Sci/Fi": None, "Sports": None})
QUESTIONS = {"team": TEAM, "urgent": URGENT, "anger": ANGER, "section": SHARED}


@pytest.fixture(scope="module")
def decisions(server_url: str) -> QwenDecisionModel:
    return QwenDecisionModel(base_url=server_url, model="qwen3")


def sums_to_one(response: ClassifierResponse) -> bool:
    return all(
        math.isclose(sum(a.probabilities.values()), 1.0, abs_tol=1e-3)
        for a in response.answers.values()
        if a.type in ("choice", "score")
    )


def close(a: ClassifierResponse, b: ClassifierResponse) -> bool:
    """The same answers, within the few ulps batched float math may move a logprob."""
    for name, x in a.answers.items():
        y = b.answers[name]
        got = [x.noul] if x.type == "noul" else list(x.probabilities.values())
        want = [y.noul] if y.type == "noul" else list(y.probabilities.values())
        if not all(math.isclose(p, q, abs_tol=1e-4) for p, q in zip(got, want, strict=True)):
            return False
    return True


def test_every_question_type_in_one_mixed_request(decisions: QwenDecisionModel) -> None:
    response = decisions.invoke({"state": "The app is down and I was charged twice!!", "questions": QUESTIONS})
    assert list(response.answers) == list(QUESTIONS)
    assert sums_to_one(response)
    team, anger = response.choices["team"], response.scores["anger"]
    assert team.choice in TEAM.criteria and team.confidence == max(team.probabilities.values())
    assert 0.0 <= response.nouls["urgent"].noul <= 1.0
    assert 0.0 <= anger.score <= 3.0 and anger.legend == dict(enumerate(ANGER.criteria))
    assert set(response.choices["section"].probabilities) == set(SHARED.criteria)
    assert response.usage is not None and response.usage["input_tokens"] > 0 and response.usage["output_tokens"] >= 4


def test_usage_reports_the_prefix_cache_s_share_once_the_questions_are_cached(decisions: QwenDecisionModel) -> None:
    decisions.invoke({"state": "warm the cache " * 30, "questions": QUESTIONS})
    response = decisions.invoke({"state": "a second state " * 30, "questions": QUESTIONS})
    assert response.usage is not None
    assert response.usage["input_token_details"]["cache_read"] > 0


def test_message_and_json_states_are_answered(decisions: QwenDecisionModel) -> None:
    conversation = [
        SystemMessage("You are the support desk."),
        HumanMessage("My invoice is wrong."),
        AIMessage("", tool_calls=[{"name": "find_invoice", "args": {"number": 17}, "id": "call-1"}]),
        ToolMessage("invoice 17: charged twice", tool_call_id="call-1"),
        HumanMessage("So fix it!"),
    ]
    json_state = {"ticket": {"subject": "Refund", "body": "Charged twice"}, "history": [HumanMessage("hello")]}
    responses = decisions.batch(
        [{"state": conversation, "questions": QUESTIONS}, {"state": json_state, "questions": QUESTIONS}]
    )
    assert all(sums_to_one(r) for r in responses)
    reordered = {"history": json_state["history"], "ticket": {"body": "Charged twice", "subject": "Refund"}}
    assert close(decisions.invoke({"state": reordered, "questions": QUESTIONS}), responses[1])


def test_answers_do_not_depend_on_batching_grouping_or_order(server_url: str, decisions: QwenDecisionModel) -> None:
    requests = [{"state": text, "questions": QUESTIONS} for text in headlines(12)]
    alone = [decisions.invoke(r) for r in requests]
    batched = decisions.batch(requests)
    backwards = decisions.batch(requests[::-1])[::-1]
    one_a_request = QwenDecisionModel(base_url=server_url, model="qwen3", batch_size=1).batch(requests)
    for response in (*batched, *backwards, *one_a_request):
        assert sums_to_one(response)
    assert all(close(a, b) for a, b in zip(alone, batched, strict=True))
    assert all(close(a, b) for a, b in zip(alone, backwards, strict=True))
    assert all(close(a, b) for a, b in zip(alone, one_a_request, strict=True))
    other = {"state": requests[1]["state"], "questions": {"urgent": URGENT}}
    mixed = decisions.batch([requests[0], other])
    assert close(mixed[0], alone[0]) and close(mixed[1], decisions.invoke(other))


async def test_abatch_matches_batch(decisions: QwenDecisionModel) -> None:
    requests = [{"state": text, "questions": {"team": TEAM}} for text in headlines(40)]
    together = await decisions.abatch(requests)
    gathered = await asyncio.gather(*(decisions.ainvoke(r) for r in requests[:8]))
    assert all(close(a, b) for a, b in zip(together, decisions.batch(requests), strict=True))
    assert all(close(a, b) for a, b in zip(gathered, together[:8], strict=True))


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        ({"state": "x", "questions": {"where": Box(instructions="Find the logo")}}, "'where'"),
        (
            {"state": [HumanMessage([{"type": "image", "url": "https://example.com/a.png"}])], "questions": QUESTIONS},
            r"state\[0\]\.content\[0\]",
        ),
        ({"state": "x", "questions": {}}, "non-empty"),
    ],
)
def test_what_the_model_cannot_answer_is_refused_naming_it(
    decisions: QwenDecisionModel, request_: Any, named: str
) -> None:
    with pytest.raises(InvalidInputError, match=named):
        decisions.invoke(request_)


def test_a_bad_request_in_a_batch_keeps_its_error_alone(decisions: QwenDecisionModel) -> None:
    good = {"state": "fine", "questions": QUESTIONS}
    results = decisions.batch(
        [good, {"state": "x", "questions": {"b": Box(instructions="?")}}, good], return_exceptions=True
    )
    assert isinstance(results[1], InvalidInputError)
    assert isinstance(results[0], ClassifierResponse) and close(results[0], results[2])


class _Calls(BaseCallbackHandler):
    def __init__(self) -> None:
        self.count = 0

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self.count += 1


def test_the_router_middleware_chooses_the_agent_s_model_under_create_agent(server_url: str) -> None:
    counts = {"quick": _Calls(), "thorough": _Calls()}
    models = {
        route: ChatQwenFast(base_url=server_url, model="qwen3", max_completion_tokens=4, callbacks=[calls])
        for route, calls in counts.items()
    }
    router = ModelRouterMiddleware(
        choices={
            "quick": ModelChoice(model=models["quick"], criteria="Short factual questions."),
            "thorough": ModelChoice(model=models["thorough"], criteria="Proofs and analysis."),
        },
        instructions="Choose the least costly model suited to the task.",
        classifier=QwenDecisionModel(base_url=server_url, model="qwen3"),
    )
    agent = create_agent(models["quick"], middleware=[router])
    state = agent.invoke({"messages": [HumanMessage("What is 2 + 2?")]})
    route = state["model_route"]
    assert isinstance(route, ChoiceAnswer) and set(route.probabilities) == {"quick", "thorough"}
    assert math.isclose(sum(route.probabilities.values()), 1.0, abs_tol=1e-3)
    assert counts[route.choice].count == 1
    assert counts["thorough" if route.choice == "quick" else "quick"].count == 0
    assert isinstance(state["messages"][-1], AIMessage)


async def test_a_classifier_s_own_labels_route_an_agent(server_url: str) -> None:
    classifier = QwenClassifier(labels=["quick", "thorough"], base_url=server_url, model="qwen3")
    chat = ChatQwenFast(base_url=server_url, model="qwen3", max_completion_tokens=4)
    router = ModelRouterMiddleware(
        choices={
            "quick": ModelChoice(model=chat, criteria="easy"),
            "thorough": ModelChoice(model=chat, criteria="hard"),
        },
        instructions="Choose.",
        classifier=classifier.as_decision_model(),
    )
    state = await create_agent(chat, middleware=[router]).ainvoke({"messages": [HumanMessage("Prove it")]})
    expected = await classifier.ainvoke("Prove it")
    assert state["model_route"].choice == expected.label
    assert state["model_route"].probabilities == pytest.approx(expected.scores, abs=1e-4)
