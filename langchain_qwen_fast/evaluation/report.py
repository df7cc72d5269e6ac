"""Evaluate a classifier on a labelled file before routing traffic with it, and calibrate its
probabilities: :func:`evaluate` runs the classifier over the file and writes ``report.json``
(with every prediction) and the plots; :func:`fit_calibration` fits a temperature and the
abstention threshold for a target accuracy; :func:`save_calibration` writes them into a saved
classifier; :func:`render_report` is the report as text."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_qwen_fast import calibration
from langchain_qwen_fast._core.stats import percentile
from langchain_qwen_fast._extras import require_extra
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.evaluation.metrics import classification_metrics
from langchain_qwen_fast.evaluation.options import EvalOptions
from langchain_qwen_fast.evaluation.plots import plot_calibration, plot_confusion
from langchain_qwen_fast.training.data import LabelledFile

if TYPE_CHECKING:
    from langchain_qwen_fast.engine import EngineClassifier

NO_LABEL = "(none)"  # the prediction recorded for an abstained or failed item
#: what the ``eval`` extra brings that the evaluation imports
_EVAL_MODULES = ("sklearn", "scipy", "matplotlib", "tqdm")


async def predict(classifier: EngineClassifier, texts: Sequence[str], chunk: int = 1024) -> tuple[list[Any], float]:
    """Every text's Classification (or exception), with a progress bar; and the seconds taken."""
    from tqdm import tqdm

    results: list[Any] = []
    start = time.perf_counter()
    with tqdm(total=len(texts), unit="item", desc="classifying") as bar:
        for offset in range(0, len(texts), chunk):
            part = list(texts[offset : offset + chunk])
            results += await classifier.engine.aclassify(part)
            bar.update(len(part))
    return results, time.perf_counter() - start


def latency_ms(classifier: EngineClassifier, texts: Sequence[str]) -> dict[str, float | None]:
    """p50/p95 of one-at-a-time ``invoke`` over ``texts``."""
    timings = []
    for text in texts:
        start = time.perf_counter()
        if isinstance(classifier.engine.classify([text])[0], Exception):
            continue  # a bad item is not a latency sample
        timings.append((time.perf_counter() - start) * 1000)
    return {name: _round(percentile(timings, q)) for name, q in (("p50", 50), ("p95", 95))}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def classifier_for(options: EvalOptions, **overrides: Any) -> EngineClassifier:
    """The classifier ``options`` describe: a saved one (``classifier``) or one from the options
    (:class:`ConfigurationError` when they give no label set)."""
    from langchain_qwen_fast.engine import EngineClassifier

    settings: dict[str, Any] = {"batch_size": options.batch_size}
    if options.base_url:
        settings["base_url"] = options.base_url
    if options.model:
        settings["model"] = options.model
    if options.abstain_below is not None:
        settings["abstain_below"] = options.abstain_below
    settings.update(overrides)
    if options.classifier:
        return EngineClassifier.load(options.classifier, **settings)
    if not options.labels:
        raise ConfigurationError("a classifier needs a label set: give labels or a saved classifier")
    return EngineClassifier(labels=options.labels, mode=options.mode, **settings)


def fit_calibration(
    labels: list[str], truth: list[str], results: list[Any], target_accuracy: float | None
) -> dict[str, Any]:
    """Fit a temperature on the scored items; the calibration error before and after, the
    reliability bins, the coverage-accuracy curve and the abstention threshold for
    ``target_accuracy`` (after scaling). :class:`ConfigurationError` when the classifier gave
    no label probabilities."""
    index = {label: k for k, label in enumerate(labels)}
    scored = [(r.scores, t) for r, t in zip(results, truth) if not isinstance(r, Exception) and r.scores]
    if not scored:
        raise ConfigurationError("calibration needs label probabilities; this classifier gave none")
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
    return report


def save_calibration(classifier: str | Path, fitted: dict[str, Any]) -> Path:
    """Write the fitted temperature (and the ``abstain_below`` found, if any) into the saved
    classifier at ``classifier``; returns the file written."""
    from langchain_qwen_fast.engine import ClassifierConfig

    update: dict[str, Any] = {"temperature": fitted["temperature"]}
    if fitted.get("abstain_below") is not None:
        update["abstain_below"] = fitted["abstain_below"]
    return ClassifierConfig.load(classifier, **update).save(classifier)


def evaluate(data: LabelledFile, options: EvalOptions) -> dict[str, Any]:
    """Run the classifier ``options`` describe over ``data``; writes ``report.json`` and the
    plots into ``options.out`` and returns the report. Raises :class:`ConfigurationError` for
    options that cannot work together and when every item failed (the first failure named),
    :class:`DataFileError` for a file that cannot be read as asked,
    :class:`MissingDependencyError` without the ``eval`` extra."""
    options.check()
    data.check()  # before the classifier (and LangChain) loads
    require_extra("eval", *_EVAL_MODULES, what="evaluation")
    if not options.classifier and not options.labels:
        # No label set given: the file's own labels, read as training reads them.
        options = dataclasses.replace(options, labels=data.read()[1])
    # Calibration is fitted on raw scores: no earlier temperature, no abstention.
    raw = {"temperature": 1.0, "abstain_below": None} if options.calibrate else {}
    classifier = classifier_for(options, **raw)
    labels = classifier.label_names
    items, _ = data.read(labels)
    items = items[: options.limit]
    truth = [label for _, label in items]
    texts = [text for text, _ in items]
    results, seconds = asyncio.run(predict(classifier, texts))
    if results and all(isinstance(r, Exception) for r in results):
        raise ConfigurationError(
            f"every item failed (check the server, the model name and the mode); "
            f"the first: {type(results[0]).__name__}: {results[0]}"
        ) from results[0]
    predicted = [NO_LABEL if isinstance(r, Exception) or r.label is None else r.label for r in results]
    scored = [
        (r, t) for r, t in zip(results, truth) if not isinstance(r, Exception) and r.scores and r.label is not None
    ]
    report: dict[str, Any] = {
        "path": str(data.path),
        "classifier": options.classifier,
        "mode": classifier.mode,
        "model": classifier.model,
        "items": len(texts),
        "failed": sum(isinstance(r, Exception) for r in results),
        "abstained": sum(not isinstance(r, Exception) and r.abstained for r in results),
        **classification_metrics(truth, predicted, labels),
        "intervals_95": calibration.bootstrap_interval(truth, predicted, labels, resamples=options.bootstrap),
        "throughput_per_s": len(texts) / seconds if seconds else 0.0,
        "seconds": seconds,
    }
    if scored:
        confidence = [max(r.scores.values()) for r, _ in scored]
        correct = [r.label == t for r, t in scored]
        report["ece"] = calibration.expected_calibration_error(confidence, correct)
    report["latency_ms"] = latency_ms(classifier, texts[: options.latency_samples])
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    if options.calibrate:
        fitted = fit_calibration(labels, truth, results, options.target_accuracy)
        report["calibration"] = fitted
        report["plots"] = [str(p) for p in plot_calibration(fitted, out)]
        if options.save_calibration:
            assert options.classifier is not None  # options.check()
            report["saved"] = str(save_calibration(options.classifier, fitted))
    report["predictions"] = [
        {"truth": t, "predicted": p, **({"error": f"{type(r).__name__}: {r}"} if isinstance(r, Exception) else {})}
        for t, p, r in zip(truth, predicted, results)
    ]
    (out / "report.json").write_text(json.dumps(report, indent=1))
    plot_confusion(report, out / "confusion.png")
    return report


def render_report(report: dict[str, Any]) -> str:
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
        lines += _calibration_lines(fitted)
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


def _calibration_lines(fitted: dict[str, Any]) -> list[str]:
    """The fitted calibration as text: the temperature's effect and the threshold found."""
    lines = [
        f"temperature {fitted['temperature']:.3f}: "
        f"ECE {fitted['before']['ece']:.4f} -> {fitted['after']['ece']:.4f}, "
        f"NLL {fitted['before']['nll']:.4f} -> {fitted['after']['nll']:.4f}"
    ]
    if "target_accuracy" not in fitted:
        return lines
    if fitted["abstain_below"] is None:
        return [*lines, f"no abstain_below reaches accuracy {fitted['target_accuracy']}"]
    return [
        *lines,
        f"abstain_below {fitted['abstain_below']:.4f} reaches accuracy {fitted['accuracy_at_target']:.4f}"
        f" (target {fitted['target_accuracy']}) answering {fitted['coverage_at_target']:.1%} of items",
    ]
