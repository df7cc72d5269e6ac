"""Where a server's CPU goes under load: ``py-spy`` samples of its API process and children
(the engine core among them) while a load runs, summarised per process by function, self and
inclusive. Used by ``python -m benchmarks.scale --profile-seconds``; py-spy comes with the
``benchmarks`` extra."""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ProcessProfile:
    """One process's samples, and the top functions by the share of samples in them (self)
    and under them (inclusive), in %."""

    samples: int
    self_pct: dict[str, float]
    inclusive_pct: dict[str, float]


@dataclass
class CpuProfile:
    """py-spy's samples per process (its title), or why there are none."""

    processes: dict[str, ProcessProfile] = field(default_factory=dict)
    error: str | None = None


def profile(pid: int, seconds: float, load: Callable[[], Any], out: Path, top: int = 25) -> CpuProfile:
    """py-spy samples of process ``pid`` and its children while ``load`` runs."""
    raw = out / f"py-spy-{pid}.txt"
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        return CpuProfile(error="py-spy is not installed")
    command = [spy, "record", "--pid", str(pid), "--subprocesses", "--duration", str(int(seconds))]
    command += ["--rate", "200", "--format", "raw", "--output", str(raw), "--nonblocking"]
    recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)
    while recorder.poll() is None:
        load()
    if not raw.is_file():
        return CpuProfile(error=(recorder.stderr.read() if recorder.stderr else b"").decode()[-2000:])
    return CpuProfile(processes=summarize_profile(raw.read_text(), top))


def summarize_profile(collapsed: str, top: int = 25) -> dict[str, ProcessProfile]:
    """From py-spy's raw (collapsed) output: per process, samples, and the top functions by
    self and by inclusive share."""
    self_counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    totals: collections.Counter[str] = collections.Counter()
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        # With --subprocesses a child's stack starts with its ancestors' "process PID:cmdline".
        owners = [f for f in frames if f.startswith("process ")]
        process = owners[-1].partition(":")[2].strip('"')[:60] if owners else "process"
        calls = [f for f in frames if not f.startswith(("process ", "thread "))]
        totals[process] += count
        if calls:
            self_counts[process][_short(calls[-1])] += count
        for name in {_short(f) for f in calls}:
            inclusive[process][name] += count
    return {
        process: ProcessProfile(
            samples=total,
            self_pct={k: round(100 * v / total, 1) for k, v in self_counts[process].most_common(top)},
            inclusive_pct={k: round(100 * v / total, 1) for k, v in inclusive[process].most_common(top)},
        )
        for process, total in totals.most_common()
    }


def _short(frame: str) -> str:
    """``function (path/to/module.py:123)`` as ``function (module.py)``."""
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.split(':')[0]).name})" if where else name


__all__ = ["CpuProfile", "ProcessProfile", "profile", "summarize_profile"]
