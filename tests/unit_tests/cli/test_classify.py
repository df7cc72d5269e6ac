"""``qwen-fast classify``'s arguments: the typed options of the file job and of the Ray path."""

from __future__ import annotations

from typing import Any

import pytest

from langchain_qwen_fast.cli import classify
from langchain_qwen_fast.errors import InfrastructureFailure
from langchain_qwen_fast.jobs.ray_job import RayJobReport, RayOptions
from tests.support.cli import parse_command


def test_without_ray_there_are_no_ray_options() -> None:
    args = parse_command(classify, ["in.csv", "--out", "out.csv", "--labels", "A,B", "C"])
    assert classify.ray_options(args) is None
    assert classify.classify_options(args).labels == ("A", "B", "C")


def test_ray_flags_become_ray_options_with_the_library_defaults() -> None:
    args = parse_command(classify, ["in.parquet", "--out", "out", "--labels", "A,B", "--ray", "auto", "--actors", "4"])
    assert classify.ray_options(args) == RayOptions(address="auto", actors=(4, 4))
    local = parse_command(classify, ["in.parquet", "--out", "out", "--labels", "A,B", "--ray", "local"])
    assert classify.ray_options(local) == RayOptions(address=None)


def test_run_sends_a_ray_job_to_the_ray_path_and_a_stopped_one_exits_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from langchain_qwen_fast.jobs import ray_job

    seen: list[Any] = []

    def fake(options: Any, ray_options: RayOptions) -> RayJobReport:
        seen.append((options, ray_options))
        return RayJobReport(
            output="out", rows=10, classified_rows=5, resumed_rows=5, seconds=2.0, rows_per_s=2.5,
            label_counts={"A": 9}, chosen_counts=None, abstained=0, errors=1, error_kinds={"InvalidInputError": 1},
            histogram=None, report="out/_report.json",
        )  # fmt: skip

    monkeypatch.setattr(ray_job, "classify_dataset", fake)
    args = parse_command(classify, ["in.parquet", "--out", "out", "--labels", "A,B", "--ray", "auto"])
    assert classify.run(args) == 0
    ((options, ray_options),) = seen
    assert options.labels == ("A", "B") and ray_options.address == "auto"
    printed = capsys.readouterr().out
    assert "wrote 10 rows to out (5 done by an earlier run, 5 now)" in printed and "errors: 1" in printed
    assert "2.5 rows/s" in printed

    def stopped(options: Any, ray_options: RayOptions) -> RayJobReport:
        raise InfrastructureFailure("the Ray job stopped")

    monkeypatch.setattr(ray_job, "classify_dataset", stopped)
    assert classify.run(args) == 3
    assert "the Ray job stopped" in capsys.readouterr().err
