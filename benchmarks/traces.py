"""Where a vLLM engine step's time goes, from vLLM's torch profiler: single requests sent inside
``/start_profile`` and ``/stop_profile`` on a server started with :data:`TRACE_SETTINGS`, and the
trace it writes split step by step into CPU time and the GPU work each step started. Used by
``python -m benchmarks.scale --latency-variants`` (a variant's ``"torch_profile"``)."""

from __future__ import annotations

import collections
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_qwen_fast.bench.measure import percentile

#: vLLM's ``--profiler-config`` for :func:`traced_steps`: the engine's torch profiler without
#: Python stacks (their cost would stretch the CPU side of each step), and not the API process.
TRACE_SETTINGS = {"profiler": "torch", "torch_profiler_with_stack": False, "ignore_frontend": True}

#: trace event categories that are work on the GPU
_GPU_EVENTS = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass
class StepTrace:
    """Where engine steps' time went: the steps found, the median of each figure a step
    (:func:`summarize_step_trace`) and the GPU operations that took most time, in µs a step;
    for a traced run, the requests sent and the trace file read, or why there is none."""

    steps: int
    median: dict[str, float] = field(default_factory=dict)
    top_gpu_ops_us_per_step: dict[str, float] = field(default_factory=dict)
    requests: int | None = None
    trace: str | None = None
    error: str | None = None


def traced_steps(
    root_url: str,
    send: Callable[[dict[str, Any]], Any],
    bodies: Sequence[dict[str, Any]],
    trace_dir: Path,
    wait: float = 180.0,
) -> StepTrace:
    """Send ``bodies`` one at a time inside vLLM's torch profiler (a server started with
    :data:`TRACE_SETTINGS` and ``trace_dir``) and summarise the trace it writes (waiting up to
    ``wait`` seconds for it)."""
    import gzip

    import httpx

    httpx.post(f"{root_url}/start_profile", timeout=120).raise_for_status()
    for body in bodies:
        send(body)
    httpx.post(f"{root_url}/stop_profile", timeout=600).raise_for_status()
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:  # the worker writes its trace after stop_profile returns
        for path in trace_dir.rglob("*.json*"):
            try:
                with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as file:
                    summary = summarize_step_trace(json.load(file))
            except (OSError, EOFError, ValueError):  # still being written
                continue
            if summary.steps:
                summary.requests, summary.trace = len(bodies), path.name
                return summary
        time.sleep(1.0)
    return StepTrace(steps=0, error=f"no trace with engine steps under {trace_dir} after {wait:.0f} s")


def summarize_step_trace(trace: Mapping[str, Any], top: int = 12) -> StepTrace:
    """Where each engine step's time goes, from a torch profiler trace (Chrome JSON) of a
    vLLM engine: a step is the worker's ``execute_...`` annotation with tokens scheduled, and
    the GPU work that starts between it and the next step is the step's. Per step (median):
    the annotation's CPU time, the GPU's busy time (union of kernels and copies), the number
    of GPU operations, and from the step's start to its first and to its last GPU work (steps
    with GPU work only); and the GPU operations that take most time, in µs a step."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    steps = sorted((e for e in events if _is_step(e)), key=lambda e: float(e["ts"]))
    gpu = sorted((e for e in events if e.get("cat") in _GPU_EVENTS), key=lambda e: float(e["ts"]))
    rows: list[dict[str, float]] = []
    op_us: dict[str, float] = collections.defaultdict(float)
    for i, step in enumerate(steps):
        start = float(step["ts"])
        end = float(steps[i + 1]["ts"]) if i + 1 < len(steps) else float("inf")
        mine = [e for e in gpu if start <= float(e["ts"]) < end]
        row = {"cpu_ms": float(step.get("dur", 0)) / 1000, "gpu_busy_ms": 0.0, "gpu_ops": float(len(mine))}
        busy, reach = 0.0, start
        for e in mine:  # union of the intervals, sorted by start
            e_start, e_end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
            busy += max(0.0, e_end - max(e_start, reach))
            reach = max(reach, e_end)
            op_us[str(e.get("name", "?"))[:90]] += float(e.get("dur", 0))
        if mine:
            row["gpu_busy_ms"] = busy / 1000
            row["to_first_gpu_ms"] = (float(mine[0]["ts"]) - start) / 1000
            row["to_last_gpu_end_ms"] = (reach - start) / 1000
        rows.append(row)
    if not rows:
        return StepTrace(steps=0)
    keys = dict.fromkeys(key for row in rows for key in row)
    medians = {key: percentile([row[key] for row in rows if key in row], 50) for key in keys}
    return StepTrace(
        steps=len(rows),
        median={key: round(value, 3) for key, value in medians.items() if value is not None},
        top_gpu_ops_us_per_step={
            name: round(us / len(rows), 1) for name, us in sorted(op_us.items(), key=lambda kv: -kv[1])[:top]
        },
    )


def _is_step(event: Mapping[str, Any]) -> bool:
    """A worker's step annotation (``execute_context_1(97)_generation_0(0)`` and the like)
    with tokens in it: vLLM also annotates steps that schedule nothing."""
    name = str(event.get("name", ""))
    return (
        event.get("cat") == "user_annotation"
        and name.startswith("execute_")
        and any(int(n) for n in re.findall(r"\d+", name))
    )


__all__ = ["TRACE_SETTINGS", "StepTrace", "summarize_step_trace", "traced_steps"]
