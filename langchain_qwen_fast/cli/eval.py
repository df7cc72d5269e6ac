"""``qwen-fast eval``: accuracy, macro-F1 and calibration of a classifier on a labelled file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from langchain_qwen_fast.cli.options import add_labelled_file_arguments, defaults, options_from
from langchain_qwen_fast.evaluation.options import EvalOptions
from langchain_qwen_fast.training import LabelledFile

DESCRIPTION = """\
Evaluate a classifier set-up on a labelled file before routing traffic with it, and calibrate
its probabilities.

    qwen-fast eval data.csv --base-url http://127.0.0.1:8000/v1
    qwen-fast eval ag_news.csv --label-map 1=World,2=Sports,3=Business,4=Sci/Tech
    qwen-fast eval data.jsonl --mode head --model qwen3-cls \\
        --labels World Sports Business Sci/Tech --limit 1000 --out out/eval
    qwen-fast eval val.csv --classifier models/news --calibrate --target-accuracy 0.98 --save-calibration

Input: CSV or JSONL. AG News's CSV layout (no header: class index, title, description) is
read as is; otherwise a header (CSV) or keys (JSONL) with a text column (or title and
description) and a label column. --label-map maps the file's label values to the classifier's
labels (1=World,2=Sports or a JSON object); a file whose labels are all numbers needs one (or
--labels naming the numbers themselves). --classifier DIR evaluates a saved classifier
(qwen-fast train's output, or QwenClassifier.save): its labels, mode and prompt. Without it,
the label set is --labels, else the file's labels, sorted; --mode head needs --labels, in the
head's class order.

Reports accuracy and macro-F1 with bootstrap 95 % intervals, per-class precision/recall/F1,
the confusion matrix (table and PNG), expected calibration error, throughput, and
one-at-a-time latency. --calibrate fits a temperature (minimum negative log-likelihood) on the
file, reports the calibration error before and after, draws a reliability diagram and a
coverage-accuracy curve, and with --target-accuracy finds the abstain_below that reaches it;
--save-calibration writes both into the saved classifier. Writes report.json (with every
prediction) and the PNGs. Metrics come from scikit-learn. Needs the 'eval' extra.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``eval``'s options: one per field of :class:`LabelledFile` and :class:`EvalOptions`,
    whose defaults they show."""
    p.add_argument("--classifier", help="a saved classifier (directory or classifier.json): labels, mode, prompt")
    p.add_argument("--base-url", help="the vLLM server (default: the saved one, else http://127.0.0.1:8000/v1)")
    p.add_argument("--model", help="served model name (default: the saved one, else qwen3)")
    p.add_argument("--mode", choices=["generate", "head"])
    p.add_argument("--labels", nargs="+", help="label set without --classifier (default: the file's, sorted)")
    add_labelled_file_arguments(p, "labelled CSV or JSONL")
    p.add_argument("--limit", type=int, help="only the first N items")
    p.add_argument("--batch-size", type=int, help="prompts per request (default: %(default)s)")
    p.add_argument("--abstain-below", type=float, help="abstain when the best probability is below this")
    p.add_argument("--calibrate", action="store_true", help="fit a temperature; reliability and coverage PNGs")
    p.add_argument(
        "--save-calibration", action="store_true", help="write the temperature and abstain_below into --classifier"
    )
    p.add_argument("--target-accuracy", type=float, help="with --calibrate: the abstain_below that reaches this")
    p.add_argument("--bootstrap", type=int, help="bootstrap resamples (default: %(default)s)")
    p.add_argument("--latency-samples", type=int, help="items timed one at a time")
    p.add_argument("--out", help="folder for report.json and the PNGs")
    p.set_defaults(**defaults(EvalOptions))


def run(args: argparse.Namespace) -> int:
    """Evaluate and print the report. A missing file is a usage error (exit code 2), as a bad
    flag is; the evaluation's own errors reach ``qwen-fast``'s one rule (exit code 1)."""
    from langchain_qwen_fast.errors import DataFileError
    from langchain_qwen_fast.evaluation.report import evaluate, render_report

    data = options_from(LabelledFile, args)
    options = options_from(EvalOptions, args)
    try:
        data.check()
    except DataFileError as exc:
        print(f"qwen-fast eval: {exc}", file=sys.stderr)
        return 2
    from langchain_qwen_fast.process import collector_paused

    with collector_paused():  # the command owns its process, and the evaluation ends
        report = evaluate(data, options)
    print(render_report(report))
    out = Path(options.out)
    written = [out / "report.json", out / "confusion.png", *map(Path, report.get("plots", []))]
    print("\nwrote " + ", ".join(map(str, written)))
    if report.get("saved"):
        print(f"saved the temperature and abstain_below into {report['saved']}")
    return 0
