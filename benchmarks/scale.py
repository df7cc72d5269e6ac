"""Independent servers on the GPUs (a :class:`~langchain_qwen_fast.serving.ServerGroup`),
measured side by side in one run, beside vLLM's own ceiling on the same hardware.

    python -m benchmarks.scale --model DIR --gpus all --servers-per-gpu 4 --mps --subsets 1,2,4,8 \\
        --sweep-subsets 1,4 --router round_robin --profile-seconds 15 --out out/scale

Starts servers-per-gpu servers on each GPU (the first GPU's servers come first), then, for
each subset size k, spreads QwenClassifier.abatch over the first k servers at the classifier's
default load, twice, and (--sweep-subsets) over a grid of prompts per request x requests in
flight per server, to show how far the defaults are from the best point. After the servers
stop, the reference row: one vLLM engine in process per server of each subset, started with
that server's flags (under MPS where the servers were), on the same texts rendered by the
classifier's plan (benchmarks/ceiling.py); every subset's rate is also given as a fraction of
it (--no-ceiling skips it). Also, on request: vLLM's router in front of the servers against
the client's own spreading, at the same load (--router); the request shape with and without
allowed_token_ids on one server (--compare-request-shape); where one server's CPU goes, from
py-spy samples of its API process and engine core (--profile-seconds;
--profile-one-at-a-time: under single requests); the defaults with the batch spread over
client processes (--client-processes); the defaults over the smallest and the largest subset
in interleaved rounds, with each role's CPU per classification (--scaling-rounds); the
capability rows over the first k servers (--capabilities-subsets); clients sending one text
each to qwen-fast api and to vLLM (--service-workers); and one-at-a-time latency of server
variants started side by side on the first GPU, with and without logprobs, engine steps split
into CPU and GPU time by vLLM's torch profiler (--latency-variants FILE). Also reports
one-at-a-time p50, GPU memory, and the cores each role (and the client's event loop) kept
busy. --mode head measures a classification-head model (its ceiling: engines that classify).
Writes scale.json after each part. Needs the 'benchmarks' extra; uses vLLM and nvidia-smi where
present.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from benchmarks._options import leaf_defaults, options_from, whole_numbers
from benchmarks.capabilities import CAPABILITY_ROWS, check_rows
from benchmarks.ceiling import Ceiling, ceiling_work, ceilings, engine_spec, fraction_of_ceiling
from benchmarks.common import require_lab, warm_classifier
from benchmarks.cpu_profile import CpuProfile
from benchmarks.latency_variants import VariantLatency
from benchmarks.layouts import (
    OneAtATime,
    RequestShape,
    RouterRow,
    ScalingRounds,
    SubsetRow,
    invoke_and_raw_http_p50,
    measure_subset,
    one_at_a_time_p50,
    request_shape,
    router_against_client,
    scaling_rounds,
    us_per_item,
)
from benchmarks.sampling import GpuSampler, GpuWindow, HostCpus, gpu_memory_mib, host_cpus
from benchmarks.variants import PROFILE_CHOICES
from langchain_qwen_fast.bench.measure import PathRow, RunContext, own_tokenizer
from langchain_qwen_fast.bench.report import Header, header, write_json
from langchain_qwen_fast.errors import ConfigurationError, QwenFastError
from langchain_qwen_fast.testing.samples import news_items

if TYPE_CHECKING:
    from langchain_qwen_fast.serving import ProfileName, ServerGroup
    from langchain_qwen_fast.serving.profiles import Frontend


# -- options --------------------------------------------------------------------------------
def _at_least_one(**counts: Sequence[int]) -> None:
    for name, values in counts.items():
        if any(k < 1 for k in values):
            raise ConfigurationError(f"{name}: every count is at least 1, got {list(values)}")


@dataclass(frozen=True)
class GroupOptions:
    """The servers: ``model`` served ``servers_per_gpu`` times on each of ``gpus`` ("all" or
    indices such as "0,1"; None: every GPU there is, none: CPU servers), with ``profile``,
    ``frontend``, ``server_args`` and ``mps``; ``tokenizer``: the classifier's, for token-id
    prompts; ``mode``: a chat model (generate) or a classification head."""

    model: str
    gpus: str | None = None
    servers_per_gpu: int = 1
    profile: ProfileName = "auto"
    frontend: Frontend = "python"
    model_name: str = "qwen3"
    tokenizer: str | None = None
    server_args: list[str] = field(default_factory=list)
    mps: bool = False
    mode: Literal["generate", "head"] = "generate"

    def __post_init__(self) -> None:
        if self.servers_per_gpu < 1:
            raise ConfigurationError("servers_per_gpu is at least 1")


@dataclass(frozen=True)
class LoadOptions:
    """The throughput parts: ``items`` texts a run over each of ``subsets`` (numbers of servers;
    empty: all), the sweep over ``sweep_subsets``, the batch spread over each count of
    ``client_processes``, ``scaling_rounds`` interleaved rounds over the smallest and largest
    subset, and the request shape with and without allowed_token_ids."""

    subsets: tuple[int, ...] = ()
    sweep_subsets: tuple[int, ...] = ()
    items: int = 8192
    client_processes: tuple[int, ...] = ()
    scaling_rounds: int = 0
    compare_request_shape: bool = False

    def __post_init__(self) -> None:
        _at_least_one(subsets=self.subsets, sweep_subsets=self.sweep_subsets, client_processes=self.client_processes)
        if self.items < 1:
            raise ConfigurationError("items is at least 1")


@dataclass(frozen=True)
class ReferenceOptions:
    """vLLM's own ceiling (:mod:`benchmarks.ceiling`) for each subset, and how long its slowest
    engine may take to start and answer."""

    ceiling: bool = True
    ceiling_timeout: float = 1800.0


@dataclass(frozen=True)
class RouterOptions:
    """vLLM's router (a policy) in front of the first ``router_servers`` servers (None: all)."""

    router: str | None = None
    router_servers: int | None = None


@dataclass(frozen=True)
class CpuProfileOptions:
    """py-spy samples of the first server for ``profile_seconds`` (0: none), under batches or
    single requests."""

    profile_seconds: float = 0.0
    profile_one_at_a_time: bool = False


@dataclass(frozen=True)
class CapabilityOptions:
    """The capability rows over the first k servers for each k of ``capabilities_subsets``."""

    capabilities_subsets: tuple[int, ...] = ()
    capabilities_items_per_server: int = 2048
    capabilities_rounds: int = 2
    capabilities_rows: list[str] | None = None  # None: every one of CAPABILITY_ROWS

    def __post_init__(self) -> None:
        _at_least_one(capabilities_subsets=self.capabilities_subsets)
        check_rows(self.capabilities_rows or ())


@dataclass(frozen=True)
class ServiceOptions:
    """``qwen-fast api`` over every server with each of ``service_workers`` worker counts (empty:
    not measured), beside vLLM taking one request per text: ``service_clients`` clients sending
    one text each; with each of ``service_groups_in_flight`` (empty: the service's default)."""

    service_workers: tuple[int, ...] = ()
    service_clients: int = 256
    service_groups_in_flight: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _at_least_one(service_workers=self.service_workers, service_groups_in_flight=self.service_groups_in_flight)
        if self.service_clients < 1:
            raise ConfigurationError("service_clients is at least 1")


@dataclass(frozen=True)
class ScaleOptions:
    """What one run starts and measures, by part (``--help`` says each option in full); every
    part beyond the subsets and the ceiling runs only when asked for."""

    group: GroupOptions = field(metadata={"part": GroupOptions})
    load: LoadOptions = field(default_factory=LoadOptions, metadata={"part": LoadOptions})
    reference: ReferenceOptions = field(default_factory=ReferenceOptions, metadata={"part": ReferenceOptions})
    routing: RouterOptions = field(default_factory=RouterOptions, metadata={"part": RouterOptions})
    cpu_profile: CpuProfileOptions = field(default_factory=CpuProfileOptions, metadata={"part": CpuProfileOptions})
    capabilities: CapabilityOptions = field(default_factory=CapabilityOptions, metadata={"part": CapabilityOptions})
    service: ServiceOptions = field(default_factory=ServiceOptions, metadata={"part": ServiceOptions})
    latency_variants: Path | None = None
    out: Path = Path("out/scale")
    label: str = ""


# -- results --------------------------------------------------------------------------------
@dataclass
class ServiceReport:
    """Clients sending one text each, over every server: the rows, the GPUs meanwhile by row,
    each service's rate over vLLM's, and the client processes the load came from."""

    servers: int
    client_processes: int
    rows: list[PathRow]
    gpu: dict[str, GpuWindow]
    checks: dict[str, float]


@dataclass
class CapabilitiesReport:
    """The capability rows over the first ``servers`` servers: each row's rate, its time over
    zero-shot's, and each role's CPU microseconds a classification."""

    servers: int
    items: int
    rounds: int
    per_s: dict[str, float]
    ratios: dict[str, float]
    us_per_item: dict[str, dict[str, float]]


@dataclass
class ScaleReport:
    """What ``scale.json`` holds (each part None or empty where not asked for)."""

    header: Header
    servers_per_gpu: int
    frontend: str
    server_args: list[str]
    items: int
    mps: bool
    host_cpus: HostCpus
    startup_s: float | None = None
    gpu_memory_mib: list[float] = field(default_factory=list)
    one_at_a_time_one_server: OneAtATime | None = None
    p50_ms_one_server: float | None = None
    subsets: list[SubsetRow] = field(default_factory=list)
    ceiling: list[Ceiling] = field(default_factory=list)
    router: RouterRow | None = None
    request_shape: RequestShape | None = None
    scaling: ScalingRounds | None = None
    service: ServiceReport | None = None
    capabilities: list[CapabilitiesReport] = field(default_factory=list)
    profile: CpuProfile | None = None
    profile_load: str | None = None
    latency_variants: dict[str, VariantLatency] | None = None


# -- the parts beyond the layouts -----------------------------------------------------------
def _capabilities(
    options: CapabilityOptions, model: str, urls: Sequence[str], pids: Sequence[int], tokenizer: str | None, k: int
) -> CapabilitiesReport:
    """The capability rows over the first ``k`` servers, with each role's CPU per item."""
    from benchmarks.capabilities import run_capabilities

    texts = news_items(options.capabilities_items_per_server * k)
    rows, ratios = run_capabilities(
        list(urls[:k]),
        model,
        tokenizer,
        texts,
        options.capabilities_rounds,
        options.capabilities_rows or CAPABILITY_ROWS,
        pids[:k],
    )
    return CapabilitiesReport(
        servers=k,
        items=len(texts),
        rounds=options.capabilities_rounds,
        per_s={r.name: round(r.rps, 1) for r in rows},
        ratios=ratios,
        us_per_item={r.name: us_per_item({**r.server_cores, "client": r.cpu_seconds / r.seconds}, r.rps) for r in rows},
    )


def _service(
    run: RunContext,
    urls: list[str],
    options: ServiceOptions,
    model: str,
    tokenizer: str | None,
    items: int,
    sampler: GpuSampler | None,
) -> ServiceReport:
    """Clients sending one text each, to vLLM one request per text and to ``qwen-fast api``
    over every server (:func:`~benchmarks.service.run_service`)."""
    from benchmarks.service import load_processes, run_service

    texts = run.fresh_texts(items)
    rows, checks = run_service(
        run,
        urls,
        model,
        tokenizer,
        texts,
        options.service_clients,
        options.service_workers,
        options.service_groups_in_flight or (None,),
    )
    fastest = max(r.rps for r in rows)
    gpu = {r.name: sampler.window(*r.window) for r in rows if sampler and r.window[1] > r.window[0]}
    return ServiceReport(len(urls), load_processes(), [r.summary(fastest) for r in rows], gpu, checks)


def _cpu_profile(options: ScaleOptions, url: str, pid: int, tokenizer: str | None) -> CpuProfile:
    """py-spy samples of the server ``pid`` under batches or, asked for, single requests."""
    from benchmarks.cpu_profile import profile

    group = options.group
    load = warm_classifier([url], group.model_name, tokenizer, mode=group.mode)
    texts = news_items(options.load.items)
    work = (
        (lambda: [load.invoke(t) for t in texts[:50]])
        if options.cpu_profile.profile_one_at_a_time
        else (lambda: asyncio.run(load.abatch(texts)))
    )
    return profile(pid, options.cpu_profile.profile_seconds, work, options.out)


def with_fractions(report: ScaleReport) -> None:
    """Each subset's and each scaling layout's mean rate as a fraction of the ceiling for as
    many engines."""
    by_engines = {c.engines: c for c in report.ceiling}
    for row in report.subsets:
        row.fraction_of_ceiling = fraction_of_ceiling(row.mean_default, by_engines.get(row.servers))
    if report.scaling is not None:
        report.scaling.fraction_of_ceiling = {
            k: fraction_of_ceiling(sum(rates) / len(rates), by_engines.get(int(k)))
            for k, rates in report.scaling.per_s.items()
        }


# -- the run --------------------------------------------------------------------------------
def _gpus(value: str | None) -> list[int]:
    """The GPUs ``value`` names (see :func:`~langchain_qwen_fast.serving.parse_gpus`); None: every one there is."""
    from langchain_qwen_fast.serving import gpu_count, parse_gpus

    return parse_gpus(value) if value is not None else list(range(gpu_count()))


def _start_group(options: ScaleOptions, gpus: list[int]) -> ServerGroup:
    from langchain_qwen_fast.serving import ServerGroup

    g = options.group
    return ServerGroup(
        g.model,
        gpus=gpus,
        servers_per_gpu=g.servers_per_gpu,
        mps=g.mps,
        log_dir=options.out / "logs",
        profile=g.profile,
        frontend=g.frontend,
        served_model_name=g.model_name,
        extra_args=list(g.server_args),
    )


def run_scale(options: ScaleOptions) -> ScaleReport:
    """Start the servers, run every part ``options`` asks for, then the ceilings after the
    servers stop, writing ``scale.json`` in ``options.out`` after each part; returns the report."""
    from benchmarks.variants import load_variants, resolve_profile

    require_lab("psutil", "tqdm")
    g, load = options.group, options.load
    variants = load_variants(options.latency_variants) if options.latency_variants else None
    out = options.out
    (out / "logs").mkdir(parents=True, exist_ok=True)
    # Texts new to the servers for the one-at-a-time parts; each part is given the pids of
    # the servers it measures (a subset of the group's).
    run = RunContext()
    tokenizer = g.tokenizer
    report = ScaleReport(
        header=header(options.label),
        servers_per_gpu=g.servers_per_gpu,
        frontend=g.frontend,
        server_args=list(g.server_args),
        items=load.items,
        mps=g.mps,
        host_cpus=host_cpus(),
    )

    def save() -> None:
        write_json(out / "scale.json", report)

    gpus = _gpus(g.gpus)
    group = _start_group(options, gpus)
    started = time.perf_counter()
    with group:
        report.startup_s = round(time.perf_counter() - started, 1)
        report.gpu_memory_mib = gpu_memory_mib()
        print(f"{len(group.servers)} servers ready in {report.startup_s} s; GPU MiB {report.gpu_memory_mib}")
        urls, pids = group.base_urls, group.pids
        sampler = GpuSampler() if GpuSampler.available() else None
        one = warm_classifier(urls[:1], g.model_name, tokenizer, mode=g.mode)
        if g.mode == "generate":
            report.one_at_a_time_one_server = invoke_and_raw_http_p50(run, one, urls[0], g.model_name, 200)
            report.p50_ms_one_server = report.one_at_a_time_one_server.invoke_p50_ms
        else:
            report.p50_ms_one_server = one_at_a_time_p50(run, one, 200)
        sizes = list(load.subsets) or [len(urls)]
        for k in sizes:
            t0 = time.perf_counter()
            row = measure_subset(
                urls[:k],
                g.model_name,
                tokenizer,
                load.items,
                pids[:k],
                k in load.sweep_subsets,
                g.mode,
                load.client_processes,
            )
            if sampler:
                row.gpu = sampler.window(t0, time.perf_counter())
            report.subsets.append(row)
            save()
        if options.routing.router:
            behind = urls[: options.routing.router_servers or len(urls)]
            report.router = router_against_client(
                run, behind, g.model_name, tokenizer, load.items, options.routing.router, out
            )
            save()
        if load.compare_request_shape:
            report.request_shape = request_shape(urls[0], g.model_name, tokenizer, load.items)
            save()
        if load.scaling_rounds:
            layouts = {k: (urls[:k], pids[:k]) for k in {min(sizes), max(sizes)}}
            report.scaling = scaling_rounds(
                layouts, g.model_name, tokenizer, load.items, load.scaling_rounds, g.mode, sampler
            )
            save()
        if options.service.service_workers:
            report.service = _service(
                run.for_servers(pids), urls, options.service, g.model_name, tokenizer, load.items, sampler
            )
            save()
        for k in options.capabilities.capabilities_subsets:
            report.capabilities.append(_capabilities(options.capabilities, g.model_name, urls, pids, tokenizer, k))
            save()
        if options.cpu_profile.profile_seconds:
            report.profile = _cpu_profile(options, urls[0], pids[0], tokenizer)
            report.profile_load = "one at a time" if options.cpu_profile.profile_one_at_a_time else "abatch"
            save()
        work = ceiling_work(one, g.model_name, load.items, g.mode) if options.reference.ceiling else None
        if sampler:
            sampler.stop()
    if work is not None:  # after the servers stop: the engines take the memory they had
        specs = [engine_spec(server) for server in group.servers]
        report.ceiling = ceilings(specs, work, sizes, g.mps, options.reference.ceiling_timeout)
        with_fractions(report)
        save()
    if variants is not None:
        from benchmarks.latency_variants import latency_variants

        report.latency_variants = latency_variants(
            run,
            g.model,
            g.model_name,
            tokenizer,
            variants,
            out / "logs",
            gpus[0] if gpus else None,
            resolve_profile(g.profile),
        )
    save()
    shown = {k: v for k, v in dataclasses.asdict(report).items() if k != "profile"}
    print(json.dumps(shown, indent=1, default=str))
    print(f"wrote {out / 'scale.json'}")
    return report


# -- the command line -----------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """``python -m benchmarks.scale``'s options: one per leaf field of :class:`ScaleOptions`,
    whose defaults they take."""
    from langchain_qwen_fast.serving import ROUTER_POLICIES
    from langchain_qwen_fast.serving.profiles import FRONTENDS

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--model", required=True, help="model directory (or hub id) to serve")
    add("--gpus", help="'all' or indices such as 0,1 (default: every GPU there is; none: CPU servers)")
    add("--servers-per-gpu", type=int, help="servers on each GPU (default: %(default)s)")
    add("--profile", choices=PROFILE_CHOICES, help="the servers' flag set (default: %(default)s)")
    add(
        "--frontend", choices=FRONTENDS, help="vLLM's HTTP frontend, as qwen-fast serve takes it (default: %(default)s)"
    )
    add("--model-name", help="served model name (default: %(default)s)")
    add("--tokenizer", help="the model's tokenizer for token-id prompts (default: MODEL where it has a tokenizer.json)")
    add(
        "--server-arg",
        dest="server_args",
        metavar="FLAG",
        action="append",
        help="extra vLLM flag (repeatable; --server-arg=--flag)",
    )
    add("--mps", action="store_true", help="run the servers under NVIDIA MPS (see qwen-fast serve)")
    add("--mode", choices=["generate", "head"], help="the model's kind (default: %(default)s)")
    add("--subsets", type=whole_numbers, help="numbers of servers to use, e.g. 1,2,4 (default: all)")
    add("--sweep-subsets", type=whole_numbers, help="subsets that also get the sweep, e.g. 1,4")
    add("--items", type=int, help="items per throughput run (default: %(default)s)")
    add("--client-processes", type=whole_numbers, help="also run the defaults spread over N client processes, e.g. 2,4")
    add(
        "--scaling-rounds",
        type=int,
        help="then the defaults over the smallest and the largest subset in this many interleaved rounds",
    )
    add("--compare-request-shape", action="store_true", help="with and without allowed_token_ids")
    add(
        "--ceiling",
        action=argparse.BooleanOptionalAction,
        help="vLLM's own ceiling for each subset, one engine in process per server, after the servers stop "
        "(default: on)",
    )
    add("--ceiling-timeout", type=float, help="seconds the slowest engine may take (default: %(default)s)")
    add("--router", choices=ROUTER_POLICIES, help="also measure the router")
    add("--router-servers", type=int, help="servers behind the router (default: all)")
    add("--profile-seconds", type=float, help="py-spy one server under load this long")
    add("--profile-one-at-a-time", action="store_true", help="--profile-seconds under single requests, not batches")
    add("--capabilities-subsets", type=whole_numbers, help="capability rows over the first k servers, e.g. 1,4")
    add("--capabilities-items-per-server", type=int, help="texts per capability run, per server (default: %(default)s)")
    add("--capabilities-rounds", type=int, help="alternating rounds of the capability rows (default: %(default)s)")
    add(
        "--capabilities-row",
        dest="capabilities_rows",
        action="append",
        choices=CAPABILITY_ROWS,
        help="a capability row to run (repeatable; default: all; zero-shot always runs)",
    )
    add(
        "--service-workers",
        type=whole_numbers,
        help="also clients sending one text each to qwen-fast api over every server, with each of these "
        "worker counts (e.g. 1,4), beside vLLM taking one request per text",
    )
    add("--service-clients", type=int, help="with --service-workers: how many clients (default: %(default)s)")
    add(
        "--service-groups-in-flight",
        type=whole_numbers,
        help="with --service-workers: each of these --groups-in-flight for every worker count (e.g. 2,8; "
        "default: the service's own)",
    )
    add(
        "--latency-variants",
        type=Path,
        metavar="FILE",
        help="JSON file of server variants ({name: {flags, drop, env}}) for one-at-a-time latency, after the group",
    )
    add("--out", type=Path, help="folder for scale.json and the py-spy samples (default: %(default)s)")
    add("--label", help="free text naming the machine, kept in the JSON")
    parser.set_defaults(**leaf_defaults(ScaleOptions))
    return parser


def scale_options(args: argparse.Namespace) -> ScaleOptions:
    """The typed options of parsed arguments, the tokenizer defaulting to the model's own
    where it has one."""
    options = options_from(ScaleOptions, args)
    tokenizer = options.group.tokenizer or own_tokenizer(options.group.model)
    return dataclasses.replace(options, group=dataclasses.replace(options.group, tokenizer=tokenizer))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark with ``argv`` (default: the process's arguments); the exit code."""
    args = build_parser().parse_args(argv)
    try:
        run_scale(scale_options(args))
    except QwenFastError as exc:
        print(f"benchmarks.scale: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
