"""``qwen-fast train``'s arguments become TrainOptions, a LabelledFile and LabelLists field by
field, with the dataclasses' own defaults; no option is copied by hand."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from langchain_qwen_fast.cli import train as command
from langchain_qwen_fast.cli.main import main
from langchain_qwen_fast.cli.options import options_from
from langchain_qwen_fast.training import LabelledFile, LabelLists, TrainOptions
from langchain_qwen_fast.training.data import write_labelled
from tests.support.cli import parse_command

#: every flag, each set to a value other than its default
EVERY_FLAG = [
    "d.csv", "--base-model", "b", "--method", "head", "--out", "o", "--labels", "x", "y", "--label-map", "1=x",
    "--text-column", "t", "--label-column", "l", "--epochs", "5", "--batch-size", "8", "--learning-rate", "0.01",
    "--lora", "--lora-rank", "4", "--lora-alpha", "8", "--val-fraction", "0.2", "--patience", "3", "--seed", "7",
    "--max-text-tokens", "64", "--max-steps", "10", "--export", "generate", "--instructions", "sort",
    "--prompt-layout", "compact",
    "--served-model-name", "n", "--resume", "--device", "cpu", "--no-progress", "--multi-label",
    "--label-separator", ";",
]  # fmt: skip
#: the one field without a flag: a mapping, given in Python
NO_FLAG = {"label_descriptions"}


def parse(argv: list[str]) -> argparse.Namespace:
    return parse_command(command, argv)


def test_every_flag_reaches_its_field() -> None:
    args = parse(EVERY_FLAG)
    options = options_from(TrainOptions, args)
    assert options == TrainOptions(
        method="head", base_model="b", out="o", epochs=5, batch_size=8, learning_rate=0.01, lora=True, lora_rank=4,
        lora_alpha=8, val_fraction=0.2, patience=3, seed=7, max_text_tokens=64, export="generate",
        instructions="sort", prompt_layout="compact", served_model_name="n", resume=True, device="cpu", max_steps=10,
        progress=False,
    )  # fmt: skip
    assert options_from(LabelledFile, args) == LabelledFile("d.csv", "1=x", "t", "l")
    assert options_from(LabelLists, args) == LabelLists(multi_label=True, label_separator=";")
    changed = {f.name for f in dataclasses.fields(TrainOptions) if getattr(options, f.name) != f.default}
    assert changed == {f.name for f in dataclasses.fields(TrainOptions)} - NO_FLAG


def test_every_argument_is_a_field_or_the_label_set() -> None:
    fields = {f.name for cls in (TrainOptions, LabelledFile, LabelLists) for f in dataclasses.fields(cls)}
    assert set(vars(parse(EVERY_FLAG))) - NO_FLAG == (fields - NO_FLAG) | {"labels"}


def test_defaults_are_the_dataclasses_own() -> None:
    args = parse(["d.csv", "--base-model", "b", "--method", "sft", "--out", "o"])
    assert options_from(TrainOptions, args) == TrainOptions(method="sft", base_model="b", out="o")
    assert options_from(LabelledFile, args) == LabelledFile("d.csv")
    assert options_from(LabelLists, args) == LabelLists()  # multi-label when detected, cells split at "|"
    assert args.labels is None


def test_help_shows_the_dataclass_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"validation share (default: {TrainOptions.val_fraction})" in out
    assert f"tokens kept per text (default: {TrainOptions.max_text_tokens})" in out


def test_the_help_says_training_stops_early_and_when_it_had_not_converged(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "the most epochs (default: 50, with validation to stop early" in out
    assert "had not converged" in out and "--label-map" in out


def test_a_file_of_numbered_labels_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = tmp_path / "ag.csv"
    data.write_text('1,"Summit","Talks."\n2,"Late goal","A win."\n')
    assert main(["train", str(data), "--base-model", "m", "--method", "head", "--out", "o"]) == 2
    assert "are numbers (1, 2)" in capsys.readouterr().err


def test_options_that_cannot_work_are_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = write_labelled(tmp_path / "d.csv", [("a", "x"), ("b", "y")])
    code = main(["train", str(data), "--base-model", "m", "--method", "head", "--export", "adapter", "--out", "o"])
    assert code == 2
    assert "qwen-fast train: a head model is exported merged" in capsys.readouterr().err


def test_bad_multi_label_data_or_options_are_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = write_labelled(tmp_path / "d.csv", [("a", ["x", "y"]), ("b", ["x", "z"])])
    argv = ["--base-model", "m", "--method", "head", "--out", "o", "--labels", "x", "y", "--multi-label"]
    assert main(["train", str(data), *argv]) == 2
    assert "the label set lacks: ['z']" in capsys.readouterr().err
    good = write_labelled(tmp_path / "d.jsonl", [("a", ["x", "y"]), ("b", [])])  # JSON lists: detected
    assert main(["train", str(good), *argv[:-1], "--export", "generate"]) == 2
    assert "--export generate is single-label" in capsys.readouterr().err


def test_a_layout_for_a_head_served_through_classify_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = write_labelled(tmp_path / "d.csv", [("a", "x"), ("b", "y")])
    argv = ["train", str(data), "--base-model", "m", "--method", "head", "--out", "o", "--prompt-layout", "compact"]
    assert main(argv) == 2
    assert "reads the bare text" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["d.csv", "--base-model", "b", "--method", "sft", "--out", "o", "--prompt-layout", "short"])
    assert "invalid choice: 'short'" in capsys.readouterr().err


def test_the_help_says_when_each_prompt_layout_fits(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--prompt-layout {chat,compact}" in out and "(default: chat)" in out
    assert "A model trained in a layout is served in it" in out
