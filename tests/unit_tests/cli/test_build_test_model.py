"""``qwen-fast build-test-model``'s options for the pretrained SmolLM2 model (nothing is built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_qwen_fast.cli import build_test_model
from langchain_qwen_fast.cli.main import main
from tests.support.cli import parse_command


def problem(*argv: str) -> str | None:
    return build_test_model.option_error(parse_command(build_test_model, ["--out", "m", *argv]))


def test_the_pretrained_size_is_offered() -> None:
    assert parse_command(build_test_model, ["--out", "m", "--size", "smollm2-135m"]).size == "smollm2-135m"
    assert problem("--size", "smollm2-135m") is None
    assert problem("--size", "smollm2-135m", "--overwrite") is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--num-labels", "4"], "--num-labels shapes a random-weight model"),
        (["--multi-label"], "--multi-label shapes a random-weight model"),
        (["--seed", "0"], "--seed shapes a random-weight model"),
        (["--tokenizer-from", "x", "--seed", "1"], "--seed, --tokenizer-from shape a random-weight model"),
    ],
)
def test_random_weight_options_are_refused_for_the_pretrained_model(flags: list[str], message: str) -> None:
    assert problem("--size", "smollm2-135m", *flags) == f"{message}; --size smollm2-135m is pretrained"


def test_the_random_sizes_keep_their_options() -> None:
    assert problem("--num-labels", "4", "--multi-label", "--seed", "3") is None
    assert problem("--multi-label") == "--multi-label needs --num-labels"


def test_a_refused_combination_is_a_usage_error_that_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "m"
    assert main(["build-test-model", "--size", "smollm2-135m", "--out", str(out), "--seed", "0"]) == 2
    assert "--seed shapes a random-weight model" in capsys.readouterr().err
    assert not out.exists()
