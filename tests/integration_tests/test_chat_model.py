"""ChatQwenFast's own behaviour against the real vLLM server (beyond the standard suites)."""

from __future__ import annotations

import re
from typing import Any

import openai
import pytest
from langchain_core.load import dumpd, load
from langchain_core.prompts import ChatPromptTemplate

from langchain_qwen_fast import (
    ChatQwenFast,
    Classification,
    QwenClassifier,
    ServerConnectionError,
    ServerStatusError,
    TransportError,
)
from tests.integration_tests.conftest import NEWS_LABELS
from tests.support.proxy import Fault, FaultProxy


def chat(url: str, **kwargs: Any) -> ChatQwenFast:
    kwargs.setdefault("max_tokens", 8)
    return ChatQwenFast(base_url=url, model="qwen3", temperature=0, **kwargs)


def test_thinking_off_by_default_and_not_streamed(proxy: FaultProxy) -> None:
    message = chat(proxy.base_url).invoke("Say hi")
    body = proxy.calls("/chat/completions")[-1].body
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert not body.get("stream")
    assert message.usage_metadata and message.usage_metadata["output_tokens"] > 0
    assert message.response_metadata["model_name"] == "qwen3"
    assert message.response_metadata["finish_reason"] in ("stop", "length")


def test_user_template_kwargs_are_kept(proxy: FaultProxy) -> None:
    model = chat(proxy.base_url, extra_body={"chat_template_kwargs": {"custom": 1}})
    model.invoke("Say hi")
    assert proxy.calls("/chat/completions")[-1].body["chat_template_kwargs"] == {"custom": 1, "enable_thinking": False}


def test_thinking_on_puts_reasoning_aside(server_url: str) -> None:
    message = chat(server_url, enable_thinking=True, max_tokens=12).invoke("Think, then answer")
    # The tiny model never closes its think block, so all it says is reasoning.
    assert message.additional_kwargs.get("reasoning_content")
    assert "<think>" not in message.content and "</think>" not in message.content
    assert message.content == ""


def test_leaked_think_block_is_removed_when_thinking_is_off(proxy: FaultProxy) -> None:
    def leak(reply: dict[str, Any]) -> dict[str, Any]:
        reply["choices"][0]["message"]["content"] = "<think>\nhmm\n</think>\n\nSports"
        return reply

    proxy.inject("/chat/completions", Fault.rewrite_reply(leak))
    assert chat(proxy.base_url).invoke("Label it").content == "Sports"


def test_stream_and_astream_work(server_url: str) -> None:
    model = chat(server_url)
    chunks = list(model.stream("Say hi"))
    assert len(chunks) > 1
    total = chunks[0]
    for chunk in chunks[1:]:
        total += chunk
    assert total.usage_metadata and total.usage_metadata["output_tokens"] == 8


async def test_astream(server_url: str) -> None:
    chunks = [c async for c in chat(server_url).astream("Say hi")]
    assert len(chunks) > 1


def test_retries_use_the_shared_policy(proxy: FaultProxy) -> None:
    model = chat(proxy.base_url, max_retries=2)
    proxy.inject("/chat/completions", Fault.http(503), Fault.http(429, {"Retry-After": "0.1"}))
    message = model.invoke("Say hi")
    assert message.usage_metadata and message.usage_metadata["output_tokens"] > 0  # the server's answer
    assert len(proxy.calls("/chat/completions")) == 3
    proxy.inject("/chat/completions", Fault.http(400))
    before = len(proxy.calls("/chat/completions"))
    with pytest.raises(ServerStatusError, match="HTTP 400") as raised:
        model.invoke("Say hi")
    assert raised.value.status_code == 400 and isinstance(raised.value.__cause__, openai.BadRequestError)
    assert len(proxy.calls("/chat/completions")) == before + 1  # no retry on 400


async def test_a_stopped_server_is_a_connection_error_naming_its_url(server_url: str) -> None:
    with FaultProxy(server_url.removesuffix("/v1")) as proxy:
        model = chat(proxy.base_url, max_retries=1)
        classifier = QwenClassifier.from_chat_model(model, labels=NEWS_LABELS)
        assert model.invoke("Say hi").usage_metadata
    # The server at the chat model's URL has stopped: its port refuses connections.
    with pytest.raises(ServerConnectionError, match=re.escape(proxy.base_url)) as raised:
        model.invoke("Say hi")
    assert isinstance(raised.value.__cause__, openai.APIConnectionError)  # the SDK's, kept
    with pytest.raises(ServerConnectionError, match=re.escape(proxy.base_url)):
        await model.ainvoke("Say hi")
    with pytest.raises(ServerConnectionError, match=re.escape(proxy.base_url)):
        list(model.stream("Say hi"))
    for failing in (model, classifier):  # one except covers both models
        with pytest.raises(TransportError):
            failing.invoke("Say hi")


def test_classifier_from_chat_model_takes_its_server_and_settings(proxy: FaultProxy) -> None:
    model = chat(proxy.base_url, api_key="sk-shared", timeout=12, max_retries=1)
    classifier = QwenClassifier.from_chat_model(model, labels=NEWS_LABELS)
    assert classifier.base_url == proxy.base_url
    assert classifier.timeout == 12 and classifier.max_retries == 1
    assert classifier.api_key is not None and classifier.api_key.get_secret_value() == "sk-shared"
    model.invoke("Say hi")
    classifier.invoke("Rates rise")
    assert {r.headers.get("authorization") for r in proxy.requests} == {"Bearer sk-shared"}


def test_chat_prompt_feeds_the_classifier(server_url: str) -> None:
    classifier = QwenClassifier.from_chat_model(chat(server_url), labels=NEWS_LABELS)
    prompt = ChatPromptTemplate.from_messages([("system", "News desk."), ("human", "{title}")])
    result = (prompt | classifier).invoke({"title": "Rates rise"})
    assert isinstance(result, Classification) and result.label in NEWS_LABELS


def test_api_key_is_secret_and_serialisation_round_trips(server_url: str) -> None:
    model = chat(server_url, api_key="sk-top-secret", enable_thinking=True)
    assert "sk-top-secret" not in repr(model)
    data = dumpd(model)
    assert "sk-top-secret" not in str(data)
    # Serialised as a reference to a secret, never its value. (langchain-core merges
    # lc_secrets parent-last, so ChatOpenAI's name for it, OPENAI_API_KEY, is the one used.)
    assert data["kwargs"]["openai_api_key"] == {"lc": 1, "type": "secret", "id": ["OPENAI_API_KEY"]}
    revived = load(
        data,
        valid_namespaces=["langchain_qwen_fast"],
        allowed_objects=[ChatQwenFast],
        secrets_map={"OPENAI_API_KEY": "sk-top-secret"},
    )
    assert isinstance(revived, ChatQwenFast) and revived.enable_thinking
    assert revived.openai_api_key.get_secret_value() == "sk-top-secret"
