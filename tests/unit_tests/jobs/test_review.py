"""The review queue: which rows it takes, and a layout that ``qwen-fast train`` reads back."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast import Classification, QwenClassifier
from langchain_qwen_fast.jobs.job import ClassifyOptions, classify_table
from langchain_qwen_fast.jobs.review import ReviewChunk, ReviewOptions, write_review
from langchain_qwen_fast.jobs.summary import confidence
from langchain_qwen_fast.testing.samples import headlines
from langchain_qwen_fast.training import LabelledFile
from tests.support.fake_vllm import FakeVLLM

LABELS = ("World", "Sports", "Business", "Sci/Tech")


def result(label: str, p: float) -> Classification:
    rest = (1 - p) / 3
    return Classification(label=label, labels=[label], scores={x: p if x == label else rest for x in LABELS},
                          scoring="label_tokens")  # fmt: skip


def review_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def run_chunks(options: ReviewOptions, results: list[Classification], size: int) -> list[list[dict[str, Any]]]:
    chunks = []
    for start in range(0, len(results), size):
        chunk = ReviewChunk(options)
        for i, r in enumerate(results[start : start + size], start):
            chunk.add(i, f"text {i}", r)
        chunks.append(chunk.entries())
    return chunks


def test_rows_under_the_threshold_and_a_stratified_sample(tmp_path: Path) -> None:
    # Sports is rare (10 of 400 rows); every row under 0.5 is taken, then 12 others, 3 a label.
    results = [result("Sports" if i % 40 == 0 else LABELS[i % 2 * 2], 0.3 if i % 7 == 0 else 0.9) for i in range(400)]
    options = ReviewOptions(str(tmp_path / "review.csv"), below=0.5, sample=9)
    chunks = run_chunks(options, results, 64)
    written = write_review(options, False, lambda: iter(chunks))
    rows = review_rows(tmp_path / "review.csv")
    low = [i for i, r in enumerate(results) if (confidence(r) or 1) < 0.5]
    assert written == {"path": options.out, "rows": len(low) + 9, "below": len(low), "sampled": 9,
                       "below_threshold": 0.5, "sample": 9}  # fmt: skip
    assert [int(r["row"]) for r in rows] == sorted(int(r["row"]) for r in rows)  # input order
    sampled = [r for r in rows if int(r["row"]) not in low]
    assert Counter(r["model_label"] for r in sampled) == {"Sports": 3, "World": 3, "Business": 3}
    assert {int(r["row"]) for r in rows} >= set(low)
    assert all(r["label"] == "" and r["text"] == f"text {r['row']}" for r in rows)
    assert all(float(r["model_probability"]) < 0.5 for r in rows if int(r["row"]) in low)


def test_the_sample_is_the_same_however_the_rows_were_chunked(tmp_path: Path) -> None:
    results = [result(LABELS[i % 4], 0.9) for i in range(300)]
    picked = []
    for size in (7, 300):
        options = ReviewOptions(str(tmp_path / f"review-{size}.jsonl"), sample=10, seed=3)
        chunks = run_chunks(options, results, size)
        write_review(options, False, lambda chunks=chunks: iter(chunks))
        picked.append([r["row"] for r in review_rows(Path(options.out))])
    assert picked[0] == picked[1] and len(picked[0]) == 10
    other_seed = ReviewOptions(str(tmp_path / "review-seed.jsonl"), sample=10, seed=4)
    chunks = run_chunks(other_seed, results, 300)
    write_review(other_seed, False, lambda: iter(chunks))
    assert [r["row"] for r in review_rows(tmp_path / "review-seed.jsonl")] != picked[0]


def test_errors_are_not_reviewed(tmp_path: Path) -> None:
    options = ReviewOptions(str(tmp_path / "r.csv"), below=0.99, sample=5)
    chunk = ReviewChunk(options)
    chunk.add(0, "x", ValueError("boom"))
    chunk.add(1, "y", result("World", 0.4))
    assert [e["row"] for e in chunk.entries()] == [1]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_filled_review_file_reads_back_as_training_data(tmp_path: Path, suffix: str) -> None:
    fake = FakeVLLM()
    source = tmp_path / "in.jsonl"
    texts = headlines(150)
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    review = tmp_path / f"review{suffix}"
    classifier = QwenClassifier(labels=list(LABELS), base_url="http://vllm.test/v1", http_transport=fake.transport)
    report = classify_table(
        ClassifyOptions(str(source), str(tmp_path / "out.csv"), labels=LABELS, review_out=str(review),
                        review_below=0.6, review_sample=8, progress=False, histogram=False, chunk_rows=40),
        classifier,
    )  # fmt: skip
    assert report.review is not None and report.review["rows"] > 8
    rows = review_rows(review)
    assert list(rows[0]) == ["text", "label", "model_label", "model_probability", "row"]
    assert all(r["text"] == texts[int(r["row"])] for r in rows)
    # a person fills the label column in; the file then trains as it is
    for r in rows:
        r["label"] = "Sports" if int(r["row"]) % 2 else "World"
    if suffix == ".jsonl":
        review.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        with review.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    items, labels = LabelledFile(str(review)).read()
    assert items == [(r["text"], r["label"]) for r in rows] and labels == ["Sports", "World"]


def test_multi_label_review_files_hold_label_lists(tmp_path: Path) -> None:
    fake = FakeVLLM()
    source = tmp_path / "in.csv"
    source.write_text("text\n" + "".join(f"{t}\n" for t in headlines(60)))
    classifier = QwenClassifier(labels=list(LABELS), multi_label=True, base_url="http://vllm.test/v1",
                                http_transport=fake.transport)  # fmt: skip
    for suffix in (".jsonl", ".csv"):
        review = tmp_path / f"review{suffix}"
        classify_table(
            ClassifyOptions(str(source), str(tmp_path / f"out{suffix}"), labels=LABELS, multi_label=True,
                            review_out=str(review), review_sample=10, progress=False, histogram=False),
            classifier,
        )  # fmt: skip
        rows = review_rows(review)
        assert len(rows) == 10
        if suffix == ".jsonl":
            assert all(r["label"] == [] and isinstance(r["model_label"], list) for r in rows)
        else:
            assert all(r["label"] == "" and set(filter(None, r["model_label"].split("|"))) <= set(LABELS) for r in rows)
