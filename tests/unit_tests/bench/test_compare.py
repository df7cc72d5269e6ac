"""``qwen-fast bench``'s options: what the parser gives reaches CompareOptions, and options
that cannot work are named before any server starts."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from langchain_qwen_fast.bench.compare import CompareOptions, run_compare
from langchain_qwen_fast.bench.variants import PROFILE_CHOICES
from langchain_qwen_fast.cli import bench as cli
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving import PROFILES


def parsed(*argv: str) -> CompareOptions:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.compare_options(parser.parse_args(argv))


def test_every_option_reaches_the_dataclass(tmp_path: Path) -> None:
    flags = tmp_path / "flags.json"
    options = parsed(
        "--start-server", "m", "--profile", "cpu", "--server-arg=--seed", "--server-arg", "7", "--model", "q",
        "--tokenizer", "tok", "--items", "64", "--chat-items", "32", "--invoke-items", "9", "--concurrency", "4",
        "--replicas", "2", "--compare-flags", str(flags), "--mode", "head", "--out", str(tmp_path), "--label", "L",
        "--sweep", "--service", "--compare-quantization", "fp8", "--transformers-baseline", "--capabilities",
        "--gpu-sample", "--offline-ceiling",
    )  # fmt: skip
    assert options == CompareOptions(
        start_server="m", profile="cpu", server_args=["--seed", "7"], model="q", tokenizer="tok", items=64,
        chat_items=32, invoke_items=9, concurrency=4, replicas=2, compare_flags=flags, mode="head", out=tmp_path,
        label="L", sweep=True, service=True, compare_quantization="fp8", transformers_baseline=True,
        capabilities=True, gpu_sample=True, offline_ceiling=True,
    )  # fmt: skip


def test_the_defaults_are_the_dataclasss_own() -> None:
    assert parsed("--base-url", "http://h:1/v1") == CompareOptions(base_url="http://h:1/v1")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    dests = set(vars(parser.parse_args(["--base-url", "u"])))
    # no option the library does not take, no field the command cannot set
    assert dests == {f.name for f in dataclasses.fields(CompareOptions)}


def test_the_token_id_paths_use_the_started_models_tokenizer_unless_told_none(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    assert parsed("--start-server", str(tmp_path)).tokenizer == str(tmp_path)
    assert parsed("--start-server", str(tmp_path), "--tokenizer", "none").tokenizer is None
    assert parsed("--start-server", str(tmp_path), "--tokenizer", "other").tokenizer == "other"
    assert parsed("--base-url", "http://h:1/v1").tokenizer is None


def test_the_profile_choices_are_the_launchers() -> None:
    assert ("auto", *PROFILES) == PROFILE_CHOICES
    with pytest.raises(SystemExit):
        parsed("--base-url", "u", "--profile", "fast")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "either base_url"),
        ({"base_url": "u", "start_server": "m"}, "either base_url"),
        ({"base_url": "u", "replicas": 2}, "replicas: start servers of their own"),
        ({"base_url": "u", "offline_ceiling": True, "transformers_baseline": True}, "transformers_baseline, offline"),
        ({"base_url": "u", "compare_flags": Path("f.json")}, "compare_flags"),
        ({"start_server": "m", "mode": "head"}, "compare_flags only"),
        ({"start_server": "m", "invoke_items": 0}, "at least 1"),
        ({"start_server": "m", "chat_items": 0}, "at least 1"),
    ],
)
def test_options_that_cannot_work_are_named(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        CompareOptions(**settings)  # type: ignore[arg-type]


def test_a_bad_flags_file_is_named_before_any_server_starts(tmp_path: Path) -> None:
    bad = tmp_path / "flags.json"
    bad.write_text("[1, 2]")
    options = CompareOptions(start_server=str(tmp_path), compare_flags=bad, out=tmp_path / "out")
    with pytest.raises(ConfigurationError, match=r"flags\.json"):
        run_compare(options)
