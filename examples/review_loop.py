"""The review loop: train on a few labelled rows, classify many unlabelled ones, have a person
label the rows the model was least sure of (plus a sample of the rest), train again, and see
held-out accuracy rise.

    python examples/review_loop.py                    # the tiny test model, on CPU, a few minutes
    python examples/review_loop.py --work out/loop    # keep the files

Here the "person" is the generator's ground truth: the review file's empty label column is
filled from it and the file goes back into training as it is. Steps:

1. train a model (SFT on the tiny test model) on a small labelled set;
2. serve it and measure held-out accuracy;
3. ``qwen-fast classify`` the unlabelled pool with ``--review-below``, ``--review-sample`` and
   ``--review-out``;
4. fill the review file's labels in, and train again on the small set and the reviewed rows;
5. serve the new model and measure held-out accuracy again.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from _local import TINY_MODEL

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.serving import VLLMServer
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, labelled_news
from langchain_qwen_fast.testing.tiny_model import build_test_model
from langchain_qwen_fast.training import LabelledFile, TrainOptions, train
from langchain_qwen_fast.training.data import write_labelled

LABELS = list(AG_NEWS_LABELS)
QWEN_FAST = [sys.executable, "-m", "langchain_qwen_fast.cli"]


def train_model(items: Sequence[tuple[str, str]], out: Path, base: str, seed: int) -> Path:
    print(f"training on {len(items)} labelled rows -> {out}", flush=True)
    options = TrainOptions(method="sft", base_model=base, out=str(out), epochs=3, learning_rate=2e-3, seed=seed,
                           progress=False)  # fmt: skip
    train(list(items), LABELS, options, log=lambda line: None)
    return out


def held_out_accuracy(model: Path, url: str, held_out: Sequence[tuple[str, str]]) -> float:
    classifier = QwenClassifier.load(model, base_url=url)
    try:
        results = classifier.batch([text for text, _ in held_out], return_exceptions=True)
    finally:
        classifier.close()
    right = sum(getattr(r, "label", None) == label for r, (_, label) in zip(results, held_out))
    return right / len(held_out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", help="folder for data, models and reports (default: a temporary one)")
    parser.add_argument("--small", type=int, default=300, help="labelled rows to start from")
    parser.add_argument("--pool", type=int, default=2000, help="unlabelled rows to classify")
    parser.add_argument("--held-out", type=int, default=400, help="held-out labelled rows")
    parser.add_argument("--review-below", type=float, default=0.285)
    parser.add_argument("--review-sample", type=int, default=60)
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="review-loop-"))
    work.mkdir(parents=True, exist_ok=True)
    base = str(build_test_model(TINY_MODEL, "tiny"))
    small = labelled_news(args.small, 0)
    pool = labelled_news(args.pool, 5)  # the labels stand for the person's answers
    held_out = labelled_news(args.held_out, 9)
    pool_csv = work / "pool.csv"
    with pool_csv.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        writer.writerows((f"row-{i}", text) for i, (text, _) in enumerate(pool))

    # 1-2. A first model from the small set; its held-out accuracy.
    first = train_model(small, work / "model-1", base, seed=0)
    review = work / "review.csv"
    with VLLMServer(str(first), log_path=work / "server-1.log") as server:
        before = held_out_accuracy(first, server.base_url, held_out)
        print(f"held-out accuracy of the first model: {before:.3f}", flush=True)

        # 3. Classify the pool; the review queue comes out beside it.
        command = ["classify", str(pool_csv), "--out", str(work / "pool-labelled.parquet"), "--classifier",
                   str(first), "--base-url", server.base_url, "--review-below", str(args.review_below),
                   "--review-sample", str(args.review_sample), "--review-out", str(review),
                   "--no-progress"]  # fmt: skip
        print("$ qwen-fast " + " ".join(command), flush=True)
        subprocess.run([*QWEN_FAST, *command], check=True)

    # 4. The person labels the review file (here: from the generator's ground truth).
    with review.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["label"] = pool[int(row["row"])][1]
    with review.open("w", newline="") as f:
        labelled = csv.DictWriter(f, fieldnames=list(rows[0]))
        labelled.writeheader()
        labelled.writerows(rows)
    reviewed, _ = LabelledFile(str(review)).read(LABELS)
    agreed = sum(row["model_label"] == row["label"] for row in rows)
    print(f"reviewed {len(reviewed)} rows; the first model had {agreed} of them right", flush=True)
    train_csv = write_labelled(work / "train-2.csv", [*small, *reviewed])
    items, _ = LabelledFile(str(train_csv)).read(LABELS)
    second = train_model(items, work / "model-2", base, seed=0)

    # 5. The new model's held-out accuracy.
    with VLLMServer(str(second), log_path=work / "server-2.log") as server:
        after = held_out_accuracy(second, server.base_url, held_out)
    print(f"held-out accuracy: before {before:.3f}, after {after:.3f} ({after - before:+.3f}) "
          f"on {len(held_out)} rows; trained on {len(small)}, then {len(items)} rows")  # fmt: skip


if __name__ == "__main__":
    main()
