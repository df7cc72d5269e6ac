"""The ``qwen-fast`` command's argument handling (no server is started)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from langchain_qwen_fast import __version__
from langchain_qwen_fast.cli.main import build_parser, main

SUBCOMMANDS = ("serve", "eval", "bench", "api", "build-test-model", "train")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for name in SUBCOMMANDS:
        assert name in out


@pytest.mark.parametrize(
    ("name", "flags"),
    [
        ("serve", ["--profile", "--api-key-file", "--served-model-name", "--print-command", "--lora"]),
        ("eval", ["--label-map", "--mode", "--abstain-below", "--limit", "--calibrate", "--target-accuracy"]),
        ("train", ["--base-model", "--method", "--out", "--lora", "--export", "--resume", "--patience"]),
        ("bench", ["--start-server", "--base-url", "--tokenizer", "--chat-items", "--invoke-items"]),
        ("build-test-model", ["--size", "--num-labels", "--tokenizer-from"]),
        ("api", ["--base-url", "--model", "--api-key-env", "--max-wait-ms", "--max-group"]),
    ],
)
def test_each_subcommand_documents_its_flags(capsys: pytest.CaptureFixture[str], name: str, flags: list[str]) -> None:
    code, out, _ = run(capsys, name, "--help")
    assert code == 0
    for flag in flags:
        assert flag in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and __version__ in out


def test_no_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys)
    assert code == 2 and "COMMAND" in err


def test_serve_prints_its_vllm_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "serve", "--model", "m", "--profile", "cpu", "--print-command", "--", "--seed", "7")
    assert code == 0
    command = shlex.split(out)
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("serve") + 1] == "m"
    assert command[-2:] == ["--seed", "7"]


def test_serve_rejects_vllm_flags_before_the_separator(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "serve", "--print-command", "stray")
    assert code == 2 and "put vLLM flags after --" in err


def test_bench_needs_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "bench")
    assert code == 2 and "--base-url" in err and "--start-server" in err


@pytest.mark.parametrize("name", ["bench-scale", "bench-job"])
def test_the_measuring_labs_tools_are_not_commands(capsys: pytest.CaptureFixture[str], name: str) -> None:
    """They are ``python -m benchmarks.scale`` and ``python -m benchmarks.classify_job`` in a
    checkout of the repository, not part of the installed package."""
    code, _, err = run(capsys, name)
    assert code == 2 and "invalid choice" in err


def test_eval_names_a_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "eval", str(tmp_path / "nope.csv"))
    assert code == 2 and "no such file" in err


def test_build_test_model_needs_two_labels(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "build-test-model", "--out", str(tmp_path), "--num-labels", "1")
    assert code == 2 and "at least 2" in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--num-labels", "two"], "invalid int value"), (["--multi-label"], "--multi-label needs --num-labels")],
)
def test_build_test_model_mistakes_are_usage_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], message: str
) -> None:
    code, _, err = run(capsys, "build-test-model", "--out", str(tmp_path), *flags)
    assert code == 2 and message in err


def test_bad_option_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "serve", "--port", "eighty")
    assert code == 2 and "invalid int value" in err


def test_parser_is_buildable_without_heavy_imports() -> None:
    import sys

    build_parser()
    assert "vllm" not in sys.modules and "matplotlib" not in sys.modules


def _adapter(path: Path, rank: int) -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(f'{{"r": {rank}, "peft_type": "LORA"}}')
    return path


def test_serve_lora_adapters_on_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    news, topics = _adapter(tmp_path / "news", 8), _adapter(tmp_path / "topics", 24)
    code, out, _ = run(
        capsys,
        "serve",
        "--model",
        str(tmp_path),
        "--lora",
        f"news={news}",
        "--lora",
        f"topics={topics}",
        "--print-command",
    )
    assert code == 0
    argv = shlex.split(out)
    assert argv[argv.index("--max-loras") + 1] == "2"
    assert argv[argv.index("--max-lora-rank") + 1] == "32"  # the next rank vLLM accepts above 24
    at = argv.index("--lora-modules")
    assert argv[at + 1 : at + 3] == [f"news={news.resolve()}", f"topics={topics.resolve()}"]
    assert "--enable-lora" in argv


@pytest.mark.parametrize("value", ["news", "=dir", "news="])
def test_serve_lora_needs_name_and_directory(capsys: pytest.CaptureFixture[str], value: str) -> None:
    code, _, err = run(capsys, "serve", "--lora", value, "--print-command")
    assert code == 2
    assert "NAME=DIR" in err


def test_serve_lora_without_an_adapter_config_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "serve", "--lora", f"news={tmp_path}", "--print-command")
    assert code == 2
    assert "adapter_config.json" in err


def test_train_refuses_a_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(
        capsys, "train", str(tmp_path / "none.csv"), "--base-model", "m", "--method", "head", "--out", "o"
    )
    assert code == 2
    assert "no such file" in err


def test_train_names_labels_the_label_set_lacks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("text,label\na,x\nb,y\nc,z\n")
    code, _, err = run(
        capsys, "train", str(data), "--base-model", "m", "--method", "sft", "--out", "o", "--labels", "x", "y"
    )
    assert code == 2
    assert "['z']" in err


def test_serve_several_servers_and_a_router(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(
        capsys, "serve", "--model", str(tmp_path), "--servers-per-gpu", "2", "--port", "8300", "--router",
        "round_robin", "--router-port", "8399", "--print-command",
    )  # fmt: skip
    assert code == 0
    lines = out.strip().splitlines()
    ports = [shlex.split(line)[shlex.split(line).index("--port") + 1] for line in lines[:2]]
    assert ports == ["8300", "8301"]
    router = shlex.split(lines[2])
    assert router[0].endswith("vllm-router") and router[router.index("--policy") + 1] == "round_robin"
    at = router.index("--worker-urls")
    assert router[at + 1 : at + 3] == ["http://127.0.0.1:8300", "http://127.0.0.1:8301"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--gpus", "all"], "no GPU answers"),
        (["--gpus", "zero"], "indices"),
        (["--router", "power_of_two", "--port", "8300"], "at least two servers"),
        (["--servers-per-gpu", "2", "--port", "8300", "--log", "x.log"], "one log each"),
    ],
)
def test_serve_group_mistakes_are_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, flags: list[str], message: str
) -> None:
    monkeypatch.setenv("PATH", "")  # no nvidia-smi: no GPU
    code, _, err = run(capsys, "serve", *flags, "--print-command")
    assert code == 2
    assert message in err


def test_serve_prints_the_mps_daemon_and_each_pinned_server(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text('#!/bin/sh\necho "GPU 0: NVIDIA H200"\necho "GPU 1: NVIDIA H200"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    code, out, _ = run(
        capsys, "serve", "--model", str(tmp_path), "--gpus", "all", "--servers-per-gpu", "2", "--mps", "--port", "8300",
        "--print-command",
    )  # fmt: skip
    assert code == 0
    daemon, *servers = out.strip().splitlines()
    assert daemon.startswith("CUDA_MPS_PIPE_DIRECTORY=") and daemon.endswith("nvidia-cuda-mps-control -d")
    pipe = shlex.split(daemon)[0]
    pinned = [set(shlex.split(line)[:2]) for line in servers]
    assert pinned == [{pipe, f"CUDA_VISIBLE_DEVICES={gpu}"} for gpu in (0, 0, 1, 1)]  # each joins the one daemon
    ports = [shlex.split(line)[shlex.split(line).index("--port") + 1] for line in servers]
    assert ports == ["8300", "8301", "8302", "8303"]
