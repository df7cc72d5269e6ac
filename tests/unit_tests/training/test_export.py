"""What an export writes for the classifier: ``classifier.json`` with the mode and the prompt
layout, and for a multi-label run ``multi_label=True`` and the tuned threshold of each label,
which ``QwenClassifier.load`` applies. The model is a stand-in: only the configuration is checked."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.training import TrainOptions
from langchain_qwen_fast.training.export import export

LABELS = ["World", "Sports", "Business"]


class _Model:
    """Saves a marker where a model would save its weights."""

    def to(self, dtype: Any) -> _Model:
        return self

    def save_pretrained(self, out: Path) -> None:
        (Path(out) / "model.safetensors").write_text("weights")


def _task(multi_label: bool) -> Any:
    return SimpleNamespace(
        torch=SimpleNamespace(bfloat16="bf16", float32="fp32"),
        device=SimpleNamespace(type="cpu"),
        multi_label=multi_label,
    )


@pytest.mark.parametrize("method", ["head", "sft"])
def test_a_multi_label_export_saves_its_thresholds(tmp_path: Path, method: str) -> None:
    options = TrainOptions(method=method, base_model=str(tmp_path / "base"), out=str(tmp_path / "out"), lora=False)  # type: ignore[arg-type]
    thresholds = {"World": 0.31, "Sports": 0.62, "Business": 0.5}
    export(_task(True), _Model(), options, LABELS, thresholds)
    config = json.loads((tmp_path / "out" / "classifier.json").read_text())["config"]
    assert config["multi_label"] is True and config["threshold"] == thresholds
    assert config["mode"] == ("head" if method == "head" else "generate")
    loaded = QwenClassifier.load(tmp_path / "out", base_url="http://127.0.0.1:9/v1")
    assert loaded.multi_label and loaded.threshold == thresholds and loaded.label_names == LABELS


def test_a_single_label_export_keeps_the_defaults(tmp_path: Path) -> None:
    options = TrainOptions(method="head", base_model=str(tmp_path / "base"), out=str(tmp_path / "out"))
    export(_task(False), _Model(), options, LABELS, {"World": 0.9})  # thresholds are for multi-label only
    config = json.loads((tmp_path / "out" / "classifier.json").read_text())["config"]
    assert config["multi_label"] is False and config["threshold"] == 0.5 and config["mode"] == "head"
    untuned = tmp_path / "untuned"
    export(_task(True), _Model(), TrainOptions(method="sft", base_model="b", out=str(untuned), lora=False), LABELS)
    assert json.loads((untuned / "classifier.json").read_text())["config"]["threshold"] == 0.5


@pytest.mark.parametrize(
    ("method", "export_as", "multi_label"),
    [("sft", "merged", False), ("sft", "adapter", True), ("head", "generate", False)],
)
def test_the_classifier_is_saved_in_the_layout_it_was_trained_in(
    tmp_path: Path, method: str, export_as: str, multi_label: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_qwen_fast.training import export as module

    monkeypatch.setattr(module, "head_as_causal_lm", lambda task, model, base: model)  # needs a real head
    monkeypatch.setattr(module, "HeadTask", SimpleNamespace)  # what _task makes
    out = tmp_path / "out"
    options = TrainOptions(method=method, base_model=str(tmp_path / "base"), out=str(out), export=export_as,  # type: ignore[arg-type]
                           prompt_layout="compact", lora=method == "sft" and export_as == "adapter")  # fmt: skip
    export(_task(multi_label), _Model(), options, LABELS, None)
    config = json.loads((out / "classifier.json").read_text())["config"]
    assert config["prompt_layout"] == "compact" and config["mode"] == "generate"
    loaded = QwenClassifier.load(out, base_url="http://127.0.0.1:9/v1")
    assert loaded.prompt_layout == "compact" and loaded.multi_label is multi_label
    plain = tmp_path / "plain"
    export(_task(False), _Model(), TrainOptions(method="head", base_model="b", out=str(plain)), LABELS)
    assert json.loads((plain / "classifier.json").read_text())["config"]["prompt_layout"] == "chat"
