"""The scale benchmark's pure parts: reading py-spy's collapsed stacks and vLLM's profiler
traces, the host's busy cores."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from langchain_qwen_fast.bench.compare import busy_and_clock, gpu_window, run_capabilities
from langchain_qwen_fast.bench.scale import summarize_profile, summarize_step_trace, us_per_item, without_logprobs

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


def _event(cat: str, name: str, ts: float, dur: float) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1}


def test_each_engine_step_is_split_into_its_cpu_and_the_gpu_work_it_started() -> None:
    step = "execute_100_context_1(sq100sk100sqsq10000sqsk10000)_generation_0(sq0sk0sqsq0sqsk0)"
    trace = {
        "traceEvents": [
            _event("kernel", "before any step", 0, 50),  # not a step's
            _event("user_annotation", step, 1_000, 600),
            _event("gpu_user_annotation", step, 1_100, 2_000),  # the GPU row of the annotation: no work
            _event("kernel", "gemm", 1_200, 400),
            _event("kernel", "attention", 1_500, 300),  # overlaps the gemm by 100 µs
            _event("gpu_memcpy", "Memcpy DtoH", 2_000, 100),
            _event("cpu_op", "aten::copy_", 1_900, 50),
            _event("user_annotation", "execute_context_0(0)_generation_0(0)", 2_050, 10),  # schedules nothing
            _event("user_annotation", step, 10_000, 800),
            _event("kernel", "gemm", 10_500, 400),
            {"ph": "i", "cat": "kernel", "name": "instant", "ts": 10_600},
        ]
    }
    report = summarize_step_trace(trace)
    assert report["steps"] == 2
    # first step: CPU 0.6 ms, GPU busy 400 + 200 + 100 µs, GPU from 0.2 to 1.1 ms, 3 operations;
    # second: 0.8 ms, 400 µs, 0.5 to 0.9 ms, 1. The nearest-rank median of two is the lower.
    assert report["median"] == {
        "cpu_ms": 0.6,
        "gpu_busy_ms": 0.4,
        "to_first_gpu_ms": 0.2,
        "to_last_gpu_end_ms": 0.9,
        "gpu_ops": 1.0,
    }
    assert report["top_gpu_ops_us_per_step"] == {"gemm": 400.0, "attention": 150.0, "Memcpy DtoH": 50.0}
    first = summarize_step_trace({"traceEvents": [e for e in trace["traceEvents"] if float(e["ts"]) < 10_000]})
    assert first["median"] == {
        "cpu_ms": 0.6,
        "gpu_busy_ms": 0.7,  # overlapping kernels count once
        "to_first_gpu_ms": 0.2,
        "to_last_gpu_end_ms": 1.1,
        "gpu_ops": 3.0,
    }


def test_a_trace_without_engine_steps_says_so() -> None:
    assert summarize_step_trace({"traceEvents": [_event("kernel", "gemm", 0, 10)]}) == {"steps": 0}
    assert summarize_step_trace({}) == {"steps": 0}


def test_steps_without_gpu_work_give_their_cpu_time_only() -> None:
    """A CPU server's trace: the forward pass is the step's CPU time."""
    step = "execute_context_1(97)_generation_0(0)"
    trace = {"traceEvents": [_event("user_annotation", step, 0, 12_000), _event("cpu_op", "aten::mm", 10, 9_000)]}
    assert summarize_step_trace(trace) == {
        "steps": 1,
        "median": {"cpu_ms": 12.0, "gpu_busy_ms": 0.0, "gpu_ops": 0.0},
        "top_gpu_ops_us_per_step": {},
    }


def test_the_no_logprobs_body_asks_the_same_step_for_its_token_only() -> None:
    body = {"model": "m", "prompt": [[1, 2]], "max_tokens": 1, "logprobs": 1, "logprob_token_ids": [5, 6]}
    assert without_logprobs(body) == {"model": "m", "prompt": [[1, 2]], "max_tokens": 1}
    assert without_logprobs({**body, "allowed_token_ids": [5]}) == without_logprobs(body)


def test_one_at_a_time_paths_never_send_a_text_twice() -> None:
    """A text sent again finds its whole prompt in vLLM's prefix cache: ~1 ms faster."""
    from langchain_qwen_fast.bench.compare import run_one_at_a_time

    sent: dict[str, list[str]] = {"a": [], "b": []}
    results = run_one_at_a_time({name: sent[name].append for name in sent}, 5)
    assert [r.name for r in results] == ["a", "b"] and all(len(r.latencies_ms) == 5 for r in results)
    texts = [t for name in sent for t in sent[name] if t != "warm-up"]
    assert len(texts) == 10 and len(set(texts)) == 10
    again = {"a": [], "b": []}
    run_one_at_a_time({name: again[name].append for name in again}, 5)
    assert not set(texts) & {t for name in again for t in again[name]}  # nor does a later run


def test_news_items_continue_where_an_earlier_call_stopped() -> None:
    from langchain_qwen_fast.testing.samples import news_items

    assert news_items(3, start=2) == news_items(5)[2:]
