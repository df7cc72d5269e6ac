"""Evaluate a classifier set-up on a labelled file before routing traffic with it, and
calibrate its probabilities.

    qwen-fast eval data.csv --base-url http://127.0.0.1:8000/v1              # AG News layout
    qwen-fast eval data.jsonl --mode head --model qwen3-cls \\
        --labels World Sports Business Sci/Tech --limit 1000 --out out/eval
    qwen-fast eval val.csv --classifier models/news --calibrate --target-accuracy 0.98 --save-calibration

Input: CSV or JSONL. AG News's CSV layout (no header: class index 1-4, title, description) is
read as is; otherwise a header (CSV) or keys (JSONL) with a text column (or title and
description) and a label column. ``--label-map`` maps the file's label values to the
classifier's labels (``1=World,2=Sports`` or a JSON object); by default AG News's indices map
to World, Sports, Business, Sci/Tech. ``--classifier DIR`` evaluates a saved classifier
(``qwen-fast train``'s output, or ``QwenClassifier.save``): its labels, mode and prompt.

Reports accuracy and macro-F1 with bootstrap 95 % intervals, per-class precision/recall/F1,
the confusion matrix (table and PNG), expected calibration error, throughput, and
one-at-a-time latency. ``--calibrate`` fits a temperature (minimum negative log-likelihood) on
the file, reports the calibration error before and after, draws a reliability diagram and a
coverage-accuracy curve, and with ``--target-accuracy`` finds the ``abstain_below`` that
reaches it; ``--save-calibration`` writes both into the saved classifier. Writes
``report.json`` (with every prediction) and the PNGs. Metrics come from scikit-learn. Needs
the ``eval`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_qwen_fast import calibration
from langchain_qwen_fast._core.stats import percentile
from langchain_qwen_fast.classifiers import QwenClassifier
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS
from langchain_qwen_fast.training.data import labelled_items

NO_LABEL = "(none)"  # the prediction recorded for an abstained or failed item


async def predict(classifier: QwenClassifier, texts: Sequence[str], chunk: int = 1024) -> tuple[list[Any], float]:
    """Every text's Classification (or exception), with a progress bar; and the seconds taken."""
    from tqdm import tqdm

    results: list[Any] = []
    start = time.perf_counter()
    with tqdm(total=len(texts), unit="item", desc="classifying") as bar:
        for offset in range(0, len(texts), chunk):
            part = list(texts[offset : offset + chunk])
            results += await classifier.abatch(part, return_exceptions=True)
            bar.update(len(part))
    return results, time.perf_counter() - start


def latency_ms(classifier: QwenClassifier, texts: Sequence[str]) -> dict[str, float | None]:
    """p50/p95 of one-at-a-time ``invoke`` over ``texts``."""
    timings = []
    for text in texts:
        start = time.perf_counter()
        try:
            classifier.invoke(text)
        except Exception:  # a bad item is not a latency sample
            continue
        timings.append((time.perf_counter() - start) * 1000)
    return {name: _round(percentile(timings, q)) for name, q in (("p50", 50), ("p95", 95))}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def metrics(truth: Sequence[str], predicted: Sequence[str], labels: Sequence[str]) -> dict[str, Any]:
    """Accuracy, macro-F1, per-class scores and the confusion matrix (rows: truth)."""
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

    labels = list(labels)
    precision, recall, f1, support = precision_recall_fscore_support(truth, predicted, labels=labels, zero_division=0)
    return {
        "accuracy": float(accuracy_score(truth, predicted)),
        "macro_f1": float(f1_score(truth, predicted, labels=labels, average="macro", zero_division=0)),
        "per_class": {
            label: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for label, p, r, f, s in zip(labels, precision, recall, f1, support)
        },
        "labels": labels,
        "confusion_matrix": confusion_matrix(truth, predicted, labels=labels).tolist(),
    }


def plot_confusion(report: dict[str, Any], path: Path) -> None:
    """Write the confusion matrix of ``report`` as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from sklearn.metrics import ConfusionMatrixDisplay

    display = ConfusionMatrixDisplay(np.array(report["confusion_matrix"]), display_labels=report["labels"])
    display.plot(cmap="Blues", colorbar=False)
    display.ax_.set_title(f"accuracy {report['accuracy']:.3f}, macro-F1 {report['macro_f1']:.3f}", fontsize=9)
    display.figure_.tight_layout()
    display.figure_.savefig(path, dpi=120)
    plt.close(display.figure_)


def render(report: dict[str, Any]) -> str:
    """The report as text: counts, headline metrics, per-class scores, confusion matrix."""
    labels = report["labels"]
    ci = report["intervals_95"]
    width = max(len(label) for label in labels) + 2
    lines = [
        f"items {report['items']}  classified {report['items'] - report['failed']}  failed {report['failed']}  "
        f"abstained {report['abstained']}",
        f"accuracy {report['accuracy']:.4f} [{ci['accuracy'][0]:.4f}, {ci['accuracy'][1]:.4f}]  "
        f"macro-F1 {report['macro_f1']:.4f} [{ci['macro_f1'][0]:.4f}, {ci['macro_f1'][1]:.4f}]  (95 % bootstrap)",
        f"throughput {report['throughput_per_s']:.1f}/s  latency p50 {report['latency_ms']['p50']} ms "
        f"p95 {report['latency_ms']['p95']} ms"
        + (f"  calibration error (ECE) {report['ece']:.4f}" if "ece" in report else ""),
    ]
    fitted = report.get("calibration")
    if fitted:
        lines.append(
            f"temperature {fitted['temperature']:.3f}: "
            f"ECE {fitted['before']['ece']:.4f} -> {fitted['after']['ece']:.4f}, "
            f"NLL {fitted['before']['nll']:.4f} -> {fitted['after']['nll']:.4f}"
        )
        if "target_accuracy" in fitted:
            if fitted["abstain_below"] is None:
                lines.append(f"no abstain_below reaches accuracy {fitted['target_accuracy']}")
            else:
                lines.append(
                    f"abstain_below {fitted['abstain_below']:.4f} reaches accuracy {fitted['accuracy_at_target']:.4f}"
                    f" (target {fitted['target_accuracy']}) answering {fitted['coverage_at_target']:.1%} of items"
                )
    lines += [
        "",
        f"{'class':<{width}} precision  recall     f1  support",
    ]
    for label, s in report["per_class"].items():
        lines.append(f"{label:<{width}} {s['precision']:9.3f} {s['recall']:7.3f} {s['f1']:6.3f} {s['support']:8d}")
    lines += ["", "confusion (rows: truth, columns: predicted)", " " * width + "".join(f"{x[:8]:>9}" for x in labels)]
    for label, row in zip(labels, report["confusion_matrix"]):
        lines.append(f"{label:<{width}}" + "".join(f"{n:>9d}" for n in row))
    return "\n".join(lines)


def _classifier(args: argparse.Namespace, **overrides: Any) -> QwenClassifier:
    """The classifier ``args`` describe: a saved one (``--classifier``) or one from the flags."""
    settings: dict[str, Any] = {"batch_size": args.batch_size}
    if args.base_url:
        settings["base_url"] = args.base_url
    if args.model:
        settings["model"] = args.model
    if args.abstain_below is not None:
        settings["abstain_below"] = args.abstain_below
    settings.update(overrides)
    if args.classifier:
        return QwenClassifier.load(args.classifier, **settings)
    return QwenClassifier(labels=args.labels or list(AG_NEWS_LABELS), mode=args.mode, **settings)


def calibrate(labels: list[str], truth: list[str], results: list[Any], target_accuracy: float | None) -> dict[str, Any]:
    """Fit a temperature on the scored items; the calibration error before and after, the
    reliability bins, the coverage-accuracy curve and the abstention threshold for
    ``target_accuracy`` (after scaling)."""
    index = {label: k for k, label in enumerate(labels)}
    scored = [(r.scores, t) for r, t in zip(results, truth) if not isinstance(r, Exception) and r.scores]
    if not scored:
        raise SystemExit("calibration needs label probabilities; this classifier gave none")
    rows = [[scores[label] for label in labels] for scores, _ in scored]
    gold = [index[t] for _, t in scored]
    temperature = calibration.fit_temperature(rows, gold)

    def summary(matrix: list[list[float]]) -> dict[str, Any]:
        confidence = [max(row) for row in matrix]
        correct = [row.index(max(row)) == g for row, g in zip(matrix, gold)]
        return {
            "ece": calibration.expected_calibration_error(confidence, correct),
            "nll": calibration.negative_log_likelihood(matrix, gold, 1.0),
            "bins": [vars(b) for b in calibration.reliability_bins(confidence, correct)],
            "confidence": confidence,
            "correct": correct,
        }

    before = summary(rows)
    after = summary([calibration.apply_temperature(row, temperature) for row in rows])
    report: dict[str, Any] = {"temperature": temperature, "items": len(rows)}
    for name, part in (("before", before), ("after", after)):
        report[name] = {k: part[k] for k in ("ece", "nll", "bins")}
    curve = calibration.coverage_curve(after["confidence"], after["correct"])
    report["coverage_curve"] = [{"threshold": t, "coverage": c, "accuracy": a} for t, c, a in curve]
    if target_accuracy is not None:
        found = calibration.abstain_threshold(after["confidence"], after["correct"], target_accuracy)
        report["target_accuracy"] = target_accuracy
        report["abstain_below"] = None if found is None else found[0]
        report["coverage_at_target"] = None if found is None else found[1]
        report["accuracy_at_target"] = None if found is None else found[2]
    report["_points"] = (before, after)  # for the plots; not written
    return report


def plot_calibration(report: dict[str, Any], out: Path) -> list[Path]:
    """The reliability diagram (before and after scaling) and the coverage-accuracy curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfect")
    for name in ("before", "after"):
        bins = [b for b in report[name]["bins"] if b["count"]]
        label = f"{name} (ECE {report[name]['ece']:.3f})"
        if name == "after":
            label = f"T = {report['temperature']:.2f} (ECE {report[name]['ece']:.3f})"
        ax.plot([b["mean_confidence"] for b in bins], [b["accuracy"] for b in bins], marker="o", label=label)
    ax.set(xlabel="confidence", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1.02), title="reliability")
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(out / "reliability.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    curve = report["coverage_curve"]
    ax.plot([p["coverage"] for p in curve], [p["accuracy"] for p in curve])
    if report.get("abstain_below") is not None:
        ax.axhline(report["target_accuracy"], color="grey", linestyle=":")
        ax.plot([report["coverage_at_target"]], [report["accuracy_at_target"]], marker="o", color="red")
        ax.text(
            0.03,
            0.05,
            f"abstain_below {report['abstain_below']:.3f}: accuracy {report['accuracy_at_target']:.3f} "
            f"answering {report['coverage_at_target']:.1%}",
            transform=ax.transAxes,
            fontsize=8,
        )
    ax.set(xlabel="coverage (answered share)", ylabel="accuracy of answered", xlim=(0, 1.02), title="coverage")
    fig.tight_layout()
    written.append(out / "coverage.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``qwen-fast eval``'s evaluation; writes and returns the report."""
    if args.save_calibration and not (args.calibrate and args.classifier):
        raise SystemExit("--save-calibration needs --calibrate and --classifier")
    # Calibration is fitted on raw scores: no earlier temperature, no abstention.
    raw = {"temperature": 1.0, "abstain_below": None} if args.calibrate else {}
    classifier = _classifier(args, **raw)
    labels = classifier.label_names
    try:
        items, _ = labelled_items(
            args.path, labels, args.label_map, text_column=args.text_column, label_column=args.label_column
        )
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    items = items[: args.limit]
    truth = [label for _, label in items]
    texts = [text for text, _ in items]
    results, seconds = asyncio.run(predict(classifier, texts))
    if results and all(isinstance(r, Exception) for r in results):
        raise SystemExit(f"every item failed; the first: {type(results[0]).__name__}: {results[0]}")
    predicted = [NO_LABEL if isinstance(r, Exception) or r.label is None else r.label for r in results]
    scored = [
        (r, t) for r, t in zip(results, truth) if not isinstance(r, Exception) and r.scores and r.label is not None
    ]
    report: dict[str, Any] = {
        "path": str(args.path),
        "classifier": args.classifier,
        "mode": classifier.mode,
        "model": classifier.model,
        "items": len(texts),
        "failed": sum(isinstance(r, Exception) for r in results),
        "abstained": sum(not isinstance(r, Exception) and r.abstained for r in results),
        **metrics(truth, predicted, labels),
        "intervals_95": calibration.bootstrap_interval(truth, predicted, labels, resamples=args.bootstrap),
        "throughput_per_s": len(texts) / seconds if seconds else 0.0,
        "seconds": seconds,
    }
    if scored:
        confidence = [max(r.scores.values()) for r, _ in scored]
        correct = [r.label == t for r, t in scored]
        report["ece"] = calibration.expected_calibration_error(confidence, correct)
    report["latency_ms"] = latency_ms(classifier, texts[: args.latency_samples])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.calibrate:
        fitted = calibrate(labels, truth, results, args.target_accuracy)
        fitted.pop("_points")
        report["calibration"] = fitted
        report["plots"] = [str(p) for p in plot_calibration(fitted, out)]
        if args.save_calibration:
            update: dict[str, Any] = {"temperature": fitted["temperature"]}
            if fitted.get("abstain_below") is not None:
                update["abstain_below"] = fitted["abstain_below"]
            report["saved"] = str(QwenClassifier.load(args.classifier, **update).save(args.classifier))
    report["predictions"] = [
        {"truth": t, "predicted": p, **({"error": f"{type(r).__name__}: {r}"} if isinstance(r, Exception) else {})}
        for t, p, r in zip(truth, predicted, results)
    ]
    (out / "report.json").write_text(json.dumps(report, indent=1))
    plot_confusion(report, out / "confusion.png")
    return report


def add_parser(sub: Any) -> None:
    """Add the ``eval`` subcommand to the ``qwen-fast`` parser."""
    parser = sub.add_parser(
        "eval",
        help="evaluate a classifier on a labelled CSV/JSONL file",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("path", help="labelled CSV or JSONL")
    parser.add_argument("--classifier", help="a saved classifier (directory or classifier.json): labels, mode, prompt")
    parser.add_argument("--base-url", help="the vLLM server (default: the saved one, else http://127.0.0.1:8000/v1)")
    parser.add_argument("--model", help="served model name (default: the saved one, else qwen3)")
    parser.add_argument("--mode", choices=["generate", "head"], default="generate")
    parser.add_argument("--labels", nargs="+", help="without --classifier (default: AG News's four)")
    parser.add_argument("--label-map", help="file label -> classifier label: '1=World,2=Sports' or JSON")
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--label-column", default="label")
    parser.add_argument("--limit", type=int, help="only the first N items")
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per request (default: %(default)s)")
    parser.add_argument("--abstain-below", type=float, help="abstain when the best probability is below this")
    parser.add_argument("--calibrate", action="store_true", help="fit a temperature; reliability and coverage PNGs")
    parser.add_argument("--target-accuracy", type=float, help="with --calibrate: the abstain_below that reaches this")
    parser.add_argument(
        "--save-calibration", action="store_true", help="write the temperature and abstain_below into --classifier"
    )
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default: %(default)s)")
    parser.add_argument("--latency-samples", type=int, default=50, help="items timed one at a time")
    parser.add_argument("--out", default="out/eval", help="folder for report.json and the PNGs")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``qwen-fast eval``."""
    if not Path(args.path).is_file():
        print(f"qwen-fast eval: no such file: {args.path}", file=sys.stderr)
        return 2
    report = evaluate(args)
    print(render(report))
    written = [Path(args.out) / "report.json", Path(args.out) / "confusion.png", *map(Path, report.get("plots", []))]
    print("\nwrote " + ", ".join(map(str, written)))
    if report.get("saved"):
        print(f"saved the temperature and abstain_below into {report['saved']}")
    return 0
