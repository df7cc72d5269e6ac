"""What the host and its GPUs did while a benchmark ran: GPU utilisation and memory
(``nvidia-smi``), the host's busy cores and their clock (psutil), and vLLM's own per-stage
request histograms (``/metrics``). The CPU the servers' processes spent is measured by
:func:`langchain_qwen_fast.bench.measure.server_cpu_seconds`.

Importing this module imports nothing heavy; psutil and httpx are imported where used.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class GpuWindow:
    """The GPUs over a span of time: mean utilisation over all of them and each one's own (an
    idle GPU halves the mean of two), and the peak memory of any; None without samples."""

    gpu_util_mean_pct: float | None = None
    gpu_util_mean_pct_by_gpu: list[float] | None = None
    gpu_mem_max_mib: float | None = None


@dataclass
class HostLoad:
    """The whole host over a span of time: mean busy cores, and their busy-weighted clock."""

    host_cores_busy: float | None
    busy_core_mhz: float | None


@dataclass
class HostCpus:
    """The host's logical CPUs and physical cores (None without psutil)."""

    logical: int | None
    physical: int | None


class GpuSampler:
    """Samples each GPU's utilisation and memory with ``nvidia-smi`` every 200 ms in the background."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int, float, float]] = []  # (time, GPU index, util %, memory MiB)
        query = ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
        self._proc = subprocess.Popen([*query, "-lms", "200"], stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    @staticmethod
    def available() -> bool:
        """Whether ``nvidia-smi`` is on the PATH."""
        return shutil.which("nvidia-smi") is not None

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            with contextlib.suppress(ValueError):
                index, util, mem = line.split(",")[:3]
                self.samples.append((time.perf_counter(), int(index), float(util), float(mem)))

    def window(self, start: float, end: float) -> GpuWindow:
        """See :func:`gpu_window`."""
        return gpu_window(self.samples, start, end)

    def stop(self) -> None:
        """Stop sampling."""
        self._proc.terminate()


def gpu_window(samples: Sequence[tuple[float, int, float, float]], start: float, end: float) -> GpuWindow:
    """The GPUs from ``(time, GPU index, util %, memory MiB)`` samples between ``start`` and
    ``end`` (perf_counter seconds)."""
    inside = [(g, u, m) for t, g, u, m in samples if start <= t <= end]
    if not inside:
        return GpuWindow()
    by_gpu: dict[int, list[float]] = {}
    for g, u, _ in inside:
        by_gpu.setdefault(g, []).append(u)
    return GpuWindow(
        gpu_util_mean_pct=round(sum(u for _, u, _ in inside) / len(inside), 1),
        gpu_util_mean_pct_by_gpu=[round(sum(v) / len(v), 1) for _, v in sorted(by_gpu.items())],
        gpu_mem_max_mib=max(m for _, _, m in inside),
    )


def gpu_memory_mib() -> list[float]:
    """Memory in use on each GPU, MiB (empty without nvidia-smi)."""
    if not GpuSampler.available():
        return []
    query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    out = subprocess.run(query, capture_output=True, text=True, check=False).stdout
    return [float(x) for x in out.split()]


def busy_and_clock(before: Sequence[Any], after: Sequence[Any], mhz: Sequence[float]) -> tuple[float, float | None]:
    """Cores kept busy between two ``psutil.cpu_times(percpu=True)`` readings, and the mean
    clock (MHz) of those cores weighted by how busy each was (None without one clock a core)."""
    shares = []
    for a, b in zip(before, after, strict=True):
        total = sum(b) - sum(a)
        idle = (b.idle - a.idle) + (getattr(b, "iowait", 0.0) - getattr(a, "iowait", 0.0))
        shares.append(max(0.0, min(1.0, (total - idle) / total)) if total > 0 else 0.0)
    busy = sum(shares)
    if len(mhz) != len(shares) or busy == 0:
        return busy, None
    return busy, sum(s * m for s, m in zip(shares, mhz, strict=True)) / busy


class HostCpuSampler:
    """Samples the whole host's busy cores and their clock (psutil) every ``interval`` seconds
    in the background: servers and client share the host's cores, and a CPU's clock falls as
    more of its cores work, so the same work takes longer on a busier host."""

    def __init__(self, interval: float = 0.25) -> None:
        import psutil

        self._psutil = psutil
        self.samples: list[tuple[float, float | None]] = []  # (busy cores, busy-weighted MHz)
        self._done = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        before = self._psutil.cpu_times(percpu=True)
        while not self._done.wait(self._interval):
            before = self._sample(before)
        if not self.samples:  # a run shorter than the interval: its whole stretch is the one sample
            self._sample(before)

    def _sample(self, before: Any) -> Any:
        after = self._psutil.cpu_times(percpu=True)
        clocks = [f.current for f in self._psutil.cpu_freq(percpu=True) or []]
        self.samples.append(busy_and_clock(before, after, clocks))
        return after

    def stop(self) -> HostLoad:
        """Stop sampling; the mean busy cores and busy-weighted MHz over the samples."""
        self._done.set()
        self._thread.join()
        clocks = [m for _, m in self.samples if m is not None]
        return HostLoad(
            host_cores_busy=round(sum(b for b, _ in self.samples) / len(self.samples), 2) if self.samples else None,
            busy_core_mhz=round(sum(clocks) / len(clocks)) if clocks else None,
        )


def client_cpu_seconds(server_pids: Sequence[int]) -> float:
    """CPU seconds used so far by this process and its child processes outside the servers'
    process trees (a classifier's client processes, and any helper the run started), with
    the children already reaped; 0.0 without psutil."""
    try:
        import psutil
    except ImportError:
        return 0.0
    me = psutil.Process()
    servers = set(server_pids)
    for pid in server_pids:
        with contextlib.suppress(psutil.Error):
            servers.update(child.pid for child in psutil.Process(pid).children(recursive=True))
    own = me.cpu_times()
    total = own.user + own.system + own.children_user + own.children_system
    for child in me.children(recursive=True):
        if child.pid in servers:
            continue
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            total += times.user + times.system
    return total


def host_cpus() -> HostCpus:
    """The host's logical CPUs and physical cores (two logical CPUs a core: busy processes
    past the core count share a core's execution units)."""
    try:
        import psutil
    except ImportError:
        return HostCpus(None, None)
    return HostCpus(logical=psutil.cpu_count(), physical=psutil.cpu_count(logical=False))


# vLLM's own request histograms (present unless --disable-log-stats): where a request's time goes.
STAGE_HISTOGRAMS = {
    "server_e2e": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "ttft": "vllm:time_to_first_token_seconds",
}


def histogram_totals(root_url: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of each stage's histogram from ``/metrics``; empty when stats are off."""
    import httpx

    text = httpx.get(f"{root_url}/metrics", timeout=10).text
    totals: dict[str, tuple[float, float]] = {}
    for stage, metric in STAGE_HISTOGRAMS.items():
        values: dict[str, float] = {}
        for line in text.splitlines():
            for part in ("_sum", "_count"):
                if line.startswith(metric + part):
                    values[part] = values.get(part, 0.0) + float(line.rsplit(" ", 1)[1])
        if len(values) == 2:
            totals[stage] = (values["_sum"], values["_count"])
    return totals


def stage_means(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Mean ms of each stage between two :func:`histogram_totals` readings."""
    return {
        stage: round((after[stage][0] - before[stage][0]) / (after[stage][1] - before[stage][1]) * 1000, 3)
        for stage in after
        if stage in before and after[stage][1] > before[stage][1]
    }


__all__ = [
    "STAGE_HISTOGRAMS",
    "GpuSampler",
    "GpuWindow",
    "HostCpuSampler",
    "HostCpus",
    "HostLoad",
    "busy_and_clock",
    "gpu_memory_mib",
    "gpu_window",
    "histogram_totals",
    "host_cpus",
    "stage_means",
]
