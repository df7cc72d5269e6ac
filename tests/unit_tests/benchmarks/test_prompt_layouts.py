"""The prompt-layouts benchmark's pure parts: tokens a text, the text sets, the fractions."""

from __future__ import annotations

import time

from benchmarks.ceiling import Ceiling
from benchmarks.prompt_layouts import (
    Cell,
    LayoutsReport,
    RunCpu,
    Tokens,
    cpu_a_text,
    median_ceiling,
    median_cpu,
    render,
    short_items,
    tokens_of,
    with_fractions,
)
from langchain_qwen_fast._core.prompting import CACHE_BLOCK_TOKENS, LabelSet, local_plan
from langchain_qwen_fast.bench.report import header
from tests.support.fake_vllm import ToyTokenizer


def test_a_compact_prompt_computes_only_the_text_and_one_token_past_its_cached_head() -> None:
    texts = short_items(20)
    assert len(set(texts)) == 20 and short_items(3, 5) == short_items(8)[5:]
    chat = tokens_of(local_plan(LabelSet.build(["World", "Sports"]), ToyTokenizer()), texts)
    compact = tokens_of(local_plan(LabelSet.build(["World", "Sports"], layout="compact"), ToyTokenizer()), texts)
    assert compact.shared % CACHE_BLOCK_TOKENS == 0
    assert compact.computed_mean == compact.prompt_mean - compact.shared
    assert compact.computed_mean < chat.computed_mean


def test_every_rate_is_given_over_its_own_ceiling_and_the_chat_layouts() -> None:
    tokens = Tokens(prompt_mean=1, shared=0, computed_mean=1)
    chat = Cell("short", "chat", tokens, 500.0, 800.0, Ceiling(engines=1, items=1, per_s=1000.0))
    compact = Cell("short", "compact", tokens, 600.0, 1100.0, Ceiling(engines=1, items=1, per_s=1250.0))
    report = LayoutsReport(header=header("t"), cells=[chat, compact])
    with_fractions(report)
    assert chat.over_own_ceiling == {"defaults": 0.5, "client_processes": 0.8, "ceiling": 1.0}
    assert compact.over_own_ceiling["client_processes"] == 0.88
    assert compact.over_chat_ceiling == {"defaults": 0.6, "client_processes": 1.1, "ceiling": 1.25}
    # The printed table gives one process at its defaults and the client processes apart.
    header_line, chat_line, compact_line = render(report).splitlines()
    assert "defaults/own" in header_line and "processes/own" in header_line
    assert chat_line.split()[-3:] == ["0.5", "0.8", "0.8"]
    assert compact_line.split()[-3:] == ["0.48", "0.88", "1.1"]


def test_a_cell_s_ceiling_is_its_median_round_and_a_failed_round_is_named() -> None:
    cell = Cell("short", "compact", Tokens(prompt_mean=1, shared=0, computed_mean=1))
    rounds = [Ceiling(engines=6, items=9, per_s=rate) for rate in (900.0, 1200.0, 1000.0)]
    assert median_ceiling(cell, rounds) is rounds[2]
    assert cell.rounds["ceiling"] == [900.0, 1200.0, 1000.0]
    failed = Ceiling(engines=6, items=9, error="engine 2: out of memory")
    assert median_ceiling(cell, [rounds[0], failed]) is failed


def test_each_roles_cpu_a_text_and_its_median_over_rounds() -> None:
    before = {"api_server": 1.0, "engine_core": 2.0, "client": 3.0}
    after = {"api_server": 1.5, "engine_core": 3.0, "client": 3.25, "other": 9.0}  # "other" appeared late
    assert cpu_a_text(before, after, 10_000) == {"api_server": 50.0, "engine_core": 100.0, "client": 25.0}
    runs = [
        RunCpu({"client": 20.0, "api_server": 60.0}, 14.0),
        RunCpu({"client": 30.0, "api_server": 40.0}, None),
        RunCpu({"client": 10.0, "api_server": 50.0}, 12.0),
    ]
    assert median_cpu(runs) == RunCpu({"api_server": 50.0, "client": 20.0}, 13.0)
    assert median_cpu([]) is None


def test_a_runs_cpu_is_taken_around_its_batch() -> None:
    import asyncio

    from benchmarks.prompt_layouts import _run

    class Spinning:  # stands in for the classifier: an abatch that spends client CPU
        async def abatch(self, texts: list[str]) -> list[str]:
            await asyncio.sleep(0)
            end = time.process_time() + 0.2
            while time.process_time() < end:
                pass
            return list(texts)

    rate, cpu = _run(Spinning(), ["a"] * 1000, [])
    assert 0 < rate < 1000 / 0.2
    assert cpu.us_a_text["client"] >= 0.2 / 1000 * 1e6 * 0.9  # about 200 us a text, the spin's
    assert "api_server" not in cpu.us_a_text  # no servers given, none measured
