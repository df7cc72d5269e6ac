"""What is Qwen3-specific, on a real model that is not Qwen3: SmolLM2-135M-Instruct (ChatML
turns, no thinking mode, no ``<think>`` token), served by vLLM.

* The chat layout's prompt is the one SmolLM2's own chat template writes for the same
  conversation, token for token (no Qwen3 think block): checked against the server's
  rendering through ``/tokenize`` with ``messages``, for a plain prompt, a multi-label
  question and few-shot examples; and the classifier reads the headlines through it.
* ``QwenDecisionModel``'s prompts too: a set of two questions (a tail turn naming each) and a
  set of one are SmolLM2's own template for the same conversation, with no think block.
* The compact layout's tokens (``<|im_end|>``, ``<|endoftext|>``) are SmolLM2's too: it runs.
* ``ChatQwenFast``'s thinking switch: off, SmolLM2 answers through its own template; on, the
  chat model refuses before asking, naming the model and the missing token.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langchain_core.decisions import Choice, Noul

from langchain_qwen_fast import ChatQwenFast, Classification, QwenClassifier, QwenDecisionModel
from langchain_qwen_fast._core.decisions import DecisionPlan
from langchain_qwen_fast._core.prompting import ClassifierPlan
from langchain_qwen_fast.errors import ConfigurationError
from tests.integration_tests.conftest import NEWS_LABELS
from tests.integration_tests.real_language.conftest import SMOLLM2_NAME
from tests.integration_tests.real_language.test_smollm2 import HEADLINES

SYSTEM_OPEN, TURN_END = "<|im_start|>system\n", "<|im_end|>\n"


def server_tokens(url: str, **body: Any) -> list[int]:
    """The server's tokens of a prompt (``prompt``), or of a conversation rendered through the
    served model's own chat template (``messages``, assistant turn opened)."""
    root = url.removesuffix("/v1")
    defaults = {"add_generation_prompt": True} if "messages" in body else {"add_special_tokens": False}
    body = {**defaults, **body}
    reply = httpx.post(f"{root}/tokenize", json={"model": SMOLLM2_NAME, **body}, timeout=30)
    reply.raise_for_status()
    return [int(t) for t in reply.json()["tokens"]]


def system_of(plan: ClassifierPlan) -> str:
    """The system turn's content of a chat plan's head."""
    head = plan.head
    assert head.startswith(SYSTEM_OPEN)
    return head[len(SYSTEM_OPEN) : head.index(TURN_END)]


def test_the_chat_prompt_is_smollm2s_own_template_and_reads_the_headlines(smollm2_url: str) -> None:
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=smollm2_url, model=SMOLLM2_NAME)
    plan = classifier.prepare()
    assert plan.label_set.prompt_format.name == "chatml"
    text = HEADLINES["Sports"][0]
    prompt = plan.render(text)
    assert "think" not in prompt
    conversation = [{"role": "system", "content": system_of(plan)}, {"role": "user", "content": text}]
    assert server_tokens(smollm2_url, prompt=prompt) == server_tokens(smollm2_url, messages=conversation)

    texts = [(label, t) for label, group in HEADLINES.items() for t in group]
    results = classifier.batch([t for _, t in texts])
    right = sum(isinstance(r, Classification) and r.label == truth for (truth, _), r in zip(texts, results))
    print(f"SmolLM2-135M zero-shot, chat layout in its own template: {right} of {len(texts)} headlines right")
    assert right >= 9, f"{right} of {len(texts)}: little better than chance (a quarter)"


def test_a_multi_label_question_is_smollm2s_own_template(smollm2_url: str) -> None:
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=smollm2_url, model=SMOLLM2_NAME, multi_label=True)
    plan = classifier.prepare()
    text = HEADLINES["World"][0]
    question = plan.steps[1].tail  # "Does 'Sports' apply?" as a user turn, the assistant's opened
    conversation = [
        {"role": "system", "content": system_of(plan)},
        {"role": "user", "content": text},
        {"role": "user", "content": "Does 'Sports' apply?"},
    ]
    assert "think" not in question
    assert server_tokens(smollm2_url, prompt=plan.render(text, 1)) == server_tokens(smollm2_url, messages=conversation)
    result = classifier.invoke(text)
    assert isinstance(result, Classification) and result.scores is not None
    print("SmolLM2-135M zero-shot multi-label yes probabilities:", {k: round(v, 3) for k, v in result.scores.items()})


def test_few_shot_examples_are_smollm2s_own_turns(smollm2_url: str) -> None:
    example = (HEADLINES["Business"][0], "Business")
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=smollm2_url, model=SMOLLM2_NAME, examples=[example])
    plan = classifier.prepare()
    text = HEADLINES["Sci/Tech"][0]
    conversation = [
        {"role": "system", "content": system_of(plan)},
        {"role": "user", "content": example[0]},
        {"role": "assistant", "content": example[1]},
        {"role": "user", "content": text},
    ]
    assert server_tokens(smollm2_url, prompt=plan.render(text)) == server_tokens(smollm2_url, messages=conversation)


def test_the_compact_layout_runs_on_smollm2s_tokens(smollm2_url: str) -> None:
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=smollm2_url, model=SMOLLM2_NAME, prompt_layout="compact")
    plan = classifier.prepare()
    assert "<|im_start|>" not in plan.render("a headline")
    results = classifier.batch([HEADLINES["World"][1], HEADLINES["Sports"][1]])
    assert all(isinstance(r, Classification) and r.scores is not None for r in results)


def test_the_thinking_switch_off_works_and_on_is_refused(smollm2_url: str) -> None:
    answer = ChatQwenFast(base_url=smollm2_url, model=SMOLLM2_NAME, max_tokens=8, temperature=0).invoke("Say hello.")
    assert isinstance(answer.content, str) and answer.content.strip() and "think>" not in answer.content
    thinking = ChatQwenFast(base_url=smollm2_url, model=SMOLLM2_NAME, max_tokens=8, enable_thinking=True)
    with pytest.raises(ConfigurationError, match=r"model 'smollm2' has no thinking mode: '</think>' is not a token"):
        thinking.invoke("Say hello.")


@pytest.mark.filterwarnings("ignore::langchain_core._api.beta_decorator.LangChainBetaWarning")
def test_the_decision_models_prompts_are_smollm2s_own_template(smollm2_url: str) -> None:
    decisions = QwenDecisionModel(base_url=smollm2_url, model=SMOLLM2_NAME)
    sport = Noul(instructions="Is this headline about sport?")
    topic = Choice(instructions="Which section is this headline for?", criteria={"World": None, "Sports": None})
    text = HEADLINES["Sports"][0]

    def first_steps(plan: DecisionPlan) -> list[int]:
        """Each question's first step (a question whose labels share first tokens has several)."""
        starts = [0]
        for part in plan.parts[:-1]:
            starts.append(starts[-1] + len(part.steps))
        return starts

    plan = decisions.prepare({"sport": sport, "topic": topic})
    assert plan.questions is not None and plan.questions.prompt_format.name == "chatml"
    for k, step in enumerate(first_steps(plan)):
        prompt = plan.render(text, step)
        assert "think" not in prompt
        conversation = [
            {"role": "system", "content": system_of(plan)},
            {"role": "user", "content": text},
            {"role": "user", "content": f"Answer question {k + 1}."},
        ]
        assert server_tokens(smollm2_url, prompt=prompt) == server_tokens(smollm2_url, messages=conversation)

    alone = decisions.prepare({"sport": sport})
    conversation = [{"role": "system", "content": system_of(alone)}, {"role": "user", "content": text}]
    assert server_tokens(smollm2_url, prompt=alone.render(text)) == server_tokens(smollm2_url, messages=conversation)
    yes = decisions.invoke({"state": text, "questions": {"sport": sport}}).nouls["sport"].noul
    print(f"SmolLM2-135M decision model, 'about sport?' on {text!r}: P(yes) {yes:.3f}")
    assert 0.0 < yes < 1.0
