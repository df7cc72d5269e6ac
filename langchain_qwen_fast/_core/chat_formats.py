"""The served model's chat format, found once at set-up, before the plans are learnt.

The classifier renders its prompts client-side (see :mod:`~langchain_qwen_fast._core.prompting`),
so it must write them as the served model's own chat template would. Its vocabulary tells
which format that is (:func:`~langchain_qwen_fast._core.prompting.fit_format`): Qwen3's, with
the empty think block, where ``<think>`` and ``</think>`` are tokens of their own; plain ChatML
where only ``<|im_start|>`` and ``<|im_end|>`` are; neither is refused. A Qwen3 vocabulary is
taken at its word (the fast path: one round of ``/tokenize`` requests, none with a local
tokenizer). Any other is checked against the server's own chat template: vLLM's
``/tokenize`` renders a conversation through it (``messages``), and its tokens must be the
classifier's rendering of the same conversation, or the set-up stops with an error that says
where they part. The decision engine asks the same of its server (:func:`chat_format_steps`):
its prompts are written in the same two formats.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from langchain_qwen_fast._core import vllm_api
from langchain_qwen_fast._core.procedure import Procedure
from langchain_qwen_fast._core.prompting import (
    FORMAT_PROBE_TOKENS,
    QWEN3,
    TEMPLATE_PROBE,
    LabelSet,
    PromptFormat,
    fit_format,
    format_token_counts,
    render_template_probe,
)
from langchain_qwen_fast._core.settings import EngineSettings
from langchain_qwen_fast._core.transport import Call, Steps, gather
from langchain_qwen_fast.errors import ConfigurationError

_log = logging.getLogger("langchain_qwen_fast")


def tokenize_chat_call(model: str, messages: Sequence[dict[str, str]]) -> Call:
    """Render ``messages`` through the served model's chat template with the assistant turn
    opened and thinking off, and tokenise the result (vLLM's ``/tokenize`` with ``messages``)."""
    body = {
        "model": model,
        "messages": list(messages),
        "add_generation_prompt": True,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    return ("POST", "/tokenize", body)


def fitted_settings_steps(procedure: Procedure) -> Steps[EngineSettings | Exception]:
    """The procedure's settings with every chat label set written in the served model's
    format (the settings themselves where nothing changes), or the error a probe request
    ended with, or a local tokenizer's refusal (returned, not raised: the set-up runs beside
    it, and its own error about the same server, or that tokenizer, says more). A head reads
    the bare text and needs no format; an engine without label sets (a decision model's)
    asks nothing.

    Raises:
        ConfigurationError: the vocabulary lacks the tokens a layout is made of, or the
            server's chat template writes the turns otherwise than the fitted format.
    """
    settings = procedure.settings
    if settings.mode == "head" or not settings.label_sets:
        return settings
    counts = yield from _vocabulary_steps(procedure)
    if isinstance(counts, Exception):
        return counts
    whose = f"model {procedure.model!r}"
    try:
        fitted = {node: fit_format(labels, counts, whose) for node, labels in settings.label_sets.items()}
    except ConfigurationError as exc:
        # A local tokenizer's refusal waits for the set-up's own check of that tokenizer
        # against the server's: a tokenizer of another model is the likelier fault.
        if procedure.tokenizer is not None:
            return exc
        raise
    formats = {labels.prompt_format for labels in fitted.values() if labels.layout == "chat"}
    for prompt_format in formats - {QWEN3}:
        yield from check_template_steps(procedure, prompt_format)
    if fitted == dict(settings.label_sets):
        return settings
    _log.info("%s has no Qwen3 think tokens: its prompts are written in plain ChatML", whose)
    return dataclasses.replace(settings, label_sets=fitted)


def chat_format_steps(procedure: Procedure) -> Steps[PromptFormat | Exception]:
    """The served model's chat format, as :func:`fitted_settings_steps` fits a chat label set
    to it (checked against the server's own template where it is not Qwen3's), or the error a
    probe request ended with (returned, not raised: the caller's set-up runs beside it, and
    its own error about the same server says more).

    Raises:
        ConfigurationError: the vocabulary lacks ChatML's turn tokens, or the server's chat
            template writes the turns otherwise than the fitted format.
    """
    counts = yield from _vocabulary_steps(procedure)
    if isinstance(counts, Exception):
        return counts
    whose = f"model {procedure.model!r}"
    prompt_format = fit_format(_CHAT, counts, whose).prompt_format
    if prompt_format != QWEN3:
        yield from check_template_steps(procedure, prompt_format)
        _log.info("%s has no Qwen3 think tokens: its prompts are written in plain ChatML", whose)
    return prompt_format


#: A chat label set of nothing: what :func:`chat_format_steps` fits to ask for the format alone.
_CHAT = LabelSet((), {}, "")


def _vocabulary_steps(procedure: Procedure) -> Steps[dict[str, int] | Exception]:
    """How many tokens each of :data:`FORMAT_PROBE_TOKENS` takes in the served vocabulary (the
    local tokenizer's where there is one: no request), or the error a probe request ended with."""
    if procedure.tokenizer is not None:
        encoded = yield from procedure.tokenize_steps(FORMAT_PROBE_TOKENS)
    else:
        replies = yield [vllm_api.tokenize_call(procedure.model, t) for t in FORMAT_PROBE_TOKENS]
        failed = next((r for r in replies if isinstance(r, Exception)), None)
        if failed is not None:
            return failed
        encoded = [vllm_api.parse_tokenize(r) for r in replies]
    return format_token_counts(encoded)


def check_template_steps(procedure: Procedure, prompt_format: PromptFormat) -> Steps[None]:
    """Raise unless the server's chat template renders :data:`TEMPLATE_PROBE` as the same
    tokens as the package's prompts do in ``prompt_format``. A server that cannot render it (no
    chat template, no tokenizer) leaves the format as the vocabulary chose it."""
    ours_text = render_template_probe(prompt_format)
    theirs_reply, ours = yield from gather(
        [_reply_steps(tokenize_chat_call(procedure.model, TEMPLATE_PROBE)), procedure.tokenize_steps([ours_text])]
    )
    if isinstance(theirs_reply, Exception):
        _log.info(
            "model %r: the server did not render its chat template (%s); prompts written in %s unchecked",
            procedure.model,
            theirs_reply,
            prompt_format.name,
        )
        return
    theirs = vllm_api.parse_tokenize(theirs_reply)
    if theirs != ours[0]:
        raise ConfigurationError(_mismatch(procedure.model, prompt_format, ours[0], theirs))


def _reply_steps(call: Call) -> Steps[Any]:
    """One call's reply, or the exception it ended with."""
    return (yield [call])[0]


def _mismatch(model: str, prompt_format: PromptFormat, ours: list[int], theirs: list[int]) -> str:
    at = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return (
        f"the chat template of model {model!r} writes a system and a user turn otherwise than the "
        f"package's {prompt_format.name} prompts: token {at} differs ({theirs[at : at + 4]} from the "
        f"template, {ours[at : at + 4]} in the package's prompt). Classifiers and decision models write "
        "Qwen3 and plain ChatML prompts only; serve the model with a ChatML chat template (vLLM's "
        "--chat-template), or, for a classifier, a classification head (mode='head'), which reads the bare text"
    )


__all__ = ["chat_format_steps", "check_template_steps", "fitted_settings_steps", "tokenize_chat_call"]
