"""The throughput benchmark's pure parts: CPU per item, the fractions of vLLM's ceiling, and
its options, from the parser to ScaleOptions and its parts."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import scale
from benchmarks.ceiling import Ceiling
from benchmarks.layouts import ScalingRounds, SubsetRow, Throughput, us_per_item
from benchmarks.sampling import HostCpus, HostLoad
from benchmarks.scale import (
    CapabilityOptions,
    CpuProfileOptions,
    GroupOptions,
    LoadOptions,
    ReferenceOptions,
    RouterOptions,
    ScaleOptions,
    ServiceOptions,
)
from langchain_qwen_fast.bench.report import header
from langchain_qwen_fast.cli.options import field_names, whole_numbers
from langchain_qwen_fast.errors import ConfigurationError


def parsed(*argv: str) -> ScaleOptions:
    return scale.scale_options(scale.build_parser().parse_args(argv))


def test_cpu_per_item_is_each_roles_busy_cores_over_the_rate() -> None:
    assert us_per_item({"api_server": 1.38, "engine_core": 1.69}, 5000.0) == {"api_server": 276.0, "engine_core": 338.0}


def test_every_option_reaches_its_part(tmp_path: Path) -> None:
    variants = tmp_path / "variants.json"
    options = parsed(
        "--model", "m", "--gpus", "0,1", "--servers-per-gpu", "4", "--profile", "gpu", "--model-name", "q",
        "--tokenizer", "tok", "--subsets", "1,2,4", "--sweep-subsets", "1,4", "--items", "100", "--router",
        "round_robin", "--router-servers", "2", "--compare-request-shape", "--profile-seconds", "3",
        "--server-arg=--seed", "--server-arg", "7", "--mps", "--mode", "head", "--client-processes", "2,4",
        "--capabilities-subsets", "1", "--capabilities-items-per-server", "16", "--capabilities-rounds", "1",
        "--capabilities-row", "8 static examples", "--scaling-rounds", "3", "--profile-one-at-a-time",
        "--latency-variants", str(variants), "--out", str(tmp_path), "--label", "L", "--service-workers", "1,4",
        "--service-clients", "512", "--service-groups-in-flight", "1,2", "--no-ceiling", "--ceiling-timeout", "60",
        "--frontend", "rust",
    )  # fmt: skip
    assert options == ScaleOptions(
        group=GroupOptions(model="m", gpus="0,1", servers_per_gpu=4, profile="gpu", frontend="rust", model_name="q",
                           tokenizer="tok", server_args=["--seed", "7"], mps=True, mode="head"),
        load=LoadOptions(subsets=(1, 2, 4), sweep_subsets=(1, 4), items=100, client_processes=(2, 4),
                         scaling_rounds=3, compare_request_shape=True),
        reference=ReferenceOptions(ceiling=False, ceiling_timeout=60.0),
        routing=RouterOptions(router="round_robin", router_servers=2),
        cpu_profile=CpuProfileOptions(profile_seconds=3.0, profile_one_at_a_time=True),
        capabilities=CapabilityOptions(capabilities_subsets=(1,), capabilities_items_per_server=16,
                                       capabilities_rounds=1, capabilities_rows=["8 static examples"]),
        service=ServiceOptions(service_workers=(1, 4), service_clients=512, service_groups_in_flight=(1, 2)),
        latency_variants=variants, out=tmp_path, label="L",
    )  # fmt: skip


def test_the_defaults_are_the_dataclasses_own(tmp_path: Path) -> None:
    assert parsed("--model", str(tmp_path)) == ScaleOptions(group=GroupOptions(model=str(tmp_path)))
    assert ScaleOptions(group=GroupOptions(model="m")).capabilities.capabilities_rows is None  # every row
    assert ScaleOptions(group=GroupOptions(model="m")).reference.ceiling  # the reference row is measured
    assert parsed("--model", "m").group.frontend == "python"
    (tmp_path / "tokenizer.json").write_text("{}")
    assert parsed("--model", str(tmp_path)).group.tokenizer == str(tmp_path)  # the model's own tokenizer
    dests = set(vars(scale.build_parser().parse_args(["--model", "m"])))
    # no option the benchmark does not take, no field the command line cannot set
    assert dests == field_names(ScaleOptions)


def test_a_list_of_counts_is_checked_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    assert whole_numbers("1, 2,,4") == (1, 2, 4) and whole_numbers("") == ()
    with pytest.raises(SystemExit):
        parsed("--model", "m", "--subsets", "1,two")
    assert "whole numbers such as 1,2,4" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: LoadOptions(subsets=(0, 2)), "subsets: every count is at least 1"),
        (lambda: CapabilityOptions(capabilities_rows=["nine labels"]), "unknown capability rows"),
        (lambda: LoadOptions(items=0), "at least 1"),
        (lambda: ServiceOptions(service_clients=0), "service_clients is at least 1"),
        (lambda: ServiceOptions(service_groups_in_flight=(2, 0)), "service_groups_in_flight: every count"),
        (lambda: GroupOptions(model="m", servers_per_gpu=0), "servers_per_gpu"),
    ],
)
def test_options_that_cannot_work_are_named(make: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make()  # type: ignore[operator]


def test_options_that_cannot_work_end_the_command_before_any_server_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert scale.main(["--model", "m", "--servers-per-gpu", "0"]) == 1
    assert "benchmarks.scale: servers_per_gpu is at least 1" in capsys.readouterr().err


def _throughput(per_s: float) -> Throughput:
    return Throughput(per_s=per_s, cores_busy={}, host=HostLoad(None, None))


def test_each_layout_is_given_as_a_fraction_of_the_ceiling_for_as_many_engines() -> None:
    report = scale.ScaleReport(header("L"), 2, "python", [], 100, False, HostCpus(None, None))
    report.subsets = [
        SubsetRow(servers=1, mode="generate", default=[_throughput(400.0), _throughput(600.0)]),
        SubsetRow(servers=2, mode="generate", default=[_throughput(900.0)]),
        SubsetRow(servers=4, mode="generate", default=[_throughput(1000.0)]),
    ]
    report.scaling = ScalingRounds([1, 2], "generate", {"1": [500.0, 500.0], "2": [800.0]}, {"1": [], "2": []}, 1.6, [])
    report.ceiling = [Ceiling(engines=1, items=100, per_s=1000.0), Ceiling(engines=2, items=100, error="no MPS")]
    scale.with_fractions(report)
    assert [row.fraction_of_ceiling for row in report.subsets] == [0.5, None, None]  # no ceiling for 2 or 4
    assert report.scaling.fraction_of_ceiling == {"1": 0.5, "2": None}
