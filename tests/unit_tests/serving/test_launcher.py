"""One server's command line: the profile, the bind address, the runner, quantization; the API
key (from the environment or a file, to vLLM through its environment, refused empty, in no repr);
``qwen-fast serve`` stopped by a signal during start-up."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from langchain_qwen_fast.cli import serve
from langchain_qwen_fast.errors import ConfigurationError, ServerStartError
from langchain_qwen_fast.serving import ServerGroup, launcher
from langchain_qwen_fast.serving.launcher import Secret, VLLMServer
from langchain_qwen_fast.serving.profiles import PROFILES
from tests.support.cli import parse_command


def test_command_binds_loopback_and_carries_the_profile(tmp_path: Path) -> None:
    server = VLLMServer("model-dir", profile="gpu", port=1234, served_model_name="clf", log_path=tmp_path / "l")
    command = server.command()
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--port") + 1] == "1234"
    assert command[command.index("--served-model-name") + 1] == "clf"
    assert command[-len(PROFILES["gpu"].args) :] == list(PROFILES["gpu"].args)
    assert server.base_url == "http://127.0.0.1:1234/v1"


def test_api_key_is_never_on_the_command_line(tmp_path: Path) -> None:
    server = VLLMServer("m", profile="cpu", port=1, api_key="sk-launch-1", log_path=tmp_path / "l")
    assert "sk-launch-1" not in " ".join(server.command()) and "sk-launch-1" not in repr(server)


def test_a_sequence_classification_checkpoint_gets_the_pooling_runner(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForSequenceClassification"]}))
    command = VLLMServer(tmp_path, profile="cpu", port=1, log_path=tmp_path / "l").command()
    assert command[command.index("--runner") + 1] == "pooling"
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    assert "--runner" not in VLLMServer(tmp_path, profile="cpu", port=1, log_path=tmp_path / "l").command()


def test_unknown_profile_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown profile 'tpu'"):
        VLLMServer("m", profile="tpu")  # type: ignore[arg-type]


def test_quantization_option(tmp_path: Path) -> None:
    command = VLLMServer("m", profile="gpu", port=1, quantization="fp8", log_path=tmp_path / "l").command()
    assert command[command.index("--quantization") + 1] == "fp8"
    assert "--quantization" not in VLLMServer("m", profile="gpu", port=1, log_path=tmp_path / "l").command()


def test_options_that_cannot_work_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="unknown profile"):
        VLLMServer("m", profile="tpu", port=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="bad LoRA adapter name"):
        VLLMServer("m", profile="cpu", port=1, lora={"a=b": tmp_path})
    with pytest.raises(ConfigurationError, match=r"no adapter_config\.json"):
        VLLMServer("m", profile="cpu", port=1, lora={"news": tmp_path})


def test_waiting_for_a_server_that_was_never_spawned_says_so(tmp_path: Path) -> None:
    server = VLLMServer("m", profile="cpu", port=1, log_path=tmp_path / "l")
    with pytest.raises(ServerStartError, match="spawn"):
        server.wait_ready()
    with pytest.raises(ServerStartError, match="no model directory"):
        VLLMServer(tmp_path / "none", profile="cpu", port=1, log_path=tmp_path / "l").start()


# -- the API key: from the environment or a file, to vLLM through its environment only ---------
KEY = "sk-launch-7c1e"


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, str]]]:
    """What the launcher starts, with no process and no port check (this layer has no network)."""
    started: list[tuple[list[str], dict[str, str]]] = []

    def spawn(command: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        started.append((command, env))
        return subprocess.Popen([sys.executable, "-c", "pass"])

    monkeypatch.setattr(launcher, "spawn_in_own_group", spawn)
    monkeypatch.setattr(launcher, "refuse_answering_port", lambda *a, **k: None)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    return started


def shown(*objects: object) -> str:
    """Everything a repr, a str or an attribute dump shows of ``objects``."""
    return " ".join(f"{o!r} {o} {vars(o) if hasattr(o, '__dict__') else ''}" for o in objects)


def test_the_key_reaches_vllm_through_its_environment_only(
    tmp_path: Path, spawned: list[tuple[list[str], dict[str, str]]], caplog: pytest.LogCaptureFixture
) -> None:
    server = VLLMServer("m", profile="cpu", port=1, api_key=KEY, log_path=tmp_path / "l")
    with caplog.at_level(logging.DEBUG):
        server.spawn()
    ((command, env),) = spawned
    assert env["VLLM_API_KEY"] == KEY and KEY not in " ".join(command)
    assert server.requires_key and KEY not in shown(server) + caplog.text
    server.stop()


def test_the_key_comes_from_the_environment_as_vllm_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawned: list[tuple[list[str], dict[str, str]]]
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    server = VLLMServer("m", profile="cpu", port=1, log_path=tmp_path / "l")
    assert server.requires_key and KEY not in shown(server)
    assert VLLMServer("m", profile="cpu", port=1, env={"VLLM_API_KEY": "other"}).requires_key


@pytest.mark.parametrize(("given", "env"), [("", None), ("  ", None), (None, "")])
def test_an_empty_key_is_refused(monkeypatch: pytest.MonkeyPatch, given: str | None, env: str | None) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    if env is not None:
        monkeypatch.setenv("VLLM_API_KEY", env)
    with pytest.raises(ConfigurationError, match="is empty"):
        VLLMServer("m", profile="cpu", port=1, api_key=given)


@pytest.mark.parametrize("flags", [["--api-key", KEY], [f"--api-key={KEY}"]])
def test_the_key_as_a_vllm_flag_is_refused(flags: list[str]) -> None:
    with pytest.raises(ConfigurationError, match="VLLM_API_KEY") as info:
        VLLMServer("m", profile="cpu", port=1, extra_args=flags)
    assert KEY not in str(info.value)


@pytest.mark.parametrize(
    ("host", "key", "warned"), [("0.0.0.0", None, True), ("0.0.0.0", KEY, False), ("127.0.0.1", None, False)]
)
def test_a_warning_when_binding_beyond_loopback_without_a_key(
    tmp_path: Path,
    spawned: list[tuple[list[str], dict[str, str]]],
    caplog: pytest.LogCaptureFixture,
    host: str,
    key: str | None,
    warned: bool,
) -> None:
    server = VLLMServer("m", profile="cpu", host=host, port=1, api_key=key, log_path=tmp_path / "l")
    with caplog.at_level(logging.WARNING, logger=launcher.__name__):
        server.spawn()
    server.stop()
    assert ("binds 0.0.0.0 without an API key" in caplog.text) is warned


def test_a_group_and_its_router_never_show_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    group = ServerGroup(
        "m", servers_per_gpu=2, port=9000, router="round_robin", router_port=9100, profile="cpu",
        api_key=Secret(KEY), log_dir=tmp_path,
    )  # fmt: skip
    assert group.router is not None and group.router.served_model_name == "qwen3"
    assert all(s.requires_key for s in group.servers)
    assert KEY not in shown(group, group.router, *group.servers) + " ".join(group.router.command())
    assert repr(Secret(KEY)) == str(Secret(KEY)) == "'***'"


# -- qwen-fast serve: the key's sources, and stopping during start-up --------------------------
def test_serve_reads_the_key_from_a_file_and_refuses_an_empty_one(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spawned: list[tuple[list[str], dict[str, str]]],
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    args = parse_command(serve, ["--model", "m", "--profile", "cpu", "--api-key-file", str(key_file)])
    server = serve.server_of(args)
    assert isinstance(server, VLLMServer)
    server.spawn()
    server.stop()
    ((_, env),) = spawned
    assert env["VLLM_API_KEY"] == KEY  # the line's end is not the key's
    assert serve.run(parse_command(serve, [*sys_argv(key_file), "--print-command"])) == 0
    assert KEY not in capsys.readouterr().out
    key_file.write_text("\n")
    assert serve.run(parse_command(serve, sys_argv(key_file))) == 2
    assert "is empty" in capsys.readouterr().err
    assert serve.run(parse_command(serve, sys_argv(tmp_path / "none"))) == 2
    assert "cannot read it" in capsys.readouterr().err
    monkeypatch.setenv("VLLM_API_KEY", "")
    assert serve.run(parse_command(serve, ["--model", "m", "--profile", "cpu", "--print-command"])) == 2
    assert "VLLM_API_KEY is empty" in capsys.readouterr().err


def sys_argv(key_file: Path) -> list[str]:
    return ["--model", "m", "--profile", "cpu", "--api-key-file", str(key_file)]


@pytest.mark.parametrize(
    "argv", [["--api-key", KEY], [f"--api-key={KEY}"], ["--", "--api-key", KEY], ["--", f"--api-key={KEY}"]]
)
def test_serve_takes_no_key_on_its_command_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    # After --, it would reach vLLM's command line; either way it is refused, and not echoed.
    assert serve.run(parse_command(serve, ["--model", "m", "--profile", "cpu", "--print-command", *argv])) == 2
    out, err = capsys.readouterr()
    assert "VLLM_API_KEY or give --api-key-file" in err and KEY not in out + err


#: ``qwen-fast serve`` with a stand-in for vLLM that never becomes ready: it writes its pid to
#: the file in argv[1], then sleeps far past the test.
_SERVE_STAND_IN = """
import sys
from langchain_qwen_fast.cli.main import main
from langchain_qwen_fast.serving import launcher
stand_in = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(300)"
launcher.VLLMServer.command = lambda self: [sys.executable, "-c", stand_in, sys.argv[1]]
sys.exit(main(["serve", "--model", "m", "--profile", "cpu", "--port", "1", "--timeout", "300", *sys.argv[2:]]))
"""


@pytest.mark.parametrize(("sig", "several"), [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)])
def test_serve_stops_and_exits_on_a_signal_during_start_up(tmp_path: Path, sig: int, several: bool) -> None:
    pid_file = tmp_path / "pid"
    group = ["--servers-per-gpu", "2"] if several else []
    serve_process = subprocess.Popen(
        [sys.executable, "-c", _SERVE_STAND_IN, str(pid_file), *group],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not pid_file.is_file() or not pid_file.read_text():
            assert time.monotonic() < deadline and serve_process.poll() is None, serve_process.communicate()
            time.sleep(0.05)
        child = int(pid_file.read_text())
        serve_process.send_signal(sig)
        # Within its deadline: the start-up's own timeout is far off.
        _, err = serve_process.communicate(timeout=30)
    finally:
        serve_process.kill()
    assert serve_process.returncode == 128 + sig, err
    assert f"{signal.Signals(sig).name} during start-up: stopped" in err
    with pytest.raises(ProcessLookupError):  # the stand-in is gone, its group too
        os.killpg(child, 0)
