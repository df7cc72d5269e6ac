"""``qwen-fast bench``: latency and throughput side by side against one server in one run.

The paths (:mod:`~langchain_qwen_fast.bench.paths`) on the same texts, one-at-a-time paths
interleaved item by item so drift on a noisy machine hits all of them alike; on request the
capability rows, the HTTP service, a quantised server, replicas sharing the GPU, a load
sweep, vLLM's offline engine and transformers. Reports requests/s, p50/p95/p99 latency, client
CPU per request and the ratio to the fastest path, and writes JSON and a PNG chart. With
``compare_flags``, one server per flag set instead, each measured briefly.
:func:`run_compare` takes :class:`CompareOptions`; the command's options and their help are
in :mod:`langchain_qwen_fast.cli.bench`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_qwen_fast.bench.measure import (
    PathResult,
    RunContext,
    p50_gap,
    ready_classifier,
    require,
    run_one_at_a_time,
    timed,
)
from langchain_qwen_fast.bench.sampling import GpuSampler, histogram_totals, stage_means
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.testing.samples import news_items

if TYPE_CHECKING:
    from langchain_qwen_fast.serving import ProfileName

#: the sweep's prompts per request, and its requests in flight per server
SWEEP_SIZES = (64, 128, 256)
SWEEP_IN_FLIGHT = (4, 8, 16)


@dataclass(frozen=True)
class CompareOptions:
    """What one ``qwen-fast bench`` run measures, and against which server: a running one
    (``base_url``) or one it starts (``start_server``: a model directory or hub id, with
    ``profile``, ``server_args`` and ``model`` as its served name). ``tokenizer``: the one
    token-id paths use (None: no token-id paths). The command's ``--help`` says each in full;
    the parts beyond the comparison run only when asked for."""

    base_url: str | None = None
    start_server: str | None = None
    profile: ProfileName = "auto"
    server_args: list[str] = field(default_factory=list)
    model: str = "qwen3"
    tokenizer: str | None = None
    items: int = 512
    chat_items: int | None = None  # None: items
    invoke_items: int = 200
    concurrency: int | None = None  # None: each batch path's own
    replicas: int = 1
    compare_flags: Path | None = None
    mode: Literal["generate", "head"] = "generate"
    out: Path = Path("out/benchmark")
    label: str = ""
    sweep: bool = False
    service: bool = False
    compare_quantization: str | None = None
    transformers_baseline: bool = False
    capabilities: bool = False
    gpu_sample: bool = False
    offline_ceiling: bool = False

    def __post_init__(self) -> None:
        if (self.base_url is None) == (self.start_server is None):
            raise ConfigurationError("give either base_url (a running server) or start_server (a model to serve)")
        if (
            min(
                self.items, self.invoke_items, self.replicas, self.items if self.chat_items is None else self.chat_items
            )
            < 1
        ):
            raise ConfigurationError("items, chat_items, invoke_items and replicas are at least 1")
        if self.start_server is None:
            needs_a_server = {
                "replicas": self.replicas > 1,
                "compare_flags": self.compare_flags is not None,
                "compare_quantization": self.compare_quantization is not None,
                "transformers_baseline": self.transformers_baseline,
                "offline_ceiling": self.offline_ceiling,
            }
            asked = [name for name, on in needs_a_server.items() if on]
            if asked:
                raise ConfigurationError(f"{', '.join(asked)}: start servers of their own, so need start_server")
        if self.mode == "head" and self.compare_flags is None:
            raise ConfigurationError("mode 'head' is measured with compare_flags only")


@contextlib.contextmanager
def served(
    options: CompareOptions,
    run: RunContext,
    name: str = "server",
    extra: Sequence[str] = (),
    profile: ProfileName | None = None,
    quantization: str | None = None,
) -> Iterator[str]:
    """The base URL to measure: ``options.base_url``, or a server started for ``options`` (with
    ``extra`` flags, its log ``name``.log in ``options.out``) whose pid ``run`` measures while
    it runs."""
    if options.start_server is None:
        assert options.base_url is not None  # CompareOptions has one or the other
        yield options.base_url
        return
    from langchain_qwen_fast.serving import VLLMServer

    options.out.mkdir(parents=True, exist_ok=True)
    with VLLMServer(
        options.start_server,
        profile=profile or options.profile,
        served_model_name=options.model,
        log_path=options.out / f"{name}.log",
        extra_args=[*options.server_args, *extra],
        quantization=quantization,
    ) as server:
        print(f"{name} ready in {server.startup_seconds:.0f} s at {server.base_url}", flush=True)
        assert server.pid is not None
        run.server_pids.append(server.pid)
        try:
            yield server.base_url
        finally:
            run.server_pids.remove(server.pid)


def compare_quantized(
    run: RunContext,
    base_url: str,
    quantized_url: str,
    model: str,
    tokenizer: str | None,
    texts: list[str],
    invoke_items: int,
) -> tuple[list[PathResult], dict[str, Any]]:
    """The same classifier against a bf16 and a quantised server: throughput, one-at-a-time
    latency, and what quantisation does to the answers (argmax agreement, mean absolute
    difference of the label probabilities)."""
    results: list[PathResult] = []
    answers = {}
    for name, url in (("bf16", base_url), ("fp8", quantized_url)):
        classifier = ready_classifier(url, model, tokenizer)
        answers[name] = classifier.batch(texts)

        def abatch(c: Any = classifier) -> Any:
            return asyncio.run(c.abatch(texts))

        results.append(timed(f"QwenClassifier.abatch, token ids, {name}", len(texts), abatch, run.server_pids))
        results += run_one_at_a_time(
            run, {f"QwenClassifier.invoke, token ids, {name}": classifier.invoke}, invoke_items
        )
    agree = sum(a.label == b.label for a, b in zip(answers["bf16"], answers["fp8"], strict=True)) / len(texts)
    diffs = [
        abs(a.scores[k] - b.scores[k])
        for a, b in zip(answers["bf16"], answers["fp8"], strict=True)
        if a.scores and b.scores
        for k in a.scores
    ]
    checks = {
        "fp8 vs bf16 argmax agreement": round(agree, 4),
        "fp8 vs bf16 mean |probability difference|": round(sum(diffs) / len(diffs), 5),
    }
    return results, checks


def run_replicas(
    run: RunContext, urls: list[str], model: str, tokenizer: str | None, texts: list[str], invoke_items: int
) -> list[PathResult]:
    """QwenClassifier spread over several servers (replicas sharing the GPU)."""
    from langchain_qwen_fast.bench.paths import IDS, classifier_runs

    classifier = ready_classifier(urls, model, tokenizer, warm_ups=len(urls))
    suffix = f"{IDS if tokenizer else ''}, {len(urls)} replicas"
    results = [timed(name, n, fn, run.server_pids) for name, n, fn in classifier_runs(suffix, classifier, texts, None)]
    results += run_one_at_a_time(run, {f"QwenClassifier.invoke{suffix}": classifier.invoke}, invoke_items)
    return results


def sweep(
    base_url: str | list[str],
    model: str,
    tokenizer: str | None,
    items: int,
    sizes: Sequence[int],
    concurrencies: Sequence[int],
) -> list[dict[str, Any]]:
    """QwenClassifier.abatch throughput for each (prompts per request, requests in flight)."""
    texts = news_items(items)
    rows = []
    for size in sizes:
        for concurrency in concurrencies:
            classifier = ready_classifier(base_url, model, tokenizer, batch_size=size, max_concurrency=concurrency)
            t0 = time.perf_counter()
            asyncio.run(classifier.abatch(texts))
            rps = items / (time.perf_counter() - t0)
            rows.append({"batch_size": size, "max_concurrency": concurrency, "requests_per_s": round(rps, 1)})
            print(f"batch_size {size:>4}  in flight {concurrency:>3}: {rps:8.1f}/s", flush=True)
    return rows


def prompt_tokens(classifier: Any, root_url: str, texts: list[str]) -> dict[str, float]:
    """Token counts of the rendered prompts, from the server's own tokeniser."""
    import httpx

    from langchain_qwen_fast._core import vllm_api

    plan = classifier.prepare()
    counts = []
    for text in texts:
        method, path, body = vllm_api.tokenize_call(classifier.model, plan.render(text))
        reply = httpx.request(method, root_url + path, json=body, timeout=30).json()
        counts.append(len(vllm_api.parse_tokenize(reply)))
    return {"mean": round(sum(counts) / len(counts), 1), "min": min(counts), "max": max(counts)}


def measure_flags(run: RunContext, url: str, options: CompareOptions, sampler: GpuSampler | None) -> dict[str, Any]:
    """A short measurement of one server configuration: one-at-a-time latency (raw HTTP and
    QwenClassifier with token ids, with vLLM's own per-stage means when it keeps stats) and
    QwenClassifier.abatch throughput with text and token-id prompts."""
    from langchain_qwen_fast.bench.paths import all_classifier_runs, build_head_paths, build_paths

    build = build_head_paths if options.mode == "head" else build_paths
    paths, objects = build(url, options.model, options.tokenizer)
    keep = [name for name in paths if name.startswith(("raw HTTP", "QwenClassifier.invoke"))]
    root = url.rstrip("/").removesuffix("/v1")
    before = histogram_totals(root)
    results = run_one_at_a_time(run, {k: paths[k] for k in keep}, options.invoke_items)
    after = histogram_totals(root)
    runs = all_classifier_runs(objects, news_items(options.items), None)
    results += [timed(name, n, fn, run.server_pids) for name, n, fn in runs if ".abatch" in name]
    row: dict[str, Any] = {}
    for r in results:
        gpu = sampler.window(*r.window) if sampler else {}
        summary = r.summary(r.rps)
        row[r.name] = {k: summary[k] for k in ("requests_per_s", "p50_ms", "cores_busy") if k in summary} | gpu
    stages = stage_means(before, after)
    if stages:
        row["server_stage_mean_ms (one at a time)"] = stages
    return row


def compare_flags(options: CompareOptions, run: RunContext, sampler: GpuSampler | None) -> dict[str, Any]:
    """One server per entry of ``options.compare_flags`` (see
    :mod:`~langchain_qwen_fast.bench.variants`), started in turn and measured by
    :func:`measure_flags`; ``flags.json`` in ``options.out`` is written after each."""
    from langchain_qwen_fast.bench.baselines import offline_ceiling
    from langchain_qwen_fast.bench.report import header, write_json
    from langchain_qwen_fast.bench.variants import load_variants, variant_flags

    assert options.compare_flags is not None
    configs = load_variants(options.compare_flags)
    runs: dict[str, Any] = {}
    report: dict[str, Any] = {**header(options.label), "runs": runs}
    for n, (name, config) in enumerate(configs.items()):
        profile, flags = variant_flags(config, options.profile)
        t0 = time.perf_counter()
        try:
            with served(options, run, f"flags-{n}", flags, profile) as url:
                started = time.perf_counter() - t0
                runs[name] = {"profile": profile, "flags": flags, "startup_s": round(started, 1)}
                runs[name].update(measure_flags(run, url, options, sampler))
        except Exception as exc:  # one configuration that does not start must not lose the others
            runs[name] = {"profile": profile, "flags": flags, "error": f"{type(exc).__name__}: {str(exc)[-2000:]}"}
        write_json(options.out / "flags.json", report)
        print(name, json.dumps(runs[name], indent=1), flush=True)
    if options.offline_ceiling:
        assert options.start_server is not None  # CompareOptions checks it
        offline = offline_ceiling(options.start_server, news_items(options.items))
        report["offline"] = {
            r.name: {"requests_per_s": round(r.rps, 1), **(sampler.window(*r.window) if sampler else {})}
            for r in offline
        }
        write_json(options.out / "flags.json", report)
        print(json.dumps(report["offline"], indent=1), flush=True)
    return report


def _checks(results: list[PathResult]) -> dict[str, Any]:
    """The comparison's headline ratios and gaps, from its rows."""
    by_name = {r.name: r for r in results}
    chat_batch = by_name["ChatOpenAI.batch (default config)"].rps
    chat_invoke = by_name["ChatOpenAI.invoke"]
    best_batch = max(r.rps for r in results if r.name.startswith("QwenClassifier.") and "batch" in r.name)
    return {
        "QwenClassifier.batch / ChatOpenAI.batch": round(by_name["QwenClassifier.batch"].rps / chat_batch, 2),
        "best QwenClassifier batch path / ChatOpenAI.batch": round(best_batch / chat_batch, 2),
        "QwenClassifier.invoke p50 - raw HTTP p50 (ms)": p50_gap(
            by_name["QwenClassifier.invoke"], by_name["raw HTTP (httpx), same request"]
        ),
        "LCEL p50 - ChatOpenAI.invoke p50 (ms)": p50_gap(by_name["LCEL prompt | ChatOpenAI"], chat_invoke),
        "LLMChain p50 - ChatOpenAI.invoke p50 (ms)": p50_gap(by_name["LLMChain(ChatOpenAI)"], chat_invoke),
    }


def _compare(options: CompareOptions, run: RunContext) -> tuple[list[PathResult], dict[str, Any], dict[str, Any]]:
    """Every path and part asked for, on the server(s) of ``options``: the rows, the extra
    checks of the parts, and the report's other fields."""
    from langchain_qwen_fast.bench.baselines import offline_ceiling, transformers_baseline
    from langchain_qwen_fast.bench.capabilities import run_capabilities
    from langchain_qwen_fast.bench.paths import build_paths, run_batches
    from langchain_qwen_fast.bench.service import run_service

    texts = news_items(options.items)
    chat_texts = news_items(options.chat_items or options.items)
    tokenizer, model = options.tokenizer, options.model
    checks: dict[str, Any] = {}
    fields: dict[str, Any] = {"sweep": []}  # and the URL measured, the replicas, the prompts' tokens
    with contextlib.ExitStack() as servers:
        url = fields["url"] = servers.enter_context(served(options, run))
        one_paths, objects = build_paths(url, model, tokenizer)
        root = url.rstrip("/").removesuffix("/v1")
        fields["prompt_tokens"] = prompt_tokens(objects["classifier"], root, news_items(64))
        results = run_one_at_a_time(run, one_paths, options.invoke_items)
        results += run_batches(objects, texts, chat_texts, options.concurrency, run.server_pids)
        if options.capabilities:
            rows, ratios = run_capabilities(url, model, tokenizer, texts, pids=run.server_pids)
            results += rows
            checks.update(ratios)
        if options.service:
            rows, ratios = run_service(run, [url], model, tokenizer, texts)
            results += rows
            checks.update(ratios)
        if options.compare_quantization:
            quantized = servers.enter_context(
                served(options, run, "server-quantized", quantization=options.compare_quantization)
            )
            rows, ratios = compare_quantized(run, url, quantized, model, tokenizer, texts, options.invoke_items)
            results += rows
            checks.update(ratios)
        urls = [url]
        if options.replicas > 1:
            urls += [servers.enter_context(served(options, run, f"server-{k}")) for k in range(1, options.replicas)]
            results += run_replicas(run, urls, model, tokenizer, texts, options.invoke_items)
        if options.sweep:
            in_flight = [n * len(urls) for n in SWEEP_IN_FLIGHT]
            fields["sweep"] = sweep(
                urls if len(urls) > 1 else url, model, tokenizer, options.items, SWEEP_SIZES, in_flight
            )
    fields["replicas"] = len(urls)
    if options.start_server and options.offline_ceiling:
        results += offline_ceiling(options.start_server, texts)
    if options.start_server and options.transformers_baseline:
        results += transformers_baseline(options.start_server, texts[:2048])
    return results, checks, fields


def run_compare(options: CompareOptions) -> dict[str, Any]:
    """The comparison (or, with ``options.compare_flags``, the flag comparison): measured,
    written to ``options.out`` (``results.json`` and ``chart.png``, or ``flags.json``) and
    printed; returns the report."""
    from langchain_qwen_fast.bench.report import header, plot, render_table, write_json

    require("tqdm", "langchain_classic", *(() if options.compare_flags else ("matplotlib",)))
    if options.service:
        require("aiohttp")
    if options.transformers_baseline or options.offline_ceiling:
        require(*(("transformers", "torch") if options.transformers_baseline else ()), "vllm", extra="server")
    if options.gpu_sample and not GpuSampler.available():
        raise ConfigurationError("gpu_sample needs nvidia-smi, which is not on the PATH")
    options.out.mkdir(parents=True, exist_ok=True)
    run = RunContext()
    sampler = GpuSampler() if options.gpu_sample else None
    try:
        if options.compare_flags:
            return compare_flags(options, run, sampler)
        results, checks, fields = _compare(options, run)
    finally:
        if sampler is not None:
            sampler.stop()
    if sampler is not None:
        for r in results:
            r.gpu = sampler.window(*r.window)
    fastest = max(r.rps for r in results)
    rows = [r.summary(fastest) for r in results]
    checks = {**_checks(results), **checks}
    report = {
        **header(options.label),
        "server_args": list(options.server_args),
        "replicas": fields["replicas"],
        "items": options.items,
        "chat_items": options.chat_items or options.items,
        "invoke_items": options.invoke_items,
        "prompt_tokens": fields["prompt_tokens"],
        "rows": rows,
        "checks": checks,
        "sweep": fields["sweep"],
        "latencies_ms": {r.name: r.latencies_ms for r in results if r.latencies_ms},
    }
    write_json(options.out / "results.json", report)
    plot(rows, options.out / "chart.png", f"{options.label or fields['url']}  ({report['date']})")
    print()
    print(render_table(rows))
    print()
    for key, value in checks.items():
        print(f"{key}: {value}")
    print(f"\nwrote {options.out / 'results.json'} and {options.out / 'chart.png'}")
    return report


__all__ = [
    "CompareOptions",
    "compare_flags",
    "compare_quantized",
    "measure_flags",
    "prompt_tokens",
    "run_compare",
    "run_replicas",
    "served",
    "sweep",
]
