"""The command line for each of vLLM's HTTP frontends, both through ``vllm serve``: the Python API
server, and the Rust frontend with its switch and the profile's flags fitted to it; a missing binary said
before anything starts; the option as ``serve`` and ``ServerGroup`` take it (the scale benchmark's own
tests, tests/unit_tests/benchmarks/test_scale.py, cover its ``--frontend``)."""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast.cli import serve
from langchain_qwen_fast.errors import ConfigurationError, ServerStartError
from langchain_qwen_fast.serving import PROFILES, SKIP_TOKENIZER, ServerGroup, VLLMServer, launcher
from tests.support.cli import parse_command


@pytest.fixture
def vllm_version(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Set the installed vLLM's release numbers the launcher sees."""

    def installed(release: tuple[int, ...]) -> None:
        monkeypatch.setattr(launcher, "installed_vllm", lambda: ("vllm", release))

    return installed


def test_the_python_frontend_runs_vllm_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the operator's choice of threads stands
    server = VLLMServer("m", profile="cpu", port=1, log_path=tmp_path / "l")
    command = server.command()
    assert command[1:5] == ["-m", "langchain_qwen_fast.serving.vllm_cli", "serve", "m"]
    assert command[-len(PROFILES["cpu"].args) :] == list(PROFILES["cpu"].args)
    assert server.command_env == {} and server.ignored_flags == []


def test_the_rust_frontend_runs_vllm_serve_with_its_switch(tmp_path: Path, vllm_version: Any) -> None:
    vllm_version((0, 32, 0))
    server = VLLMServer("m", profile="gpu", frontend="rust", port=1, log_path=tmp_path / "l")
    command = server.command()
    assert command[0] == sys.executable
    assert command[1:5] == ["-m", "langchain_qwen_fast.serving.vllm_cli", "serve", "m"]
    assert "--model" not in command
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert server.command_env == {"VLLM_USE_RUST_FRONTEND": "1"}
    # 0.32.0 takes every gpu-profile flag; it ignores the chat-side ones, which are named.
    assert command[-len(PROFILES["gpu"].args) :] == list(PROFILES["gpu"].args)
    assert server.ignored_flags == [
        "--structured-outputs-config",
        "--enable-auto-tool-choice",
        "--disable-uvicorn-access-log",
    ]
    assert "frontend='rust'" in repr(server)


@pytest.mark.parametrize("release", [(0, 26, 0), None])
def test_an_older_or_unknown_rust_frontend_loses_the_generation_config_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: tuple[int, ...] | None
) -> None:
    monkeypatch.setattr(launcher, "installed_vllm", lambda: None if release is None else ("vllm", release))
    command = VLLMServer("m", profile="cpu", frontend="rust", port=1, log_path=tmp_path / "l").command()
    assert "--generation-config" not in command
    assert command[command.index("--disable-uvicorn-access-log") + 1] == "--max-num-seqs"  # its value went too
    assert command[command.index("-O0") - 4 : command.index("-O0") + 1] == [
        "--max-num-seqs",
        "256",
        "--dtype",
        "float32",
        "-O0",
    ]
    python = VLLMServer("m", profile="cpu", port=1, log_path=tmp_path / "l").command()
    assert python[python.index("--generation-config") + 1] == "vllm"


def test_a_flag_the_rust_frontend_refuses_asked_for_by_name_is_a_configuration_error(
    tmp_path: Path, vllm_version: Any
) -> None:
    vllm_version((0, 32, 0))
    with pytest.raises(ConfigurationError, match="Rust frontend refuses --skip-tokenizer-init"):
        VLLMServer("m", profile="cpu", frontend="rust", port=1, extra_args=[SKIP_TOKENIZER])
    vllm_version((0, 26, 0))
    with pytest.raises(ConfigurationError, match="refuses --generation-config"):
        VLLMServer("m", profile="default", frontend="rust", port=1, extra_args=["--generation-config=auto"])
    with pytest.raises(ConfigurationError, match="unknown frontend 'go'"):
        VLLMServer("m", frontend="go", port=1)  # type: ignore[arg-type]


def test_a_classification_head_is_refused_by_the_rust_frontend(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForSequenceClassification"]}))
    with pytest.raises(ConfigurationError, match="Rust frontend serves no /classify"):
        VLLMServer(tmp_path, profile="cpu", frontend="rust", port=1)
    with pytest.raises(ConfigurationError, match="no /classify"):
        VLLMServer("m", profile="cpu", frontend="rust", port=1, extra_args=["--runner", "pooling"])
    command = VLLMServer(tmp_path, profile="cpu", port=1, log_path=tmp_path / "l").command()
    assert command[command.index("--runner") + 1] == "pooling"


def test_a_missing_rust_frontend_binary_is_said_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_RUST_FRONTEND_PATH", raising=False)
    monkeypatch.setattr(launcher, "rust_frontend_binary", lambda: tmp_path / "vllm-rs")
    spawned: list[object] = []
    monkeypatch.setattr(launcher, "spawn_in_own_group", lambda *a: spawned.append(a))
    server = VLLMServer("m", profile="cpu", frontend="rust", port=1, log_path=tmp_path / "l")
    with pytest.raises(ServerStartError, match=r"Rust frontend is not installed.*setup\.sh"):
        server.spawn()
    (tmp_path / "vllm-rs").write_text("")  # there, but not executable
    with pytest.raises(ServerStartError, match="not installed"):
        server.spawn()
    assert spawned == []


def test_the_rust_frontend_starts_with_its_switch_and_names_the_flags_it_ignores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, vllm_version: Any
) -> None:
    vllm_version((0, 32, 0))
    binary = tmp_path / "vllm-rs"
    binary.write_text("")
    binary.chmod(0o755)
    monkeypatch.delenv("VLLM_RUST_FRONTEND_PATH", raising=False)
    monkeypatch.setattr(launcher, "rust_frontend_binary", lambda: binary)
    started: list[tuple[list[str], dict[str, str]]] = []

    def spawn(command: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        started.append((command, env))
        return subprocess.Popen([sys.executable, "-c", "pass"])

    monkeypatch.setattr(launcher, "spawn_in_own_group", spawn)
    monkeypatch.setattr(launcher, "refuse_answering_port", lambda *a, **k: None)  # this layer has no network
    server = VLLMServer("m", profile="cpu", frontend="rust", port=1, log_path=tmp_path / "l")
    with caplog.at_level(logging.WARNING, logger=launcher.__name__):
        server.spawn()
    ((command, env),) = started
    assert command == server.command()
    assert env["VLLM_USE_RUST_FRONTEND"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "ignores --structured-outputs-config, --enable-auto-tool-choice, --disable-uvicorn-access-log" in caplog.text


def test_a_group_gives_every_server_the_frontend(tmp_path: Path) -> None:
    group = ServerGroup("m", servers_per_gpu=2, port=8000, profile="cpu", frontend="rust", log_dir=tmp_path)
    assert [s.frontend for s in group.servers] == ["rust", "rust"]
    assert all(s.command()[3] == "serve" for s in group.servers)
    assert "Rust frontend" in repr(group)
    assert (
        ServerGroup("m", servers_per_gpu=2, port=8000, profile="cpu", log_dir=tmp_path).servers[0].frontend == "python"
    )


def test_serve_prints_the_rust_frontend_command_with_its_variable(capsys: pytest.CaptureFixture[str]) -> None:
    code = serve.run(
        parse_command(serve, ["--model", "m", "--profile", "cpu", "--frontend", "rust", "--print-command"])
    )
    words = shlex.split(capsys.readouterr().out)
    assert code == 0
    at = words.index(sys.executable)  # the variables come first
    assert "VLLM_USE_RUST_FRONTEND=1" in words[:at]
    assert words[at + 1 : at + 4] == ["-m", "langchain_qwen_fast.serving.vllm_cli", "serve"]
    assert parse_command(serve, []).frontend == "python"


def test_serve_says_which_flag_the_rust_frontend_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model", "m", "--frontend", "rust", "--print-command", "--", SKIP_TOKENIZER]
    assert serve.run(parse_command(serve, argv)) == 2
    assert "refuses --skip-tokenizer-init" in capsys.readouterr().err
