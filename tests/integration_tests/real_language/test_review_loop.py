"""The review loop on real language: SmolLM2-135M-Instruct with an SFT adapter trained on a few
generated headlines, served; ``qwen-fast classify`` labels a pool of natural headlines written
by hand and writes the review file (the rows under a confidence, and a sample of the others); a
person's answers (here: the pool's hand-written labels) go into that file; training again on the
same generated headlines and the reviewed rows raises accuracy on other natural headlines, held
out (:data:`~langchain_qwen_fast.testing.samples.NATURAL_NEWS`).

Both models are scored on the held-out headlines with transformers, alike: the first as its
adapter on the base model, the second as trained (merged).
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

from langchain_qwen_fast.cli import main
from langchain_qwen_fast.testing.samples import NATURAL_NEWS, NATURAL_REVIEW_POOL, labelled_news
from langchain_qwen_fast.training import LabelledFile, TrainOptions, train
from langchain_qwen_fast.training.data import write_labelled
from langchain_qwen_fast.training.tasks import load_tokenizer, make_task, score
from tests.integration_tests.conftest import record_seconds
from tests.integration_tests.real_language.conftest import (
    FIRST_ITEMS,
    FIRST_LEARNING_RATE,
    LABELS,
    TRAIN_SEED,
    background_jobs,
    work_dir,
)

__all__ = ["background_jobs"]  # the integration conftest plans this module's training runs through it

#: The review file: rows under this confidence, and this many others, stratified by label.
REVIEW_BELOW, REVIEW_SAMPLE = 0.9, 8


def _natural_accuracy(model: Any, task: Any) -> float:
    rows = score(task, model, [text for text, _ in NATURAL_NEWS])
    return sum(LABELS[row.index(max(row))] == y for row, (_, y) in zip(rows, NATURAL_NEWS)) / len(NATURAL_NEWS)


def _person_labels(review: Path) -> list[tuple[str, str]]:
    """The review file with its empty label column filled in as a person would (from the pool's
    hand-written labels), read back as ``qwen-fast train`` reads it."""
    with review.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        assert row["label"] == "" and row["model_label"] in LABELS
        row["label"] = NATURAL_REVIEW_POOL[int(row["row"])][1]
    with review.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    reviewed, _ = LabelledFile(str(review)).read(LABELS)
    return reviewed


def test_a_review_round_raises_accuracy_on_natural_headlines(
    smollm2_model: Path, first_adapter: tuple[Path, dict[str, Any]], smollm2_url: str
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    work, first = work_dir(), first_adapter[0]
    pool = work / "review-pool.csv"
    with pool.open("w", newline="") as f:
        csv.writer(f).writerows([("text",), *((text,) for text, _ in NATURAL_REVIEW_POOL)])
    review = work / "review.csv"
    assert main(["classify", str(pool), "--out", str(work / "pool-labelled.jsonl"), "--classifier", str(first),
                 "--base-url", smollm2_url, "--review-below", str(REVIEW_BELOW), "--review-sample",
                 str(REVIEW_SAMPLE), "--review-out", str(review), "--no-progress"]) == 0  # fmt: skip
    reviewed = _person_labels(review)
    assert 0 < len(reviewed) <= len(NATURAL_REVIEW_POOL)

    start = time.perf_counter()
    second = work / "news-reviewed"
    options = TrainOptions(method="sft", base_model=str(smollm2_model), out=str(second), epochs=1,
                           learning_rate=FIRST_LEARNING_RATE, seed=TRAIN_SEED, progress=False)  # fmt: skip
    data = write_labelled(work / "news-reviewed.csv", [*labelled_news(FIRST_ITEMS, TRAIN_SEED), *reviewed])
    items, _ = LabelledFile(str(data)).read(LABELS)
    train(items, LABELS, options, log=lambda line: None)
    record_seconds(f"SmolLM2-135M: review round, SFT on {len(items)} rows (foreground)", time.perf_counter() - start)

    task = make_task(options, LABELS, load_tokenizer(str(second)))
    base = AutoModelForCausalLM.from_pretrained(smollm2_model, dtype=task.torch.float32)
    before = _natural_accuracy(PeftModel.from_pretrained(base, first), task)
    after = _natural_accuracy(AutoModelForCausalLM.from_pretrained(second, dtype=task.torch.float32), task)
    print(f"review round ({len(reviewed)} rows reviewed): natural held-out accuracy {before:.3f} -> {after:.3f}")
    assert after > before
