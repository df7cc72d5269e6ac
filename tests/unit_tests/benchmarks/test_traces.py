"""vLLM's torch profiler traces: each engine step split into CPU time and the GPU work it started."""

from __future__ import annotations

from benchmarks.traces import StepTrace, summarize_step_trace


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
    assert report.steps == 2
    # first step: CPU 0.6 ms, GPU busy 400 + 200 + 100 µs, GPU from 0.2 to 1.1 ms, 3 operations;
    # second: 0.8 ms, 400 µs, 0.5 to 0.9 ms, 1. The nearest-rank median of two is the lower.
    assert report.median == {
        "cpu_ms": 0.6,
        "gpu_busy_ms": 0.4,
        "to_first_gpu_ms": 0.2,
        "to_last_gpu_end_ms": 0.9,
        "gpu_ops": 1.0,
    }
    assert report.top_gpu_ops_us_per_step == {"gemm": 400.0, "attention": 150.0, "Memcpy DtoH": 50.0}
    first = summarize_step_trace({"traceEvents": [e for e in trace["traceEvents"] if float(e["ts"]) < 10_000]})
    assert first.median == {
        "cpu_ms": 0.6,
        "gpu_busy_ms": 0.7,  # overlapping kernels count once
        "to_first_gpu_ms": 0.2,
        "to_last_gpu_end_ms": 1.1,
        "gpu_ops": 3.0,
    }


def test_a_trace_without_engine_steps_says_so() -> None:
    assert summarize_step_trace({"traceEvents": [_event("kernel", "gemm", 0, 10)]}) == StepTrace(steps=0)
    assert summarize_step_trace({}) == StepTrace(steps=0)


def test_steps_without_gpu_work_give_their_cpu_time_only() -> None:
    """A CPU server's trace: the forward pass is the step's CPU time."""
    step = "execute_context_1(97)_generation_0(0)"
    trace = {"traceEvents": [_event("user_annotation", step, 0, 12_000), _event("cpu_op", "aten::mm", 10, 9_000)]}
    assert summarize_step_trace(trace) == StepTrace(
        steps=1, median={"cpu_ms": 12.0, "gpu_busy_ms": 0.0, "gpu_ops": 0.0}, top_gpu_ops_us_per_step={}
    )
