"""``ChatQwenFast``: a LangChain chat model for Qwen3 on a vLLM OpenAI-compatible server.

The server renders the messages through the served model's own chat template, so any chat
model works; what is Qwen3's is the thinking switch. ``enable_thinking=False`` is a template
argument that other templates ignore; ``enable_thinking=True`` is refused, on the first call,
for a model whose vocabulary has no ``</think>`` token (it has no thinking mode to turn on).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Self

import openai
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils import secret_from_env
from langchain_openai import ChatOpenAI
from pydantic import Field, PrivateAttr, SecretStr, ValidationError, model_validator

from langchain_qwen_fast._core import vllm_api
from langchain_qwen_fast._core.base_urls import DEFAULT_BASE_URL
from langchain_qwen_fast._core.prompting import THINK_TOKENS, strip_think
from langchain_qwen_fast._core.transport import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    Transport,
    TransportSettings,
    parse_retry_after,
)
from langchain_qwen_fast.errors import (
    ConfigurationError,
    ServerConnectionError,
    ServerStatusError,
    ServerTimeoutError,
    TransportError,
    is_retryable,
)

_THINK_TAGS = THINK_TOKENS
_log = logging.getLogger("langchain_qwen_fast")


def _root_cause(exc: BaseException) -> BaseException:
    """The first error under the SDK's own in ``exc``'s chain (what the HTTP client ran into),
    else ``exc``."""
    cause: BaseException | None = exc
    while isinstance(cause, openai.OpenAIError):
        cause = cause.__cause__
    return cause or exc


def _status_text(exc: openai.APIStatusError) -> str:
    """The server's own error text, kept short."""
    body = exc.body
    message = body.get("message", body) if isinstance(body, dict) else body if body is not None else exc.message
    return str(message)[:500]


def _package_error(exc: openai.OpenAIError, base_url: str) -> TransportError:
    """The openai SDK's error (or langchain-openai's subclass of it) as this package's: the
    chat model then raises what the classifier raises, and retries by the same rule."""
    if isinstance(exc, openai.APITimeoutError):  # an APIConnectionError too: asked first
        return ServerTimeoutError(f"no answer from {exc.request.url} within the timeout")
    if isinstance(exc, openai.APIConnectionError):
        root = _root_cause(exc)
        return ServerConnectionError(
            f"talking to the server at {exc.request.url} failed: {type(root).__name__}: {root}"
        )
    if isinstance(exc, openai.APIStatusError):
        hint = ""
        if exc.status_code == 404 and not base_url.rstrip("/").endswith("/v1"):
            hint = f" (the base URL {base_url} does not end in /v1, where vLLM serves the OpenAI API)"
        return ServerStatusError(
            f"server answered HTTP {exc.status_code} to {exc.response.request.url}: {_status_text(exc)}{hint}",
            status_code=exc.status_code,
            retry_after=parse_retry_after(exc.response.headers.get("retry-after")),
        )
    return TransportError(f"the chat request to {base_url} failed: {type(exc).__name__}: {exc}")


def _settings_problems(exc: ValidationError) -> str:
    """What each of pydantic's errors says, by field (a check of the whole model by its own
    message), without the values."""
    problems = []
    for error in exc.errors():
        cause = error.get("ctx", {}).get("error")
        where = ".".join(map(str, error["loc"]))
        what = str(cause) if isinstance(cause, Exception) else error["msg"]
        problems.append(f"{where}: {what}" if where else what)
    return "; ".join(problems)


class ChatQwenFast(ChatOpenAI):
    """Chat model for Qwen3 served by vLLM, with thinking off unless asked for.

    Built on ``langchain_openai.ChatOpenAI`` (message conversion, tools, structured output,
    streaming), pointed at a vLLM server and running over the same transport as
    :class:`~langchain_qwen_fast.QwenClassifier`: pooled connections, this package's retry
    policy (connection errors, timeouts, 429 honouring ``Retry-After``, 5xx; exponential
    backoff with jitter, at most ``max_retries`` retries) and timeouts.

    * ``enable_thinking`` (default False) is sent as ``chat_template_kwargs``. Thinking is
      Qwen3's: with it on, the first call asks the server's ``/tokenize`` whether ``</think>``
      is a token of the served vocabulary, and raises
      :class:`~langchain_qwen_fast.errors.ConfigurationError` where it is not (a model with no
      thinking mode, such as SmolLM2). With it off, any chat model works: other templates
      ignore the argument.
    * With thinking on, the server's reasoning text (its Qwen3 reasoning parser) lands in
      ``message.additional_kwargs["reasoning_content"]``, not in ``content``. With thinking
      off, any ``<think>…</think>`` that still leaks is removed from ``content``.
    * No streaming unless you call ``stream``/``astream``.
    * Failures raise this package's errors, as the classifier's do
      (:class:`~langchain_qwen_fast.errors.ServerConnectionError`,
      :class:`~langchain_qwen_fast.errors.ServerTimeoutError`,
      :class:`~langchain_qwen_fast.errors.ServerStatusError`, else
      :class:`~langchain_qwen_fast.errors.TransportError`), the SDK's error as ``__cause__``;
      settings that cannot work raise :class:`~langchain_qwen_fast.errors.ConfigurationError`.

    Example:
        .. code-block:: python

            chat = ChatQwenFast(base_url="http://127.0.0.1:8000/v1", model="qwen3")
            chat.invoke("Name a colour.").content
    """

    model_name: str = Field(default="qwen3", alias="model")
    """The served model name."""
    openai_api_base: str | None = Field(default=DEFAULT_BASE_URL, alias="base_url")
    """The vLLM server's OpenAI-compatible base URL."""
    openai_api_key: SecretStr | None = Field(
        alias="api_key", default_factory=secret_from_env("VLLM_API_KEY", default="EMPTY")
    )
    """Bearer token (default: ``VLLM_API_KEY``, else a placeholder vLLM ignores)."""
    request_timeout: float | tuple[float, float] | Any | None = Field(default=DEFAULT_TIMEOUT, alias="timeout")
    """Seconds allowed for each HTTP request (the classifier's default; also what the SDK
    sends each request with, which would otherwise be no limit)."""
    enable_thinking: bool = False
    """Let Qwen3 think before answering (its reasoning goes to ``reasoning_content``)."""
    stream_usage: bool | None = True
    """Ask for token usage in the last streamed chunk (vLLM supports ``stream_options``)."""
    max_retries: int | None = Field(default=None, ge=0)
    """Retries after the first try, for connection errors, timeouts, 429 and 5xx (None: the
    classifier's default)."""
    http_socket_options: Sequence[tuple[int, int, int]] | None = ()
    """Unused: requests go through this package's pooled clients (so ``ChatOpenAI``'s probe of
    the machine's socket options is skipped)."""

    _transport: Transport = PrivateAttr()
    #: whether the served model was found to have a thinking mode (checked once, when asked for)
    _thinking_checked: bool = PrivateAttr(default=False)

    def __init__(self, **kwargs: Any) -> None:
        try:
            super().__init__(**kwargs)
        except ValidationError as exc:
            # Neither the pydantic error nor its values are kept: a value checked "before" is the
            # whole input, API key included.
            raise ConfigurationError(f"ChatQwenFast: {_settings_problems(exc)}") from None

    @model_validator(mode="after")
    def validate_environment(self) -> Self:
        """Build the shared transport and hand its pooled clients to the openai SDK."""
        timeout = self.request_timeout if isinstance(self.request_timeout, (int, float)) else DEFAULT_TIMEOUT
        settings = TransportSettings(
            base_urls=(self.openai_api_base or DEFAULT_BASE_URL,),
            api_key=self.openai_api_key.get_secret_value() if self.openai_api_key else None,
            timeout=float(timeout),
            max_retries=DEFAULT_MAX_RETRIES if self.max_retries is None else self.max_retries,
        )
        self._transport = Transport.from_settings(settings)
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

    # -- thinking: Qwen3's, refused on a model without it --------------------------------------
    # The check goes through the chat's own HTTP clients (a caller's, where given), once: a
    # server that cannot tell (no /tokenize, unreachable, another API) is let through, and the
    # chat request that follows says what is wrong, if anything.
    def _thinking_request(self) -> dict[str, Any]:
        base = (self.openai_api_base or DEFAULT_BASE_URL).rstrip("/").removesuffix("/v1")
        key = self.openai_api_key.get_secret_value() if self.openai_api_key else ""
        body = {"model": self.model_name, "prompt": THINK_TOKENS[1], "add_special_tokens": False}
        headers = {"authorization": f"Bearer {key}"} if key else {}
        return {"url": base + "/tokenize", "json": body, "headers": headers}

    def _check_thinking(self) -> None:
        if self.enable_thinking and not self._thinking_checked:
            try:
                response = (self.http_client or self._transport.client).post(**self._thinking_request())
            except Exception as exc:
                response = exc
            self._thinking_checked = self._thinking_verdict(response)

    async def _acheck_thinking(self) -> None:
        if self.enable_thinking and not self._thinking_checked:
            try:
                client = self.http_async_client or self._transport.new_async_client()
                response = await client.post(**self._thinking_request())
            except Exception as exc:
                response = exc
            self._thinking_checked = self._thinking_verdict(response)

    def _thinking_verdict(self, response: Any) -> bool:
        """Whether the served vocabulary was found to have ``</think>`` as a token; raises
        :class:`ConfigurationError` where it was found not to."""
        try:
            tokens = vllm_api.parse_tokenize(response.json()) if response.status_code == 200 else None
        except Exception:
            tokens = None
        if tokens is None:
            _log.debug("thinking mode of model %r unchecked: %s", self.model_name, response)
            return False
        if len(tokens) != 1:
            raise ConfigurationError(
                f"model {self.model_name!r} has no thinking mode: {THINK_TOKENS[1]!r} is not a token of its "
                "vocabulary, so its chat template has nothing to turn on; enable_thinking=True needs a thinking "
                "model such as Qwen3 (leave it False for this one)"
            )
        return True

    # -- errors: the package's, retried by the transport's policy around the SDK's calls -----
    # run_manager is named because LangChain hands a generation its callbacks only when the
    # method has a parameter of that name.
    @contextlib.contextmanager
    def _package_errors(self) -> Iterator[None]:
        """Raise the SDK's errors as this package's (the SDK's as ``__cause__``)."""
        try:
            yield
        except openai.OpenAIError as exc:
            raise _package_error(exc, self.openai_api_base or DEFAULT_BASE_URL) from exc

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self._check_thinking()
        generate = super()._generate

        def attempt() -> ChatResult:
            with self._package_errors():
                return generate(messages, stop=stop, run_manager=run_manager, **kwargs)

        retrying, _ = self._transport.retrying(is_retryable)
        return retrying(attempt)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        await self._acheck_thinking()
        agenerate = super()._agenerate

        async def attempt() -> ChatResult:
            with self._package_errors():
                return await agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)

        _, aretrying = self._transport.retrying(is_retryable)
        return await aretrying(attempt)

    # A stream is not retried: its chunks may already have reached the caller.
    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        self._check_thinking()
        with self._package_errors():
            yield from super()._stream(*args, **kwargs)

    async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        await self._acheck_thinking()
        with self._package_errors():
            async for chunk in super()._astream(*args, **kwargs):
                yield chunk

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
