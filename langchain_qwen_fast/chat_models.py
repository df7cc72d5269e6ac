"""``ChatQwenFast``: a LangChain chat model for Qwen3 on a vLLM OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import openai
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils import secret_from_env
from langchain_openai import ChatOpenAI
from pydantic import Field, PrivateAttr, SecretStr, model_validator
from typing_extensions import Self

from langchain_qwen_fast._core.prompting import strip_think
from langchain_qwen_fast._core.transport import RetryPolicy, Transport
from langchain_qwen_fast.errors import is_retryable_status

_THINK_TAGS = ("<think>", "</think>")


def _sdk_retryable(exc: BaseException) -> bool:
    """Connection errors, timeouts, 429 and 5xx from the openai SDK; never other 4xx."""
    if isinstance(exc, openai.APIStatusError):
        return is_retryable_status(exc.status_code)
    return isinstance(exc, openai.APIConnectionError)  # includes APITimeoutError


class ChatQwenFast(ChatOpenAI):
    """Chat model for Qwen3 served by vLLM, with thinking off unless asked for.

    Built on ``langchain_openai.ChatOpenAI`` (message conversion, tools, structured output,
    streaming), pointed at a vLLM server and running over the same transport as
    :class:`~langchain_qwen_fast.QwenClassifier`: pooled connections, this package's retry
    policy (connection errors, timeouts, 429 honouring ``Retry-After``, 5xx; exponential
    backoff with jitter, bounded by ``max_retries`` and ``retry_deadline``) and timeouts.

    * ``enable_thinking`` (default False) is sent as ``chat_template_kwargs``.
    * With thinking on, the server's reasoning text (its Qwen3 reasoning parser) lands in
      ``message.additional_kwargs["reasoning_content"]``, not in ``content``. With thinking
      off, any ``<think>…</think>`` that still leaks is removed from ``content``.
    * No streaming unless you call ``stream``/``astream``.

    Example:
        .. code-block:: python

            chat = ChatQwenFast(base_url="http://127.0.0.1:8000/v1", model="qwen3")
            chat.invoke("Name a colour.").content
    """

    model_name: str = Field(default="qwen3", alias="model")
    """The served model name."""
    openai_api_base: str | None = Field(default="http://127.0.0.1:8000/v1", alias="base_url")
    """The vLLM server's OpenAI-compatible base URL."""
    openai_api_key: SecretStr | None = Field(
        alias="api_key", default_factory=secret_from_env("VLLM_API_KEY", default="EMPTY")
    )
    """Bearer token (default: ``VLLM_API_KEY``, else a placeholder vLLM ignores)."""
    enable_thinking: bool = False
    """Let Qwen3 think before answering (its reasoning goes to ``reasoning_content``)."""
    stream_usage: bool | None = True
    """Ask for token usage in the last streamed chunk (vLLM supports ``stream_options``)."""
    retry_deadline: float = Field(default=60.0, gt=0)
    """No retry wait starts that would end more than this many seconds after the first try."""
    http_socket_options: Sequence[tuple[int, int, int]] | None = ()
    """Unused: requests go through this package's pooled clients (so ``ChatOpenAI``'s probe of
    the machine's socket options is skipped)."""

    _transport: Transport = PrivateAttr()

    @model_validator(mode="after")
    def validate_environment(self) -> Self:
        """Build the shared transport and hand its pooled clients to the openai SDK."""
        api_key = self.openai_api_key.get_secret_value() if self.openai_api_key else None
        retries = 3 if self.max_retries is None else self.max_retries
        timeout = self.request_timeout if isinstance(self.request_timeout, (int, float)) else 60.0
        self._transport = Transport(
            self.openai_api_base or "http://127.0.0.1:8000/v1",
            api_key=api_key,
            timeout=float(timeout),
            retry=RetryPolicy(max_attempts=retries + 1, deadline=self.retry_deadline),
        )
        self.http_client = self.http_client or self._transport.client
        self.http_async_client = self.http_async_client or self._transport.new_async_client()
        super().validate_environment()  # type: ignore[operator]
        # Retries are ours (see _generate); the SDK must not retry underneath them.
        if self.root_client is not None:
            self.root_client = self.root_client.with_options(max_retries=0)
            self.client = self.root_client.chat.completions
        self.root_async_client = self.root_async_client.with_options(max_retries=0)
        self.async_client = self.root_async_client.chat.completions
        return self

    @property
    def _llm_type(self) -> str:
        return "qwen-fast-chat"

    @classmethod
    def get_lc_namespace(cls) -> list[str]:
        """The LangChain serialisation namespace."""
        return ["langchain_qwen_fast", "chat_models"]

    @property
    def _default_params(self) -> dict[str, Any]:
        params = super()._default_params
        extra_body = dict(params.get("extra_body") or {})
        template_kwargs = {**extra_body.get("chat_template_kwargs", {}), "enable_thinking": self.enable_thinking}
        extra_body["chat_template_kwargs"] = template_kwargs
        params["extra_body"] = extra_body
        return params

    def bind_tools(
        self,
        tools: Sequence[Any],
        *,
        strict: bool | None = None,
        parallel_tool_calls: bool | None = None,
        **kwargs: Any,
    ) -> Runnable:
        """Bind tools, with two defaults chosen for a small model behind an agent:

        * ``strict=True``: vLLM holds tool-call arguments to each tool's schema under
          constrained decoding (servers without it ignore the flag);
        * ``parallel_tool_calls=False``: one tool call per turn.
        """
        return super().bind_tools(
            tools,
            strict=True if strict is None else strict,
            parallel_tool_calls=False if parallel_tool_calls is None else parallel_tool_calls,
            **kwargs,
        )

    # -- retries: the transport's policy around the SDK's (retry-free) calls ----------------
    # The messages, stop words and options pass through as LangChain gives them (by keyword);
    # run_manager is named because LangChain hands a generation its callbacks only when the
    # method has a parameter of that name.
    def _generate(self, *args: Any, run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        retrying, _ = self._transport.retrying(_sdk_retryable)
        return retrying(super()._generate, *args, run_manager=run_manager, **kwargs)

    async def _agenerate(
        self, *args: Any, run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any
    ) -> ChatResult:
        _, aretrying = self._transport.retrying(_sdk_retryable)
        return await aretrying(super()._agenerate, *args, run_manager=run_manager, **kwargs)

    # -- reasoning: split out, or stripped when thinking is off ----------------------------
    def _create_chat_result(self, response: dict | openai.BaseModel, generation_info: dict | None = None) -> ChatResult:
        result = super()._create_chat_result(response, generation_info)
        raw = response if isinstance(response, dict) else response.model_dump(warnings=False)
        generations = []
        for generation, choice in zip(result.generations, raw.get("choices") or []):
            message = generation.message
            reasoning = (choice.get("message") or {}).get("reasoning") or (choice.get("message") or {}).get(
                "reasoning_content"
            )
            if isinstance(message, AIMessage):
                message = self._split_reasoning(message, reasoning)
            generations.append(ChatGeneration(message=message, generation_info=generation.generation_info))
        return ChatResult(generations=generations, llm_output=result.llm_output)

    def _split_reasoning(self, message: AIMessage, reasoning: str | None) -> AIMessage:
        update: dict[str, Any] = {}
        if reasoning:
            update["additional_kwargs"] = {**message.additional_kwargs, "reasoning_content": reasoning}
        if isinstance(message.content, str) and any(tag in message.content for tag in _THINK_TAGS):
            if self.enable_thinking and not reasoning:
                # No server-side parser: split the block out ourselves.
                head, _, tail = message.content.partition("</think>")
                update["additional_kwargs"] = {
                    **message.additional_kwargs,
                    "reasoning_content": head.replace("<think>", "").strip(),
                }
                update["content"] = tail.strip()
            else:
                update["content"] = strip_think(message.content)
        return message.model_copy(update=update) if update else message

    def _convert_chunk_to_generation_chunk(
        self, chunk: dict, default_chunk_class: type, base_generation_info: dict | None
    ) -> ChatGenerationChunk | None:
        generation = super()._convert_chunk_to_generation_chunk(chunk, default_chunk_class, base_generation_info)
        if generation is None or not isinstance(generation.message, AIMessageChunk):
            return generation
        choices = chunk.get("choices") or [{}]
        delta = choices[0].get("delta") or {}
        reasoning = delta.get("reasoning") or delta.get("reasoning_content")
        message = generation.message
        update: dict[str, Any] = {}
        if reasoning:
            update["additional_kwargs"] = {**message.additional_kwargs, "reasoning_content": reasoning}
        if not self.enable_thinking and isinstance(message.content, str):
            # Think tags are single special tokens, so they arrive whole in one chunk.
            cleaned = message.content
            for tag in _THINK_TAGS:
                cleaned = cleaned.replace(tag, "")
            if cleaned != message.content:
                update["content"] = cleaned
        if not update:
            return generation
        return ChatGenerationChunk(
            message=message.model_copy(update=update), generation_info=generation.generation_info
        )
