"""The measurements of one group of servers that ``python -m benchmarks.scale`` makes, and
their results: one ``abatch`` run with the CPU each role spent (:func:`throughput`), the
defaults over the first k servers against a grid of loads (:func:`measure_subset`),
interleaved rounds over several layouts (:func:`scaling_rounds`), one request at a time
beside raw HTTP (:func:`invoke_and_raw_http_p50`), vLLM's router against the client's own
spreading (:func:`router_against_client`), and the request shape with and without
``allowed_token_ids`` (:func:`request_shape`). Each takes running servers' URLs (and their
pids, whose processes' CPU it measures)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import warm_classifier
from benchmarks.sampling import GpuSampler, GpuWindow, HostCpuSampler, HostLoad
from langchain_qwen_fast.bench.measure import (
    RunContext,
    cores_between,
    percentile,
    run_one_at_a_time,
    server_cpu_seconds,
)
from langchain_qwen_fast.bench.paths import request_body
from langchain_qwen_fast.testing.samples import news_items

#: the sweep: prompts per request x requests in flight per server
SWEEP_GROUPS = (128, 256)
SWEEP_IN_FLIGHT = (4, 8, 16)

#: Requests in flight a server when the client spreads the router comparison's load: set on
#: both sides (the client over every server, the client in front of the router) so that they
#: carry the same load whatever the classifier's own default is.
ROUTER_IN_FLIGHT_PER_SERVER = 8


@dataclass
class Throughput:
    """One ``abatch`` run: classifications/s, the cores each role kept busy (the servers' by
    role, the client's process and its event loop), the whole host's load; where asked, the
    CPU microseconds each role spent a classification and the GPUs meanwhile."""

    per_s: float
    cores_busy: dict[str, float]
    host: HostLoad
    us_per_item: dict[str, float] | None = None
    gpu: GpuWindow | None = None


@dataclass
class SweepCell:
    """One point of the grid: prompts a request, requests in flight, classifications/s."""

    batch_size: int
    max_concurrency: int
    per_s: float


@dataclass
class ClientProcessesRun:
    """The defaults with the batch spread over ``processes`` client processes (two runs),
    interleaved with one run in one process, and the spread rate over the one-process one."""

    processes: int
    runs: list[Throughput]
    one_process: Throughput
    over_one_process: float


@dataclass
class BestAgain:
    """The sweep's best cell run again against the defaults, interleaved: each one's rates."""

    batch_size: int
    max_concurrency: int
    best: list[float]
    default: list[float]


@dataclass
class SubsetRow:
    """The first ``servers`` servers: the defaults' runs (before and, with the sweep, after
    it), the client-process runs, the sweep and how the defaults compare with its best cell,
    the GPUs meanwhile, and the defaults' mean rate as a fraction of vLLM's ceiling for as
    many engines."""

    servers: int
    mode: str
    default: list[Throughput]
    client_processes: list[ClientProcessesRun] = field(default_factory=list)
    sweep: list[SweepCell] = field(default_factory=list)
    default_over_best: float | None = None
    best_again: BestAgain | None = None
    default_over_best_again: float | None = None
    gpu: GpuWindow | None = None
    fraction_of_ceiling: float | None = None

    @property
    def mean_default(self) -> float:
        """The defaults' mean rate over their runs."""
        return sum(d.per_s for d in self.default) / len(self.default)


@dataclass
class OneAtATime:
    """One server, one request at a time: p50 of ``invoke`` and of raw HTTP with the
    classifier's own request (ms), raw HTTP's failed statuses, and whether the server took
    prompt lists."""

    invoke_p50_ms: float | None
    raw_http_p50_ms: float | None
    raw_http_failed: list[int]
    takes_prompt_lists: bool


@dataclass
class RouterRow:
    """The same load spread by the client over the servers and sent to vLLM's router in
    front of them (interleaved runs of each), the router with the client's defaults, the
    one-at-a-time p50 of each, and the router's rate over the client's."""

    servers: int
    policy: str
    in_flight: int
    client: list[float]
    router: list[float]
    router_client_defaults: float
    router_p50_ms: float | None
    client_p50_ms: float | None
    router_over_client: float


@dataclass
class RequestShape:
    """Grouped completions as the classifier sends them and with ``allowed_token_ids`` added
    (interleaved rounds, classifications/s), and the first's rate over the second's."""

    now: list[float]
    with_allowed_token_ids: list[float]
    now_over_before: float


@dataclass
class ScalingRounds:
    """The defaults over each layout in interleaved rounds: the rates by number of servers,
    every run, the largest layout's mean rate over the smallest's (and each round's), and
    each layout's mean rate as a fraction of vLLM's ceiling for as many engines."""

    servers: list[int]
    mode: str
    per_s: dict[str, list[float]]
    runs: dict[str, list[Throughput]]
    ratio: float
    round_ratios: list[float]
    fraction_of_ceiling: dict[str, float | None] = field(default_factory=dict)


def throughput(classifier: Any, texts: list[str], pids: Sequence[int] = ()) -> Throughput:
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
    return Throughput(per_s=round(len(texts) / seconds, 1), cores_busy=cores, host=host.stop())


def us_per_item(cores_busy: Mapping[str, float], per_s: float) -> dict[str, float]:
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
) -> ScalingRounds:
    """The defaults over each server count in ``layouts`` (count -> its URLs and server pids),
    in ``rounds`` interleaved rounds so drift on a shared host hits every layout alike; each
    run with the CPU every role spent per item and the GPUs' utilisation."""
    texts = news_items(items)
    classifiers = {k: warm_classifier(urls, model, tokenizer, mode=mode) for k, (urls, _) in layouts.items()}
    runs: dict[int, list[Throughput]] = {k: [] for k in layouts}
    for _ in range(rounds):
        for k, classifier in classifiers.items():
            t0 = time.perf_counter()
            got = throughput(classifier, texts, layouts[k][1])
            got.us_per_item = us_per_item(got.cores_busy, got.per_s)
            if sampler is not None:
                got.gpu = sampler.window(t0, time.perf_counter())
            runs[k].append(got)
            print(f"  scaling: {k} servers {got.per_s}/s, us/item {got.us_per_item}", flush=True)
    small, large = min(layouts), max(layouts)
    mean = {k: sum(r.per_s for r in got) / len(got) for k, got in runs.items()}
    return ScalingRounds(
        servers=sorted(layouts),
        mode=mode,
        per_s={str(k): [r.per_s for r in got] for k, got in runs.items()},
        runs={str(k): got for k, got in runs.items()},
        ratio=round(mean[large] / mean[small], 3),
        round_ratios=[round(a.per_s / b.per_s, 3) for a, b in zip(runs[large], runs[small], strict=True)],
    )


def one_at_a_time_p50(run: RunContext, classifier: Any, items: int) -> float | None:
    """p50 ms of ``invoke`` one text at a time, each text new to the server (``run.fresh_texts``)."""
    (result,) = run_one_at_a_time(run, {"invoke": classifier.invoke}, items)
    return percentile(result.latencies_ms, 50)


def invoke_and_raw_http_p50(run: RunContext, classifier: Any, base_url: str, model: str, items: int) -> OneAtATime:
    """p50 ms of ``invoke`` and of raw HTTP with the classifier's own request for the same text
    (its prompt as the classifier sends it: text or token ids, in a list or alone, as the server
    takes it), interleaved item by item, each text new to the server. Generate mode only."""
    import httpx

    plan = classifier.prepare()
    http = httpx.Client(timeout=30)
    url = base_url.rstrip("/") + "/completions"

    failed: list[int] = []

    def raw_http(text: str) -> Any:
        prompt = plan.encode([text])[0] if plan.tokenizer is not None else plan.render(text)
        response = http.post(url, json=request_body(plan, model, [prompt]))
        if response.status_code != 200:  # counted, not raised: one bad answer ends no run
            failed.append(response.status_code)
        return response

    try:
        invoke, raw = run_one_at_a_time(run, {"invoke": classifier.invoke, "raw HTTP": raw_http}, items)
    finally:
        http.close()
    return OneAtATime(
        invoke_p50_ms=percentile(invoke.latencies_ms, 50),
        raw_http_p50_ms=percentile(raw.latencies_ms, 50),
        raw_http_failed=failed,
        takes_prompt_lists=bool(plan.takes_prompt_lists),
    )


def _sweep(
    urls: Sequence[str], model: str, tokenizer: str | None, texts: list[str], pids: Sequence[int], mode: str
) -> list[SweepCell]:
    """The grid: :data:`SWEEP_GROUPS` prompts per request x :data:`SWEEP_IN_FLIGHT` in flight a server."""
    cells = []
    for group in SWEEP_GROUPS:
        for per_server in SWEEP_IN_FLIGHT:
            in_flight = per_server * len(urls)
            load = warm_classifier(urls, model, tokenizer, batch_size=group, max_concurrency=in_flight, mode=mode)
            cells.append(SweepCell(group, in_flight, throughput(load, texts, pids).per_s))
            print(f"  {group:>4} per request x {in_flight:>3} in flight: {cells[-1].per_s}/s", flush=True)
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
) -> SubsetRow:
    """The defaults (twice: before and after the sweep) and, with ``sweep``, the grid; for
    each count in ``processes``, the defaults with the batch spread over that many client
    processes, interleaved with a one-process run."""
    texts = news_items(items)
    default = warm_classifier(urls, model, tokenizer, mode=mode)
    row = SubsetRow(servers=len(urls), mode=mode, default=[throughput(default, texts, pids)])
    print(f"{len(urls)} servers, defaults: {row.default[0].per_s}/s", flush=True)
    for count in processes:
        spread = warm_classifier(urls, model, tokenizer, mode=mode, client_processes=count)
        runs = [throughput(spread, texts, pids), throughput(default, texts, pids), throughput(spread, texts, pids)]
        spread.close()
        ratio = round((runs[0].per_s + runs[2].per_s) / (runs[1].per_s + row.default[0].per_s), 3)
        row.client_processes.append(ClientProcessesRun(count, [runs[0], runs[2]], runs[1], ratio))
        print(f"  {count} client processes: {[r.per_s for r in runs]}/s (spread, one, spread)", flush=True)
    if sweep:
        row.sweep = _sweep(urls, model, tokenizer, texts, pids, mode)
        row.default.append(throughput(default, texts, pids))
        best = max(row.sweep, key=lambda c: c.per_s)
        row.default_over_best = round(row.mean_default / best.per_s, 3)
        print(f"  defaults {row.mean_default:.0f}/s = {row.default_over_best:.1%} of the best cell", flush=True)
        # The best of several noisy cells is biased upwards: run it again against the
        # defaults, interleaved, for a like-for-like ratio.
        best_again = warm_classifier(
            urls, model, tokenizer, batch_size=best.batch_size, max_concurrency=best.max_concurrency, mode=mode
        )
        rates = [throughput(c, texts, pids).per_s for c in (best_again, default, best_again, default)]
        row.best_again = BestAgain(best.batch_size, best.max_concurrency, rates[0::2], rates[1::2])
        row.default_over_best_again = round(sum(rates[1::2]) / sum(rates[0::2]), 3)
        print(f"  best cell, defaults, interleaved: {rates}/s: defaults {row.default_over_best_again:.1%}", flush=True)
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
) -> RouterRow:
    """The same load spread by the client over ``urls`` and sent to vLLM's router in front of
    them (the client then sees one URL, so its in-flight count is set to the same total), and
    the one-at-a-time p50 of each over ``single_requests`` requests."""
    from langchain_qwen_fast.serving import Router

    texts = news_items(items)
    in_flight = ROUTER_IN_FLIGHT_PER_SERVER * len(urls)
    client_side = warm_classifier(urls, model, tokenizer, max_concurrency=in_flight)
    rates: dict[str, list[float]] = {"client": [], "router": []}
    with Router(urls, policy, log_path=log_dir / "router.log") as router:
        routed = warm_classifier([router.base_url], model, tokenizer, max_concurrency=in_flight)
        routed_default = warm_classifier([router.base_url], model, tokenizer)
        for name, classifier in [("client", client_side), ("router", routed)] * 2:  # interleaved: drift hits both
            rates[name].append(throughput(classifier, texts).per_s)
        router_defaults = throughput(routed_default, texts).per_s
        router_p50 = one_at_a_time_p50(run, routed, single_requests)
    row = RouterRow(
        servers=len(urls),
        policy=policy,
        in_flight=in_flight,
        client=rates["client"],
        router=rates["router"],
        router_client_defaults=router_defaults,
        router_p50_ms=router_p50,
        client_p50_ms=one_at_a_time_p50(run, client_side, single_requests),
        router_over_client=round(sum(rates["router"]) / sum(rates["client"]), 3),
    )
    print(json.dumps(dataclasses.asdict(row)), flush=True)
    return row


def request_shape(url: str, model: str, tokenizer: str | None, items: int) -> RequestShape:
    """Grouped completions on one server as the classifier sends them (every answer token's
    logprob) and with ``allowed_token_ids`` added, raw HTTP, 256 prompts a request, 8 in
    flight, interleaved rounds."""
    import httpx

    classifier = warm_classifier([url], model, tokenizer)
    plan = classifier.prepare()
    texts = news_items(items)
    prompts: list[Any] = plan.encode(texts) if tokenizer else [plan.render(t) for t in texts]
    now = [request_body(plan, model, prompts[i : i + 256]) for i in range(0, len(prompts), 256)]
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

    shape = RequestShape(now=[], with_allowed_token_ids=[], now_over_before=0.0)
    for _ in range(2):
        shape.now.append(round(asyncio.run(send_all(now)), 1))
        shape.with_allowed_token_ids.append(round(asyncio.run(send_all(before)), 1))
    shape.now_over_before = round(sum(shape.now) / sum(shape.with_allowed_token_ids), 3)
    print(json.dumps(dataclasses.asdict(shape)), flush=True)
    return shape


__all__ = [
    "ROUTER_IN_FLIGHT_PER_SERVER",
    "SWEEP_GROUPS",
    "SWEEP_IN_FLIGHT",
    "BestAgain",
    "ClientProcessesRun",
    "OneAtATime",
    "RequestShape",
    "RouterRow",
    "ScalingRounds",
    "SubsetRow",
    "SweepCell",
    "Throughput",
    "invoke_and_raw_http_p50",
    "measure_subset",
    "one_at_a_time_p50",
    "request_shape",
    "router_against_client",
    "scaling_rounds",
    "throughput",
    "us_per_item",
]
