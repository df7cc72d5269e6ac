"""The paths ``qwen-fast bench`` puts side by side, all on the same texts and server: raw HTTP
(httpx) with QwenClassifier's exact request, the ``openai`` SDK, ``ChatOpenAI``, LCEL
``prompt | ChatOpenAI``, ``LLMChain`` (langchain-classic) and ``QwenClassifier``, one at a time
and in batches. Uses only the package's public API around the request bodies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from langchain_qwen_fast._core import vllm_api
from langchain_qwen_fast._core.prompting import DEFAULT_INSTRUCTIONS
from langchain_qwen_fast.bench.measure import LABELS, PathResult, ready_classifier, timed

# The chat paths get the same instructions and label list as QwenClassifier's prompt.
SYSTEM = f"{DEFAULT_INSTRUCTIONS}\nLabels: {', '.join(LABELS)}"

IDS = ", token ids"  # suffix of the paths that send token-id prompts (tokenizer_path)

#: A batch path: its name, its items, and the call that runs it.
BatchRun = tuple[str, int, Callable[[], Any]]


def chat_messages(text: str) -> list[dict[str, str]]:
    """The chat paths' messages for ``text``."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


def build_paths(
    base_url: str, model: str, tokenizer: str | None
) -> tuple[dict[str, Callable[[str], Any]], dict[str, Any]]:
    """The one-at-a-time callables and the objects the batch paths use."""
    import httpx
    from langchain_classic.chains import LLMChain
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_openai import ChatOpenAI
    from openai import OpenAI

    classifier = ready_classifier(base_url, model)
    plan = classifier.prepare()
    http = httpx.Client(timeout=30)
    completions_url = base_url.rstrip("/") + "/completions"

    def raw_http(text: str) -> Any:
        # QwenClassifier's exact request, with nothing else around it.
        body = vllm_api.completions_body(plan, model, 0, [plan.render(text)])
        return http.post(completions_url, json=body).json()["choices"][0]

    thinking_off = {"chat_template_kwargs": {"enable_thinking": False}}
    sdk = OpenAI(base_url=base_url, api_key="EMPTY")

    def openai_sdk(text: str) -> Any:
        messages: Any = chat_messages(text)
        return sdk.chat.completions.create(
            model=model, messages=messages, max_tokens=1, temperature=0, extra_body=thinking_off
        )

    # The usual LangChain set-up, as users write it (hence keyword names as ChatOpenAI documents them).
    chat_settings: dict[str, Any] = {
        "base_url": base_url,
        "api_key": "EMPTY",
        "model": model,
        "temperature": 0,
        "max_tokens": 1,
        "extra_body": thinking_off,
    }
    chat = ChatOpenAI(**chat_settings)
    prompt = ChatPromptTemplate.from_messages([("system", SYSTEM), ("human", "{text}")])
    lcel = prompt | chat
    llm_chain = LLMChain(llm=chat, prompt=prompt)

    one_at_a_time: dict[str, Callable[[str], Any]] = {
        "raw HTTP (httpx), same request": raw_http,
        "openai SDK chat.completions": openai_sdk,
        "ChatOpenAI.invoke": lambda t: chat.invoke(chat_messages(t)),
        "LCEL prompt | ChatOpenAI": lambda t: lcel.invoke({"text": t}),
        "LLMChain(ChatOpenAI)": lambda t: llm_chain.invoke({"text": t}),
        "QwenClassifier.invoke": classifier.invoke,
    }
    objects = {"chat": chat, "classifier": classifier}
    if tokenizer:
        with_ids = ready_classifier(base_url, model, tokenizer)
        one_at_a_time[f"QwenClassifier.invoke{IDS}"] = with_ids.invoke
        objects["classifier_ids"] = with_ids
    return one_at_a_time, objects


def build_head_paths(
    base_url: str, model: str, tokenizer: str | None
) -> tuple[dict[str, Callable[[str], Any]], dict[str, Any]]:
    """:func:`build_paths` for a classification-head model (``/classify``): raw HTTP with the
    classifier's exact request, and the classifier (text and token-id inputs)."""
    import httpx

    classifier = ready_classifier(base_url, model, mode="head")
    plan = classifier.prepare()
    http = httpx.Client(timeout=30)
    root = base_url.rstrip("/").removesuffix("/v1")

    def raw_http(text: str) -> Any:
        _, path, body = vllm_api.classify_call(plan, model, 0, [plan.render(text)])
        return http.post(root + path, json=body).json()["data"][0]

    one_at_a_time: dict[str, Callable[[str], Any]] = {
        "raw HTTP (httpx), same request": raw_http,
        "QwenClassifier.invoke": classifier.invoke,
    }
    objects: dict[str, Any] = {"classifier": classifier}
    if tokenizer:
        with_ids = ready_classifier(base_url, model, tokenizer, mode="head")
        one_at_a_time[f"QwenClassifier.invoke{IDS}"] = with_ids.invoke
        objects["classifier_ids"] = with_ids
    return one_at_a_time, objects


def run_batches(
    objects: dict[str, Any],
    texts: list[str],
    chat_texts: list[str],
    concurrency: int | None,
    pids: Sequence[int] = (),
) -> list[PathResult]:
    """Time the batch paths: ChatOpenAI.batch/abatch and the classifier's batch/abatch, with
    the cores the servers ``pids`` kept busy."""
    from tqdm import tqdm

    chat = objects["chat"]
    messages = [chat_messages(t) for t in chat_texts]
    config = {"max_concurrency": concurrency} if concurrency else None
    runs: list[BatchRun] = [
        ("ChatOpenAI.batch (default config)", len(messages), lambda: chat.batch(messages)),
        ("ChatOpenAI.abatch", len(messages), lambda: asyncio.run(chat.abatch(messages, config=config))),
    ]
    runs += all_classifier_runs(objects, texts, config)
    return [timed(name, n, fn, pids) for name, n, fn in tqdm(runs, desc="batch paths", unit="path")]


def all_classifier_runs(objects: dict[str, Any], texts: list[str], config: Any) -> list[BatchRun]:
    """The batch runs of the text classifier and, with a tokenizer, the token-id one."""
    runs = classifier_runs("", objects["classifier"], texts, config)
    if "classifier_ids" in objects:
        runs += classifier_runs(IDS, objects["classifier_ids"], texts, config)
    return runs


def classifier_runs(suffix: str, classifier: Any, texts: list[str], config: Any) -> list[BatchRun]:
    """``classifier``'s ``batch`` and ``abatch`` over ``texts``, named with ``suffix``."""
    # Without return_exceptions a failed item raises: a run of failures cannot pass as fast.
    return [
        (f"QwenClassifier.batch{suffix}", len(texts), lambda: classifier.batch(texts, config=config)),
        (f"QwenClassifier.abatch{suffix}", len(texts), lambda: asyncio.run(classifier.abatch(texts, config=config))),
    ]


__all__ = [
    "IDS",
    "SYSTEM",
    "BatchRun",
    "all_classifier_runs",
    "build_head_paths",
    "build_paths",
    "chat_messages",
    "classifier_runs",
    "run_batches",
]
