"""``qwen-fast bench``'s options: what the parser gives reaches CompareOptions, and options
that cannot work are named before any server starts; the report it writes."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from langchain_qwen_fast.bench.compare import CompareOptions, checks
from langchain_qwen_fast.bench.measure import PathResult
from langchain_qwen_fast.bench.report import header, render_table, write_json
from langchain_qwen_fast.cli import bench as cli
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving import PROFILES


def parsed(*argv: str) -> CompareOptions:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.compare_options(parser.parse_args(argv))


def test_every_option_reaches_the_dataclass(tmp_path: Path) -> None:
    options = parsed(
        "--start-server", "m", "--profile", "cpu", "--server-arg=--seed", "--server-arg", "7", "--model", "q",
        "--tokenizer", "tok", "--items", "64", "--chat-items", "32", "--invoke-items", "9", "--concurrency", "4",
        "--out", str(tmp_path), "--label", "L",
    )  # fmt: skip
    assert options == CompareOptions(
        start_server="m", profile="cpu", server_args=["--seed", "7"], model="q", tokenizer="tok", items=64,
        chat_items=32, invoke_items=9, concurrency=4, out=tmp_path, label="L",
    )  # fmt: skip


def test_the_defaults_are_the_dataclasss_own() -> None:
    assert parsed("--base-url", "http://h:1/v1") == CompareOptions(base_url="http://h:1/v1")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    dests = set(vars(parser.parse_args(["--base-url", "u"])))
    # no option the library does not take, no field the command cannot set
    assert dests == {f.name for f in dataclasses.fields(CompareOptions)}


def test_the_token_id_paths_use_the_started_models_tokenizer_unless_told_none(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    assert parsed("--start-server", str(tmp_path)).tokenizer == str(tmp_path)
    assert parsed("--start-server", str(tmp_path), "--tokenizer", "none").tokenizer is None
    assert parsed("--start-server", str(tmp_path), "--tokenizer", "other").tokenizer == "other"
    assert parsed("--base-url", "http://h:1/v1").tokenizer is None


def test_the_profile_choices_are_the_launchers() -> None:
    assert ("auto", *PROFILES) == cli.PROFILE_CHOICES
    with pytest.raises(SystemExit):
        parsed("--base-url", "u", "--profile", "fast")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "either base_url"),
        ({"base_url": "u", "start_server": "m"}, "either base_url"),
        ({"start_server": "m", "invoke_items": 0}, "at least 1"),
        ({"start_server": "m", "chat_items": 0}, "at least 1"),
    ],
)
def test_options_that_cannot_work_are_named(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        CompareOptions(**settings)  # type: ignore[arg-type]


def _results() -> list[PathResult]:
    one = [1.0, 2.0, 3.0]
    return [
        PathResult("raw HTTP (httpx), same request", "one-at-a-time", 3, 0.006, 0.001, one),
        PathResult("ChatOpenAI.invoke", "one-at-a-time", 3, 0.009, 0.003, [2.0, 3.0, 4.0]),
        PathResult("LCEL prompt | ChatOpenAI", "one-at-a-time", 3, 0.012, 0.004, [3.0, 4.0, 5.0]),
        PathResult("LLMChain(ChatOpenAI)", "one-at-a-time", 3, 0.015, 0.005, [4.0, 5.0, 6.0]),
        PathResult("QwenClassifier.invoke", "one-at-a-time", 3, 0.007, 0.002, [1.5, 2.5, 3.5]),
        PathResult("ChatOpenAI.batch (default config)", "batch", 100, 2.0, 0.5, server_cores={"api_server": 0.5}),
        PathResult("QwenClassifier.batch", "batch", 100, 0.5, 0.1),
        PathResult("QwenClassifier.abatch", "batch", 100, 0.25, 0.1),
    ]


def test_the_checks_compare_the_classifier_with_the_chat_paths() -> None:
    found = checks(_results())
    assert found.classifier_batch_over_chat_batch == 4.0  # 200/s against 50/s
    assert found.best_classifier_batch_over_chat_batch == 8.0
    assert found.classifier_invoke_p50_minus_raw_http_ms == 0.5
    assert found.lcel_p50_minus_chat_invoke_ms == 1.0 and found.llm_chain_p50_minus_chat_invoke_ms == 2.0


def test_a_report_is_written_field_by_field_and_rendered_as_a_table(tmp_path: Path) -> None:
    results = _results()
    rows = [r.summary(max(r.rps for r in results)) for r in results]
    write_json(tmp_path / "out" / "r.json", {"header": header("L"), "rows": rows, "out": tmp_path})
    written = json.loads((tmp_path / "out" / "r.json").read_text())
    assert written["header"]["label"] == "L" and written["out"] == str(tmp_path)
    first = written["rows"][0]
    assert first["path"] == "raw HTTP (httpx), same request" and first["ratio_to_fastest"] == 1  # the fastest
    table = render_table(rows)
    assert table.count("\n") == len(rows) + 1  # a head, a rule and a line a row
    assert "0.25/0.50/" in table  # the client's cores and the API server's; the engine's unmeasured
