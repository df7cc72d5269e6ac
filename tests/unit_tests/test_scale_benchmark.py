"""The scale benchmark's pure parts: reading py-spy's collapsed stacks, the host's busy cores."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from langchain_qwen_fast.benchmark import busy_and_clock, gpu_window, run_capabilities
from langchain_qwen_fast.scale_benchmark import summarize_profile, us_per_item

API = 'process 10:"python -m vllm.entrypoints.openai.api_server --model m"'
ENGINE = 'process 11:"VLLM::EngineCore"'
COLLAPSED = f"""{API};run (runners.py:10);decode (detokenizer.py:5) 30
{API};run (runners.py:10);validate (protocol.py:40) 10
{API};{ENGINE};busy_loop (core.py:1);execute_model (model_runner.py:9);forward (qwen3.py:3) 45
{API};{ENGINE};busy_loop (core.py:1);schedule (scheduler.py:2) 15
not a sample line
"""


def test_samples_go_to_the_innermost_process_with_self_and_inclusive_shares() -> None:
    report = summarize_profile(COLLAPSED)
    assert list(report) == ["VLLM::EngineCore", "python -m vllm.entrypoints.openai.api_server --model m"]
    engine = report["VLLM::EngineCore"]
    assert engine["samples"] == 60
    assert engine["self_pct"] == {"forward (qwen3.py)": 75.0, "schedule (scheduler.py)": 25.0}
    assert engine["inclusive_pct"]["busy_loop (core.py)"] == 100.0
    assert engine["inclusive_pct"]["execute_model (model_runner.py)"] == 75.0
    api = report["python -m vllm.entrypoints.openai.api_server --model m"]
    assert api["samples"] == 40 and api["self_pct"]["decode (detokenizer.py)"] == 75.0
    assert "busy_loop (core.py)" not in api["inclusive_pct"]  # a child's frames stay the child's


class CpuTimes(NamedTuple):  # the fields of psutil's per-CPU times that matter here
    user: float
    system: float
    idle: float
    iowait: float


def test_busy_cores_and_their_clock_weighted_by_how_busy_each_was() -> None:
    before = [CpuTimes(0, 0, 0, 0), CpuTimes(0, 0, 0, 0), CpuTimes(5, 5, 5, 5)]
    after = [CpuTimes(8, 2, 0, 0), CpuTimes(1, 1, 6, 2), CpuTimes(5, 5, 15, 5)]  # busy 1, 0.2, 0
    busy, mhz = busy_and_clock(before, after, [3000.0, 2000.0, 1000.0])
    assert busy == pytest.approx(1.2)
    assert mhz == pytest.approx((1.0 * 3000 + 0.2 * 2000) / 1.2)  # the idle core's clock does not count
    assert busy_and_clock(before, after, []) == (pytest.approx(1.2), None)  # no clocks readable
    assert busy_and_clock(before, before, [1.0, 1.0, 1.0]) == (0.0, None)  # no time passed


def test_gpu_utilisation_is_given_per_gpu_as_well_as_over_all() -> None:
    samples = [(0.5, 0, 99.0, 1.0), (1.0, 0, 80.0, 10.0), (1.0, 1, 0.0, 5.0), (2.0, 0, 90.0, 12.0), (2.0, 1, 10.0, 5.0)]
    window = gpu_window(samples, 1.0, 2.0)  # the first sample is before the window
    assert window["gpu_util_mean_pct_by_gpu"] == [85.0, 5.0]
    assert window["gpu_util_mean_pct"] == 45.0 and window["gpu_mem_max_mib"] == 12.0
    assert gpu_window(samples, 3.0, 4.0)["gpu_util_mean_pct"] is None


def test_cpu_per_item_is_each_roles_busy_cores_over_the_rate() -> None:
    assert us_per_item({"api_server": 1.38, "engine_core": 1.69}, 5000.0) == {"api_server": 276.0, "engine_core": 338.0}


def test_an_unknown_capability_row_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown capability rows \['8 examples'\]"):
        run_capabilities("http://127.0.0.1:9/v1", "qwen3", None, ["a text"], rows=["8 examples"])
