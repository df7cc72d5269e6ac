"""The launcher's pure parts: profiles, the command line, flag dropping, runner choice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langchain_qwen_fast.serving import PROFILES, VLLMServer, drop_flags


def test_profiles_are_tuned_for_classification() -> None:
    assert PROFILES["cpu"].env["VLLM_CPU_KVCACHE_SPACE"]
    gpu = PROFILES["gpu"].args
    # A KV cache sized for short prompts (not 92 % of the card) and full CUDA graphs.
    assert gpu[gpu.index("--kv-cache-memory-bytes") + 1] == "2G"
    assert json.loads(gpu[gpu.index("--compilation-config") + 1]) == {"cudagraph_mode": "FULL"}
    assert PROFILES["default"].args == ()  # vLLM's own defaults, for comparisons
    for name in ("cpu", "gpu"):
        assert "--enable-prefix-caching" in PROFILES[name].args


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


def test_drop_flags_removes_flags_with_their_values() -> None:
    gpu = list(PROFILES["gpu"].args)
    kept = drop_flags(gpu, ["--compilation-config", "--disable-log-stats"])
    assert "--compilation-config" not in kept and "--disable-log-stats" not in kept
    assert not any("cudagraph_mode" in a for a in kept)
    assert kept[kept.index("--kv-cache-memory-bytes") + 1] == "2G"
    assert len(kept) == len(gpu) - 3


def test_quantization_option(tmp_path: Path) -> None:
    command = VLLMServer("m", profile="gpu", port=1, quantization="fp8", log_path=tmp_path / "l").command()
    assert command[command.index("--quantization") + 1] == "fp8"
    assert "--quantization" not in VLLMServer("m", profile="gpu", port=1, log_path=tmp_path / "l").command()


def test_a_server_group_pins_each_server_to_its_gpu(tmp_path: Path) -> None:
    from langchain_qwen_fast.serving import ServerGroup

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
    from langchain_qwen_fast.serving.launcher import share_gpu_memory

    assert share_gpu_memory(["--a"], 7) == ("--a", "--gpu-memory-utilization", "0.129")
    assert share_gpu_memory(["--gpu-memory-utilization", "0.2"], 7) == ("--gpu-memory-utilization", "0.2")
    assert share_gpu_memory(["--a"], 1) == ("--a",)


def test_a_server_group_without_gpus_runs_cpu_servers(tmp_path: Path) -> None:
    from langchain_qwen_fast.serving import ServerGroup

    group = ServerGroup(tmp_path, servers_per_gpu=3, port=9000, profile="cpu", log_dir=tmp_path)
    assert len(group.servers) == 3 and all("CUDA_VISIBLE_DEVICES" not in s.env for s in group.servers)
    assert group.url == group.base_urls  # no router: the list
    with pytest.raises(ValueError, match="at least 1"):
        ServerGroup(tmp_path, servers_per_gpu=0, port=9000)


def test_a_server_group_under_mps_starts_and_stops_the_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_qwen_fast.serving import ServerGroup
    from langchain_qwen_fast.serving.launcher import MPSDaemon, ServerStartError

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


def test_a_router_takes_its_own_metrics_port() -> None:
    from langchain_qwen_fast.serving import Router

    # vllm-router's Prometheus exporter defaults to port 29000: a second router would not start.
    first, second = Router(["http://127.0.0.1:8000/v1"], port=9000), Router(["http://127.0.0.1:8001"], port=9002)
    ports = [r.command()[r.command().index("--prometheus-port") + 1] for r in (first, second)]
    assert ports == ["9001", "9003"]
    assert first.command()[first.command().index("--worker-urls") + 1] == "http://127.0.0.1:8000"
    with pytest.raises(ValueError, match="at least two"):
        Router(["http://127.0.0.1:8000"], "power_of_two", port=9000)


def test_a_server_without_a_tokenizer_drops_the_flags_that_need_one() -> None:
    from langchain_qwen_fast.serving.launcher import PROFILES, SKIP_TOKENIZER, VLLMServer

    command = VLLMServer("/m", profile="gpu", port=8000, extra_args=[SKIP_TOKENIZER]).command()
    for flag in (
        "--reasoning-parser",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "--structured-outputs-config",
    ):
        assert flag not in command
    assert "qwen3" not in command[command.index("--served-model-name") + 2 :]  # the parser's value went too
    kept = VLLMServer("/m", profile="gpu", port=8000).command()
    assert "--reasoning-parser" in kept and SKIP_TOKENIZER not in kept
    assert command[-1] == SKIP_TOKENIZER and "--compilation-config" in command and PROFILES["gpu"].args[0] in kept
