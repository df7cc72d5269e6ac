"""``qwen-fast bench-scale``: independent servers on the GPUs (a :class:`ServerGroup`), measured
side by side in one run: the classifier's default load over the first k servers against a
grid of loads, vLLM's router against the client's own spreading, the request shape, where a
server's CPU goes (py-spy), client processes, interleaved scaling rounds, the capability rows,
and one-at-a-time latency of server variants. :func:`run_scale` takes :class:`ScaleOptions`;
the command's options and their help are in :mod:`langchain_qwen_fast.cli.bench_scale`."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_qwen_fast._core.stats import percentile
from langchain_qwen_fast.bench.capabilities import CAPABILITY_ROWS, check_rows
from langchain_qwen_fast.bench.measure import RunContext, require, run_one_at_a_time, warm_classifier
from langchain_qwen_fast.bench.sampling import (
    GpuSampler,
    HostCpuSampler,
    cores_between,
    gpu_memory_mib,
    host_cpus,
    server_cpu_seconds,
)
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.testing.samples import news_items

if TYPE_CHECKING:
    from langchain_qwen_fast.serving import ProfileName
    from langchain_qwen_fast.serving.profiles import Frontend

#: the sweep: prompts per request x requests in flight per server
SWEEP_GROUPS = (128, 256)
SWEEP_IN_FLIGHT = (4, 8, 16)


@dataclass(frozen=True)
class ScaleOptions:
    """What one ``bench-scale`` run starts and measures (the command's ``--help`` says each
    in full). ``subsets``: numbers of servers to spread over (empty: all of them); every part
    beyond the subsets runs only when asked for (a non-empty or true field)."""

    model: str
    gpus: str | None = None  # "all" or indices such as "0,1"; None: every GPU there is (none: CPU servers)
    servers_per_gpu: int = 1
    profile: ProfileName = "auto"
    frontend: Frontend = "python"
    model_name: str = "qwen3"
    tokenizer: str | None = None
    subsets: tuple[int, ...] = ()
    sweep_subsets: tuple[int, ...] = ()
    items: int = 8192
    router: str | None = None
    router_servers: int | None = None
    compare_request_shape: bool = False
    profile_seconds: float = 0.0
    profile_one_at_a_time: bool = False
    server_args: list[str] = field(default_factory=list)
    mps: bool = False
    mode: Literal["generate", "head"] = "generate"
    client_processes: tuple[int, ...] = ()
    capabilities_subsets: tuple[int, ...] = ()
    capabilities_items_per_server: int = 2048
    capabilities_rounds: int = 2
    capabilities_rows: list[str] | None = None  # None: every one of CAPABILITY_ROWS
    scaling_rounds: int = 0
    #: ``qwen-fast api`` over every server with each of these worker counts, beside vLLM taking
    #: one request per text, ``service_clients`` clients sending one text each (empty: not measured)
    service_workers: tuple[int, ...] = ()
    service_clients: int = 256
    #: with ``service_workers``: each of these ``--groups-in-flight`` for every worker count
    #: (empty: the service's default)
    service_groups_in_flight: tuple[int, ...] = ()
    latency_variants: Path | None = None
    out: Path = Path("out/scale")
    label: str = ""

    def __post_init__(self) -> None:
        check_rows(self.capabilities_rows or ())
        counts = {
            "subsets": self.subsets,
            "sweep_subsets": self.sweep_subsets,
            "client_processes": self.client_processes,
            "capabilities_subsets": self.capabilities_subsets,
            "service_workers": self.service_workers,
            "service_groups_in_flight": self.service_groups_in_flight,
        }
        for name, values in counts.items():
            if any(k < 1 for k in values):
                raise ConfigurationError(f"{name}: every count is at least 1, got {list(values)}")
        if self.items < 1 or self.servers_per_gpu < 1 or self.service_clients < 1:
            raise ConfigurationError("items, servers_per_gpu and service_clients are at least 1")


def throughput(classifier: Any, texts: list[str], pids: Sequence[int] = ()) -> dict[str, Any]:
    """Classifications/s of one ``abatch`` over ``texts`` (every item must succeed), with the
    cores each server role kept busy meanwhile, and the whole host's busy cores and clock."""
    before = server_cpu_seconds(pids)
    host = HostCpuSampler()
    c0, t0, l0 = time.process_time(), time.perf_counter(), time.thread_time()
    results = asyncio.run(classifier.abatch(texts))
    seconds = time.perf_counter() - t0
    loop_seconds = time.thread_time() - l0  # the event loop runs in this thread
    after = server_cpu_seconds(pids)
    assert len(results) == len(texts)
    cores = cores_between(before, after, seconds)
    cores["client"] = round((time.process_time() - c0) / seconds, 2)
    cores["client_event_loop"] = round(loop_seconds / seconds, 2)
    return {"per_s": round(len(texts) / seconds, 1), "cores_busy": cores, "host": host.stop()}


def us_per_item(cores_busy: dict[str, float], per_s: float) -> dict[str, float]:
    """CPU microseconds each role spent on one classification, from the cores it kept busy
    and the rate (a role busier per item on a busier host points at shared cores)."""
    return {role: round(cores / per_s * 1e6, 1) for role, cores in cores_busy.items()}


def scaling_rounds(
    layouts: Mapping[int, tuple[Sequence[str], Sequence[int]]],
    model: str,
    tokenizer: str | None,
    items: int,
    rounds: int,
    mode: str = "generate",
    sampler: GpuSampler | None = None,
) -> dict[str, Any]:
    """The defaults over each server count in ``layouts`` (count -> its URLs and server pids),
    in ``rounds`` interleaved rounds so drift on a shared host hits every layout alike; each
    run with the CPU every role spent per item and the GPUs' utilisation. ``ratio``: the
    largest layout's mean rate over the smallest's."""
    texts = news_items(items)
    classifiers = {k: warm_classifier(urls, model, tokenizer, mode=mode) for k, (urls, _) in layouts.items()}
    runs: dict[int, list[dict[str, Any]]] = {k: [] for k in layouts}
    for _ in range(rounds):
        for k, classifier in classifiers.items():
            t0 = time.perf_counter()
            got = throughput(classifier, texts, layouts[k][1])
            got["us_per_item"] = us_per_item(got["cores_busy"], got["per_s"])
            if sampler is not None:
                got["gpu"] = sampler.window(t0, time.perf_counter())
            runs[k].append(got)
            print(f"  scaling: {k} servers {got['per_s']}/s, us/item {got['us_per_item']}", flush=True)
    small, large = min(layouts), max(layouts)
    mean = {k: sum(r["per_s"] for r in got) / len(got) for k, got in runs.items()}
    return {
        "servers": sorted(layouts),
        "mode": mode,
        "per_s": {str(k): [r["per_s"] for r in got] for k, got in runs.items()},
        "runs": {str(k): got for k, got in runs.items()},
        "ratio": round(mean[large] / mean[small], 3),
        "round_ratios": [round(a["per_s"] / b["per_s"], 3) for a, b in zip(runs[large], runs[small], strict=True)],
    }


def one_at_a_time_p50(run: RunContext, classifier: Any, items: int) -> float | None:
    """p50 ms of ``invoke`` one text at a time, each text new to the server (``run.fresh_texts``)."""
    (result,) = run_one_at_a_time(run, {"invoke": classifier.invoke}, items)
    return percentile(result.latencies_ms, 50)


def invoke_and_raw_http_p50(run: RunContext, classifier: Any, base_url: str, model: str, items: int) -> dict[str, Any]:
    """p50 ms of ``invoke`` and of raw HTTP with the classifier's own request for the same text
    (its prompt as the classifier sends it: text or token ids, in a list or alone, as the server
    takes it), interleaved item by item, each text new to the server. Generate mode only."""
    import httpx

    from langchain_qwen_fast._core import vllm_api

    plan = classifier.prepare()
    http = httpx.Client(timeout=30)
    url = base_url.rstrip("/") + "/completions"

    failed: list[int] = []

    def raw_http(text: str) -> Any:
        prompt = plan.encode([text])[0] if plan.tokenizer is not None else plan.render(text)
        response = http.post(url, json=vllm_api.completions_body(plan, model, 0, [prompt]))
        if response.status_code != 200:  # counted, not raised: one bad answer ends no run
            failed.append(response.status_code)
        return response

    try:
        invoke, raw = run_one_at_a_time(run, {"invoke": classifier.invoke, "raw HTTP": raw_http}, items)
    finally:
        http.close()
    return {
        "invoke p50 ms": percentile(invoke.latencies_ms, 50),
        "raw HTTP p50 ms": percentile(raw.latencies_ms, 50),
        "raw HTTP failed": failed,
        "takes prompt lists": plan.takes_prompt_lists,
    }


def _sweep(
    urls: Sequence[str], model: str, tokenizer: str | None, texts: list[str], pids: Sequence[int], mode: str
) -> list[dict[str, Any]]:
    """The grid: :data:`SWEEP_GROUPS` prompts per request x :data:`SWEEP_IN_FLIGHT` in flight a server."""
    cells = []
    for group in SWEEP_GROUPS:
        for per_server in SWEEP_IN_FLIGHT:
            load = {"batch_size": group, "max_concurrency": per_server * len(urls), "mode": mode}
            got = throughput(warm_classifier(urls, model, tokenizer, **load), texts, pids)
            cells.append({"batch_size": group, "max_concurrency": load["max_concurrency"], "per_s": got["per_s"]})
            print(f"  {group:>4} per request x {load['max_concurrency']:>3} in flight: {got['per_s']}/s", flush=True)
    return cells


def measure_subset(
    urls: Sequence[str],
    model: str,
    tokenizer: str | None,
    items: int,
    pids: Sequence[int],
    sweep: bool,
    mode: str = "generate",
    processes: Sequence[int] = (),
) -> dict[str, Any]:
    """The defaults (twice: before and after the sweep) and, with ``sweep``, the grid; for
    each count in ``processes``, the defaults with the batch spread over that many client
    processes, interleaved with a one-process run."""
    texts = news_items(items)
    default = warm_classifier(urls, model, tokenizer, mode=mode)
    row: dict[str, Any] = {"servers": len(urls), "mode": mode, "default": [throughput(default, texts, pids)]}
    print(f"{len(urls)} servers, defaults: {row['default'][0]['per_s']}/s", flush=True)
    row["client_processes"] = []
    for count in processes:
        spread = warm_classifier(urls, model, tokenizer, mode=mode, client_processes=count)
        runs = [throughput(spread, texts, pids), throughput(default, texts, pids), throughput(spread, texts, pids)]
        spread.close()
        ratio = round((runs[0]["per_s"] + runs[2]["per_s"]) / (runs[1]["per_s"] + row["default"][0]["per_s"]), 3)
        row["client_processes"].append(
            {"processes": count, "runs": [runs[0], runs[2]], "one_process": runs[1], "over_one_process": ratio}
        )
        print(f"  {count} client processes: {[r['per_s'] for r in runs]}/s (spread, one, spread)", flush=True)
    if sweep:
        cells = row["sweep"] = _sweep(urls, model, tokenizer, texts, pids, mode)
        row["default"].append(throughput(default, texts, pids))
        best = max(cells, key=lambda c: c["per_s"])
        mean_default = sum(d["per_s"] for d in row["default"]) / len(row["default"])
        row["default_over_best"] = round(mean_default / best["per_s"], 3)
        print(f"  defaults {mean_default:.0f}/s = {row['default_over_best']:.1%} of the best cell", flush=True)
        # The best of several noisy cells is biased upwards: run it again against the
        # defaults, interleaved, for a like-for-like ratio.
        load = {"batch_size": best["batch_size"], "max_concurrency": best["max_concurrency"], "mode": mode}
        best_again = warm_classifier(urls, model, tokenizer, **load)
        rates = [throughput(c, texts, pids)["per_s"] for c in (best_again, default, best_again, default)]
        row["best_again"] = {**load, "best": rates[0::2], "default": rates[1::2]}
        row["default_over_best_again"] = round(sum(rates[1::2]) / sum(rates[0::2]), 3)
        print(
            f"  best cell, defaults, interleaved: {rates}/s: defaults {row['default_over_best_again']:.1%}", flush=True
        )
    return row


def router_against_client(
    run: RunContext,
    urls: Sequence[str],
    model: str,
    tokenizer: str | None,
    items: int,
    policy: str,
    log_dir: Path,
    single_requests: int = 200,
) -> dict[str, Any]:
    """The same load spread by the client over ``urls`` and sent to vLLM's router in front of
    them (the client then sees one URL, so its in-flight count is set to the same total), and
    the one-at-a-time p50 of each over ``single_requests`` requests."""
    from langchain_qwen_fast.classifiers import IN_FLIGHT_PER_REPLICA
    from langchain_qwen_fast.serving import Router

    texts = news_items(items)
    in_flight = IN_FLIGHT_PER_REPLICA * len(urls)
    client_side = warm_classifier(urls, model, tokenizer)
    row: dict[str, Any] = {"servers": len(urls), "policy": policy, "in_flight": in_flight}
    with Router(urls, policy, log_path=log_dir / "router.log") as router:
        routed = warm_classifier([router.base_url], model, tokenizer, max_concurrency=in_flight)
        routed_default = warm_classifier([router.base_url], model, tokenizer)
        runs = [("client", client_side), ("router", routed), ("client", client_side), ("router", routed)]
        for name, classifier in runs:  # interleaved: drift hits both alike
            row.setdefault(name, []).append(throughput(classifier, texts)["per_s"])
        one_url = f"router, client defaults (one URL: {IN_FLIGHT_PER_REPLICA} in flight)"
        row[one_url] = throughput(routed_default, texts)["per_s"]
        row["router p50 ms"] = one_at_a_time_p50(run, routed, single_requests)
    row["client p50 ms"] = one_at_a_time_p50(run, client_side, single_requests)
    row["router_over_client"] = round(sum(row["router"]) / sum(row["client"]), 3)
    print(json.dumps(row), flush=True)
    return row


def request_shape(url: str, model: str, tokenizer: str | None, items: int) -> dict[str, Any]:
    """Grouped completions on one server as sent now (every answer token's logprob, no
    ``allowed_token_ids``) and as sent before (the same plus ``allowed_token_ids``), raw
    HTTP, 256 prompts a request, 8 in flight, interleaved rounds."""
    import httpx

    from langchain_qwen_fast._core import vllm_api

    classifier = warm_classifier([url], model, tokenizer)
    plan = classifier.prepare()
    texts = news_items(items)
    prompts: list[Any] = (
        [plan.prompt_ids(ids, 0) for ids in plan.encode_bodies([plan.body(t) for t in texts])]
        if tokenizer
        else [plan.render(t) for t in texts]
    )
    now = [vllm_api.completions_body(plan, model, 0, prompts[i : i + 256]) for i in range(0, len(prompts), 256)]
    before = [{**body, "allowed_token_ids": body["logprob_token_ids"]} for body in now]

    async def send_all(bodies: list[dict[str, Any]]) -> float:
        gate = asyncio.Semaphore(8)
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=16)) as client:

            async def one(body: dict[str, Any]) -> None:
                async with gate:
                    reply = await client.post(f"{url}/completions", json=body)
                    reply.raise_for_status()

            t0 = time.perf_counter()
            await asyncio.gather(*(one(b) for b in bodies))
            return items / (time.perf_counter() - t0)

    row: dict[str, list[float]] = {"now": [], "with allowed_token_ids": []}
    for _ in range(2):
        row["now"].append(round(asyncio.run(send_all(now)), 1))
        row["with allowed_token_ids"].append(round(asyncio.run(send_all(before)), 1))
    print(json.dumps(row), flush=True)
    return {**row, "now_over_before": round(sum(row["now"]) / sum(row["with allowed_token_ids"]), 3)}


def _capabilities(
    options: ScaleOptions, urls: Sequence[str], pids: Sequence[int], tokenizer: str | None, k: int
) -> dict[str, Any]:
    """The capability rows over the first ``k`` servers, with each role's CPU per item."""
    from langchain_qwen_fast.bench.capabilities import run_capabilities

    texts = news_items(options.capabilities_items_per_server * k)
    rows, ratios = run_capabilities(
        list(urls[:k]),
        options.model_name,
        tokenizer,
        texts,
        options.capabilities_rounds,
        options.capabilities_rows or CAPABILITY_ROWS,
        pids[:k],
    )
    return {
        "servers": k,
        "items": len(texts),
        "rounds": options.capabilities_rounds,
        "per_s": {r.name: round(r.rps, 1) for r in rows},
        "ratios": ratios,
        "us_per_item": {
            r.name: us_per_item({**r.server_cores, "client": r.cpu_seconds / r.seconds}, r.rps) for r in rows
        },
    }


def _service(
    run: RunContext, urls: list[str], options: ScaleOptions, tokenizer: str | None, sampler: GpuSampler | None
) -> dict[str, Any]:
    """Clients sending one text each, to vLLM one request per text and to ``qwen-fast api``
    over every server (:func:`~langchain_qwen_fast.bench.service.run_service`)."""
    from langchain_qwen_fast.bench.service import load_processes, run_service

    texts = run.fresh_texts(options.items)
    rows, checks = run_service(run, urls, options.model_name, tokenizer, texts, options.service_clients,
                               options.service_workers, options.service_groups_in_flight or (None,))  # fmt: skip
    fastest = max(r.rps for r in rows)
    summaries = []
    for row in rows:
        summary = row.summary(fastest)
        if sampler and row.window[1] > row.window[0]:
            summary["gpu"] = sampler.window(*row.window)
        summaries.append(summary)
    return {"servers": len(urls), "client_processes": load_processes(), "rows": summaries, "checks": checks}


def _cpu_profile(options: ScaleOptions, url: str, pid: int, tokenizer: str | None) -> dict[str, Any]:
    """py-spy samples of the server ``pid`` under batches or, asked for, single requests."""
    from langchain_qwen_fast.bench.cpu_profile import profile

    load = warm_classifier([url], options.model_name, tokenizer, mode=options.mode)
    texts = news_items(options.items)
    work = (
        (lambda: [load.invoke(t) for t in texts[:50]])
        if options.profile_one_at_a_time
        else (lambda: asyncio.run(load.abatch(texts)))
    )
    return profile(pid, options.profile_seconds, work, options.out)


def _gpus(value: str | None) -> list[int]:
    """The GPUs ``value`` names (see :func:`~langchain_qwen_fast.serving.parse_gpus`); None: every one there is."""
    from langchain_qwen_fast.serving import gpu_count, parse_gpus

    return parse_gpus(value) if value is not None else list(range(gpu_count()))


def run_scale(options: ScaleOptions) -> dict[str, Any]:
    """Start the servers, run every part ``options`` asks for, write ``scale.json`` in
    ``options.out`` after each part; returns the report."""
    from langchain_qwen_fast.bench.report import header, write_json
    from langchain_qwen_fast.bench.variants import load_variants, resolve_profile
    from langchain_qwen_fast.serving import ServerGroup

    require("psutil", "tqdm")
    variants = load_variants(options.latency_variants) if options.latency_variants else None
    out = options.out
    (out / "logs").mkdir(parents=True, exist_ok=True)
    # Texts new to the servers for the one-at-a-time parts; each part is given the pids of
    # the servers it measures (a subset of the group's).
    run = RunContext()
    tokenizer = options.tokenizer
    report: dict[str, Any] = {
        **header(options.label),
        "servers_per_gpu": options.servers_per_gpu,
        "frontend": options.frontend,
        "server_args": list(options.server_args),
        "items": options.items,
    }

    def save() -> None:
        write_json(out / "scale.json", report)

    gpus = _gpus(options.gpus)
    report["mps"] = options.mps
    report["host_cpus"] = host_cpus()
    group = ServerGroup(
        options.model,
        gpus=gpus,
        servers_per_gpu=options.servers_per_gpu,
        mps=options.mps,
        log_dir=out / "logs",
        profile=options.profile,
        frontend=options.frontend,
        served_model_name=options.model_name,
        extra_args=list(options.server_args),
    )
    started = time.perf_counter()
    with group:
        report["startup_s"] = round(time.perf_counter() - started, 1)
        report["gpu_memory_mib"] = gpu_memory_mib()
        print(f"{len(group.servers)} servers ready in {report['startup_s']} s; GPU MiB {report['gpu_memory_mib']}")
        urls, pids = group.base_urls, group.pids
        sampler = GpuSampler() if GpuSampler.available() else None
        one = warm_classifier(urls[:1], options.model_name, tokenizer, mode=options.mode)
        if options.mode == "generate":
            report["one_at_a_time_one_server"] = invoke_and_raw_http_p50(run, one, urls[0], options.model_name, 200)
            report["p50_ms_one_server"] = report["one_at_a_time_one_server"]["invoke p50 ms"]
        else:
            report["p50_ms_one_server"] = one_at_a_time_p50(run, one, 200)
        sizes = list(options.subsets) or [len(urls)]
        report["subsets"] = []
        for k in sizes:
            t0 = time.perf_counter()
            row = measure_subset(
                urls[:k],
                options.model_name,
                tokenizer,
                options.items,
                pids[:k],
                k in options.sweep_subsets,
                options.mode,
                options.client_processes,
            )
            if sampler:
                row["gpu"] = sampler.window(t0, time.perf_counter())
            report["subsets"].append(row)
            save()
        if options.router:
            behind = urls[: options.router_servers or len(urls)]
            report["router"] = router_against_client(
                run, behind, options.model_name, tokenizer, options.items, options.router, out
            )
            save()
        if options.compare_request_shape:
            report["request_shape"] = request_shape(urls[0], options.model_name, tokenizer, options.items)
            save()
        if options.scaling_rounds:
            layouts = {k: (urls[:k], pids[:k]) for k in {min(sizes), max(sizes)}}
            report["scaling"] = scaling_rounds(
                layouts, options.model_name, tokenizer, options.items, options.scaling_rounds, options.mode, sampler
            )
            save()
        if options.service_workers:
            report["service"] = _service(run.for_servers(pids), urls, options, tokenizer, sampler)
            print(json.dumps(report["service"]), flush=True)
            save()
        for k in options.capabilities_subsets:
            report.setdefault("capabilities", []).append(_capabilities(options, urls, pids, tokenizer, k))
            print(json.dumps(report["capabilities"][-1]), flush=True)
            save()
        if options.profile_seconds:
            report["profile"] = _cpu_profile(options, urls[0], pids[0], tokenizer)
            report["profile_load"] = "one at a time" if options.profile_one_at_a_time else "abatch"
            save()
        if sampler:
            sampler.stop()
    if variants is not None:
        from langchain_qwen_fast.bench.latency_variants import latency_variants

        report["latency_variants"] = latency_variants(
            run,
            options.model,
            options.model_name,
            tokenizer,
            variants,
            out / "logs",
            gpus[0] if gpus else None,
            resolve_profile(options.profile),
        )
    save()
    print(json.dumps({k: v for k, v in report.items() if k != "profile"}, indent=1))
    print(f"wrote {out / 'scale.json'}")
    return report


__all__ = [
    "SWEEP_GROUPS",
    "SWEEP_IN_FLIGHT",
    "ScaleOptions",
    "measure_subset",
    "one_at_a_time_p50",
    "request_shape",
    "router_against_client",
    "run_scale",
    "scaling_rounds",
    "throughput",
    "us_per_item",
]
