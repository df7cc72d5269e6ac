"""``qwen-fast build-test-model``'s options for the pretrained SmolLM2 model (nothing is built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_qwen_fast.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_pretrained_size_is_offered(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "build-test-model", "--help")
    assert code == 0 and "smollm2-135m" in out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--num-labels", "4"], "--num-labels shapes a random-weight model"),
        (["--multi-label"], "--multi-label shapes a random-weight model"),
        (["--seed", "0"], "--seed shapes a random-weight model"),
        (["--tokenizer-from", "x", "--seed", "1"], "--seed, --tokenizer-from shape a random-weight model"),
    ],
)
def test_random_weight_options_are_refused_for_the_pretrained_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], message: str
) -> None:
    code, _, err = run(capsys, "build-test-model", "--size", "smollm2-135m", "--out", str(tmp_path / "m"), *flags)
    assert code == 2 and message in err and "smollm2-135m is pretrained" in err
    assert not (tmp_path / "m").exists()
