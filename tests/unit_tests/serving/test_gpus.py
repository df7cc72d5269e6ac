"""The machine's GPUs as ``nvidia-smi -L`` lists them (a stand-in program here), and GPU choices
checked against them."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving.gpus import gpu_count, has_gpu, parse_gpus


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "GPU 0: NVIDIA H200 (UUID: a)"\necho "GPU 1: NVIDIA H200 (UUID: b)"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")


def test_without_nvidia_smi_there_is_no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_count() == 0 and not has_gpu()
    assert parse_gpus(None) == []
    with pytest.raises(ConfigurationError, match="no GPU answers nvidia-smi"):
        parse_gpus("all")


@pytest.mark.usefixtures("two_gpus")
def test_gpus_are_counted_and_chosen_from_what_nvidia_smi_lists() -> None:
    assert gpu_count() == 2 and has_gpu()
    assert parse_gpus("all") == [0, 1]
    assert parse_gpus("1") == [1]
    assert parse_gpus("0,1") == [0, 1]
    with pytest.raises(ConfigurationError, match="no GPU 2 here"):
        parse_gpus("0,2")
    with pytest.raises(ConfigurationError, match="indices such as 0,1"):
        parse_gpus("first")


def test_a_failing_nvidia_smi_means_no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "GPU 0: listed, but the driver failed"\nexit 9\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert gpu_count() == 0 and not has_gpu()
