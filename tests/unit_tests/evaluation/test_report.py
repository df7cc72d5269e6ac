"""``evaluate`` over a canned vLLM server (no network): the report, the files it writes, the
calibration it saves, and the typed errors that replace exiting."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.errors import ConfigurationError, DataFileError, MissingDependencyError
from langchain_qwen_fast.evaluation import EvalOptions, evaluate, render_report
from langchain_qwen_fast.evaluation import report as report_module
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, labelled_news
from langchain_qwen_fast.training import LabelledFile
from langchain_qwen_fast.training.data import write_labelled
from tests.support.fake_vllm import FakeVLLM

URL = "http://vllm.test/v1"
LABELS = list(AG_NEWS_LABELS)
QUICK = {"base_url": URL, "latency_samples": 2, "bootstrap": 50}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeVLLM:
    """The canned server every classifier ``evaluate`` builds talks to."""
    server = FakeVLLM()
    build = report_module.classifier_for

    def through_fake(options: EvalOptions, **overrides: Any) -> QwenClassifier:
        return build(options, http_transport=server.transport, **overrides)

    monkeypatch.setattr(report_module, "classifier_for", through_fake)
    return server


@pytest.fixture
def data(tmp_path: Path) -> LabelledFile:
    return LabelledFile(str(write_labelled(tmp_path / "news.csv", labelled_news(24, 0))))


def test_the_report_holds_the_classifiers_own_answers_and_is_written(
    fake: FakeVLLM, data: LabelledFile, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    got = evaluate(data, EvalOptions(out=str(out), limit=20, **QUICK))
    assert got["labels"] == sorted(LABELS)  # no label set given: the file's, sorted
    items = labelled_news(24, 0)[:20]
    classifier = QwenClassifier(labels=sorted(LABELS), base_url=URL, http_transport=fake.transport)
    expected = classifier.batch([t for t, _ in items])
    assert [p["predicted"] for p in got["predictions"]] == [r.label for r in expected]
    assert [p["truth"] for p in got["predictions"]] == [y for _, y in items]
    assert got["items"] == 20 and got["failed"] == 0 and got["mode"] == "generate"
    low, high = got["intervals_95"]["accuracy"]
    assert low <= got["accuracy"] <= high
    assert 0.0 <= got["ece"] <= 1.0
    assert json.loads((out / "report.json").read_text())["accuracy"] == got["accuracy"]
    assert (out / "confusion.png").stat().st_size > 0
    text = render_report(got)
    assert "macro-F1" in text and "confusion (rows: truth" in text


def test_calibration_is_fitted_on_raw_scores_and_saved_into_the_classifier(
    fake: FakeVLLM, data: LabelledFile, tmp_path: Path
) -> None:
    saved = QwenClassifier(labels=LABELS, base_url=URL, temperature=3.0).save(tmp_path / "clf" / "classifier.json")
    options = EvalOptions(
        classifier=str(saved), calibrate=True, target_accuracy=0.5, save_calibration=True, out=str(tmp_path), **QUICK
    )
    got = evaluate(data, options)
    fitted = got["calibration"]
    assert fitted["after"]["nll"] <= fitted["before"]["nll"] + 1e-9
    assert got["saved"] == str(saved)
    assert QwenClassifier.load(saved).temperature == pytest.approx(fitted["temperature"])
    assert {Path(p).name for p in got["plots"]} == {"reliability.png", "coverage.png"}
    assert "temperature" in render_report(got)


def test_saving_a_calibration_without_fitting_one_is_a_configuration_error(data: LabelledFile, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="--save-calibration needs --calibrate"):
        evaluate(data, EvalOptions(classifier="c", save_calibration=True, out=str(tmp_path)))
    assert not (tmp_path / "report.json").exists()


def test_a_missing_file_is_a_data_file_error(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="no such file"):
        evaluate(LabelledFile(str(tmp_path / "none.csv")), EvalOptions(out=str(tmp_path)))


def test_a_file_of_numbered_labels_needs_a_label_map(fake: FakeVLLM, tmp_path: Path) -> None:
    path = tmp_path / "ag.csv"
    path.write_text('3,"Stocks up","Markets rallied."\n2,"Late goal","A win."\n')
    with pytest.raises(DataFileError, match=r"are numbers \(2, 3\).*--label-map"):
        evaluate(LabelledFile(str(path)), EvalOptions(out=str(tmp_path), **QUICK))
    named = LabelledFile(str(path), label_map="1=World,2=Sports,3=Business,4=Sci/Tech")
    got = evaluate(named, EvalOptions(labels=LABELS, out=str(tmp_path), **QUICK))
    assert [p["truth"] for p in got["predictions"]] == ["Business", "Sports"] and got["labels"] == LABELS


def test_a_file_where_every_item_fails_is_a_configuration_error_naming_the_first_failure(
    fake: FakeVLLM, data: LabelledFile, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="every item failed") as caught:
        evaluate(data, EvalOptions(model="not-served", out=str(tmp_path), **QUICK))
    assert type(caught.value.__cause__).__name__ in str(caught.value)
    assert not (tmp_path / "report.json").exists()


def test_calibration_without_label_probabilities_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="label probabilities"):
        report_module.fit_calibration(LABELS, ["World"], [ValueError("failed")], None)


def test_a_missing_part_of_the_eval_extra_is_named(
    monkeypatch: pytest.MonkeyPatch, data: LabelledFile, tmp_path: Path
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else find_spec(name, *a)
    )
    with pytest.raises(MissingDependencyError, match=r"matplotlib.*langchain-qwen-fast\[eval\]"):
        evaluate(data, EvalOptions(out=str(tmp_path)))
