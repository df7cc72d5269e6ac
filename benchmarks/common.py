"""What several of the lab's tools share beside :mod:`langchain_qwen_fast.bench`: the check
that their extras are installed, and a classifier set up and warm over several servers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_qwen_fast.bench.measure import LABELS, require
from langchain_qwen_fast.testing.samples import news_items


def require_lab(*modules: str) -> None:
    """Name any of ``modules`` that is missing with the ``benchmarks`` extra's install line,
    before a tool starts servers."""
    require(*modules, extra="benchmarks")


def warm_classifier(urls: Sequence[str], model: str, tokenizer: str | None, **load: Any) -> Any:
    """A classifier over ``urls`` (``load``: its batch_size/max_concurrency, mode,
    client_processes), set up (workers too) and with each server's prefix cache warm: a batch
    over every server, which the load measurements want and a single request does not give."""
    from langchain_qwen_fast import QwenClassifier

    classifier = QwenClassifier(labels=LABELS, base_url=list(urls), model=model, tokenizer_path=tokenizer, **load)
    classifier.batch(news_items(16 * len(urls)))
    classifier.prepare()
    return classifier


__all__ = ["require_lab", "warm_classifier"]
