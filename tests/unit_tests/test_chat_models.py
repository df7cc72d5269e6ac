"""ChatQwenFast without a server: langchain-tests' standard unit suite, and the reasoning and
thinking rules on canned replies."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_openai import ChatOpenAI
from langchain_tests.unit_tests import ChatModelUnitTests

from langchain_qwen_fast import ChatQwenFast


class TestChatQwenFastUnit(ChatModelUnitTests):
    """The standard unit suite (no network: the base URL points nowhere)."""

    @property
    def chat_model_class(self) -> type[ChatQwenFast]:
        return ChatQwenFast

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model": "qwen3", "base_url": "http://127.0.0.1:1/v1"}

    @property
    def init_from_env_params(self) -> tuple[dict, dict, dict]:
        return (
            {"VLLM_API_KEY": "sk-from-env"},
            {"model": "qwen3"},
            {"openai_api_key": "sk-from-env"},
        )

    @pytest.mark.xfail(
        reason="langchain-core 1.8's load() admits only classes in its own built-in mapping, even with "
        "allowed_objects='all' as langchain-tests 1.1.9 passes; no third-party class can pass. "
        "Round-trip with an explicit allowlist is tested in integration_tests/test_chat_model.py",
        strict=True,
    )
    def test_serdes(self, model: Any, snapshot: Any) -> None:
        super().test_serdes(model, snapshot)


def canned_chat(content: str, reasoning: str | None = None, **kwargs: Any) -> tuple[ChatQwenFast, list[Any]]:
    """A chat model whose HTTP client answers every chat completion with ``content``."""
    sent: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning"] = reasoning
        return httpx.Response(
            200,
            json={
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": "qwen3",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            },
        )

    client = httpx.Client(transport=httpx.MockTransport(handler))
    chat = ChatQwenFast(base_url="http://chat.test/v1", http_client=client, **kwargs)
    return chat, sent


def test_thinking_is_off_by_default_and_sent_as_template_kwargs() -> None:
    chat, sent = canned_chat("Paris")
    assert chat.invoke("Capital of France?").content == "Paris"
    body = __import__("json").loads(sent[0].content)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body.get("stream") in (None, False)


def test_leaked_think_block_is_stripped_when_thinking_is_off() -> None:
    chat, _ = canned_chat("<think>\nhmm\n</think>\n\nParis")
    assert chat.invoke("q").content == "Paris"


def test_reasoning_goes_to_reasoning_content_when_thinking_is_on() -> None:
    chat, sent = canned_chat("Paris", reasoning="France's capital is Paris.", enable_thinking=True)
    message = chat.invoke("q")
    assert isinstance(message, AIMessage)
    assert message.content == "Paris"
    assert message.additional_kwargs["reasoning_content"] == "France's capital is Paris."
    assert __import__("json").loads(sent[0].content)["chat_template_kwargs"] == {"enable_thinking": True}


def test_reasoning_is_split_on_our_side_without_a_server_parser() -> None:
    chat, _ = canned_chat("<think>\nweighing\n</think>\n\nParis", enable_thinking=True)
    message = chat.invoke("q")
    assert message.content == "Paris" and message.additional_kwargs["reasoning_content"] == "weighing"


def test_bind_tools_defaults_strict_and_one_call_per_turn() -> None:
    def lookup(city: str) -> str:
        """Look a city up."""
        return city

    bound = ChatQwenFast(base_url="http://chat.test/v1").bind_tools([lookup])
    kwargs = bound.kwargs  # type: ignore[attr-defined]
    assert kwargs["parallel_tool_calls"] is False
    assert kwargs["tools"][0]["function"]["strict"] is True


def test_api_key_is_secret() -> None:
    chat = ChatQwenFast(base_url="http://chat.test/v1", api_key="sk-hidden-9")
    assert "sk-hidden-9" not in repr(chat) and "sk-hidden-9" not in str(chat.to_json())


@pytest.mark.parametrize(("status", "retried"), [(503, True), (429, True), (400, False), (404, False)])
def test_retry_rule_is_the_packages(status: int, retried: bool) -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(status, json={"error": {"message": "no"}}, headers={"retry-after": "0"})

    chat = ChatQwenFast(
        base_url="http://chat.test/v1", http_client=httpx.Client(transport=httpx.MockTransport(handler)), max_retries=2
    )
    with pytest.raises(Exception, match="no"):
        chat.invoke("q")
    assert len(calls) == (3 if retried else 1)


async def test_the_retrying_generation_hands_on_the_run_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    """LangChain gives a generation its callbacks' run manager only when the method names that
    parameter; the retry wrapper names it and passes it on to ChatOpenAI's own generation."""
    given: list[Any] = []
    reply = ChatResult(generations=[ChatGeneration(message=AIMessage("Paris"))])

    def generate(self: Any, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        given.append(run_manager)
        return reply

    async def agenerate(self: Any, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        given.append(run_manager)
        return reply

    monkeypatch.setattr(ChatOpenAI, "_generate", generate)
    monkeypatch.setattr(ChatOpenAI, "_agenerate", agenerate)
    chat = ChatQwenFast(base_url="http://chat.test/v1")
    assert chat.invoke("q").content == "Paris"
    assert (await chat.ainvoke("q")).content == "Paris"
    assert [type(m) for m in given] == [CallbackManagerForLLMRun, AsyncCallbackManagerForLLMRun]
