"""A real server started with ``--skip-tokenizer-init``: it reads token-id prompts only and
skips vLLM's per-request detokenising. The classifier with the model's tokenizer gets the
scores a server with a tokenizer gives; without one, it is told why the server refuses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast import QwenClassifier, QwenFastError
from langchain_qwen_fast.testing.samples import SAMPLE_EXAMPLES
from tests.integration_tests.conftest import NEWS_LABELS, served


@pytest.fixture(scope="module")
def ids_only_server_url() -> Iterator[str]:
    """A server of the tiny model started with ``--skip-tokenizer-init``, for this module only
    (conftest runs it first, and spawns it with the shared servers)."""
    yield from served("ids_only_server_url")


CASES: dict[str, dict[str, Any]] = {
    "single-label": {},
    "multi-label": {"multi_label": True},
    "8 examples": {"examples": list(SAMPLE_EXAMPLES)},
}


@pytest.mark.parametrize("case", CASES)
def test_scores_match_a_server_with_a_tokenizer(
    case: str, server_url: str, ids_only_server_url: str, tiny_model: Path, news_texts: list[str]
) -> None:
    settings = {"labels": NEWS_LABELS, "tokenizer_path": str(tiny_model), **CASES[case]}
    texts = news_texts[:16]
    with_tokenizer = QwenClassifier(base_url=server_url, **settings).batch(texts)
    ids_only = QwenClassifier(base_url=ids_only_server_url, **settings).batch(texts)
    for a, b in zip(with_tokenizer, ids_only, strict=True):
        # The same weights on the same CPU; batches differ, so allow float noise.
        assert b.scores == pytest.approx(a.scores, abs=1e-3)
        top = sorted(a.scores.values(), reverse=True)
        if top[0] - top[1] > 5e-3:
            assert b.label == a.label


def test_text_prompts_are_refused_with_the_servers_reason(ids_only_server_url: str) -> None:
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=ids_only_server_url)
    with pytest.raises(QwenFastError, match="skip_tokenizer_init"):
        classifier.invoke("Stocks rally as the central bank signals rate cuts")
