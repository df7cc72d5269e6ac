"""Head mode: a Qwen3ForSequenceClassification checkpoint on vLLM's pooling runner (/classify)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from langchain_qwen_fast import Classification, ContextLengthError, InvalidInputError, QwenClassifier, QwenFastError
from tests.integration_tests.conftest import NEWS_LABELS
from tests.support.proxy import FaultProxy


def head(url: str, **kwargs: Any) -> QwenClassifier:
    return QwenClassifier(labels=NEWS_LABELS, base_url=url, model="qwen3-cls", mode="head", **kwargs)


def assert_valid(result: Any) -> None:
    assert isinstance(result, Classification) and result.scoring == "head"
    assert result.label in NEWS_LABELS
    assert math.isclose(sum(result.scores.values()), 1.0, rel_tol=1e-9)
    assert result.scores[result.label] == max(result.scores.values())


def test_head_invoke_and_batch_keep_order(head_server_url: str, news_texts: list[str]) -> None:
    classifier = head(head_server_url)
    texts = [f"{news_texts[i % len(news_texts)]} ({i})" for i in range(150)]
    batched = classifier.batch(texts)
    for result in batched:
        assert_valid(result)
    for i in (0, 33, 149):
        alone = classifier.invoke(texts[i])
        assert alone.label == batched[i].label
        assert alone.scores["World"] == pytest.approx(batched[i].scores["World"], abs=2e-3)
    assert len({r.label for r in batched}) >= 2  # the head's answers vary by text


async def test_head_async(head_server_url: str, news_texts: list[str]) -> None:
    classifier = head(head_server_url)
    results = await classifier.abatch(news_texts[:40], config={"max_concurrency": 2})
    assert [r.label for r in results] == [r.label for r in classifier.batch(news_texts[:40])]
    assert_valid(await classifier.ainvoke({"text": news_texts[0]}))


def test_head_requests_are_grouped(head_server_url: str, news_texts: list[str]) -> None:
    with FaultProxy(head_server_url.removesuffix("/v1")) as proxy:
        classifier = head(proxy.base_url, batch_size=25)
        classifier.batch(news_texts[:100])
        grouped = [c.body for c in proxy.calls("/classify") if len(c.body["input"]) > 1]
        assert [len(b["input"]) for b in grouped] == [25, 25, 25, 25]
        # Requests run concurrently, so they are recorded in any order; each is a slice of the
        # input, in order, of bare texts (no chat template).
        slices = sorted((b["input"] for b in grouped), key=lambda group: news_texts.index(group[0]))
        assert [text for group in slices for text in group] == news_texts[:100]


def test_head_errors(head_server_url: str) -> None:
    classifier = head(head_server_url)
    results = classifier.batch(["fine", "", None, "word " * 2000, "also fine"], return_exceptions=True)
    assert_valid(results[0]) and assert_valid(results[4])
    assert isinstance(results[1], InvalidInputError) and isinstance(results[2], InvalidInputError)
    assert isinstance(results[3], ContextLengthError)
    with pytest.raises(QwenFastError, match="4-class head but 3 labels"):
        QwenClassifier(labels=["a", "b", "c"], base_url=head_server_url, model="qwen3-cls", mode="head").invoke("x")


def test_head_with_token_id_prompts(head_server_url: str, news_texts: list[str]) -> None:
    from tests.integration_tests.conftest import ROOT

    texts = [f"{news_texts[i % len(news_texts)]} ({i})" for i in range(70)]
    by_text = head(head_server_url).batch(texts)
    by_ids = head(head_server_url, tokenizer_path=str(ROOT / ".models" / "qwen3-tiny-cls")).batch(texts)
    for a, b in zip(by_text, by_ids):
        assert a.label == b.label and a.scores == pytest.approx(b.scores, abs=1e-6)
