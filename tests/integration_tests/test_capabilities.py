"""Against the real vLLM server: any label set with probabilities (checked against the server's
own prompt logprobs), multi-label in both modes, few-shot examples and selectors, hierarchies,
dedup, caches and the Runnable protocol, with requests counted through the recording proxy."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.example_selectors import SemanticSimilarityExampleSelector
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_qwen_fast import Classification, QwenClassifier
from langchain_qwen_fast._core.prompting import softmax
from langchain_qwen_fast.caches import InMemoryCache
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from tests.integration_tests.conftest import served
from tests.support.proxy import FaultProxy

LABELS = list(AG_NEWS_LABELS)


@pytest.fixture(scope="module")
def multi_head_server_url() -> Iterator[str]:
    """A tiny random multi-label (sigmoid) Qwen3ForSequenceClassification, 4 classes, as ``qwen3-multi``."""
    yield from served("multi_head_server_url")


def sequence_logprob(server_url: str, prompt: str, label: str, end: bool) -> float:
    """The server's own logprob of ``label`` (then the end of the answer, if ``end``) after
    ``prompt``, from the prompt logprobs of the prompt and the label together."""
    continuation = label + ("<|im_end|>" if end else "")
    root = server_url.removesuffix("/v1")
    tokens = httpx.post(
        f"{root}/tokenize", json={"model": "qwen3", "prompt": continuation, "add_special_tokens": False}
    )
    n = len(tokens.json()["tokens"])
    body = {"model": "qwen3", "prompt": prompt + continuation, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
    entries = httpx.post(f"{server_url}/completions", json=body, timeout=60).json()["choices"][0]["prompt_logprobs"]
    ids = httpx.post(
        f"{root}/tokenize", json={"model": "qwen3", "prompt": prompt + continuation, "add_special_tokens": False}
    ).json()["tokens"]
    return sum(entries[i][str(ids[i])]["logprob"] for i in range(len(ids) - n, len(ids)))


@pytest.mark.parametrize(
    "labels",
    [
        ["Sci/Tech", "Sci-Fi", "Sci", "Sport"],  # shared first tokens, a label that prefixes others
        ["billing dispute", "billing address change", "account locked", "account deletion request"],
    ],
)
def test_sequence_scores_are_the_servers_label_probabilities(server_url: str, labels: list[str]) -> None:
    classifier = QwenClassifier(labels=labels, base_url=server_url)
    plan = classifier.prepare()
    assert plan.scoring == "label_sequences"
    for text in ["A telescope sees further than ever", "Please change where my invoices go"]:
        result = classifier.invoke(text)
        prompt = plan.render(text).removesuffix(plan.steps[0].path_text)
        prefixes = {label for label in labels if any(o != label and o.startswith(label) for o in labels)}
        reference = softmax([sequence_logprob(server_url, prompt, x, x in prefixes) for x in labels])
        assert result.scores is not None
        assert [result.scores[x] for x in labels] == pytest.approx(reference, abs=2e-3)
        assert result.label == labels[reference.index(max(reference))]


@pytest.mark.parametrize("n", [40, 200])
def test_large_label_sets_get_a_probability_each(proxy: FaultProxy, n: int) -> None:
    labels = [f"Topic {i}" for i in range(n)]
    classifier = QwenClassifier(labels=labels, base_url=proxy.base_url, batch_size=256)
    results = classifier.batch(["first text", "second text"])
    for result in results:
        assert result.scoring == "label_sequences" and result.scores is not None and len(result.scores) == n
        assert math.isclose(sum(result.scores.values()), 1.0, rel_tol=1e-9)
        assert result.scores[result.label] == max(result.scores.values())
    steps = len(classifier.prepare().steps)
    sent = [p for c in proxy.calls("/v1/completions")[1:] for p in c.body["prompt"]]
    assert len(sent) == 2 * steps  # one prompt per text and trie node, no more


def test_multi_label_generate_scores_are_yes_over_yes_and_no(proxy: FaultProxy, server_url: str) -> None:
    classifier = QwenClassifier(labels=LABELS, base_url=proxy.base_url, multi_label=True, threshold=0.5)
    plan = classifier.prepare()
    texts = ["Stocks rally after the final whistle", "A new chip ships"]
    results = classifier.batch(texts)
    yes, no = plan.steps[0].allowed
    for text, result in zip(texts, results):
        assert result.multi_label and result.scores is not None
        for k, label in enumerate(LABELS):
            body = {
                "model": "qwen3",
                "prompt": plan.render(text, k),
                "max_tokens": 1,
                "temperature": 0,
                "logprobs": 1,
                "logprob_token_ids": [yes, no],
                "allowed_token_ids": [yes, no],
                "return_tokens_as_token_ids": True,
            }
            step = httpx.post(f"{server_url}/completions", json=body).json()["choices"][0]["logprobs"]["top_logprobs"][
                0
            ]
            want = softmax([step[f"token_id:{yes}"], step[f"token_id:{no}"]])[0]
            assert result.scores[label] == pytest.approx(want, abs=2e-3)
        assert result.labels == [x for x in LABELS if result.scores[x] >= 0.5]
    # A text's label questions travel together, after the shared head and the text.
    (request,) = [c for c in proxy.calls("/v1/completions") if len(c.body["prompt"]) > 1]
    assert len(request.body["prompt"]) == 8
    shared = plan.head + "<|im_start|>user\n" + texts[0]
    assert all(p.startswith(shared) for p in request.body["prompt"][:4])


def test_hierarchical_labels(server_url: str) -> None:
    tree = {"Sports": ["Football", "Tennis"], "Business": ["Markets", "Deals"], "World": ["Europe", "Asia"]}
    classifier = QwenClassifier(labels=tree, base_url=server_url)
    texts = headlines(12)
    results = classifier.batch(texts)
    top = QwenClassifier(labels=list(tree), base_url=server_url).batch(texts)
    for text, result, first in zip(texts, results, top):
        second = QwenClassifier(labels=tree[first.label], base_url=server_url).invoke(text)  # type: ignore[index]
        assert result.path == [first.label, second.label] and result.label == second.label
        assert result.path_scores is not None
        assert result.path_scores[0] == pytest.approx(first.scores, abs=2e-3)
        assert result.path_scores[1] == pytest.approx(second.scores, abs=2e-3)


def test_static_examples_and_a_semantic_selector(proxy: FaultProxy) -> None:
    examples = [("Late goal wins the cup", "Sports"), ("Shares slide on rate fears", "Business")]
    static = QwenClassifier(labels=LABELS, base_url=proxy.base_url, examples=examples)
    static.batch(["one headline", "another headline"])
    head = static.prepare().head
    grouped = [c for c in proxy.calls("/v1/completions") if len(c.body["prompt"]) == 2]
    assert all(p.startswith(head) for p in grouped[0].body["prompt"]) and "Late goal wins the cup" in head

    pool = [{"text": t, "label": label} for t, label in [*examples, ("Rover lands on Mars", "Sci/Tech")]]
    selector = SemanticSimilarityExampleSelector.from_examples(
        pool, DeterministicFakeEmbedding(size=32), InMemoryVectorStore, k=2
    )
    dynamic = QwenClassifier(labels=LABELS, base_url=proxy.base_url, example_selector=selector)
    result = dynamic.invoke("Rover lands on Mars again")
    assert isinstance(result, Classification)
    prompt = proxy.calls("/v1/completions")[-1].body["prompt"][0]
    chosen = [e["text"] for e in selector.select_examples({"text": "Rover lands on Mars again"})]
    base = dynamic.prepare().head
    assert prompt.startswith(base) and all(f"<|im_start|>user\n{t}<|im_end|>" in prompt[len(base) :] for t in chosen)


def test_duplicates_are_sent_once(proxy: FaultProxy) -> None:
    classifier = QwenClassifier(labels=LABELS, base_url=proxy.base_url)
    classifier.prepare()
    texts = ["same text", "other text"] * 50
    results = classifier.batch(texts)
    sent = [p for c in proxy.calls("/v1/completions")[1:] for p in c.body["prompt"]]
    assert len(sent) == 2 and all(r == results[i % 2] for i, r in enumerate(results))


def test_cache_hits_send_nothing(proxy: FaultProxy) -> None:
    cache = InMemoryCache()
    classifier = QwenClassifier(labels=LABELS, base_url=proxy.base_url, cache=cache)
    texts = headlines(20)
    first = classifier.batch(texts)
    count = len(proxy.requests)
    assert classifier.batch(texts) == first and len(proxy.requests) == count
    assert (cache.hits, cache.misses) == (20, 20)


async def test_as_completed_and_map_keep_grouping(proxy: FaultProxy) -> None:
    classifier = QwenClassifier(labels=LABELS, base_url=proxy.base_url, batch_size=10)
    classifier.prepare()
    texts = headlines(35)
    before = len(proxy.calls("/v1/completions"))
    got = dict(classifier.batch_as_completed(texts))
    agot = {i: r async for i, r in classifier.abatch_as_completed(texts)}
    assert got == agot and sorted(got) == list(range(35))
    mapped = classifier.map().invoke(texts)
    assert mapped == [got[i] for i in range(35)]
    sizes = [len(c.body["prompt"]) for c in proxy.calls("/v1/completions")[before:]]
    assert sorted(sizes) == sorted([10, 10, 10, 5] * 3)


def scores_close(a: dict[str, float] | None, b: dict[str, float] | None) -> bool:
    assert a is not None and b is not None
    return all(abs(a[k] - b[k]) < 2e-3 for k in a)


def test_tokens_and_text_prompts_agree_for_every_scoring(server_url: str, tiny_model: Any) -> None:
    for settings in (
        {"labels": ["Sci/Tech", "Sci-Fi", "Sci", "Sport"]},
        {"labels": LABELS, "multi_label": True},
        {"labels": LABELS, "examples": [("Late goal wins the cup", "Sports")]},
    ):
        texts = headlines(5)
        by_text = QwenClassifier(base_url=server_url, **settings).batch(texts)
        by_ids = QwenClassifier(base_url=server_url, tokenizer_path=str(tiny_model), **settings).batch(texts)
        assert all(scores_close(a.scores, b.scores) for a, b in zip(by_text, by_ids)), settings


# Last in this module: its server boots while the tests above run.
def test_multi_label_head_uses_the_sigmoid_probabilities(multi_head_server_url: str) -> None:
    classifier = QwenClassifier(
        labels=LABELS, base_url=multi_head_server_url, model="qwen3-multi", mode="head", multi_label=True
    )
    texts = headlines(6)
    results = classifier.batch(texts)
    root = multi_head_server_url.removesuffix("/v1")
    served = httpx.post(f"{root}/classify", json={"model": "qwen3-multi", "input": texts}).json()["data"]
    for result, item in zip(results, served):
        assert result.scores is not None and list(result.scores.values()) == pytest.approx(item["probs"], abs=1e-6)
        assert not math.isclose(sum(item["probs"]), 1.0, abs_tol=1e-3)  # independent, not a softmax
        assert result.labels == [x for x in LABELS if result.scores[x] >= 0.5]
