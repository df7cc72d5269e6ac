"""The lab's tools from the command line: each parser gives its tool's typed options (the
fields listed once, in the dataclasses), mistakes are named before anything starts, and
building a parser imports nothing heavy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import classify_job, client_libraries, compare, flags
from benchmarks.classify_job import JobBenchOptions, JobExtras, JobLoad, JobServer
from benchmarks.client_libraries import LibraryRow, Round
from benchmarks.compare import LabCompareOptions, LabParts
from benchmarks.flags import FlagsOptions
from langchain_qwen_fast.bench.compare import CompareOptions
from langchain_qwen_fast.cli.options import field_names
from langchain_qwen_fast.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("langchain_core", "langchain_openai", "openai", "vllm", "matplotlib", "tqdm", "psutil", "torch", "ray")


def test_the_job_benchmarks_options_reach_their_parts(tmp_path: Path) -> None:
    args = classify_job.build_parser().parse_args(
        [
            "--base-url",
            "http://h:1/v1",
            "--model",
            "q",
            "--rows",
            "64",
            "--rounds",
            "2",
            "--chunk-rows",
            "16",
            "--chunks-in-flight",
            "2",
            "--memory",
            "10,20",
            "--canned",
            "--out",
            str(tmp_path),
        ]
    )
    options = classify_job.options_from(JobBenchOptions, args)
    assert options == JobBenchOptions(
        server=JobServer(base_url="http://h:1/v1", model="q"),
        load=JobLoad(rows=64, rounds=2, chunk_rows=16, chunks_in_flight=2),
        extras=JobExtras(memory=(10, 20), canned=True),
        out=tmp_path,
    )
    assert set(vars(classify_job.build_parser().parse_args([]))) == field_names(JobBenchOptions)
    assert classify_job.options_from(JobBenchOptions, classify_job.build_parser().parse_args([])) == JobBenchOptions()


def test_the_job_benchmark_needs_a_server_or_the_canned_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert classify_job.main(["--rows", "8"]) == 1
    assert "give --base-url URL or --start-server MODEL" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        classify_job.main(["--base-url", "u", "--start-server", "m"])


def test_distinct_texts_are_made_one_at_a_time() -> None:
    texts = list(classify_job.distinct_texts(500))
    assert len(set(texts)) == 500 and texts[12].endswith("item 1 2")


def test_the_lab_comparison_takes_qwen_fast_benchs_options_and_its_own(tmp_path: Path) -> None:
    args = compare.build_parser().parse_args(
        [
            "--start-server",
            "m",
            "--tokenizer",
            "none",
            "--items",
            "64",
            "--out",
            str(tmp_path),
            "--replicas",
            "2",
            "--sweep",
            "--service",
            "--compare-quantization",
            "fp8",
            "--transformers-baseline",
            "--capabilities",
            "--gpu-sample",
            "--offline-ceiling",
        ]
    )
    assert compare.lab_options(args) == LabCompareOptions(
        comparison=CompareOptions(start_server="m", items=64, out=tmp_path),
        parts=LabParts(
            replicas=2,
            sweep=True,
            service=True,
            compare_quantization="fp8",
            transformers_baseline=True,
            capabilities=True,
            gpu_sample=True,
            offline_ceiling=True,
        ),
    )
    assert set(vars(compare.build_parser().parse_args(["--base-url", "u"]))) == field_names(LabCompareOptions)


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (LabParts(replicas=2), "replicas: start servers of their own"),
        (LabParts(offline_ceiling=True, transformers_baseline=True), "transformers_baseline, offline_ceiling"),
        (LabParts(compare_quantization="fp8"), "compare_quantization"),
    ],
)
def test_lab_parts_that_start_servers_need_a_started_server(parts: LabParts, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        LabCompareOptions(comparison=CompareOptions(base_url="u"), parts=parts)
    with pytest.raises(ConfigurationError, match="replicas is at least 1"):
        LabParts(replicas=0)


def test_the_flag_comparisons_options(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    given = ["--start-server", str(tmp_path), "--flags", "f.json", "--mode", "head", "--gpu-sample", "--items", "9"]
    options = flags.flags_options(flags.build_parser().parse_args(given))
    assert options == FlagsOptions(
        start_server=str(tmp_path), flags=Path("f.json"), mode="head", gpu_sample=True, items=9, tokenizer=str(tmp_path)
    )
    assert options.server().start_server == str(tmp_path) and options.server().items == 9
    assert set(vars(flags.build_parser().parse_args(given))) == field_names(FlagsOptions)


def test_a_client_librarys_row_gives_each_round_and_the_medians() -> None:
    rounds = [Round("httpx", 100, 1.0, 0.1, 0), Round("httpx", 100, 0.5, 0.2, 1), Round("httpx", 100, 2.0, 0.3, 0)]
    row = LibraryRow.of(rounds)
    assert row.requests_per_s == [100.0, 200.0, 50.0] and row.median_requests_per_s == 100.0
    assert row.client_cpu_ms_per_request == [1.0, 2.0, 3.0] and row.median_client_cpu_ms_per_request == 2.0
    assert row.failed_requests == [0, 1, 0]
    args = client_libraries.build_parser().parse_args(["--base-url", "u", "--library", "aiohttp"])
    assert args.libraries == ["aiohttp"] and args.requests > args.in_flight


@pytest.mark.parametrize("tool", ["scale", "compare", "flags", "classify_job", "ray_classify", "client_libraries"])
def test_a_tools_help_imports_nothing_heavy(tool: str) -> None:
    code = (
        "import sys\n"
        f"from benchmarks import {tool}\n"
        f"{tool}.build_parser().format_help()\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"
