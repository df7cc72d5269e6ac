"""The launcher and the test-model builder."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import pytest

from langchain_qwen_fast.serving import launcher
from langchain_qwen_fast.serving.launcher import ServerStartError, VLLMServer
from langchain_qwen_fast.serving.process_group import spawn_in_own_group


def group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_failed_start_raises_with_log_tail_and_leaves_no_process(tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-model"
    bogus.mkdir()
    (bogus / "config.json").write_text(json.dumps({"model_type": "no_such_architecture"}))
    server = VLLMServer(bogus, profile="cpu", log_path=tmp_path / "server.log", startup_timeout=300)
    with pytest.raises(ServerStartError, match="exited with code") as info:
        server.start()
    message = str(info.value)
    assert "no_such_architecture" in message or "not-a-model" in message  # the log's own words
    assert str(tmp_path / "server.log") in message
    assert server.pid is None and not server.running


def test_server_binds_loopback_and_stops_its_whole_group(server_url: str) -> None:
    # The session's server came from this launcher; check what it bound and how it runs.
    assert server_url.startswith("http://127.0.0.1:")
    assert httpx.get(server_url.removesuffix("/v1") + "/health").status_code == 200
    command = VLLMServer("model-dir", profile="cpu", port=1234).command()
    assert command[command.index("--host") + 1] == "127.0.0.1"
    for flag in ("--enable-prefix-caching", "--max-model-len", "--served-model-name"):
        assert flag in command


def test_stop_kills_the_process_group(tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A short-lived stand-in process group proves stop() reaps children, without a second
    # vLLM start-up: the launcher's stop() only needs a process it spawned.
    server = VLLMServer(tiny_model, profile="cpu", log_path=tmp_path / "log")
    child = "import time; time.sleep(300)"
    parent = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(300)"
    stand_in = [sys.executable, "-c", parent]
    monkeypatch.setattr(launcher, "spawn_in_own_group", lambda command, log, env: spawn_in_own_group(stand_in, log))
    server.spawn()
    pid = server.pid
    assert pid is not None
    assert group_alive(pid)
    server.stop()
    assert not group_alive(pid)
