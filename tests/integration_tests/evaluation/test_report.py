"""The eval command, in both modes, with metrics recomputed independently here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.cli import main
from langchain_qwen_fast.training.data import parse_label_map
from tests.integration_tests.conftest import NEWS_LABELS


def write_ag_csv(path: Path, news_texts: list[str], n: int) -> list[tuple[str, str]]:
    """AG News layout (class index, title, description); returns (text, truth) pairs."""
    rows = []
    with path.open("w") as f:
        for i in range(n):
            index = i % 4 + 1
            title, description = news_texts[i % len(news_texts)], f"Story number {i}"
            f.write(f'"{index}","{title}","{description}"\n')
            rows.append((f"{title}. {description}", NEWS_LABELS[index - 1]))
    return rows


def hand_metrics(truth: list[str], predicted: list[str]) -> dict:
    """Accuracy, per-class precision/recall, macro-F1 and confusion matrix, by hand."""
    accuracy = sum(t == p for t, p in zip(truth, predicted)) / len(truth)
    per_class, f1s = {}, []
    for label in NEWS_LABELS:
        tp = sum(t == label and p == label for t, p in zip(truth, predicted))
        fp = sum(t != label and p == label for t, p in zip(truth, predicted))
        fn = sum(t == label and p != label for t, p in zip(truth, predicted))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[label] = (precision, recall, f1, tp + fn)
        f1s.append(f1)
    matrix = [[sum(t == a and p == b for t, p in zip(truth, predicted)) for b in NEWS_LABELS] for a in NEWS_LABELS]
    return {"accuracy": accuracy, "macro_f1": sum(f1s) / len(f1s), "per_class": per_class, "matrix": matrix}


def check_report(report: dict, rows: list[tuple[str, str]], classifier: QwenClassifier) -> None:
    truth = [t for _, t in rows]
    predicted = [p["predicted"] for p in report["predictions"]]
    assert [p["truth"] for p in report["predictions"]] == truth
    # The predictions are the classifier's own answers, item by item.
    assert predicted == [r.label for r in classifier.batch([text for text, _ in rows])]
    expected = hand_metrics(truth, predicted)
    assert report["accuracy"] == pytest.approx(expected["accuracy"])
    assert report["macro_f1"] == pytest.approx(expected["macro_f1"])
    assert report["confusion_matrix"] == expected["matrix"]
    for label, (precision, recall, f1, support) in expected["per_class"].items():
        got = report["per_class"][label]
        assert (got["precision"], got["recall"], got["f1"]) == pytest.approx((precision, recall, f1))
        assert got["support"] == support
    assert report["throughput_per_s"] > 0 and report["latency_ms"]["p50"] > 0


def test_eval_generate_mode_on_ag_news_layout(
    server_url: str, news_texts: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "ag.csv"
    rows = write_ag_csv(data, news_texts, 48)
    names = ",".join(f"{k}={label}" for k, label in enumerate(NEWS_LABELS, 1))  # the class indices named
    main(["eval", str(data), "--base-url", server_url, "--label-map", names, "--labels", *NEWS_LABELS,
          "--out", str(tmp_path / "out"), "--latency-samples", "5"])  # fmt: skip
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["items"] == 48 and report["failed"] == 0
    check_report(report, rows, QwenClassifier(labels=NEWS_LABELS, base_url=server_url))
    assert (tmp_path / "out" / "confusion.png").stat().st_size > 0
    assert "macro-F1" in capsys.readouterr().out


def test_eval_head_mode_jsonl_with_label_map_and_limit(
    head_server_url: str, news_texts: list[str], tmp_path: Path
) -> None:
    data = tmp_path / "data.jsonl"
    codes = {"w": "World", "s": "Sports", "b": "Business", "t": "Sci/Tech"}
    all_rows = [(f"{news_texts[i % len(news_texts)]} #{i}", "wsbt"[i % 4]) for i in range(60)]
    data.write_text("\n".join(json.dumps({"text": t, "label": c}) for t, c in all_rows))
    out = tmp_path / "out"
    main([
        "eval", str(data), "--base-url", head_server_url, "--model", "qwen3-cls", "--mode", "head",
        "--labels", *NEWS_LABELS, "--label-map", json.dumps(codes), "--limit", "40", "--out", str(out),
        "--latency-samples", "5",
    ])  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    rows = [(t, codes[c]) for t, c in all_rows[:40]]
    assert report["items"] == 40 and report["mode"] == "head"
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=head_server_url, model="qwen3-cls", mode="head")
    check_report(report, rows, classifier)
    assert len({p["predicted"] for p in report["predictions"]}) >= 2  # a real spread to score


def test_label_map_forms_and_unknown_labels(
    server_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert parse_label_map("1=World, 2=Sports") == {"1": "World", "2": "Sports"}
    assert parse_label_map('{"1": "World"}') == {"1": "World"}
    with pytest.raises(ValueError, match="label map"):
        parse_label_map("1:World")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "x", "label": "Politics"}))
    assert (
        main(["eval", str(data), "--base-url", server_url, "--labels", *NEWS_LABELS, "--out", str(tmp_path / "o")]) == 1
    )
    assert "Politics" in capsys.readouterr().err
