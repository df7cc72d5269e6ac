"""One request at a time on server variants started side by side: raw HTTP with the
classifier's own request body (and the same without logprobs, to price them) and
``QwenClassifier.invoke``, in interleaved rounds, every request a text new to its server; with
a variant's ``"torch_profile"``, its engine steps traced and split into CPU and GPU time
(:mod:`benchmarks.traces`). ``python -m benchmarks.scale --latency-variants FILE``."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import warm_classifier
from benchmarks.sampling import histogram_totals, stage_means
from benchmarks.traces import TRACE_SETTINGS, StepTrace, traced_steps
from benchmarks.variants import Variant, resolve_profile, variant_flags
from langchain_qwen_fast.bench.measure import RunContext, percentile
from langchain_qwen_fast.bench.paths import request_body

if TYPE_CHECKING:
    from langchain_qwen_fast.serving import ProfileName, VLLMServer

#: what each variant is timed on, one request of each in turn
KINDS = ("raw", "raw_no_logprobs", "invoke")


@dataclass
class VariantLatency:
    """One variant: how its server started (flags, environment, frontend) and, measured, the
    p50 of raw HTTP with and without logprobs and of ``invoke`` (ms), raw HTTP's p10, vLLM's
    own stage means where it keeps stats, its traced engine steps; or why it was not measured."""

    flags: list[str]
    env: dict[str, str]
    frontend: str
    raw_http_p50_ms: float | None = None
    raw_http_no_logprobs_p50_ms: float | None = None
    invoke_p50_ms: float | None = None
    raw_http_p10_ms: float | None = None
    server_stage_mean_ms: dict[str, float] = field(default_factory=dict)
    engine_steps: StepTrace | None = None
    engine_steps_error: str | None = None
    error: str | None = None


def without_logprobs(body: Mapping[str, Any]) -> dict[str, Any]:
    """A completions body asking the same step for its sampled token only (no logprobs)."""
    return {k: v for k, v in body.items() if k not in ("logprobs", "logprob_token_ids", "allowed_token_ids")}


def _servers(
    model: str,
    model_name: str,
    variants: dict[str, Variant],
    log_dir: Path,
    gpu: int | None,
    base_profile: ProfileName,
) -> tuple[dict[str, VLLMServer], dict[str, VariantLatency], dict[str, tuple[int, Path]]]:
    """A server for each variant (not started), each variant's report entry, and the traced
    variants' request counts and trace folders."""
    from langchain_qwen_fast.serving import PROFILES, VLLMServer, share_gpu_memory

    servers: dict[str, VLLMServer] = {}
    report: dict[str, VariantLatency] = {}
    traced: dict[str, tuple[int, Path]] = {}
    for n, (name, variant) in enumerate(variants.items()):
        profile, flags = variant_flags(variant, base_profile)
        if variant.torch_profile:
            trace_dir = (log_dir / f"trace-{n}").resolve()
            traced[name] = (variant.torch_profile, trace_dir)
            flags += ["--profiler-config", json.dumps({**TRACE_SETTINGS, "torch_profiler_dir": str(trace_dir)})]
        env = {
            # kept when flags are dropped (the "default" profile has none)
            **PROFILES[resolve_profile(variant.profile or base_profile)].env,
            **({"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else {}),
            **variant.env,
        }
        if gpu is not None:  # all on one card
            flags = list(share_gpu_memory(flags, len(variants)))
        servers[name] = VLLMServer(
            model,
            profile=profile,
            frontend=variant.frontend,
            served_model_name=model_name,
            extra_args=flags,
            env=env,
            log_path=log_dir / f"latency-{n}.log",
            startup_timeout=variant.startup_timeout,
        )
        report[name] = VariantLatency(flags=flags, env=dict(variant.env), frontend=servers[name].frontend)
    return servers, report, traced


def latency_variants(
    run: RunContext,
    model: str,
    model_name: str,
    tokenizer: str | None,
    variants: dict[str, Variant],
    log_dir: Path,
    gpu: int | None = None,
    base_profile: ProfileName = "gpu",
    rounds: int = 3,
    items: int = 100,
) -> dict[str, VariantLatency]:
    """One-at-a-time latency of server variants, all started side by side (on ``gpu``) and
    measured one request at a time in interleaved rounds: raw HTTP (the classifier's own
    request body; the same without logprobs, to price them) and ``QwenClassifier.invoke``,
    every request with a text new to its server (from ``run.fresh_texts``: nothing of it in
    the prefix cache). Each variant's flags come from ``base_profile``
    (:func:`~benchmarks.variants.variant_flags`); it is served by vLLM's Python API server or,
    with ``frontend="rust"``, its Rust frontend. ``torch_profile=N`` also traces N single
    requests with vLLM's torch profiler and splits its engine steps into CPU and GPU time;
    ``startup_timeout`` gives up on a variant sooner. A variant that does not start gets an
    ``error`` and the others are measured."""
    import httpx

    servers, report, traced = _servers(model, model_name, variants, log_dir, gpu, base_profile)
    try:
        for server in servers.values():
            server.spawn()
        ready: dict[str, Any] = {}
        for name, server in servers.items():
            try:
                server.wait_ready()
                ready[name] = warm_classifier([server.base_url], model_name, tokenizer)
            except Exception as exc:  # one variant that does not start must not lose the others
                report[name].error = f"{type(exc).__name__}: {str(exc)[-1500:]}"
        measured = rounds * items * len(KINDS)
        texts = run.fresh_texts(measured + max((requests for requests, _ in traced.values()), default=0))
        samples: dict[str, dict[str, list[float]]] = {name: {kind: [] for kind in KINDS} for name in ready}
        roots = {name: servers[name].base_url.removesuffix("/v1") for name in ready}
        bodies: dict[str, list[dict[str, Any]]] = {}
        for name, classifier in ready.items():
            plan = classifier.prepare()
            prompts = plan.encode(texts) if tokenizer else [plan.render(text) for text in texts]
            bodies[name] = [request_body(plan, model_name, [prompt]) for prompt in prompts]
        stages_before = {name: histogram_totals(root) for name, root in roots.items()}
        with httpx.Client(timeout=30) as http:

            def timed_post(url: str, body: dict[str, Any]) -> float:
                t0 = time.perf_counter()
                http.post(url, json=body).raise_for_status()
                return (time.perf_counter() - t0) * 1000

            for first in range(0, measured, items * len(KINDS)):  # a round: every variant in turn
                for name, classifier in ready.items():
                    url = f"{servers[name].base_url}/completions"
                    for k in range(first, first + items * len(KINDS), len(KINDS)):
                        samples[name]["raw"].append(timed_post(url, bodies[name][k]))
                        samples[name]["raw_no_logprobs"].append(timed_post(url, without_logprobs(bodies[name][k + 1])))
                        t0 = time.perf_counter()
                        classifier.invoke(texts[k + 2])
                        samples[name]["invoke"].append((time.perf_counter() - t0) * 1000)
            for name, got in samples.items():
                row = report[name]
                row.raw_http_p50_ms = percentile(got["raw"], 50)
                row.raw_http_no_logprobs_p50_ms = percentile(got["raw_no_logprobs"], 50)
                row.invoke_p50_ms = percentile(got["invoke"], 50)
                row.raw_http_p10_ms = percentile(got["raw"], 10)
                row.server_stage_mean_ms = stage_means(stages_before[name], histogram_totals(roots[name]))
            for name, (requests, trace_dir) in traced.items():
                if name in ready:
                    url = f"{servers[name].base_url}/completions"
                    send = lambda body, url=url: timed_post(url, body)  # noqa: E731
                    try:
                        report[name].engine_steps = traced_steps(
                            roots[name], send, bodies[name][measured : measured + requests], trace_dir
                        )
                    except Exception as exc:  # a frontend without the profiler's routes loses its trace only
                        report[name].engine_steps_error = f"{type(exc).__name__}: {str(exc)[-1500:]}"
    finally:
        for server in servers.values():
            server.stop()
    return report


__all__ = ["KINDS", "VariantLatency", "latency_variants", "without_logprobs"]
