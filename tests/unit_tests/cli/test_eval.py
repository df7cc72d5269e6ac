"""``qwen-fast eval``'s arguments become EvalOptions and a LabelledFile field by field, with
the dataclasses' own defaults; the library's typed errors reach the command's exit code."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from langchain_qwen_fast.cli import eval as command
from langchain_qwen_fast.cli.main import main
from langchain_qwen_fast.cli.options import options_from
from langchain_qwen_fast.evaluation import EvalOptions
from langchain_qwen_fast.training import LabelledFile
from langchain_qwen_fast.training.data import write_labelled
from tests.support.cli import parse_command

#: every flag, each set to a value other than its default
EVERY_FLAG = [
    "d.jsonl", "--classifier", "c", "--base-url", "http://h/v1", "--model", "m", "--mode", "head", "--labels", "x",
    "y", "--label-map", "1=x", "--text-column", "t", "--label-column", "l", "--limit", "9", "--batch-size", "8",
    "--abstain-below", "0.5", "--calibrate", "--target-accuracy", "0.9", "--save-calibration", "--bootstrap", "10",
    "--latency-samples", "3", "--out", "o",
]  # fmt: skip


def parse(argv: list[str]) -> argparse.Namespace:
    return parse_command(command, argv)


def test_every_flag_reaches_its_field() -> None:
    args = parse(EVERY_FLAG)
    options = options_from(EvalOptions, args)
    assert options == EvalOptions(
        classifier="c", base_url="http://h/v1", model="m", mode="head", labels=["x", "y"], limit=9, batch_size=8,
        abstain_below=0.5, calibrate=True, target_accuracy=0.9, save_calibration=True, bootstrap=10,
        latency_samples=3, out="o",
    )  # fmt: skip
    assert options_from(LabelledFile, args) == LabelledFile("d.jsonl", "1=x", "t", "l")
    changed = {f.name for f in dataclasses.fields(EvalOptions) if getattr(options, f.name) != f.default}
    assert changed == {f.name for f in dataclasses.fields(EvalOptions)}


def test_every_argument_is_a_field() -> None:
    fields = {f.name for cls in (EvalOptions, LabelledFile) for f in dataclasses.fields(cls)}
    assert set(vars(parse(EVERY_FLAG))) == fields


def test_defaults_are_the_dataclasses_own() -> None:
    args = parse(["d.csv"])
    assert options_from(EvalOptions, args) == EvalOptions()
    assert options_from(LabelledFile, args) == LabelledFile("d.csv")


def test_a_file_of_numbered_labels_is_refused_saying_how_to_name_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "ag.csv"
    data.write_text('1,"Summit","Talks."\n2,"Late goal","A win."\n')
    assert main(["eval", str(data), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "qwen-fast eval: the labels in" in err and "--label-map 1=<name>,2=<name>" in err


def test_saving_a_calibration_without_one_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = write_labelled(tmp_path / "d.csv", [("a", "World")])
    assert main(["eval", str(data), "--classifier", "c", "--save-calibration", "--out", str(tmp_path)]) == 1
    assert "qwen-fast eval: --save-calibration needs --calibrate and --classifier" in capsys.readouterr().err
