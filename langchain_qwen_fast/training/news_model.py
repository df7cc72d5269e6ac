"""The quickstart's offline stand-in: the tiny test model fine-tuned on generated news
headlines, so that the examples and tests classify news with labels that mean something when
the model hub cannot be reached. Built once, then cached beside its recipe."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from langchain_qwen_fast.training.options import TrainOptions
from langchain_qwen_fast.training.tasks import load_tokenizer, make_task, score
from langchain_qwen_fast.training.trainer import train

#: how the stand-in is trained; a change rebuilds it
_NEWS_RECIPE: Mapping[str, Any] = MappingProxyType(
    {
        "train_items": 1200,
        "test_items": 400,
        "seed": 0,
        "epochs": 3,
        "learning_rate": 2e-3,
        "version": 2,
    }
)


def build_news_model(out: str | Path, base_model: str | Path, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The quickstart's offline stand-in: ``base_model`` (the tiny test model) fine-tuned with
    ``--method sft`` on :func:`~langchain_qwen_fast.testing.samples.labelled_news` headlines over AG
    News's labels, merged into ``out``. Built once: a second call with the same base and recipe
    returns the cached model's report. The report's ``held_out_accuracy`` is measured here on
    headlines of another seed."""
    from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, labelled_news

    out = Path(out)
    base = Path(base_model)
    recipe = {
        **_NEWS_RECIPE,
        "base": json.loads((base / ".built.json").read_text()) if (base / ".built.json").is_file() else str(base),
    }
    marker = out / ".built.json"
    if marker.is_file() and json.loads(marker.read_text()).get("recipe") == recipe:
        return dict(json.loads(marker.read_text())["report"])
    options = TrainOptions(
        method="sft",
        base_model=str(base),
        out=str(out),
        epochs=_NEWS_RECIPE["epochs"],
        learning_rate=_NEWS_RECIPE["learning_rate"],
        seed=_NEWS_RECIPE["seed"],
        progress=False,
    )
    labels = list(AG_NEWS_LABELS)
    started = time.perf_counter()
    report = train(labelled_news(_NEWS_RECIPE["train_items"], _NEWS_RECIPE["seed"]), labels, options, log=log)
    from transformers import AutoModelForCausalLM

    held_out = labelled_news(_NEWS_RECIPE["test_items"], _NEWS_RECIPE["seed"] + 1)
    task = make_task(options, labels, load_tokenizer(str(out)))
    model = AutoModelForCausalLM.from_pretrained(out, dtype=task.torch.float32).to(task.device)
    rows = score(task, model, [t for t, _ in held_out])
    right = sum(labels[row.index(max(row))] == y for row, (_, y) in zip(rows, held_out))
    summary = {
        "held_out_accuracy": right / len(held_out),
        "held_out_items": len(held_out),
        "seconds": round(time.perf_counter() - started, 1),
        "train_samples_per_s": report["train_samples_per_s"],
    }
    marker.write_text(json.dumps({"recipe": recipe, "report": summary}))
    return summary
