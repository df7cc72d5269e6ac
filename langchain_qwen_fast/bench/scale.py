"""Scale benchmark: independent servers on the GPUs, side by side in one run.

    qwen-fast bench-scale --model DIR --gpus all --servers-per-gpu 4 --subsets 1,2,3,4,8 \\
        --sweep-subsets 1,4 --router round_robin --profile-seconds 15 --out out/scale

Starts ``servers-per-gpu`` servers on each GPU (a :class:`ServerGroup`; the first GPU's servers
come first), then, for each subset size k, spreads ``QwenClassifier.abatch`` over the first k
servers at the classifier's default load, twice, and (``--sweep-subsets``) over a grid of
prompts per request x requests in flight per server, to show how far the defaults are from
the best point. Also, on request: vLLM's router in front of the servers against the
client's own spreading, at the same load (``--router``); the request shape before and after
dropping ``allowed_token_ids`` on one server (``--compare-request-shape``); and where one
server's CPU goes under load, from ``py-spy`` samples of its API process and engine core
(``--profile-seconds``; ``--profile-one-at-a-time``: under single requests instead); the
defaults again with the batch spread over client processes (``--client-processes``); the
defaults over the smallest and the largest subset in interleaved rounds, with each role's
CPU per classification (``--scaling-rounds``); the capability rows of ``qwen-fast bench``
(multi-label, examples, ...) over the first k servers (``--capabilities-subsets``); and
one-at-a-time latency of server variants started side by side on the first GPU, with and
without logprobs, and engine steps split into CPU and GPU time from vLLM's torch profiler
(``--latency-variants FILE``). Also reports one-at-a-time p50, GPU
memory, and the cores each role (and the client's event loop) kept busy. ``--mode head``
measures a classification-head model. Needs the ``bench`` extra; uses vLLM and nvidia-smi
where present.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_qwen_fast._core import vllm_api
from langchain_qwen_fast._core.stats import percentile
from langchain_qwen_fast.bench.compare import (
    CAPABILITY_ROWS,
    LABELS,
    GpuSampler,
    HostCpuSampler,
    fresh_texts,
    histogram_totals,
    run_capabilities,
    run_one_at_a_time,
    server_cpu_seconds,
    stage_means,
)
from langchain_qwen_fast.testing.samples import news_items

if TYPE_CHECKING:
    from langchain_qwen_fast.serving.launcher import ProfileName

#: the sweep: prompts per request x requests in flight per server
SWEEP_GROUPS = (128, 256)
SWEEP_IN_FLIGHT = (4, 8, 16)


def warm_classifier(urls: Sequence[str], model: str, tokenizer: str | None, **load: Any) -> Any:
    """A classifier over ``urls`` (``load``: its batch_size/max_concurrency, mode,
    client_processes), set up (workers too) and with each server's prefix cache warm."""
    from langchain_qwen_fast import QwenClassifier

    classifier = QwenClassifier(labels=LABELS, base_url=list(urls), model=model, tokenizer_path=tokenizer, **load)
    classifier.batch(news_items(16 * len(urls)))  # set-up, and each server's prefix cache warm
    classifier.prepare()
    return classifier


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
    cores = {role: round((after[role] - before[role]) / seconds, 2) for role in after if role in before}
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
    sampler: Any = None,
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


def one_at_a_time_p50(classifier: Any, items: int) -> float | None:
    """p50 ms of ``invoke`` one text at a time, each text new to the server."""
    (result,) = run_one_at_a_time({"invoke": classifier.invoke}, items)
    return percentile(result.latencies_ms, 50)


def host_cpus() -> dict[str, int | None]:
    """The host's logical CPUs and physical cores (two logical CPUs a core: busy processes
    past the core count share a core's execution units)."""
    try:
        import psutil
    except ImportError:
        return {"logical": None, "physical": None}
    return {"logical": psutil.cpu_count(), "physical": psutil.cpu_count(logical=False)}


def gpu_memory_mib() -> list[float]:
    """Memory in use on each GPU, MiB (empty without nvidia-smi)."""
    if shutil.which("nvidia-smi") is None:
        return []
    query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    out = subprocess.run(query, capture_output=True, text=True, check=False).stdout
    return [float(x) for x in out.split()]


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
        cells = []
        for group in SWEEP_GROUPS:
            for per_server in SWEEP_IN_FLIGHT:
                load = {"batch_size": group, "max_concurrency": per_server * len(urls), "mode": mode}
                got = throughput(warm_classifier(urls, model, tokenizer, **load), texts, pids)
                cells.append({"batch_size": group, "max_concurrency": load["max_concurrency"], "per_s": got["per_s"]})
                print(
                    f"  {group:>4} per request x {load['max_concurrency']:>3} in flight: {got['per_s']}/s", flush=True
                )
        row["sweep"] = cells
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
    urls: Sequence[str], model: str, tokenizer: str | None, items: int, policy: str, log_dir: Path
) -> dict[str, Any]:
    """The same load spread by the client over ``urls`` and sent to vLLM's router in front of
    them (the client then sees one URL, so its in-flight count is set to the same total)."""
    from langchain_qwen_fast.classifiers import IN_FLIGHT_PER_REPLICA
    from langchain_qwen_fast.serving.launcher import Router

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
        row["router, client defaults (one URL: 8 in flight)"] = throughput(routed_default, texts)["per_s"]
        row["router p50 ms"] = one_at_a_time_p50(routed, 200)
    row["client p50 ms"] = one_at_a_time_p50(client_side, 200)
    row["router_over_client"] = round(sum(row["router"]) / sum(row["client"]), 3)
    print(json.dumps(row), flush=True)
    return row


def request_shape(url: str, model: str, tokenizer: str | None, items: int) -> dict[str, Any]:
    """Grouped completions on one server as sent now (every answer token's logprob, no
    ``allowed_token_ids``) and as sent before (the same plus ``allowed_token_ids``), raw
    HTTP, 256 prompts a request, 8 in flight, interleaved rounds."""
    import httpx

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

    async def run(bodies: list[dict[str, Any]]) -> float:
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
        row["now"].append(round(asyncio.run(run(now)), 1))
        row["with allowed_token_ids"].append(round(asyncio.run(run(before)), 1))
    print(json.dumps(row), flush=True)
    return {**row, "now_over_before": round(sum(row["now"]) / sum(row["with allowed_token_ids"]), 3)}


def latency_variants(
    model: str,
    model_name: str,
    tokenizer: str | None,
    variants: dict[str, dict[str, Any]],
    log_dir: Path,
    gpu: int | None = None,
    base_profile: ProfileName = "gpu",
    rounds: int = 3,
    items: int = 100,
) -> dict[str, Any]:
    """One-at-a-time latency of server variants, all started side by side (on ``gpu``) and
    measured one request at a time in interleaved rounds: raw HTTP (the classifier's own
    request body; the same without logprobs, to price them) and ``QwenClassifier.invoke``,
    every request with a text new to its server (nothing of it in the prefix cache).
    Each variant is ``{"flags": [...], "drop": [...], "env": {...}}``: ``base_profile``'s flags
    without those in ``drop``, then ``flags``. ``"torch_profile": N`` also traces N single
    requests with vLLM's torch profiler and splits its engine steps into CPU and GPU time
    (:func:`summarize_step_trace`); ``"startup_timeout"`` (s) gives up on a variant sooner."""
    import httpx

    from langchain_qwen_fast.serving.launcher import PROFILES, VLLMServer, drop_flags, share_gpu_memory

    servers: dict[str, VLLMServer] = {}
    report: dict[str, Any] = {}
    traced: dict[str, tuple[int, Path]] = {}
    for n, (name, variant) in enumerate(variants.items()):
        profile, flags = base_profile, list(variant.get("flags", []))
        if variant.get("drop"):
            flags = drop_flags(PROFILES[base_profile].args, variant["drop"]) + flags
            profile = "default"
        if variant.get("torch_profile"):
            trace_dir = (log_dir / f"trace-{n}").resolve()
            traced[name] = (int(variant["torch_profile"]), trace_dir)
            flags += ["--profiler-config", json.dumps({**TRACE_SETTINGS, "torch_profiler_dir": str(trace_dir)})]
        env = {
            **PROFILES[base_profile].env,  # kept when flags are dropped (the "default" profile has none)
            **({"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else {}),
            **variant.get("env", {}),
        }
        if gpu is not None:  # all on one card
            flags = list(share_gpu_memory(flags, len(variants)))
        servers[name] = VLLMServer(
            model,
            profile=profile,
            served_model_name=model_name,
            extra_args=flags,
            env=env,
            log_path=log_dir / f"latency-{n}.log",
            startup_timeout=float(variant.get("startup_timeout", 600)),
        )
        report[name] = {"flags": flags, "env": variant.get("env", {})}
    try:
        for server in servers.values():
            server.spawn()
        ready: dict[str, Any] = {}
        for name, server in servers.items():
            try:
                server.wait_ready()
                ready[name] = warm_classifier([server.base_url], model_name, tokenizer)
            except Exception as exc:  # one variant that does not start must not lose the others
                report[name]["error"] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
        # every request a text new to its server (see fresh_texts)
        kinds = ("raw", "raw_no_logprobs", "invoke")
        measured = rounds * items * len(kinds)
        texts = fresh_texts(measured + max((requests for requests, _ in traced.values()), default=0))
        samples: dict[str, dict[str, list[float]]] = {name: {kind: [] for kind in kinds} for name in ready}
        roots = {name: servers[name].base_url.removesuffix("/v1") for name in ready}
        bodies: dict[str, list[dict[str, Any]]] = {}
        for name, classifier in ready.items():
            plan = classifier.prepare()
            prompts = plan.encode(texts) if tokenizer else [plan.render(text) for text in texts]
            bodies[name] = [vllm_api.completions_body(plan, model_name, 0, [prompt]) for prompt in prompts]
        stages_before = {name: histogram_totals(root) for name, root in roots.items()}
        with httpx.Client(timeout=30) as http:

            def timed_post(url: str, body: dict[str, Any]) -> float:
                t0 = time.perf_counter()
                http.post(url, json=body).raise_for_status()
                return (time.perf_counter() - t0) * 1000

            for first in range(0, measured, items * len(kinds)):  # a round: every variant in turn
                for name, classifier in ready.items():
                    url = f"{servers[name].base_url}/completions"
                    for k in range(first, first + items * len(kinds), len(kinds)):
                        samples[name]["raw"].append(timed_post(url, bodies[name][k]))
                        samples[name]["raw_no_logprobs"].append(timed_post(url, without_logprobs(bodies[name][k + 1])))
                        t0 = time.perf_counter()
                        classifier.invoke(texts[k + 2])
                        samples[name]["invoke"].append((time.perf_counter() - t0) * 1000)
            for name, got in samples.items():
                report[name]["raw_http_p50_ms"] = percentile(got["raw"], 50)
                report[name]["raw_http_no_logprobs_p50_ms"] = percentile(got["raw_no_logprobs"], 50)
                report[name]["invoke_p50_ms"] = percentile(got["invoke"], 50)
                report[name]["raw_http_p10_ms"] = percentile(got["raw"], 10)
                stages = stage_means(stages_before[name], histogram_totals(roots[name]))  # empty unless stats are on
                if stages:
                    report[name]["server_stage_mean_ms"] = stages
            for name, (requests, trace_dir) in traced.items():
                if name in ready:
                    url = f"{servers[name].base_url}/completions"
                    send = lambda body, url=url: timed_post(url, body)  # noqa: E731
                    report[name]["engine_steps"] = traced_steps(
                        roots[name], send, bodies[name][measured : measured + requests], trace_dir
                    )
    finally:
        for server in servers.values():
            server.stop()
    print(json.dumps(report, indent=1), flush=True)
    return report


def without_logprobs(body: Mapping[str, Any]) -> dict[str, Any]:
    """A completions body asking the same step for its sampled token only (no logprobs)."""
    return {k: v for k, v in body.items() if k not in ("logprobs", "logprob_token_ids", "allowed_token_ids")}


#: vLLM's ``--profiler-config`` for :func:`traced_steps`: the engine's torch profiler without
#: Python stacks (their cost would stretch the CPU side of each step), and not the API process.
TRACE_SETTINGS = {"profiler": "torch", "torch_profiler_with_stack": False, "ignore_frontend": True}

#: trace event categories that are work on the GPU
_GPU_EVENTS = ("kernel", "gpu_memcpy", "gpu_memset")


def traced_steps(
    root_url: str,
    send: Callable[[dict[str, Any]], Any],
    bodies: Sequence[dict[str, Any]],
    trace_dir: Path,
    wait: float = 180.0,
) -> dict[str, Any]:
    """Send ``bodies`` one at a time inside vLLM's torch profiler (a server started with
    :data:`TRACE_SETTINGS` and ``trace_dir``) and summarise the trace it writes (waiting up to
    ``wait`` seconds for it)."""
    import gzip

    import httpx

    httpx.post(f"{root_url}/start_profile", timeout=120).raise_for_status()
    for body in bodies:
        send(body)
    httpx.post(f"{root_url}/stop_profile", timeout=600).raise_for_status()
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:  # the worker writes its trace after stop_profile returns
        for path in trace_dir.rglob("*.json*"):
            try:
                with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as file:
                    summary = summarize_step_trace(json.load(file))
            except (OSError, EOFError, ValueError):  # still being written
                continue
            if summary["steps"]:
                return {**summary, "requests": len(bodies), "trace": path.name}
        time.sleep(1.0)
    return {"steps": 0, "error": f"no trace with engine steps under {trace_dir} after {wait:.0f} s"}


def summarize_step_trace(trace: Mapping[str, Any], top: int = 12) -> dict[str, Any]:
    """Where each engine step's time goes, from a torch profiler trace (Chrome JSON) of a
    vLLM engine: a step is the worker's ``execute_...`` annotation with tokens scheduled, and
    the GPU work that starts between it and the next step is the step's. Per step (median):
    the annotation's CPU time, the GPU's busy time (union of kernels and copies), the number
    of GPU operations, and from the step's start to its first and to its last GPU work (steps
    with GPU work only); and the GPU operations that take most time, in µs a step."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    steps = sorted((e for e in events if _is_step(e)), key=lambda e: float(e["ts"]))
    gpu = sorted((e for e in events if e.get("cat") in _GPU_EVENTS), key=lambda e: float(e["ts"]))
    rows: list[dict[str, float]] = []
    op_us: dict[str, float] = collections.defaultdict(float)
    for i, step in enumerate(steps):
        start = float(step["ts"])
        end = float(steps[i + 1]["ts"]) if i + 1 < len(steps) else float("inf")
        mine = [e for e in gpu if start <= float(e["ts"]) < end]
        row = {"cpu_ms": float(step.get("dur", 0)) / 1000, "gpu_busy_ms": 0.0, "gpu_ops": float(len(mine))}
        busy, reach = 0.0, start
        for e in mine:  # union of the intervals, sorted by start
            e_start, e_end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
            busy += max(0.0, e_end - max(e_start, reach))
            reach = max(reach, e_end)
            op_us[str(e.get("name", "?"))[:90]] += float(e.get("dur", 0))
        if mine:
            row["gpu_busy_ms"] = busy / 1000
            row["to_first_gpu_ms"] = (float(mine[0]["ts"]) - start) / 1000
            row["to_last_gpu_end_ms"] = (reach - start) / 1000
        rows.append(row)
    if not rows:
        return {"steps": 0}
    keys = dict.fromkeys(key for row in rows for key in row)
    medians = {key: percentile([row[key] for row in rows if key in row], 50) for key in keys}
    return {
        "steps": len(rows),
        "median": {key: round(value, 3) for key, value in medians.items() if value is not None},
        "top_gpu_ops_us_per_step": {
            name: round(us / len(rows), 1) for name, us in sorted(op_us.items(), key=lambda kv: -kv[1])[:top]
        },
    }


def _is_step(event: Mapping[str, Any]) -> bool:
    """A worker's step annotation (``execute_context_1(97)_generation_0(0)`` and the like)
    with tokens in it: vLLM also annotates steps that schedule nothing."""
    name = str(event.get("name", ""))
    return (
        event.get("cat") == "user_annotation"
        and name.startswith("execute_")
        and any(int(n) for n in re.findall(r"\d+", name))
    )


def profile(pid: int, seconds: float, load: Callable[[], Any], out: Path, top: int = 25) -> dict[str, Any]:
    """py-spy samples of process ``pid`` and its children while ``load`` runs: per process,
    the share of samples in each function (self) and under each function (inclusive)."""
    raw = out / f"py-spy-{pid}.txt"
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        return {"error": "py-spy is not installed"}
    command = [spy, "record", "--pid", str(pid), "--subprocesses", "--duration", str(int(seconds))]
    command += ["--rate", "200", "--format", "raw", "--output", str(raw), "--nonblocking"]
    recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)
    while recorder.poll() is None:
        load()
    if not raw.is_file():
        return {"error": (recorder.stderr.read() if recorder.stderr else b"").decode()[-2000:]}
    return summarize_profile(raw.read_text(), top)


def summarize_profile(collapsed: str, top: int = 25) -> dict[str, Any]:
    """From py-spy's raw (collapsed) output: per process, samples, and the top functions by
    self and by inclusive share."""
    self_counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    totals: collections.Counter[str] = collections.Counter()
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        # With --subprocesses a child's stack starts with its ancestors' "process PID:cmdline".
        owners = [f for f in frames if f.startswith("process ")]
        process = owners[-1].partition(":")[2].strip('"')[:60] if owners else "process"
        calls = [f for f in frames if not f.startswith(("process ", "thread "))]
        totals[process] += count
        if calls:
            self_counts[process][_short(calls[-1])] += count
        for name in {_short(f) for f in calls}:
            inclusive[process][name] += count
    report = {}
    for process, total in totals.most_common():
        report[process] = {
            "samples": total,
            "self_pct": {k: round(100 * v / total, 1) for k, v in self_counts[process].most_common(top)},
            "inclusive_pct": {k: round(100 * v / total, 1) for k, v in inclusive[process].most_common(top)},
        }
    return report


def _short(frame: str) -> str:
    """``function (path/to/module.py:123)`` as ``function (module.py)``."""
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.split(':')[0]).name})" if where else name


def add_parser(sub: Any) -> None:
    """Add the ``bench-scale`` subcommand to the ``qwen-fast`` parser."""
    parser = sub.add_parser(
        "bench-scale",
        help="several servers per GPU: default load against a sweep, router against client, profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, help="model directory (or hub id) to serve")
    parser.add_argument("--gpus", help="'all' or indices such as 0,1 (default: every GPU there is; none: CPU servers)")
    parser.add_argument("--servers-per-gpu", type=int, default=1, help="servers on each GPU (default: 1)")
    parser.add_argument("--profile", default="auto", choices=["auto", "cpu", "gpu", "default"])
    parser.add_argument("--model-name", default="qwen3", help="served model name")
    parser.add_argument("--tokenizer", help="the model's tokenizer for token-id prompts (default: MODEL)")
    parser.add_argument("--subsets", help="numbers of servers to spread over, e.g. 1,2,4 (default: all)")
    parser.add_argument("--sweep-subsets", default="", help="subsets that also get the sweep, e.g. 1,4")
    parser.add_argument("--items", type=int, default=8192, help="items per throughput run")
    parser.add_argument("--router", choices=["round_robin", "power_of_two", "random"], help="also measure the router")
    parser.add_argument("--router-servers", type=int, help="servers behind the router (default: all)")
    parser.add_argument("--compare-request-shape", action="store_true", help="with and without allowed_token_ids")
    parser.add_argument("--profile-seconds", type=float, default=0, help="py-spy one server under load this long")
    parser.add_argument("--server-arg", action="append", default=[], help="extra vLLM flag (repeatable)")
    parser.add_argument("--mps", action="store_true", help="run the servers under NVIDIA MPS (see qwen-fast serve)")
    parser.add_argument("--mode", choices=["generate", "head"], default="generate", help="the model's kind")
    parser.add_argument(
        "--client-processes", default="", help="also run the defaults spread over N client processes, e.g. 2,4"
    )
    parser.add_argument("--capabilities-subsets", default="", help="capability rows over the first k servers, e.g. 1,4")
    parser.add_argument(
        "--capabilities-items-per-server", type=int, default=2048, help="texts per capability run, per server"
    )
    parser.add_argument("--capabilities-rounds", type=int, default=2, help="alternating rounds of the capability rows")
    parser.add_argument(
        "--capabilities-row",
        action="append",
        choices=CAPABILITY_ROWS,
        help="a capability row to run (repeatable; default: all; zero-shot always runs)",
    )
    parser.add_argument(
        "--scaling-rounds",
        type=int,
        default=0,
        help="then the defaults over the smallest and the largest subset in this many interleaved rounds",
    )
    parser.add_argument(
        "--profile-one-at-a-time", action="store_true", help="--profile-seconds under single requests, not batches"
    )
    parser.add_argument(
        "--latency-variants",
        help="JSON file of server variants ({name: {flags, drop, env}}) for one-at-a-time latency, after the group",
    )
    parser.add_argument("--out", default="out/scale", help="folder for scale.json and the py-spy samples")
    parser.add_argument("--label", default="", help="free text naming the machine, kept in the JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``qwen-fast bench-scale``."""
    measure(args)
    return 0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Start the servers, run every part asked for, write ``scale.json``; returns the report."""
    from langchain_qwen_fast.serving.launcher import ServerGroup, gpu_count, has_gpu, parse_gpus

    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    tokenizer = args.tokenizer or (args.model if (Path(args.model) / "tokenizer.json").is_file() else None)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "label": args.label,
        "machine": f"{platform.node()} python {platform.python_version()}",
        "servers_per_gpu": args.servers_per_gpu,
        "server_args": args.server_arg,
        "items": args.items,
    }
    save = lambda: (out / "scale.json").write_text(json.dumps(report, indent=1))  # noqa: E731
    gpus = parse_gpus(args.gpus) if args.gpus else list(range(gpu_count()))
    base_profile: ProfileName = args.profile if args.profile != "auto" else ("gpu" if has_gpu() else "cpu")
    settings = {"profile": args.profile, "served_model_name": args.model_name, "extra_args": args.server_arg}
    report["mps"] = args.mps
    report["host_cpus"] = host_cpus()
    group = ServerGroup(
        args.model, gpus=gpus, servers_per_gpu=args.servers_per_gpu, mps=args.mps, log_dir=out / "logs", **settings
    )
    started = time.perf_counter()
    with group:
        report["startup_s"] = round(time.perf_counter() - started, 1)
        report["gpu_memory_mib"] = gpu_memory_mib()
        print(f"{len(group.servers)} servers ready in {report['startup_s']} s; GPU MiB {report['gpu_memory_mib']}")
        urls, pids = group.base_urls, group.pids
        sampler = GpuSampler() if shutil.which("nvidia-smi") else None
        report["p50_ms_one_server"] = one_at_a_time_p50(
            warm_classifier(urls[:1], args.model_name, tokenizer, mode=args.mode), 200
        )
        sizes = [int(k) for k in args.subsets.split(",")] if args.subsets else [len(urls)]
        sweep = {int(k) for k in args.sweep_subsets.split(",") if k}
        processes = [int(n) for n in args.client_processes.split(",") if n]
        report["subsets"] = []
        for k in sizes:
            t0 = time.perf_counter()
            row = measure_subset(
                urls[:k], args.model_name, tokenizer, args.items, pids[:k], k in sweep, args.mode, processes
            )
            if sampler:
                row["gpu"] = sampler.window(t0, time.perf_counter())
            report["subsets"].append(row)
            save()
        if args.router:
            behind = urls[: args.router_servers or len(urls)]
            report["router"] = router_against_client(behind, args.model_name, tokenizer, args.items, args.router, out)
            save()
        if args.compare_request_shape:
            report["request_shape"] = request_shape(urls[0], args.model_name, tokenizer, args.items)
            save()
        if args.scaling_rounds:
            ends = {min(sizes), max(sizes)}
            layouts = {k: (urls[:k], pids[:k]) for k in ends}
            report["scaling"] = scaling_rounds(
                layouts, args.model_name, tokenizer, args.items, args.scaling_rounds, args.mode, sampler
            )
            save()
        wanted = args.capabilities_row or CAPABILITY_ROWS
        for k in [int(k) for k in args.capabilities_subsets.split(",") if k]:
            texts = news_items(args.capabilities_items_per_server * k)
            rows, ratios = run_capabilities(
                urls[:k], args.model_name, tokenizer, texts, args.capabilities_rounds, wanted, pids[:k]
            )
            report.setdefault("capabilities", []).append(
                {
                    "servers": k,
                    "items": len(texts),
                    "rounds": args.capabilities_rounds,
                    "per_s": {r.name: round(r.rps, 1) for r in rows},
                    "ratios": ratios,
                    "us_per_item": {
                        r.name: us_per_item({**r.server_cores, "client": r.cpu_seconds / r.seconds}, r.rps)
                        for r in rows
                    },
                }
            )
            print(json.dumps(report["capabilities"][-1]), flush=True)
            save()
        if args.profile_seconds:
            load = warm_classifier(urls[:1], args.model_name, tokenizer, mode=args.mode)
            texts = news_items(args.items)
            work = (
                (lambda: [load.invoke(t) for t in texts[:50]])
                if args.profile_one_at_a_time
                else (lambda: asyncio.run(load.abatch(texts)))
            )
            report["profile"] = profile(pids[0], args.profile_seconds, work, out)
            report["profile_load"] = "one at a time" if args.profile_one_at_a_time else "abatch"
            save()
        if sampler:
            sampler.stop()
    if args.latency_variants:
        variants = json.loads(Path(args.latency_variants).read_text())
        report["latency_variants"] = latency_variants(
            args.model, args.model_name, tokenizer, variants, out / "logs", gpus[0] if gpus else None, base_profile
        )
    save()
    print(json.dumps({k: v for k, v in report.items() if k != "profile"}, indent=1))
    print(f"wrote {out / 'scale.json'}")
    return report


__all__ = [
    "add_parser",
    "latency_variants",
    "measure",
    "run",
    "scaling_rounds",
    "summarize_profile",
    "summarize_step_trace",
    "traced_steps",
    "us_per_item",
    "warm_classifier",
    "without_logprobs",
]
