"""The quickstart's offline stand-in: a test model fine-tuned on generated news headlines, so that
the examples and tests classify news with labels that mean something when the model hub cannot
be reached. Built once, then cached beside its recipe.

Two bases, each with its own recipe:

* SmolLM2-135M-Instruct (``qwen-fast build-test-model --size smollm2-135m``), a real pretrained
  model: it already reads language, so a short LoRA SFT on a few hundred generated headlines
  maps what it reads onto the labels, and its labels hold on natural headlines written apart
  from the generator (:data:`~langchain_qwen_fast.testing.samples.NATURAL_NEWS`). The examples'
  stand-in.
* the tiny random Qwen3-shaped model: it learns the generator's words and nothing else, so its
  labels mean something on generated headlines only. The training tests' base for adapters,
  where the model's size, not its reading, is what counts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from langchain_qwen_fast.training.options import TrainOptions
from langchain_qwen_fast.training.tasks import load_tokenizer, make_task, score
from langchain_qwen_fast.training.trainer import train

#: how the stand-in is trained on the pretrained SmolLM2 (a change rebuilds it): one epoch of
#: LoRA SFT on a few hundred headlines, enough for a model that reads to learn four labels
PRETRAINED_RECIPE: Mapping[str, Any] = MappingProxyType(
    {
        "train_items": 400,
        "test_items": 400,
        "seed": 0,
        "epochs": 1,
        "learning_rate": 3e-4,
        "version": 4,
    }
)
#: how the stand-in is trained on the tiny random model (a change rebuilds it): it learns every
#: word from the rows, so more of them and more epochs at a higher rate
TINY_RECIPE: Mapping[str, Any] = MappingProxyType(
    {
        "train_items": 1200,
        "test_items": 400,
        "seed": 0,
        "epochs": 3,
        "learning_rate": 2e-3,
        "version": 3,
    }
)


def _recipe(base_marker: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The recipe for a base, by its build marker: the pretrained one for a SmolLM2 build,
    the tiny one otherwise."""
    return PRETRAINED_RECIPE if base_marker is not None and "gguf_sha256" in base_marker else TINY_RECIPE


def _accuracy(rows: Sequence[Sequence[float]], items: Sequence[tuple[str, str]], labels: Sequence[str]) -> float:
    return sum(labels[list(row).index(max(row))] == y for row, (_, y) in zip(rows, items)) / len(items)


def build_news_model(out: str | Path, base_model: str | Path, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The quickstart's offline stand-in: ``base_model`` fine-tuned with ``--method sft`` on
    :func:`~langchain_qwen_fast.testing.samples.labelled_news` headlines over AG News's labels,
    merged into ``out``, by the recipe for that base (:data:`PRETRAINED_RECIPE` for a build of
    SmolLM2-135M, :data:`TINY_RECIPE` for the tiny model). Built once: a second call with the
    same base and recipe returns the cached model's report.

    The report, measured here with transformers on the merged model: ``held_out_accuracy`` on
    ``held_out_items`` generated headlines of another seed, ``natural_accuracy`` on
    ``natural_items`` natural headlines written by hand apart from the generator
    (:data:`~langchain_qwen_fast.testing.samples.NATURAL_NEWS`), the build's ``seconds`` and
    the training rate."""
    from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, NATURAL_NEWS, labelled_news

    out = Path(out)
    base = Path(base_model)
    base_marker = json.loads((base / ".built.json").read_text()) if (base / ".built.json").is_file() else None
    chosen = _recipe(base_marker)
    recipe = {**chosen, "base": base_marker if base_marker is not None else str(base)}
    marker = out / ".built.json"
    if marker.is_file() and json.loads(marker.read_text()).get("recipe") == recipe:
        return dict(json.loads(marker.read_text())["report"])
    options = TrainOptions(
        method="sft",
        base_model=str(base),
        out=str(out),
        epochs=chosen["epochs"],
        learning_rate=chosen["learning_rate"],
        seed=chosen["seed"],
        progress=False,
    )
    labels = list(AG_NEWS_LABELS)
    started = time.perf_counter()
    report = train(labelled_news(chosen["train_items"], chosen["seed"]), labels, options, log=log)
    from transformers import AutoModelForCausalLM

    held_out = labelled_news(chosen["test_items"], chosen["seed"] + 1)
    task = make_task(options, labels, load_tokenizer(str(out)))
    model = AutoModelForCausalLM.from_pretrained(out, dtype=task.torch.float32).to(task.device)
    generated = score(task, model, [t for t, _ in held_out])
    natural = score(task, model, [t for t, _ in NATURAL_NEWS])
    summary = {
        "held_out_accuracy": _accuracy(generated, held_out, labels),
        "held_out_items": len(held_out),
        "natural_accuracy": _accuracy(natural, NATURAL_NEWS, labels),
        "natural_items": len(NATURAL_NEWS),
        "seconds": round(time.perf_counter() - started, 1),
        "train_samples_per_s": report["train_samples_per_s"],
    }
    marker.write_text(json.dumps({"recipe": recipe, "report": summary}))
    return summary
