"""``qwen-fast bench-scale``'s pure parts: CPU per item, and its options, from the parser to
ScaleOptions."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from langchain_qwen_fast.bench.scale import ScaleOptions, us_per_item
from langchain_qwen_fast.cli import bench_scale as cli
from langchain_qwen_fast.cli.options import whole_numbers
from langchain_qwen_fast.errors import ConfigurationError


def parsed(*argv: str) -> ScaleOptions:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.scale_options(parser.parse_args(argv))


def test_cpu_per_item_is_each_roles_busy_cores_over_the_rate() -> None:
    assert us_per_item({"api_server": 1.38, "engine_core": 1.69}, 5000.0) == {"api_server": 276.0, "engine_core": 338.0}


def test_every_option_reaches_the_dataclass(tmp_path: Path) -> None:
    variants = tmp_path / "variants.json"
    options = parsed(
        "--model", "m", "--gpus", "0,1", "--servers-per-gpu", "4", "--profile", "gpu", "--model-name", "q",
        "--tokenizer", "tok", "--subsets", "1,2,4", "--sweep-subsets", "1,4", "--items", "100", "--router",
        "round_robin", "--router-servers", "2", "--compare-request-shape", "--profile-seconds", "3",
        "--server-arg=--seed", "--server-arg", "7", "--mps", "--mode", "head", "--client-processes", "2,4",
        "--capabilities-subsets", "1", "--capabilities-items-per-server", "16", "--capabilities-rounds", "1",
        "--capabilities-row", "8 static examples", "--scaling-rounds", "3", "--profile-one-at-a-time",
        "--latency-variants", str(variants), "--out", str(tmp_path), "--label", "L", "--service-workers", "1,4",
        "--service-clients", "512", "--service-groups-in-flight", "1,2",
    )  # fmt: skip
    assert options == ScaleOptions(
        model="m", gpus="0,1", servers_per_gpu=4, profile="gpu", model_name="q", tokenizer="tok", subsets=(1, 2, 4),
        sweep_subsets=(1, 4), items=100, router="round_robin", router_servers=2, compare_request_shape=True,
        profile_seconds=3.0, server_args=["--seed", "7"], mps=True, mode="head", client_processes=(2, 4),
        capabilities_subsets=(1,), capabilities_items_per_server=16, capabilities_rounds=1,
        capabilities_rows=["8 static examples"], scaling_rounds=3, profile_one_at_a_time=True,
        latency_variants=variants, out=tmp_path, label="L", service_workers=(1, 4), service_clients=512,
        service_groups_in_flight=(1, 2),
    )  # fmt: skip


def test_the_defaults_are_the_dataclasss_own(tmp_path: Path) -> None:
    assert parsed("--model", str(tmp_path)) == ScaleOptions(model=str(tmp_path))
    assert ScaleOptions(model="m").capabilities_rows is None  # every row
    (tmp_path / "tokenizer.json").write_text("{}")
    assert parsed("--model", str(tmp_path)).tokenizer == str(tmp_path)  # the model's own tokenizer
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    dests = set(vars(parser.parse_args(["--model", "m"])))
    assert dests == {f.name for f in dataclasses.fields(ScaleOptions)}


def test_a_list_of_counts_is_checked_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    assert whole_numbers("1, 2,,4") == (1, 2, 4) and whole_numbers("") == ()
    with pytest.raises(SystemExit):
        parsed("--model", "m", "--subsets", "1,two")
    assert "whole numbers such as 1,2,4" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"subsets": (0, 2)}, "subsets: every count is at least 1"),
        ({"capabilities_rows": ["nine labels"]}, "unknown capability rows"),
        ({"items": 0}, "at least 1"),
        ({"service_clients": 0}, "service_clients are at least 1"),
        ({"service_groups_in_flight": (2, 0)}, "service_groups_in_flight: every count is at least 1"),
    ],
)
def test_options_that_cannot_work_are_named(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ScaleOptions(model="m", **settings)  # type: ignore[arg-type]
