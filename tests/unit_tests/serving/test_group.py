"""Several servers of one model: pinned to GPUs, sharing a card, or CPU servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_qwen_fast.serving.group import ServerGroup, share_gpu_memory


def test_a_server_group_pins_each_server_to_its_gpu(tmp_path: Path) -> None:
    group = ServerGroup(
        tmp_path, gpus=[0, 1], servers_per_gpu=2, port=9000, router="round_robin", router_port=9100,
        profile="gpu", log_dir=tmp_path / "logs", env={"EXTRA": "1"},
    )  # fmt: skip
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in group.servers] == ["0", "0", "1", "1"]
    assert all(s.env["EXTRA"] == "1" for s in group.servers)
    assert group.base_urls == [f"http://127.0.0.1:{9000 + n}/v1" for n in range(4)]
    assert group.url == "http://127.0.0.1:9100/v1"
    assert len({s.log_path for s in group.servers}) == 4
    kv = [s.command()[s.command().index("--kv-cache-memory-bytes") + 1] for s in group.servers]
    assert kv == ["2G"] * 4  # each keeps the job-sized cache, so several share a card
    # and asks for its share of the card, so vLLM's free-memory check passes beside the others
    share = [s.command()[s.command().index("--gpu-memory-utilization") + 1] for s in group.servers]
    assert share == ["0.450"] * 4
    assert not group.running and group.pids == []
    given = ServerGroup(
        tmp_path, gpus=[0], servers_per_gpu=6, port=9000, profile="gpu", extra_args=["--gpu-memory-utilization", "0.1"]
    )
    assert given.servers[0].command().count("--gpu-memory-utilization") == 1  # the caller's value wins
    alone = ServerGroup(tmp_path, gpus=[0], servers_per_gpu=1, port=9000, profile="gpu")
    assert "--gpu-memory-utilization" not in alone.servers[0].command()


def test_servers_sharing_a_card_ask_for_an_equal_share_unless_they_name_one() -> None:
    assert share_gpu_memory(["--a"], 7) == ("--a", "--gpu-memory-utilization", "0.129")
    assert share_gpu_memory(["--gpu-memory-utilization", "0.2"], 7) == ("--gpu-memory-utilization", "0.2")
    assert share_gpu_memory(["--a"], 1) == ("--a",)


def test_a_server_group_without_gpus_runs_cpu_servers(tmp_path: Path) -> None:
    group = ServerGroup(tmp_path, servers_per_gpu=3, port=9000, profile="cpu", log_dir=tmp_path)
    assert len(group.servers) == 3 and all("CUDA_VISIBLE_DEVICES" not in s.env for s in group.servers)
    assert group.url == group.base_urls  # no router: the list
    with pytest.raises(ValueError, match="at least 1"):
        ServerGroup(tmp_path, servers_per_gpu=0, port=9000)
