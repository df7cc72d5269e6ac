"""NVIDIA's Multi-Process Service for a group, with a stand-in control program."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_qwen_fast.errors import ServerStartError
from langchain_qwen_fast.serving.group import ServerGroup
from langchain_qwen_fast.serving.mps import MPSDaemon


def test_a_server_group_under_mps_starts_and_stops_the_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="give gpus"):
        ServerGroup(tmp_path, servers_per_gpu=2, mps=True)
    group = ServerGroup(tmp_path, gpus=[0, 1], servers_per_gpu=2, mps=True, port=9000, log_dir=tmp_path)
    assert group.mps is not None
    pipes = {s.env["CUDA_MPS_PIPE_DIRECTORY"] for s in group.servers}
    assert pipes == {group.mps.env["CUDA_MPS_PIPE_DIRECTORY"]}  # every server joins the one daemon
    assert len(group.mps.env["CUDA_MPS_PIPE_DIRECTORY"]) < 100  # a Unix socket path
    # Without NVIDIA's tools it says what is missing.
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ServerStartError, match="nvidia-cuda-mps-control"):
        MPSDaemon().start()
    # A stand-in control program records what the daemon is asked.
    record = tmp_path / "calls"
    fake = tmp_path / "bin" / "nvidia-cuda-mps-control"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$* pipe=$CUDA_MPS_PIPE_DIRECTORY stdin=$(cat)" >> {record}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    daemon = MPSDaemon()
    daemon.start()
    daemon.stop()
    daemon.stop()  # idempotent
    pipe = daemon.env["CUDA_MPS_PIPE_DIRECTORY"]
    assert record.read_text().splitlines() == [f"-d pipe={pipe} stdin=", f" pipe={pipe} stdin=quit"]
    assert Path(pipe).is_dir()
