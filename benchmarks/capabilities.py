"""What each capability costs: ``QwenClassifier.abatch`` with multi-label, few-shot examples,
an example selector or many labels, against zero-shot single-label on the same servers and
texts. Rows of ``python -m benchmarks.compare --capabilities`` and ``python -m
benchmarks.scale --capabilities-subsets``.

Importing this module imports nothing heavy (the tools' parsers read :data:`CAPABILITY_ROWS`
for their choices).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Any

from langchain_qwen_fast.bench.measure import LABELS, PathResult, timed
from langchain_qwen_fast.errors import ConfigurationError

#: The capability rows of :func:`run_capabilities`, the zero-shot baseline first.
CAPABILITY_ROWS = (
    "zero-shot, 4 labels",
    "multi-label, 4 labels",
    "8 static examples",
    "example selector (k=2)",
    "40 labels (label sequences)",
)


def check_rows(rows: Sequence[str]) -> None:
    """Raise :class:`ConfigurationError` naming any of ``rows`` that is not a capability row."""
    unknown = sorted(set(rows) - set(CAPABILITY_ROWS))
    if unknown:
        raise ConfigurationError(f"unknown capability rows {unknown}; known: {list(CAPABILITY_ROWS)}")


def run_capabilities(
    base_url: str | list[str],
    model: str,
    tokenizer: str | None,
    texts: list[str],
    rounds: int = 2,
    rows: Sequence[str] = CAPABILITY_ROWS,
    pids: Sequence[int] = (),
) -> tuple[list[PathResult], dict[str, float]]:
    """``QwenClassifier.abatch`` with each capability against zero-shot single-label, on the same
    server and texts: multi-label with 4 labels, 8 static examples, an example selector (a
    semantic-similarity selector over the 8 examples, k=2), 40 labels scored as sequences
    (``rows``: those of :data:`CAPABILITY_ROWS` to run; zero-shot always runs). Paths alternate
    over ``rounds`` and each keeps its best round; each row carries the cores the servers
    ``pids`` kept busy. Returns the rows and the ratios of each path's time to the zero-shot
    one's."""
    check_rows(rows)
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.example_selectors import SemanticSimilarityExampleSelector
    from langchain_core.vectorstores import InMemoryVectorStore

    from langchain_qwen_fast import QwenClassifier
    from langchain_qwen_fast.testing.samples import SAMPLE_EXAMPLES

    selector = SemanticSimilarityExampleSelector.from_examples(
        [{"text": t, "label": label} for t, label in SAMPLE_EXAMPLES],
        DeterministicFakeEmbedding(size=64),
        InMemoryVectorStore,
        k=2,
    )
    # the classifier on these servers, with one capability's settings
    make = functools.partial(QwenClassifier, base_url=base_url, model=model, tokenizer_path=tokenizer)
    build: dict[str, Callable[[], Any]] = {
        "zero-shot, 4 labels": lambda: make(labels=LABELS),
        "multi-label, 4 labels": lambda: make(labels=LABELS, multi_label=True),
        "8 static examples": lambda: make(labels=LABELS, examples=list(SAMPLE_EXAMPLES)),
        "example selector (k=2)": lambda: make(labels=LABELS, example_selector=selector),
        "40 labels (label sequences)": lambda: make(labels=[f"Topic {i}" for i in range(40)]),
    }
    wanted = {CAPABILITY_ROWS[0], *rows}
    variants = {name: build_one() for name, build_one in build.items() if name in wanted}
    best: dict[str, PathResult] = {}
    for classifier in variants.values():
        classifier.invoke("warm-up")
    for _ in range(rounds):
        for name, classifier in variants.items():

            def run(c: Any = classifier) -> Any:
                return asyncio.run(c.abatch(texts))

            result = timed(f"QwenClassifier.abatch, {name}", len(texts), run, pids)
            if name not in best or result.seconds < best[name].seconds:
                best[name] = result
    base = best["zero-shot, 4 labels"].seconds
    ratios = {f"{name} / zero-shot (time)": round(r.seconds / base, 3) for name, r in best.items()}
    return list(best.values()), ratios


__all__ = ["CAPABILITY_ROWS", "check_rows", "run_capabilities"]
