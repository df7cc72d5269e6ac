"""The evaluation's PNGs are written from a report's numbers."""

from __future__ import annotations

from pathlib import Path

from langchain_qwen_fast.evaluation.plots import plot_calibration, plot_confusion


def test_confusion_reliability_and_coverage_pngs_are_written(tmp_path: Path) -> None:
    plot_confusion(
        {"confusion_matrix": [[3, 1], [0, 2]], "labels": ["a", "b"], "accuracy": 5 / 6, "macro_f1": 0.83},
        tmp_path / "confusion.png",
    )
    bins = [{"count": 4, "mean_confidence": 0.6, "accuracy": 0.5}, {"count": 0, "mean_confidence": 0, "accuracy": 0}]
    fitted = {
        "temperature": 1.5,
        "before": {"ece": 0.1, "bins": bins},
        "after": {"ece": 0.05, "bins": bins},
        "coverage_curve": [{"coverage": 1.0, "accuracy": 0.8}, {"coverage": 0.5, "accuracy": 0.95}],
        "target_accuracy": 0.9,
        "abstain_below": 0.7,
        "coverage_at_target": 0.5,
        "accuracy_at_target": 0.95,
    }
    written = plot_calibration(fitted, tmp_path)
    assert written == [tmp_path / "reliability.png", tmp_path / "coverage.png"]
    for path in [tmp_path / "confusion.png", *written]:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
