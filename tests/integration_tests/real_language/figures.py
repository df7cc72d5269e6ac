"""The figures of docs/training-and-calibration.md's "On real language": accuracy and calibration
error on natural held-out headlines (:data:`~langchain_qwen_fast.testing.samples.NATURAL_NEWS`)
of a model zero-shot, with a head, with SFT and after one review round, scored in process with
transformers as the served classifier scores (the tests check that parity). One model a run:

    .venv/bin/python -m tests.integration_tests.real_language.figures smollm2 --out out/figures
    .venv/bin/python -m tests.integration_tests.real_language.figures tiny --out out/figures

``smollm2`` trains as the tests of this package do (their rows, epochs and learning rates) and
its SFT model is the quickstart stand-in; ``tiny`` trains the tiny random model as the training
tests do (a head on 600 headlines, 3 epochs) and as the stand-in's tiny recipe does. The review
round: a first SFT model on 100 generated headlines, then the same with every row of the review
pool (:data:`~langchain_qwen_fast.testing.samples.NATURAL_REVIEW_POOL`) labelled. Temperatures are
fitted on the review pool and the error measured on the held-out headlines. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_qwen_fast.calibration import apply_temperature, expected_calibration_error, fit_temperature
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, NATURAL_NEWS, NATURAL_REVIEW_POOL, labelled_news
from langchain_qwen_fast.testing.smollm2 import build_smollm2
from langchain_qwen_fast.testing.tiny_model import build_test_model
from langchain_qwen_fast.training import TrainOptions, build_news_model, train
from langchain_qwen_fast.training.tasks import load_tokenizer, make_task, score

ROOT = Path(__file__).resolve().parents[3]
LABELS = list(AG_NEWS_LABELS)
#: (rows, learning rate, epochs) of the head and of the review round's SFT runs, by model: the
#: real-language tests' for SmolLM2, the training tests' (head) and the tiny stand-in's (SFT) for
#: the tiny model.
RECIPES: dict[str, dict[str, tuple[int, float, int]]] = {
    "smollm2": {"head": (200, 3e-4, 1), "review": (100, 5e-4, 1)},
    "tiny": {"head": (600, 1e-3, 3), "review": (100, 2e-3, 3)},
}


def _rows(method: str, model: Path, texts: Sequence[str]) -> list[list[float]]:
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    options = TrainOptions(method="head" if method == "head" else "sft", base_model=str(model), out=str(model))
    task = make_task(options, LABELS, load_tokenizer(str(model)))
    loader: Any = AutoModelForSequenceClassification if method == "head" else AutoModelForCausalLM
    return score(task, loader.from_pretrained(model), list(texts))


def _accuracy_and_ece(rows: Sequence[Sequence[float]], items: Sequence[tuple[str, str]]) -> tuple[float, float]:
    right = [LABELS[list(row).index(max(row))] == label for row, (_, label) in zip(rows, items)]
    return sum(right) / len(items), expected_calibration_error([max(row) for row in rows], right)


def measured(method: str, model: Path) -> dict[str, float]:
    """Held-out natural accuracy and ECE, and the ECE at a temperature fitted on the review pool."""
    pool = _rows(method, model, [text for text, _ in NATURAL_REVIEW_POOL])
    temperature = fit_temperature(pool, [LABELS.index(label) for _, label in NATURAL_REVIEW_POOL])
    held_out = _rows(method, model, [text for text, _ in NATURAL_NEWS])
    accuracy, ece = _accuracy_and_ece(held_out, NATURAL_NEWS)
    _, calibrated = _accuracy_and_ece([apply_temperature(row, temperature) for row in held_out], NATURAL_NEWS)
    return {"accuracy": round(accuracy, 3), "ece": round(ece, 4), "temperature": round(temperature, 3),
            "ece_calibrated": round(calibrated, 4)}  # fmt: skip


def _trained(method: str, base: Path, out: Path, items: list[tuple[str, str]], recipe: tuple[int, float, int]) -> float:
    """Train into ``out`` (kept: a second run reuses it); the seconds it took."""
    start = time.perf_counter()
    if not (out / "training.json").is_file():
        _, learning_rate, epochs = recipe
        options = TrainOptions(method=method, base_model=str(base), out=str(out), epochs=epochs,  # type: ignore[arg-type]
                               learning_rate=learning_rate, seed=0, progress=False)  # fmt: skip
        train(items, LABELS, options, log=lambda line: None)
    return round(time.perf_counter() - start, 1)


def figures(which: str, work: Path) -> dict[str, Any]:
    """Every figure of the table for one model (``smollm2`` or ``tiny``)."""
    if which == "smollm2":
        base, stand_in = build_smollm2(ROOT / ".models" / "smollm2-135m"), ROOT / ".models" / "smollm2-news"
    else:
        base, stand_in = build_test_model(ROOT / ".models" / "qwen3-tiny", "tiny"), ROOT / ".models" / "qwen3-tiny-news"
    recipes, work = RECIPES[which], work / which
    head_items, _, _ = recipes["head"]
    head_seconds = _trained("head", base, work / "head", labelled_news(head_items, 0), recipes["head"])
    built = build_news_model(stand_in, base, log=lambda line: None)
    first_items, _, _ = recipes["review"]
    first = labelled_news(first_items, 0)
    _trained("sft", base, work / "first", first, recipes["review"])
    _trained("sft", base, work / "reviewed", [*first, *NATURAL_REVIEW_POOL], recipes["review"])
    return {
        "model": which,
        "zero_shot": measured("sft", base),
        "head": {**measured("head", work / "head"), "train_seconds": head_seconds},
        "sft": {**measured("sft", stand_in), "stand_in": built},
        "review": {
            "before": measured("sft", work / "first")["accuracy"],
            "after": measured("sft", work / "reviewed")["accuracy"],
            "reviewed_rows": len(NATURAL_REVIEW_POOL),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=sorted(RECIPES))
    parser.add_argument("--out", default=str(ROOT / "out" / "figures"), help="folder for the trained models")
    args = parser.parse_args()
    print(json.dumps(figures(args.model, Path(args.out)), indent=1))


if __name__ == "__main__":
    main()
