"""Evaluate a classifier set-up on a labelled file before routing traffic with it.

    qwen-fast eval data.csv --base-url http://127.0.0.1:8000/v1              # AG News layout
    qwen-fast eval data.jsonl --mode head --model qwen3-cls \\
        --labels World Sports Business Sci/Tech --limit 1000 --out out/eval

Input: CSV or JSONL. AG News's CSV layout (no header: class index 1-4, title, description) is
read as is; otherwise a header (CSV) or keys (JSONL) with a text column (or title and
description) and a label column. ``--label-map`` maps the file's label values to the
classifier's labels (``1=World,2=Sports`` or a JSON object); by default AG News's indices map
to World, Sports, Business, Sci/Tech.

Reports accuracy, macro-F1, per-class precision/recall/F1, the confusion matrix (table and
PNG), throughput, and one-at-a-time latency; writes ``report.json`` (with every prediction) and
``confusion.png``. Metrics come from scikit-learn. Needs the ``eval`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_qwen_fast.classifiers import QwenClassifier
from langchain_qwen_fast.samples import AG_NEWS_INDEX, AG_NEWS_LABELS
from langchain_qwen_fast.stats import percentile

NO_LABEL = "(none)"  # the prediction recorded for an abstained or failed item


def parse_label_map(value: str | None) -> dict[str, str]:
    """``1=World,2=Sports`` or a JSON object; keys are the file's label values."""
    if not value:
        return {}
    if value.lstrip().startswith("{"):
        return {str(k): str(v) for k, v in json.loads(value).items()}
    pairs = [item.split("=", 1) for item in value.split(",") if item.strip()]
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"--label-map must look like '1=World,2=Sports' or be JSON, got {value!r}")
    return {k.strip(): v.strip() for k, v in pairs}


def read_labelled(path: Path, text_column: str = "text", label_column: str = "label") -> list[tuple[str, str]]:
    """(text, raw label) pairs from CSV (AG News layout or with a header) or JSONL."""

    def text_of(row: dict[str, Any]) -> str:
        if row.get(text_column):
            return str(row[text_column])
        return f"{row.get('title', '')}. {row.get('description', '')}"

    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [(text_of(r), str(r[label_column])) for r in rows]
    with path.open(newline="") as f:
        table = list(csv.reader(f))
    if table and table[0] and table[0][0].strip().isdigit():  # AG News: index, title, description
        return [(f"{r[1]}. {r[2]}", r[0].strip()) for r in table]
    header, *body = table
    return [(text_of(dict(zip(header, r))), r[header.index(label_column)]) for r in body]


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
    width = max(len(label) for label in labels) + 2
    lines = [
        f"items {report['items']}  classified {report['items'] - report['failed']}  failed {report['failed']}  "
        f"abstained {report['abstained']}",
        f"accuracy {report['accuracy']:.4f}  macro-F1 {report['macro_f1']:.4f}  "
        f"throughput {report['throughput_per_s']:.1f}/s  latency p50 {report['latency_ms']['p50']} ms "
        f"p95 {report['latency_ms']['p95']} ms",
        "",
        f"{'class':<{width}} precision  recall     f1  support",
    ]
    for label, s in report["per_class"].items():
        lines.append(f"{label:<{width}} {s['precision']:9.3f} {s['recall']:7.3f} {s['f1']:6.3f} {s['support']:8d}")
    lines += ["", "confusion (rows: truth, columns: predicted)", " " * width + "".join(f"{x[:8]:>9}" for x in labels)]
    for label, row in zip(labels, report["confusion_matrix"]):
        lines.append(f"{label:<{width}}" + "".join(f"{n:>9d}" for n in row))
    return "\n".join(lines)


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``qwen-fast eval``'s evaluation; writes and returns the report."""
    labels = args.labels
    label_map = parse_label_map(args.label_map) or (AG_NEWS_INDEX if tuple(labels) == AG_NEWS_LABELS else {})
    rows = read_labelled(Path(args.path), args.text_column, args.label_column)[: args.limit]
    truth = [label_map.get(raw, raw) for _, raw in rows]
    unknown = sorted(set(truth) - set(labels))
    if unknown:
        raise SystemExit(f"labels in the file that the classifier lacks: {unknown}; use --label-map")
    texts = [text for text, _ in rows]
    classifier = QwenClassifier(
        labels=labels,
        base_url=args.base_url,
        model=args.model,
        mode=args.mode,
        batch_size=args.batch_size,
        abstain_below=args.abstain_below,
    )
    results, seconds = asyncio.run(predict(classifier, texts))
    predicted = [NO_LABEL if isinstance(r, Exception) or r.label is None else r.label for r in results]
    report = {
        "path": str(args.path),
        "mode": args.mode,
        "model": args.model,
        "items": len(texts),
        "failed": sum(isinstance(r, Exception) for r in results),
        "abstained": sum(not isinstance(r, Exception) and r.abstained for r in results),
        **metrics(truth, predicted, labels),
        "throughput_per_s": len(texts) / seconds if seconds else 0.0,
        "seconds": seconds,
        "latency_ms": latency_ms(classifier, texts[: args.latency_samples]),
        "predictions": [
            {"truth": t, "predicted": p, **({"error": f"{type(r).__name__}: {r}"} if isinstance(r, Exception) else {})}
            for t, p, r in zip(truth, predicted, results)
        ],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
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
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="the vLLM server (default: %(default)s)")
    parser.add_argument("--model", default="qwen3", help="served model name (default: %(default)s)")
    parser.add_argument("--mode", choices=["generate", "head"], default="generate")
    parser.add_argument("--labels", nargs="+", default=list(AG_NEWS_LABELS), help="default: AG News's four")
    parser.add_argument("--label-map", help="file label -> classifier label: '1=World,2=Sports' or JSON")
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--label-column", default="label")
    parser.add_argument("--limit", type=int, help="only the first N items")
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per request (default: %(default)s)")
    parser.add_argument("--abstain-below", type=float, help="abstain when the best probability is below this")
    parser.add_argument("--latency-samples", type=int, default=50, help="items timed one at a time")
    parser.add_argument("--out", default="out/eval", help="folder for report.json and confusion.png")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``qwen-fast eval``."""
    if not Path(args.path).is_file():
        print(f"qwen-fast eval: no such file: {args.path}", file=sys.stderr)
        return 2
    report = evaluate(args)
    print(render(report))
    print(f"\nwrote {Path(args.out) / 'report.json'} and {Path(args.out) / 'confusion.png'}")
    return 0
