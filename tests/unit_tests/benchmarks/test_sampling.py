"""What the host and its GPUs did: busy cores and their clock, GPU windows, and vLLM's stage
means from counter readings."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from benchmarks.sampling import GpuWindow, busy_and_clock, gpu_window, stage_means


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
    assert window == GpuWindow(gpu_util_mean_pct=45.0, gpu_util_mean_pct_by_gpu=[85.0, 5.0], gpu_mem_max_mib=12.0)
    assert gpu_window(samples, 3.0, 4.0) == GpuWindow()  # no samples: nothing to say


def test_stage_means_are_the_new_sum_over_the_new_count() -> None:
    before = {"queue": (0.010, 10.0), "prefill": (1.0, 10.0)}
    after = {"queue": (0.030, 20.0), "prefill": (1.0, 10.0), "ttft": (1.0, 1.0)}
    # prefill saw no new request and ttft has no earlier reading: neither is reported
    assert stage_means(before, after) == {"queue": 2.0}


def test_the_clients_cpu_counts_its_own_children_but_not_the_servers() -> None:
    psutil = pytest.importorskip("psutil")
    import subprocess
    import sys
    import time

    from benchmarks.sampling import client_cpu_seconds

    spin = [sys.executable, "-c", "while True: pass"]
    worker, server = subprocess.Popen(spin), subprocess.Popen(spin)
    try:
        start_with, start_without = client_cpu_seconds([]), client_cpu_seconds([server.pid])
        deadline = time.monotonic() + 30
        while min(sum(psutil.Process(p.pid).cpu_times()[:2]) for p in (worker, server)) < 0.3:  # both alive
            assert time.monotonic() < deadline, "the children got no CPU"
            time.sleep(0.05)
        with_server = client_cpu_seconds([]) - start_with
        without_server = client_cpu_seconds([server.pid]) - start_without
    finally:
        for child in (worker, server):
            child.kill()
            child.wait(10)
    assert with_server > without_server + 0.2  # the server's CPU is not the client's
    assert without_server > 0.2  # the worker's is
