"""One server's command line: the profile, the bind address, the runner, quantization, the API key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langchain_qwen_fast.errors import ConfigurationError, ServerStartError
from langchain_qwen_fast.serving.launcher import VLLMServer
from langchain_qwen_fast.serving.profiles import PROFILES


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
