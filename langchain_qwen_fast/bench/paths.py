"""The paths ``qwen-fast bench`` puts side by side, all on the same texts and server: raw HTTP
(httpx) with QwenClassifier's exact request, the ``openai`` SDK, ``ChatOpenAI``, LCEL
``prompt | ChatOpenAI``, ``LLMChain`` (langchain-classic) and ``QwenClassifier``, one at a time
and in batches. Uses only the package's public API around the request bodies, which
:func:`request_body` builds as the classifier does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_qwen_fast._core import vllm_api
from langchain_qwen_fast._core.prompting import DEFAULT_INSTRUCTIONS
from langchain_qwen_fast.bench.measure import LABELS, PathResult, ready_classifier, timed

# The chat paths get the same instructions and label list as QwenClassifier's prompt.
SYSTEM = f"{DEFAULT_INSTRUCTIONS}\nLabels: {', '.join(LABELS)}"

IDS = ", token ids"  # suffix of the paths that send token-id prompts (tokenizer_path)

#: A batch path: its name, its items, and the call that runs it.
BatchRun = tuple[str, int, Callable[[], Any]]


def request_body(plan: Any, model: str, prompts: Sequence[Any]) -> dict[str, Any]:
    """The ``/v1/completions`` body the classifier sends for ``prompts`` (rendered texts or
    token ids) with ``plan`` (``QwenClassifier.prepare()``): its first question, every answer
    token's logprob asked for as it asks. The raw-HTTP paths send exactly this."""
    return vllm_api.completions_body(plan, model, 0, list(prompts))


def head_request(plan: Any, model: str, prompts: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """The path under the server's root and the body the classifier sends a classification-head
    server (``/classify``) for ``prompts``."""
    _, path, body = vllm_api.classify_call(plan, model, 0, list(prompts))
    return path, body


def chat_messages(text: str) -> list[dict[str, str]]:
    """The chat paths' messages for ``text``."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


@dataclass
class PathObjects:
    """What the batch paths run on: the chat model and the classifier, and the classifier
    sending token-id prompts where a tokenizer was given."""

    chat: Any
    classifier: Any
    classifier_ids: Any = None


def build_paths(
    base_url: str, model: str, tokenizer: str | None
) -> tuple[dict[str, Callable[[str], Any]], PathObjects]:
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
        return http.post(completions_url, json=request_body(plan, model, [plan.render(text)])).json()["choices"][0]

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
    objects = PathObjects(chat=chat, classifier=classifier)
    if tokenizer:
        objects.classifier_ids = ready_classifier(base_url, model, tokenizer)
        one_at_a_time[f"QwenClassifier.invoke{IDS}"] = objects.classifier_ids.invoke
    return one_at_a_time, objects


def run_batches(
    objects: PathObjects,
    texts: list[str],
    chat_texts: list[str],
    concurrency: int | None,
    pids: Sequence[int] = (),
) -> list[PathResult]:
    """Time the batch paths: ChatOpenAI.batch/abatch and the classifier's batch/abatch, with
    the cores the servers ``pids`` kept busy."""
    from tqdm import tqdm

    chat = objects.chat
    messages = [chat_messages(t) for t in chat_texts]
    config = {"max_concurrency": concurrency} if concurrency else None
    runs: list[BatchRun] = [
        ("ChatOpenAI.batch (default config)", len(messages), lambda: chat.batch(messages)),
        ("ChatOpenAI.abatch", len(messages), lambda: asyncio.run(chat.abatch(messages, config=config))),
    ]
    runs += all_classifier_runs(objects.classifier, objects.classifier_ids, texts, config)
    return [timed(name, n, fn, pids) for name, n, fn in tqdm(runs, desc="batch paths", unit="path")]


def all_classifier_runs(classifier: Any, classifier_ids: Any, texts: list[str], config: Any) -> list[BatchRun]:
    """The batch runs of the text classifier and, where there is one, the token-id one."""
    runs = classifier_runs("", classifier, texts, config)
    if classifier_ids is not None:
        runs += classifier_runs(IDS, classifier_ids, texts, config)
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
    "PathObjects",
    "all_classifier_runs",
    "build_paths",
    "chat_messages",
    "classifier_runs",
    "head_request",
    "request_body",
    "run_batches",
]
