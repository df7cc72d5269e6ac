"""The shared measuring library: what a run owns (its servers and texts new to them), the
one-at-a-time loop, a path's summary row, and the checks made before a run starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_qwen_fast.bench.measure import (
    FRESH_TEXTS_START,
    FreshTexts,
    PathResult,
    RunContext,
    cores_between,
    own_tokenizer,
    p50_gap,
    require,
    run_one_at_a_time,
    server_cpu_seconds,
)
from langchain_qwen_fast.errors import MissingDependencyError
from langchain_qwen_fast.testing.samples import news_items


def test_one_at_a_time_paths_never_send_a_text_twice() -> None:
    """A text sent again finds its whole prompt in vLLM's prefix cache and is answered faster
    than a new one: within a run, no text is sent twice."""
    run = RunContext()
    sent: dict[str, list[str]] = {"a": [], "b": []}
    results = run_one_at_a_time(run, {name: sent[name].append for name in sent}, 5)
    assert [r.name for r in results] == ["a", "b"] and all(len(r.latencies_ms) == 5 for r in results)
    texts = [t for name in sent for t in sent[name] if t != "warm-up"]
    assert len(texts) == 10 and len(set(texts)) == 10
    again: dict[str, list[str]] = {"a": [], "b": []}
    run_one_at_a_time(run, {name: again[name].append for name in again}, 5)
    assert not set(texts) & {t for name in again for t in again[name]}  # nor does a later measurement


def test_each_run_owns_its_texts_and_servers() -> None:
    """Nothing is shared through the module: a new run starts from the same first text, and
    drawing from one run moves no other."""
    first, second = RunContext(), RunContext()
    drawn = first.fresh_texts(3)
    assert second.fresh_texts(3) == drawn == news_items(3, FRESH_TEXTS_START)
    assert first.fresh_texts(2) == news_items(2, FRESH_TEXTS_START + 3)
    first.server_pids.append(123)
    assert second.server_pids == [] and RunContext().server_pids == []


def test_a_view_on_some_servers_shares_the_runs_texts() -> None:
    run = RunContext(server_pids=[1, 2, 3])
    some = run.for_servers([2])
    assert some.server_pids == [2] and run.server_pids == [1, 2, 3]
    assert some.fresh_texts is run.fresh_texts
    assert not set(run.fresh_texts(4)) & set(some.fresh_texts(4))


def test_fresh_texts_start_past_the_batch_texts() -> None:
    texts = FreshTexts()(8)
    assert not set(texts) & set(news_items(64))  # the batch runs' texts start at 0
    assert FreshTexts(5)(2) == news_items(7)[5:]


def test_news_items_continue_where_an_earlier_call_stopped() -> None:
    assert news_items(3, start=2) == news_items(5)[2:]


def test_a_path_summary_gives_rate_percentiles_cpu_and_the_ratio_to_the_fastest() -> None:
    result = PathResult("p", "one-at-a-time", 4, 2.0, 0.004, [1.0, 2.0, 3.0, 10.0], server_cores={"api_server": 0.5})
    row = result.summary(fastest_rps=4.0)
    assert row.requests_per_s == 2.0 and row.ratio_to_fastest == 0.5
    assert row.p50_ms == 2.0 and row.p99_ms == 10.0
    assert row.client_cpu_ms_per_request == 1.0
    assert row.cores_busy == {"client": 0.0, "api_server": 0.5}
    assert PathResult("q", "batch", 1, 1.0, 0.0).summary(1.0).cores_busy is None  # no servers measured
    faster = PathResult("f", "one-at-a-time", 4, 1.0, 0.0, [0.5, 1.5, 2.0, 2.0])
    assert p50_gap(result, faster) == 0.5
    assert p50_gap(result, PathResult("b", "batch", 1, 1.0, 0.0)) is None


def test_a_missing_extra_is_named_before_the_run_starts() -> None:
    require("json", "pathlib")
    with pytest.raises(
        MissingDependencyError, match=r"no_such_module_here: pip install 'langchain-qwen-fast\[bench\]'"
    ):
        require("json", "no_such_module_here")


def test_a_models_own_tokenizer_is_used_only_where_it_has_one(tmp_path: Path) -> None:
    assert own_tokenizer(str(tmp_path)) is None
    (tmp_path / "tokenizer.json").write_text("{}")
    assert own_tokenizer(str(tmp_path)) == str(tmp_path)
    assert own_tokenizer(None) is None and own_tokenizer("Qwen/Qwen3-0.6B") is None


def test_server_cores_are_each_roles_cpu_seconds_over_the_wall_time() -> None:
    before = {"api_server": 1.0, "engine_core": 2.0, "other": 0.0}
    after = {"api_server": 2.0, "engine_core": 5.0, "other": 0.5}
    assert cores_between(before, after, 2.0) == {"api_server": 0.5, "engine_core": 1.5, "other": 0.25}
    assert cores_between({}, after, 2.0) == {}  # no servers measured before: nothing to say
    assert server_cpu_seconds([]) == {}  # no servers, no roles
