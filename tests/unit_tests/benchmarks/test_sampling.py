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
