"""Several independent servers: started, waited for and stopped together; the classifier
spreading over them from the URL file ``qwen-fast serve --urls-file`` writes; and vLLM's
router in front of them passing everything the classifier sends (``/v1/models``,
``/tokenize``, grouped text and token-id prompts, and ``/classify`` to a head server)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast._core.base_urls import write_urls
from langchain_qwen_fast.serving import Router, ServerGroup
from langchain_qwen_fast.testing.samples import headlines
from tests.integration_tests.conftest import NEWS_LABELS, ROOT, record_seconds
from tests.integration_tests.serving.test_server import group_alive


def served_requests(base_url: str) -> float:
    """Requests a server finished, from its Prometheus metrics (the cpu profile keeps stats)."""
    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total")
    )


@pytest.fixture(scope="module")
def group(tiny_model: Path) -> Iterator[ServerGroup]:
    with ServerGroup(
        tiny_model, servers_per_gpu=2, profile="cpu", router="round_robin", log_dir=ROOT / "out" / "test-group"
    ) as started:
        record_seconds("vLLM start-up, 2 servers started together + router", max(
            s.startup_seconds or 0.0 for s in started.servers
        ))  # fmt: skip
        yield started


def test_the_classifier_spreads_over_the_servers_in_a_urls_file(group: ServerGroup, tmp_path: Path) -> None:
    urls = write_urls(tmp_path / "urls.txt", group.base_urls)
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=str(urls), batch_size=8, max_concurrency=4)
    assert classifier.base_url == group.base_urls
    before = [served_requests(u) for u in group.base_urls]
    results = classifier.batch(headlines(256))
    after = [served_requests(u) for u in group.base_urls]
    assert all(r.label in NEWS_LABELS for r in results)
    assert all(b - a >= 4 for a, b in zip(before, after))  # 32 grouped requests, spread over both
    assert sum(after) - sum(before) >= 32


def test_the_environment_variable_names_the_servers(group: ServerGroup, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QWEN_FAST_BASE_URL", ",".join(group.base_urls))
    classifier = QwenClassifier(labels=NEWS_LABELS)
    assert classifier.base_url == group.base_urls
    assert classifier.invoke("Stocks rally as rates fall").label in NEWS_LABELS


def test_the_router_passes_what_the_classifier_sends(group: ServerGroup, tiny_model: Path) -> None:
    assert isinstance(group.url, str)
    before = [served_requests(u) for u in group.base_urls]
    texts = headlines(128)
    direct = QwenClassifier(labels=NEWS_LABELS, base_url=group.base_urls[0]).batch(texts)
    # Set-up (/v1/models, /tokenize), grouped text prompts, then token-id prompts, all through the router.
    routed = QwenClassifier(labels=NEWS_LABELS, base_url=group.url, batch_size=16).batch(texts)
    with_ids = QwenClassifier(labels=NEWS_LABELS, base_url=group.url, tokenizer_path=str(tiny_model)).batch(texts)
    assert [r.label for r in routed] == [r.label for r in direct] == [r.label for r in with_ids]
    for a, b in zip(direct, routed):
        assert b.scores == pytest.approx(a.scores, abs=1e-4)
    after = [served_requests(u) for u in group.base_urls]
    assert all(b - a >= 4 for a, b in zip(before, after))  # round robin reached both workers


def test_the_router_passes_classify_requests_to_a_head_server(head_server_url: str) -> None:
    texts = headlines(64)
    settings = {"labels": NEWS_LABELS, "model": "qwen3-cls", "mode": "head"}
    direct = QwenClassifier(base_url=head_server_url, **settings).batch(texts)
    log = ROOT / "out" / "test-router-head.log"
    with Router([head_server_url], "round_robin", log_path=log) as router:
        routed = QwenClassifier(base_url=router.base_url, batch_size=16, **settings).batch(texts)
    assert [r.label for r in routed] == [r.label for r in direct]
    for a, b in zip(direct, routed):
        assert b.scores == pytest.approx(a.scores, abs=1e-4)


def test_the_scale_benchmark_measures_the_group(
    group: ServerGroup, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m benchmarks.scale``'s parts on the running group (the tool itself starts its own)."""
    import asyncio

    from benchmarks import layouts as bench
    from benchmarks.ceiling import ceiling_work
    from benchmarks.common import warm_classifier
    from benchmarks.cpu_profile import profile as cpu_profile
    from langchain_qwen_fast._core import processes as _processes
    from langchain_qwen_fast.bench.measure import RunContext

    urls, tokenizer = group.base_urls, str(tiny_model)
    monkeypatch.setattr(_processes, "MIN_ITEMS_PER_PROCESS", 64)  # 128 items reach both workers
    monkeypatch.setattr(bench, "SWEEP_GROUPS", (16, 32))  # a small grid: the sweep's steps, not its figures
    monkeypatch.setattr(bench, "SWEEP_IN_FLIGHT", (2,))
    row = bench.measure_subset(urls, "qwen3", tokenizer, 128, group.pids[:2], sweep=True, processes=[2])
    default = row.default[0]
    assert row.servers == 2 and default.per_s > 0
    assert [(c.batch_size, c.max_concurrency) for c in row.sweep] == [(16, 4), (32, 4)]
    assert len(row.default) == 2 and row.default_over_best is not None and row.default_over_best > 0
    again = row.best_again  # the best cell re-run against the defaults, interleaved
    assert again is not None and again.max_concurrency == 4 and len(again.best) == len(again.default) == 2
    assert row.default_over_best_again == pytest.approx(sum(again.default) / sum(again.best), abs=1e-3)
    assert default.host.host_cores_busy is not None and default.host.host_cores_busy > 0.1  # servers and client worked
    assert default.cores_busy["engine_core"] > 0.05 and default.cores_busy["api_server"] > 0.01
    assert 0 < default.cores_busy["client_event_loop"] <= default.cores_busy["client"] + 0.05
    (spread,) = row.client_processes
    assert spread.processes == 2 and len(spread.runs) == 2 and spread.over_one_process > 0
    # The parent only hands out shares: its own CPU per item is far below one process's.
    assert spread.runs[0].cores_busy["client"] < default.cores_busy["client"]
    routed = bench.router_against_client(
        RunContext(), urls, "qwen3", tokenizer, 128, "round_robin", tmp_path, single_requests=5
    )
    assert len(routed.client) == len(routed.router) == 2 and routed.router_over_client > 0
    shape = bench.request_shape(urls[0], "qwen3", tokenizer, 64)
    assert len(shape.now) == len(shape.with_allowed_token_ids) == 2
    load = warm_classifier(urls[:1], "qwen3", tokenizer)
    one_at_a_time = bench.invoke_and_raw_http_p50(RunContext(), load, urls[0], "qwen3", 3)
    assert one_at_a_time.invoke_p50_ms and one_at_a_time.raw_http_p50_ms
    assert one_at_a_time.takes_prompt_lists
    texts = headlines(32)
    profile = cpu_profile(group.pids[0], 2, lambda: asyncio.run(load.abatch(texts)), tmp_path)
    engine = next(p for p in profile.processes if "EngineCore" in p)  # the engine core's samples, by function
    assert profile.processes[engine].samples > 0 and profile.processes[engine].inclusive_pct
    work = ceiling_work(load, "qwen3", 64, "generate")  # the reference row's prompts, from the plan
    assert work.sampling is not None and len(work.prompts) == 64 and isinstance(work.prompts[0], tuple)
    assert set(work.sampling.label_tokens) == set(load.prepare().answer_token_ids)


def test_the_service_rows_load_vllm_and_qwen_fast_api_workers_from_client_processes(
    group: ServerGroup, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m benchmarks.scale --service-workers``: clients in two processes, one text a
    request, straight to the servers and to ``qwen-fast api --workers 2`` over them; every
    request answered."""
    from benchmarks import service
    from langchain_qwen_fast.bench.measure import RunContext

    monkeypatch.setattr(service, "load_processes", lambda: 2)
    run = RunContext(list(group.pids))
    rows, checks = service.run_service(run, group.base_urls, "qwen3", str(tiny_model), headlines(64), 16, (2,))
    assert [r.items for r in rows] == [64, 64, 64, 64] and [len(r.latencies_ms) for r in rows[:2]] == [64, 64]
    assert "2 servers" in rows[0].name and "qwen-fast api, 2 workers" in rows[1].name
    assert rows[1].server_cores["qwen_fast_api"] > 0  # the service and its workers were measured
    assert rows[3].name == "QwenClassifier.abatch, at most 128 prompts in flight"
    assert checks["qwen-fast api, 2 workers / vLLM one request per text (req/s)"] > 0
    assert rows[0].server_cores["api_server"] > 0  # the servers' own processes were measured


def test_scaling_rounds_interleave_the_layouts_with_cpu_per_item(group: ServerGroup, tiny_model: Path) -> None:
    from benchmarks import layouts as bench

    layouts = {1: (group.base_urls[:1], group.pids[:1]), 2: (group.base_urls, group.pids)}
    report = bench.scaling_rounds(layouts, "qwen3", str(tiny_model), 128, rounds=2)
    assert report.servers == [1, 2] and [len(report.per_s[k]) for k in ("1", "2")] == [2, 2]
    mean = {k: sum(v) / 2 for k, v in report.per_s.items()}
    assert report.ratio == pytest.approx(mean["2"] / mean["1"], abs=1e-3)
    assert len(report.round_ratios) == 2
    for run in report.runs["2"]:
        # CPU per item of each role: the engine cores and API processes of both servers worked
        assert run.us_per_item is not None
        assert run.us_per_item["engine_core"] > 0 and run.us_per_item["api_server"] > 0
        assert run.us_per_item["client"] == pytest.approx(run.cores_busy["client"] / run.per_s * 1e6, rel=0.05)


def test_chosen_capability_rows_carry_the_servers_cpu_per_item(group: ServerGroup, tiny_model: Path) -> None:
    from benchmarks.capabilities import run_capabilities

    rows, ratios = run_capabilities(
        group.base_urls[:1], "qwen3", str(tiny_model), headlines(64), 1, ["8 static examples"], group.pids[:1]
    )
    assert [r.name for r in rows] == [
        "QwenClassifier.abatch, zero-shot, 4 labels",
        "QwenClassifier.abatch, 8 static examples",
    ]
    assert set(ratios) == {"zero-shot, 4 labels / zero-shot (time)", "8 static examples / zero-shot (time)"}
    for row in rows:
        assert row.server_cores["engine_core"] > 0 and row.server_cores["api_server"] > 0


def test_the_group_stops_every_process(group: ServerGroup) -> None:
    """Last in this file: stops the module's group (its fixture's own stop is then a no-op)."""
    pids = group.pids
    assert len(pids) == 3  # two servers and the router, each its own process group
    group.stop()
    assert not group.running and group.pids == []
    deadline = time.monotonic() + 20  # SIGKILLed workers are reaped by init a moment later
    while any(group_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(group_alive(pid) for pid in pids)


# After the group has stopped: its servers and this one would otherwise make four on the machine.
def test_a_latency_variant_starts_and_is_measured(tiny_model: Path, tmp_path: Path) -> None:
    """One variant, the tool's every step: its flags from the base profile less the dropped one,
    served by the Rust frontend (one prompt a request: the raw bodies and the classifier must fit
    it as they fit the Python API server), started, warmed and measured. The Python frontend's
    variant is the profile every other integration test serves with."""
    from benchmarks.latency_variants import latency_variants
    from benchmarks.variants import Variant
    from langchain_qwen_fast.bench.measure import RunContext

    name = "cpu profile, no prefix caching, Rust frontend"
    variants = {name: Variant(drop=("--enable-prefix-caching",), frontend="rust")}
    report = latency_variants(
        RunContext(),
        str(tiny_model),
        "qwen3",
        str(tiny_model),
        variants,
        tmp_path,
        base_profile="cpu",
        rounds=1,
        items=1,
    )
    assert set(report) == {name}
    row = report[name]
    assert row.error is None, row
    assert row.raw_http_p50_ms and row.invoke_p50_ms
    # the profile's flags but the dropped one: its dtype kept, prefix caching gone
    assert "--enable-prefix-caching" not in row.flags and "float32" in row.flags
    assert row.frontend == "rust"
