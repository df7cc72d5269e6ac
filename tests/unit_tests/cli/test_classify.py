"""``qwen-fast classify``'s arguments: the typed options of the file job and of the Ray path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast.cli import classify
from langchain_qwen_fast.jobs.ray_data import RayJobReport, RayOptions
from tests.support.cli import parse_command


def test_without_ray_there_are_no_ray_options() -> None:
    args = parse_command(classify, ["in.csv", "--out", "out.csv", "--labels", "A,B", "C"])
    assert classify.ray_options(args) is None
    assert classify.classify_options(args).labels == ("A", "B", "C")


def test_ray_flags_become_ray_options_with_the_library_defaults() -> None:
    args = parse_command(classify, ["in.parquet", "--out", "out", "--labels", "A,B", "--ray", "auto", "--actors", "4"])
    assert classify.ray_options(args) == RayOptions(address="auto", actors=4)
    local = parse_command(classify, ["in.parquet", "--out", "out", "--labels", "A,B", "--ray", "local"])
    assert classify.ray_options(local) == RayOptions(address=None)


def test_run_sends_a_ray_job_to_the_ray_path(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from langchain_qwen_fast.jobs import ray_data

    seen: list[Any] = []

    def fake(options: Any, ray_options: RayOptions) -> RayJobReport:
        seen.append((options, ray_options))
        return RayJobReport(Path("out"), rows=10, shards=2, skipped=[0], written=[1], classified_rows=5,
                            error_rows=1, seconds=2.0)  # fmt: skip

    monkeypatch.setattr(ray_data, "classify_dataset", fake)
    args = parse_command(classify, ["in.parquet", "--out", "out", "--labels", "A,B", "--ray", "auto"])
    assert classify.run(args) == 0
    ((options, ray_options),) = seen
    assert options.labels == ("A", "B") and ray_options.address == "auto"
    printed = capsys.readouterr().out
    assert "wrote 1 shard(s) to out (1 already there)" in printed and "1 with an error" in printed
    assert "2.5 rows/s" in printed
