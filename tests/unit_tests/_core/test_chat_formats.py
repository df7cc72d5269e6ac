"""What is Qwen3's in the classifier's and the decision model's prompts, and how a model that
is not Qwen3 is served: the chat format fitted from the served vocabulary, checked against the
server's own chat template, or refused with an error that names the model and what it lacks."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from langchain_core.decisions import Choice, Noul

from langchain_qwen_fast import ChatQwenFast, QwenClassifier, QwenDecisionModel
from langchain_qwen_fast._core.deciding import Decider
from langchain_qwen_fast._core.decisions import DecisionQuestion, QuestionSet
from langchain_qwen_fast._core.prompting import (
    CHATML,
    FORMAT_PROBE_TOKENS,
    PROMPT_SUFFIX,
    QWEN3,
    LabelSet,
    fit_format,
    fit_format_to_tokenizer,
    local_plan,
)
from langchain_qwen_fast.errors import ConfigurationError, QwenFastError
from tests.support.fake_vllm import FakeVLLM, ToyTokenizer, toy_tokenize

LABELS = ["World", "Sports", "Business"]
URL = "http://vllm.test/v1"
EVERY_TOKEN = dict.fromkeys(FORMAT_PROBE_TOKENS, 1)
NO_THINK = {**EVERY_TOKEN, "<think>": 3, "</think>": 3}


def chatml_template(messages: list[dict[str, str]]) -> str:
    """SmolLM2's chat template (ChatML, no thinking mode), with the assistant turn opened."""
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


def llama_template(messages: list[dict[str, str]]) -> str:
    """A template of other turns, over a vocabulary that happens to hold ChatML's tokens."""
    turns = "".join(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content']}<|eot_id|>" for m in messages)
    return turns + "<|start_header_id|>assistant<|end_header_id|>\n\n"


class OtherModel(FakeVLLM):
    """The canned server, serving a model whose vocabulary splits the think tags (no thinking
    mode) and whose chat template is ``template`` (None: the server renders none)."""

    def __init__(self, template: Callable[[list[dict[str, str]]], str] | None = chatml_template) -> None:
        super().__init__()
        self.template = template
        #: the conversations rendered through the template
        self.rendered: list[list[dict[str, str]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        if request.url.path.endswith("/tokenize") and "messages" in body:
            self.rendered.append(body["messages"])
            if self.template is None:
                return self._json({"error": {"message": "no chat template", "type": "BadRequestError"}}, 400)
            ids = toy_tokenize(self.template(body["messages"]))
            return self._json({"tokens": ids, "count": len(ids), "max_model_len": 512})
        if request.url.path.endswith("/tokenize") and body.get("prompt") in ("<think>", "</think>"):
            return self._json({"tokens": [7, 8, 9], "count": 3, "max_model_len": 512})
        return super().__call__(request)


class NoTurns(OtherModel):
    """A model whose vocabulary splits ChatML's turn markers as well as the think tags."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        if request.url.path.endswith("/tokenize") and body.get("prompt") in ("<|im_start|>", "<|im_end|>"):
            return self._json({"tokens": [4, 5, 6], "count": 3, "max_model_len": 512})
        return super().__call__(request)


def classifier(fake: FakeVLLM, **kwargs: Any) -> QwenClassifier:
    settings: dict[str, Any] = {"labels": LABELS, "base_url": URL, "model": "qwen3", "http_transport": fake.transport}
    return QwenClassifier(**{**settings, **kwargs})


# -- the format, from the vocabulary ---------------------------------------------------------
def test_a_qwen3_vocabulary_keeps_the_qwen3_prompt_as_it_is() -> None:
    labels = LabelSet.build(LABELS)
    assert fit_format(labels, EVERY_TOKEN, "model 'q'") is labels
    assert labels.answer_suffix == PROMPT_SUFFIX == "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_a_chatml_vocabulary_without_think_tokens_gets_no_think_block() -> None:
    fitted = fit_format(LabelSet.build(LABELS, multi_label=True), NO_THINK, "model 'smol'")
    assert fitted.prompt_format == CHATML
    assert fitted.answer_suffix == "<|im_end|>\n<|im_start|>assistant\n"
    assert "think" not in fitted.question("World") + fitted.render_head()


@pytest.mark.parametrize("missing", ["<|im_start|>", "<|im_end|>"])
def test_a_vocabulary_without_chatml_turns_is_refused_naming_the_model_and_the_token(missing: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"model 'llama' has no ChatML chat template: \['{missing}'\]"):
        fit_format(LabelSet.build(LABELS), {**EVERY_TOKEN, missing: 4}, "model 'llama'")


def test_the_compact_layout_needs_only_its_own_tokens() -> None:
    compact = LabelSet.build(LABELS, layout="compact")
    assert fit_format(compact, NO_THINK, "model 'smol'") is compact
    with pytest.raises(
        ConfigurationError, match=r"model 'x' cannot take the compact prompt layout: \['<\|endoftext\|>'\]"
    ):
        fit_format(compact, {**EVERY_TOKEN, "<|endoftext|>": 5}, "model 'x'")


def test_a_local_plan_is_written_in_its_tokenizers_format() -> None:
    """Training renders its prompts with the tokenizer: in the format the server is asked in."""

    class NoThink(ToyTokenizer):
        def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[Any]:
            return [self.Encoding([1, 2, 3] if t in ("<think>", "</think>") else toy_tokenize(t)) for t in texts]

    assert local_plan(LabelSet.build(LABELS), ToyTokenizer()).label_set.prompt_format == QWEN3
    plan = local_plan(LabelSet.build(LABELS), NoThink())
    assert plan.label_set.prompt_format == CHATML and plan.render("t").endswith("t<|im_end|>\n<|im_start|>assistant\n")
    assert fit_format_to_tokenizer(LabelSet.build(LABELS), NoThink()).prompt_format == CHATML


# -- the set-up, against a server ---------------------------------------------------------------
def test_on_qwen3_the_probe_rides_along_the_set_ups_first_round() -> None:
    fake = FakeVLLM()
    classifier(fake).invoke("a text")
    first_round = fake.requests[: len(FORMAT_PROBE_TOKENS) + 1]  # sent together, so in any order
    assert sorted(r.body["prompt"] if r.body else r.path for r in first_round) == sorted(
        ["/v1/models", *FORMAT_PROBE_TOKENS]
    )
    assert not any("messages" in (r.body or {}) for r in fake.requests)  # no template check on Qwen3
    assert classifier(fake).prepare().render("t").endswith("t" + PROMPT_SUFFIX)


def test_a_chatml_model_is_asked_through_its_own_template() -> None:
    fake = OtherModel()
    model = classifier(fake)
    result = model.invoke("Cup final tonight")
    assert result.label in LABELS and result.scores is not None
    plan = model.prepare()
    prompt = plan.render("Cup final tonight")
    assert "think" not in prompt
    system = plan.head.removeprefix("<|im_start|>system\n").removesuffix("<|im_end|>\n")
    conversation = [{"role": "system", "content": system}, {"role": "user", "content": "Cup final tonight"}]
    assert prompt == chatml_template(conversation)
    assert len(fake.rendered) == 1
    sent = [p for r in fake.calls("/v1/completions") for p in r.body["prompt"] if "Cup final" in p]
    assert sent and not any("think" in p for p in sent)


def test_a_template_that_writes_other_turns_is_refused_saying_where_it_parts() -> None:
    with pytest.raises(ConfigurationError, match=r"chat template of model 'qwen3' writes a system and a user turn"):
        classifier(OtherModel(llama_template)).prepare()


def test_a_server_that_renders_no_template_leaves_the_vocabularys_choice() -> None:
    plan = classifier(OtherModel(template=None)).prepare()
    assert plan.label_set.prompt_format == CHATML


def test_a_head_needs_no_format() -> None:
    fake = OtherModel(llama_template)
    fake.head_classes = 3
    classifier(fake, mode="head").invoke("a text")
    assert not fake.calls("/tokenize")


# -- the decision model, against a server --------------------------------------------------------
QUESTIONS = {
    "topic": Choice(instructions="What is it about?", criteria={"sport": "Games.", "politics": None}),
    "urgent": Noul(instructions="Is it breaking news?", criteria={"true": "Just happened.", "false": None}),
}
STATE = "Cup final tonight"


def decisions(fake: FakeVLLM) -> QwenDecisionModel:
    return QwenDecisionModel(base_url=URL, model="qwen3", http_transport=fake.transport)


def test_on_qwen3_the_decision_models_probe_rides_along_its_first_round() -> None:
    fake = FakeVLLM()
    decisions(fake).invoke({"state": STATE, "questions": QUESTIONS})
    first_round = fake.requests[: len(FORMAT_PROBE_TOKENS) + 1]
    assert sorted(r.body["prompt"] if r.body else r.path for r in first_round) == sorted(
        ["/v1/models", *FORMAT_PROBE_TOKENS]
    )
    assert not any("messages" in (r.body or {}) for r in fake.requests)
    sent = [p for r in fake.calls("/v1/completions") for p in r.body["prompt"] if STATE in p]
    assert len(sent) == 2 and all(p.endswith(PROMPT_SUFFIX) for p in sent)


def test_a_chatml_models_decisions_are_asked_through_its_own_template() -> None:
    fake = OtherModel()
    model = decisions(fake)
    response = model.invoke({"state": STATE, "questions": QUESTIONS})
    assert set(response.answers) == set(QUESTIONS)
    plan = model.prepare(QUESTIONS)
    assert plan.questions is not None and plan.questions.prompt_format == CHATML
    system = plan.head.removeprefix("<|im_start|>system\n").removesuffix("<|im_end|>\n")
    for k in range(len(QUESTIONS)):
        conversation = [
            {"role": "system", "content": system},
            {"role": "user", "content": STATE},
            {"role": "user", "content": f"Answer question {k + 1}."},
        ]
        assert plan.render(STATE, k) == chatml_template(conversation)
    assert len(fake.rendered) == 1  # the template is asked once, at set-up
    sent = [p for r in fake.calls("/v1/completions") for p in r.body["prompt"] if STATE in p]
    assert len(sent) == 2 and not any("think" in p for p in sent)


def test_a_decision_model_on_a_model_without_chatml_turns_is_refused_before_it_asks() -> None:
    fake = NoTurns()
    with pytest.raises(ConfigurationError, match=r"model 'qwen3' has no ChatML chat template: \['<\|im_start\|>'"):
        decisions(fake).invoke({"state": STATE, "questions": QUESTIONS})
    assert not fake.calls("/v1/completions")


def test_a_decision_model_on_a_template_of_other_turns_is_refused_saying_where_it_parts() -> None:
    fake = OtherModel(llama_template)
    with pytest.raises(ConfigurationError, match=r"chat template of model 'qwen3' writes a system and a user turn"):
        decisions(fake).prepare(QUESTIONS)
    assert not fake.calls("/v1/completions")


def test_a_decision_model_on_a_server_that_renders_no_template_keeps_the_vocabularys_choice() -> None:
    plan = decisions(OtherModel(template=None)).prepare(QUESTIONS)
    assert plan.questions is not None and plan.questions.prompt_format == CHATML
    assert all("think" not in step.tail for step in plan.steps)


def test_a_decider_with_a_local_tokenizer_probes_the_format_without_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_qwen_fast._core import engine

    monkeypatch.setattr(engine, "load_tokenizer", lambda path: ToyTokenizer())
    fake = FakeVLLM()
    decider = Decider(classifier(fake, tokenizer_path="toy").engine)
    questions = QuestionSet((DecisionQuestion.noul("urgent", "Is it breaking news?"),))
    (outcome,) = decider.decide([(STATE, questions)])
    assert not isinstance(outcome, Exception)
    assert not [r for r in fake.calls("/tokenize") if r.body["prompt"] in FORMAT_PROBE_TOKENS]


# -- the chat model's thinking switch -----------------------------------------------------------
def chat_model(tokens: list[int] | None, **kwargs: Any) -> tuple[ChatQwenFast, list[str]]:
    """A chat model whose server tokenises ``</think>`` as ``tokens`` (None: no ``/tokenize``,
    404) and answers every chat completion with "Paris"; also the paths it was asked."""
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        if request.url.path == "/tokenize":
            if tokens is None:
                return httpx.Response(404, json={"detail": "Not Found"})
            return httpx.Response(200, json={"tokens": tokens, "count": len(tokens), "max_model_len": 2048})
        choice = {"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}
        return httpx.Response(200, json={"id": "c", "object": "chat.completion", "created": 0, "choices": [choice]})

    chat = ChatQwenFast(
        base_url="http://chat.test/v1",
        model="smol",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
        http_async_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
        **kwargs,
    )
    return chat, asked


#: ``</think>`` in SmolLM2's vocabulary (three ordinary tokens) and in Qwen3's (one)
SPLIT = [44, 17400, 46]
WHOLE = [151668]


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "stream"])
async def test_thinking_on_a_model_without_it_is_refused(how: str) -> None:
    chat, asked = chat_model(SPLIT, enable_thinking=True)
    with pytest.raises(ConfigurationError, match=r"model 'smol' has no thinking mode: '</think>' is not a token"):
        if how == "invoke":
            chat.invoke("q")
        elif how == "ainvoke":
            await chat.ainvoke("q")
        else:
            list(chat.stream("q"))
    assert asked == ["/tokenize"]  # refused before the chat request


def test_thinking_off_asks_nothing_more_of_any_model() -> None:
    chat, asked = chat_model(SPLIT)
    assert chat.invoke("q").content == "Paris"
    assert asked == ["/v1/chat/completions"]


def test_thinking_on_a_thinking_model_is_checked_once() -> None:
    chat, asked = chat_model(WHOLE, enable_thinking=True)
    chat.invoke("q")
    chat.invoke("q")
    assert asked == ["/tokenize", "/v1/chat/completions", "/v1/chat/completions"]


def test_a_server_that_cannot_tell_is_let_through() -> None:
    chat, asked = chat_model(None, enable_thinking=True)
    assert chat.invoke("q").content == "Paris"
    assert asked[-1] == "/v1/chat/completions"


def test_a_local_tokenizer_of_another_model_is_named_before_the_format(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tokenizer_path whose vocabulary lacks ChatML's turns is more likely another model's
    tokenizer than the served model's: the set-up's check of it against the server speaks first."""
    from langchain_qwen_fast._core import engine

    class NoTurns(ToyTokenizer):
        def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[Any]:
            return [self.Encoding(toy_tokenize(t.replace("<|im_start|>", "< im_start >"))) for t in texts]

    monkeypatch.setattr(engine, "load_tokenizer", lambda path: NoTurns())
    with pytest.raises(QwenFastError, match="does not match the server's"):
        classifier(FakeVLLM(), tokenizer_path="toy").invoke("a text")
