"""QwenDecisionModel's request procedure against a canned vLLM (no network): every question
type, batches and their independence from grouping, the refusals, and a classifier's own
labels as a decision model. The tests of a decision model's kind that langchain-tests does
not ship yet (batch order, one response from ``stream``, typed errors, distributions that
sum to 1) are here too."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from langchain_core.decisions import BaseDecisionModel, Box, Choice, ClassifierResponse, Noul, Score
from langchain_core.exceptions import ModelRefusalError
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_qwen_fast import (
    ConfigurationError,
    InvalidInputError,
    QwenClassifier,
    QwenDecisionModel,
    ServerStatusError,
)
from langchain_qwen_fast.caches import InMemoryCache
from tests.support.fake_vllm import FakeVLLM, status

URL = "http://vllm.test/v1"
TEAM = Choice(
    instructions="Which team should handle this?",
    criteria={"billing": "Payments and invoices.", "technical": "Bugs.", "sales": None},
)
URGENT = Noul(instructions="Is this urgent?", criteria={"true": "Something is down.", "false": None})
ANGER = Score(instructions="How angry is the customer?", criteria=["Calm.", "Annoyed.", "Furious."])
QUESTIONS = {"team": TEAM, "urgent": URGENT, "anger": ANGER}
STATES = [f"Ticket {i}: my invoice number {i * 7} is wrong and the app crashes" for i in range(40)]


@pytest.fixture
def fake() -> FakeVLLM:
    return FakeVLLM()


def make(fake: FakeVLLM, **kwargs: Any) -> QwenDecisionModel:
    return QwenDecisionModel(base_url=URL, model="qwen3", http_transport=fake.transport, **kwargs)


def completions(fake: FakeVLLM) -> list[Any]:
    return fake.calls("/v1/completions")


def check_distributions(response: ClassifierResponse) -> None:
    for answer in response.answers.values():
        if answer.type in ("choice", "score"):
            assert math.isclose(sum(answer.probabilities.values()), 1.0, abs_tol=1e-3)
            assert 0.0 <= answer.confidence <= 1.0


def test_it_is_a_langchain_decision_model_with_the_classifier_s_connection_fields() -> None:
    model = QwenDecisionModel(base_url=URL, model="qwen3", timeout=5, max_retries=1)
    assert isinstance(model, BaseDecisionModel)
    assert model.engine.settings.timeout == 5 and model.engine.settings.base_urls == (URL,)


def test_every_question_type_is_answered_with_its_whole_distribution(fake: FakeVLLM) -> None:
    response = make(fake).invoke({"state": "Production is down and I was billed twice!", "questions": QUESTIONS})
    assert list(response.answers) == ["team", "urgent", "anger"]
    team, urgent, anger = response.choices["team"], response.nouls["urgent"], response.scores["anger"]
    assert team.choice == max(team.probabilities, key=team.probabilities.__getitem__)
    assert team.confidence == max(team.probabilities.values())
    assert set(team.probabilities) == {"billing", "technical", "sales"}
    assert 0.0 <= urgent.noul <= 1.0
    assert anger.legend == {0: "Calm.", 1: "Annoyed.", 2: "Furious."}
    assert anger.score == pytest.approx(sum(level * p for level, p in anger.probabilities.items()))
    check_distributions(response)
    assert response.model == "qwen3"
    assert response.usage is not None and response.usage["input_tokens"] > 0 and response.usage["output_tokens"] == 3


def test_questions_about_one_state_share_a_request_where_they_ask_the_same_tokens(fake: FakeVLLM) -> None:
    nouls = {f"q{i}": Noul(instructions=f"Does it mention topic {i}?") for i in range(8)}
    make(fake).invoke({"state": "A long ticket " * 20, "questions": nouls})
    (request,) = [c for c in completions(fake) if "A long ticket" in str(c.body["prompt"])]
    prompts = request.body["prompt"]
    assert len(prompts) == 8
    state_at = prompts[0].index("A long ticket")
    assert len({p[: state_at + 280] for p in prompts}) == 1  # the questions and the state first, shared


def test_one_question_set_over_many_states_goes_in_a_few_grouped_requests(fake: FakeVLLM) -> None:
    responses = make(fake).batch([{"state": s, "questions": {"team": TEAM}} for s in STATES])
    assert len(responses) == len(STATES)
    assert len(completions(fake)) < len(STATES) / 2


def test_an_answer_never_depends_on_batching_grouping_or_order(fake: FakeVLLM) -> None:
    model = make(fake)
    requests = [{"state": s, "questions": QUESTIONS} for s in STATES[:12]]
    alone = [model.invoke(r) for r in requests]
    together = model.batch(requests)
    backwards = model.batch(list(reversed(requests)))[::-1]
    in_small_groups = make(fake, batch_size=1).batch(requests)
    assert [r.answers for r in together] == [r.answers for r in alone]
    assert [r.answers for r in backwards] == [r.answers for r in alone]
    assert [r.answers for r in in_small_groups] == [r.answers for r in alone]


def test_requests_with_different_question_sets_are_answered_side_by_side(fake: FakeVLLM) -> None:
    model = make(fake)
    requests = [
        {"state": "first", "questions": {"team": TEAM}},
        {"state": "second", "questions": {"urgent": URGENT}},
        {"state": "third", "questions": {"team": TEAM}},
    ]
    responses = model.batch(requests)
    assert [list(r.answers) for r in responses] == [["team"], ["urgent"], ["team"]]
    assert responses[0].answers == model.invoke(requests[0]).answers


async def test_abatch_and_ainvoke_give_what_batch_and_invoke_give(fake: FakeVLLM) -> None:
    model = make(fake)
    requests = [{"state": s, "questions": QUESTIONS} for s in STATES[:6]]
    assert [r.answers for r in await model.abatch(requests)] == [r.answers for r in model.batch(requests)]
    assert (await model.ainvoke(requests[0])).answers == model.invoke(requests[0]).answers
    gathered = await asyncio.gather(*(model.ainvoke(r) for r in requests))
    assert [r.answers for r in gathered] == [r.answers for r in model.batch(requests)]


def test_stream_yields_one_whole_response(fake: FakeVLLM) -> None:
    chunks = list(make(fake).stream({"state": "hello", "questions": QUESTIONS}))
    assert len(chunks) == 1 and isinstance(chunks[0], ClassifierResponse) and len(chunks[0].answers) == 3


def test_messages_keep_their_roles_and_json_renders_alike_every_time(fake: FakeVLLM) -> None:
    model = make(fake)
    conversation = [
        SystemMessage("You are support."),
        HumanMessage("My card was charged twice."),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {"id": 7}, "id": "c1"}]),
        ToolMessage("two charges found", tool_call_id="c1"),
    ]
    # a conversation is answered as its transcript, a turn a line with its role
    transcript = (
        "system: You are support.\nuser: My card was charged twice.\n"
        'assistant: tool call {"args": {"id": 7}, "name": "lookup"}\ntool: two charges found'
    )
    answered = model.invoke({"state": conversation, "questions": QUESTIONS}).answers
    assert answered == model.invoke({"state": transcript, "questions": QUESTIONS}).answers
    assert answered != model.invoke({"state": transcript.replace("twice", "once"), "questions": QUESTIONS}).answers
    # JSON is answered as its compact text with sorted keys, whatever the order it was built in
    first = model.invoke({"state": {"b": 1, "a": [HumanMessage("hi")]}, "questions": QUESTIONS})
    second = model.invoke({"state": {"a": [HumanMessage("hi")], "b": 1}, "questions": QUESTIONS})
    as_text = model.invoke({"state": '{"a":[{"content":"hi","role":"user"}],"b":1}', "questions": QUESTIONS})
    assert first.answers == second.answers == as_text.answers


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        ({"state": "x", "questions": {}}, "non-empty mapping"),
        ({"state": "x", "questions": {"where": Box(instructions="Find the cat")}}, "question 'where'.*Box"),
        ({"state": "x", "questions": {"q": {"type": "poll", "instructions": "?"}}}, "question 'q' is not a Noul"),
        (
            {
                "state": [HumanMessage([{"type": "image", "base64": "AAAA", "mime_type": "image/png"}])],
                "questions": QUESTIONS,
            },
            r"state\[0\]\.content\[0\] is a 'image' block",
        ),
        ({"state": {"pic": {"type": "image", "url": "http://x/a.png"}}, "questions": QUESTIONS}, r"state\['pic'\]"),
        (
            {"state": "x", "questions": {"q": Noul(instructions=[{"type": "image", "url": "http://x/a.png"}])}},
            r"question 'q' instructions\[0\] is a 'image' block",
        ),
        ({"state": "   ", "questions": QUESTIONS}, "state is empty"),
        ({"text": "x"}, "'state' and 'questions'"),
    ],
)
def test_what_the_model_cannot_answer_is_a_typed_error_naming_it_before_anything_is_sent(
    fake: FakeVLLM, request_: Any, named: str
) -> None:
    model = make(fake)
    with pytest.raises(InvalidInputError, match=named):
        model.invoke(request_)
    assert not completions(fake)


def test_one_bad_request_in_a_batch_keeps_its_error_and_the_others_their_answers(fake: FakeVLLM) -> None:
    model = make(fake)
    good = [{"state": s, "questions": QUESTIONS} for s in STATES[:3]]
    results = model.batch([good[0], {"state": "x", "questions": {}}, good[1], good[2]], return_exceptions=True)
    assert isinstance(results[1], InvalidInputError)
    assert [r.answers for r in (results[0], results[2], results[3])] == [r.answers for r in model.batch(good)]
    with pytest.raises(InvalidInputError):
        model.batch([good[0], {"state": "x", "questions": {}}])


def test_labels_sharing_first_tokens_and_one_label_choices_are_answered(fake: FakeVLLM) -> None:
    shared = Choice(instructions="Which?", criteria={"Sci/Tech": None, "Sci/Fi": None, "Sports": None})
    only = Choice(instructions="Which?", criteria={"only": None})
    response = make(fake).invoke({"state": "rockets", "questions": {"shared": shared, "only": only}})
    check_distributions(response)
    assert response.choices["only"].choice == "only" and response.choices["only"].confidence == 1.0
    told_apart = response.choices["shared"].probabilities  # past their shared first tokens, a step per trie node
    assert len({told_apart["Sci/Tech"], told_apart["Sci/Fi"], told_apart["Sports"]}) == 3


def test_long_label_sets_and_rubrics_are_answered(fake: FakeVLLM) -> None:
    many = Choice(instructions="Which topic?", criteria={f"topic{i}": None for i in range(60)})
    levels = Score(instructions="Rate it", criteria=[f"level {i}" for i in range(12)])
    response = make(fake).invoke({"state": "text", "questions": {"many": many, "levels": levels}})
    check_distributions(response)
    assert len(response.choices["many"].probabilities) == 60 and set(response.scores["levels"].legend) == set(range(12))


def test_abstention_refuses_a_choice_below_the_threshold_and_temperature_flattens(fake: FakeVLLM) -> None:
    with pytest.raises(ModelRefusalError, match="team"):
        make(fake, abstain_below=1.0).invoke({"state": "hello", "questions": {"team": TEAM}})
    sharp = make(fake).invoke({"state": "hello", "questions": {"team": TEAM}}).choices["team"]
    flat = make(fake, temperature=10.0).invoke({"state": "hello", "questions": {"team": TEAM}}).choices["team"]
    assert flat.choice == sharp.choice and flat.confidence < sharp.confidence


def test_the_cache_answers_a_repeated_request_without_the_network(fake: FakeVLLM) -> None:
    model = make(fake, cache=InMemoryCache())
    first = model.invoke({"state": "hello", "questions": QUESTIONS})
    asked = len(completions(fake))
    again = model.invoke({"state": "hello", "questions": QUESTIONS})
    assert again.answers == first.answers and len(completions(fake)) == asked


def test_server_failures_are_the_package_s_typed_errors(fake: FakeVLLM) -> None:
    model = make(fake, max_retries=0)
    model.invoke({"state": "warm", "questions": QUESTIONS})
    fake.fail("/v1/completions", status(503), status(503), status(503))
    with pytest.raises(ServerStatusError):
        model.invoke({"state": "cold", "questions": QUESTIONS})


def test_a_model_the_server_does_not_serve_and_bad_settings_are_configuration_errors(fake: FakeVLLM) -> None:
    with pytest.raises(ConfigurationError, match="not served"):
        QwenDecisionModel(base_url=URL, model="other", http_transport=fake.transport).invoke(
            {"state": "x", "questions": QUESTIONS}
        )
    with pytest.raises(ConfigurationError, match="timeout"):
        QwenDecisionModel(base_url=URL, timeout=0)
    with pytest.raises(ConfigurationError, match="max_retires"):
        QwenDecisionModel(base_url=URL, max_retires=2)


def test_the_key_never_shows_in_the_repr() -> None:
    assert "sk-hidden" not in repr(QwenDecisionModel(base_url=URL, api_key="sk-hidden"))


# -- a classifier as a decision model ------------------------------------------------------
def test_a_classifier_answers_its_own_labels_as_a_choice(fake: FakeVLLM) -> None:
    classifier = QwenClassifier(labels=["cheap", "strong"], base_url=URL, http_transport=fake.transport)
    decisions = classifier.as_decision_model()
    route = Choice(instructions="Which model?", criteria={"strong": "Hard tasks.", "cheap": "Easy tasks."})
    answer = decisions.invoke({"state": HumanMessage("Prove the theorem"), "questions": {"route": route}})
    expected = classifier.invoke("Prove the theorem")
    assert answer.choices["route"].choice == expected.label
    assert answer.choices["route"].probabilities == expected.scores
    with pytest.raises(InvalidInputError, match="own labels"):
        decisions.invoke({"state": "x", "questions": {"u": URGENT}})


def test_only_flat_single_label_classifiers_become_decision_models() -> None:
    with pytest.raises(ConfigurationError, match="multi-label or hierarchical"):
        QwenClassifier(labels=["a", "b"], multi_label=True, base_url=URL).as_decision_model()


def test_a_model_whose_entry_gives_no_context_is_answered_as_the_classifier_answers_it(fake: FakeVLLM) -> None:
    # vLLM lists a LoRA adapter with no max_model_len of its own: the context is unknown, and
    # the server's own limit is the only check (it used to be read as a context of 0 tokens).
    fake.models["adapter"] = 0
    model = QwenDecisionModel(base_url=URL, model="adapter", http_transport=fake.transport)
    response = model.invoke({"state": STATES[0], "questions": QUESTIONS})
    assert set(response.answers) == set(QUESTIONS)
