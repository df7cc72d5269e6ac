"""The evaluation's pictures, as PNGs (matplotlib, the ``eval`` extra): the confusion matrix,
the reliability diagram before and after temperature scaling, and the coverage-accuracy curve."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_confusion(report: dict[str, Any], path: Path) -> None:
    """Write the confusion matrix of ``report`` as a PNG."""
    plt = _pyplot()
    import numpy as np
    from sklearn.metrics import ConfusionMatrixDisplay

    display = ConfusionMatrixDisplay(np.array(report["confusion_matrix"]), display_labels=report["labels"])
    display.plot(cmap="Blues", colorbar=False)
    display.ax_.set_title(f"accuracy {report['accuracy']:.3f}, macro-F1 {report['macro_f1']:.3f}", fontsize=9)
    display.figure_.tight_layout()
    display.figure_.savefig(path, dpi=120)
    plt.close(display.figure_)


def plot_calibration(report: dict[str, Any], out: Path) -> list[Path]:
    """The reliability diagram (before and after scaling) and the coverage-accuracy curve."""
    plt = _pyplot()
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
