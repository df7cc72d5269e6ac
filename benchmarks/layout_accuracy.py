"""The prompt layouts' accuracy: the same model trained with SFT in each layout (``chat``,
``compact``) on the same generated data, seeds and options, and scored on the same held-out
texts, as the served classifier scores them (transformers, the classifier's own prompts).

    python -m benchmarks.layout_accuracy --base-model .models/qwen3-tiny --out out/layout-accuracy

Single-label: :func:`~langchain_qwen_fast.testing.samples.labelled_news` headlines over AG
News's labels, LoRA SFT at the quickstart stand-in's learning rate (``training/news_model.py``),
held-out accuracy on headlines of another seed. Multi-label:
:func:`~langchain_qwen_fast.testing.samples.multi_labelled_news`, full fine-tuning at the
multi-label learning test's learning rate (tests/integration_tests/training/test_trainer.py),
held-out micro-F1 at the thresholds each run tuned (and at 0.5). Each run is scored at its
best epoch by validation (:data:`RECIPES`). Each task runs for every
seed in ``--seeds`` and every size in ``--train-items`` (a smaller size leaves room below a
perfect score, where a layout's loss would show). Prints each (chat, compact) pair and the
difference, and writes ``layout-accuracy.json``. CPU by default; with ``--base-model`` the
tiny test model (``qwen-fast build-test-model --size tiny``) is built where it is missing.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_qwen_fast._core.prompting import LAYOUTS, PromptLayout
from langchain_qwen_fast.bench.report import Header, header, write_json
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, labelled_news, multi_labelled_news
from langchain_qwen_fast.training import TrainOptions

LABELS = list(AG_NEWS_LABELS)
#: Each task's training options beyond the layout, the data and the seed: the single-label
#: stand-in's learning rate (LoRA), stopping early; and the multi-label learning test's full
#: fine-tuning over a longer run that never stops early: on the tiny model, multi-label
#: validation can stand still for several epochs before it climbs, which early stopping would
#: take for the end. Either way each layout is scored at its own best epoch.
RECIPES: dict[str, dict[str, Any]] = {
    "single": {"method": "sft", "epochs": 8, "patience": 2, "learning_rate": 2e-3},
    "multi": {"method": "sft", "lora": False, "epochs": 20, "patience": 20, "learning_rate": 3e-3},
}


@dataclass
class Run:
    """One training run of one layout and its held-out scores."""

    task: str
    layout: PromptLayout
    train_items: int
    seed: int
    #: accuracy (single-label) or micro-F1 at the tuned thresholds (multi-label)
    score: float
    #: multi-label: micro-F1 at threshold 0.5
    score_at_half: float | None
    best_epoch: int
    #: whether early stopping ended the run (False: the epoch cap did; None: nothing says)
    converged: bool | None
    validation_macro_f1: float | None
    train_seconds: float


@dataclass
class Report:
    """What ``layout-accuracy.json`` holds."""

    header: Header
    base_model: str
    held_out_items: dict[str, int]
    runs: list[Run] = field(default_factory=list)


def held_out(task: str, n: int, seen: set[str]) -> list[tuple[str, Any]]:
    """``n`` generated items of seed 1000 (no training seed's), without any training text."""
    items: list[tuple[str, Any]] = list(labelled_news(n, 1000) if task == "single" else multi_labelled_news(n, 1000))
    return [item for item in items if item[0] not in seen]


def train_and_score(
    task: str, layout: PromptLayout, items: Sequence[tuple[str, Any]], test: Sequence[tuple[str, Any]], seed: int,
    base_model: str, work: Path, device: str | None, epochs: int | None = None,
) -> Run:  # fmt: skip
    """Train ``layout`` on ``items`` into ``work`` and score ``test`` as the classifier would."""
    from transformers import AutoModelForCausalLM

    from langchain_qwen_fast.training import train
    from langchain_qwen_fast.training.tasks import load_tokenizer, make_task, score
    from langchain_qwen_fast.training.thresholds import multi_label_scores

    out = work / f"{task}-{len(items)}-{seed}-{layout}"
    recipe = {**RECIPES[task], **({"epochs": epochs} if epochs else {})}
    options = TrainOptions(base_model=base_model, out=str(out), seed=seed, prompt_layout=layout, progress=False,
                           device=device, **recipe)  # fmt: skip
    report = train(items, LABELS, options, log=lambda line: print(f"  {task} {layout} seed {seed}: {line}", flush=True))
    saved = json.loads((out / "classifier.json").read_text())["config"]
    assert saved["prompt_layout"] == layout
    multi = task == "multi"
    scorer = make_task(options, LABELS, load_tokenizer(str(out)), multi)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=scorer.torch.float32).to(scorer.device)
    rows = score(scorer, model, [t for t, _ in test])
    if multi:
        truth = [y for _, y in test]
        value = multi_label_scores(truth, rows, LABELS, saved["threshold"])["micro_f1"]
        at_half: float | None = multi_label_scores(truth, rows, LABELS, 0.5)["micro_f1"]
    else:
        value = sum(LABELS[row.index(max(row))] == y for row, (_, y) in zip(rows, test)) / len(test)
        at_half = None
    return Run(task, layout, len(items), seed, value, at_half, report["best_epoch"], report["converged"],
               report["validation_macro_f1"], report["train_seconds"])  # fmt: skip


def pairs(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """Each (chat, compact) pair of runs of one task, size and seed."""
    by_key = {(r.task, r.train_items, r.seed, r.layout): r for r in runs}
    return [(r, by_key[(r.task, r.train_items, r.seed, "compact")]) for r in runs
            if r.layout == "chat" and (r.task, r.train_items, r.seed, "compact") in by_key]  # fmt: skip


def _scores(run: Run) -> str:
    """A run's score, and multi-label its micro-F1 at 0.5 after it."""
    return f"{run.score:.4f}" + (f"; {run.score_at_half:.4f}" if run.score_at_half is not None else "")


def table(runs: Sequence[Run]) -> str:
    """The pairs as a Markdown table, with each task and size's mean over the seeds."""
    lines = [
        "| task | train items | seed | metric | chat | compact | compact - chat |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    groups: dict[tuple[str, int], list[tuple[Run, Run]]] = {}
    for chat, compact in pairs(runs):
        groups.setdefault((chat.task, chat.train_items), []).append((chat, compact))
        metric = "accuracy" if chat.task == "single" else "micro-F1 (tuned; at 0.5)"
        lines.append(f"| {chat.task} | {chat.train_items} | {chat.seed} | {metric} | {_scores(chat)} | "
                     f"{_scores(compact)} | {compact.score - chat.score:+.4f} |")  # fmt: skip
    for (task, size), group in groups.items():
        if len(group) > 1:
            chat_mean = sum(c.score for c, _ in group) / len(group)
            compact_mean = sum(c.score for _, c in group) / len(group)
            lines.append(f"| {task} | {size} | mean of {len(group)} | | {chat_mean:.4f} | {compact_mean:.4f} | "
                         f"{compact_mean - chat_mean:+.4f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Train each task in each layout, print the pairs, write the JSON report."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.layout_accuracy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--base-model", default=".models/qwen3-tiny", help="model directory (default: %(default)s)")
    p.add_argument("--tasks", nargs="+", choices=sorted(RECIPES), default=sorted(RECIPES))
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds (default: %(default)s)")
    p.add_argument("--single-items", type=int, nargs="+", default=[1200, 300],
                   help="single-label training sizes (default: %(default)s)")  # fmt: skip
    p.add_argument("--multi-items", type=int, nargs="+", default=[3200],
                   help="multi-label training sizes (default: %(default)s)")  # fmt: skip
    p.add_argument("--held-out", type=int, default=1000, help="held-out items generated a task (default: %(default)s)")
    p.add_argument("--epochs", type=int, help="the most epochs of every run (default: each task's recipe)")
    p.add_argument("--device", help="cpu or cuda (default: cuda where there is one)")
    p.add_argument("--out", type=Path, default=Path("out/layout-accuracy"), help="default: %(default)s")
    args = p.parse_args(argv)

    base = Path(args.base_model)
    if not (base / "config.json").is_file() and base.name == "qwen3-tiny":
        from langchain_qwen_fast.testing.tiny_model import build_test_model

        build_test_model(base, "tiny")
    report = Report(header("layout accuracy"), str(base), {})
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="layout-accuracy-") as tmp:
        for task in args.tasks:
            sizes = args.single_items if task == "single" else args.multi_items
            make = labelled_news if task == "single" else multi_labelled_news
            for size in sizes:
                for seed in args.seeds:
                    items: list[tuple[str, Any]] = list(make(size, seed))
                    test = held_out(task, args.held_out, {t for t, _ in items})
                    report.held_out_items[task] = len(test)
                    for layout in LAYOUTS:
                        run = train_and_score(
                            task, layout, items, test, seed, str(base), Path(tmp), args.device, args.epochs
                        )
                        report.runs.append(run)
                        print(f"{task} {size} items, seed {seed}, {layout}: {run.score:.4f} (best epoch "
                              f"{run.best_epoch}, converged {run.converged}, {run.train_seconds:.0f} s training)",
                              flush=True)  # fmt: skip
    print(f"\n{table(report.runs)}\n\nheld-out items {report.held_out_items}; {time.perf_counter() - started:.0f} s")
    write_json(args.out / "layout-accuracy.json", report)
    print(f"wrote {args.out / 'layout-accuracy.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
