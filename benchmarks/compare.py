"""``qwen-fast bench``'s comparison with the lab's parts added, in the same run and report.

    python -m benchmarks.compare --start-server .models/qwen3-tiny --replicas 2 --sweep --service
    python -m benchmarks.compare --start-server DIR --profile gpu --gpu-sample --offline-ceiling \\
        --compare-quantization fp8 --transformers-baseline --capabilities

Every option of ``qwen-fast bench`` (the paths side by side: raw HTTP, the openai SDK,
ChatOpenAI, LCEL, LLMChain and QwenClassifier, one at a time and in batches), and on request:
the capability rows (--capabilities); many concurrent HTTP clients against qwen-fast api and
vLLM (--service); a quantised server beside the first one, with what quantisation does to the
answers (--compare-quantization METHOD); more servers sharing the GPU with the classifier
spread over all of them (--replicas N); a sweep of prompts a request x requests in flight
(--sweep); vLLM's offline engine and Hugging Face transformers on the classifier's prompts
(--offline-ceiling, --transformers-baseline); GPU utilisation and memory per path
(--gpu-sample). Writes results.json (the comparison's report inside the lab's) and chart.png.
Needs the 'benchmarks' extra; the engine baselines need vLLM (and transformers).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks._options import leaf_defaults, options_from
from benchmarks.sampling import GpuSampler, GpuWindow
from langchain_qwen_fast.bench.compare import (
    CompareOptions,
    CompareReport,
    measure_paths,
    served,
    summarize,
    write_report,
)
from langchain_qwen_fast.bench.measure import (
    PathResult,
    RunContext,
    ready_classifier,
    require,
    run_one_at_a_time,
    timed,
)
from langchain_qwen_fast.errors import ConfigurationError, QwenFastError
from langchain_qwen_fast.testing.samples import news_items

#: the sweep's prompts per request, and its requests in flight per server
SWEEP_SIZES = (64, 128, 256)
SWEEP_IN_FLIGHT = (4, 8, 16)


@dataclass(frozen=True)
class LabParts:
    """The parts beyond the comparison (``--help`` says each); all off by default."""

    replicas: int = 1
    sweep: bool = False
    service: bool = False
    compare_quantization: str | None = None
    transformers_baseline: bool = False
    capabilities: bool = False
    gpu_sample: bool = False
    offline_ceiling: bool = False

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ConfigurationError("replicas is at least 1")

    def needing_a_started_server(self) -> list[str]:
        """The parts asked for that start servers of their own, or load the model here."""
        asked = {
            "replicas": self.replicas > 1,
            "compare_quantization": self.compare_quantization is not None,
            "transformers_baseline": self.transformers_baseline,
            "offline_ceiling": self.offline_ceiling,
        }
        return [name for name, on in asked.items() if on]


@dataclass(frozen=True)
class LabCompareOptions:
    """The comparison's options and the lab's parts."""

    comparison: CompareOptions = field(metadata={"part": CompareOptions})
    parts: LabParts = field(default_factory=LabParts, metadata={"part": LabParts})

    def __post_init__(self) -> None:
        asked = self.parts.needing_a_started_server()
        if asked and self.comparison.start_server is None:
            raise ConfigurationError(f"{', '.join(asked)}: start servers of their own, so need start_server")


@dataclass
class SweepPoint:
    """QwenClassifier.abatch's rate at one point of the sweep."""

    batch_size: int
    max_concurrency: int
    requests_per_s: float


@dataclass
class QuantizationCheck:
    """What quantisation does to the answers: the share of texts with the same label, and the
    mean absolute difference of the label probabilities."""

    argmax_agreement: float
    mean_abs_probability_difference: float


@dataclass
class LabCompareReport:
    """The comparison's report (every row in it) and the lab's parts' own figures."""

    comparison: CompareReport
    replicas: int
    sweep: list[SweepPoint] = field(default_factory=list)
    capability_ratios: dict[str, float] = field(default_factory=dict)
    service_ratios: dict[str, float] = field(default_factory=dict)
    quantization: QuantizationCheck | None = None
    gpu: dict[str, GpuWindow] = field(default_factory=dict)


def compare_quantized(
    run: RunContext,
    base_url: str,
    quantized_url: str,
    model: str,
    tokenizer: str | None,
    texts: list[str],
    invoke_items: int,
    quantization: str,
) -> tuple[list[PathResult], QuantizationCheck]:
    """The same classifier against an unquantised and a quantised server: throughput,
    one-at-a-time latency, and what quantisation does to the answers."""
    results: list[PathResult] = []
    answers = {}
    for name, url in (("bf16", base_url), (quantization, quantized_url)):
        classifier = ready_classifier(url, model, tokenizer)
        answers[name] = classifier.batch(texts)

        def abatch(c: Any = classifier) -> Any:
            return asyncio.run(c.abatch(texts))

        results.append(timed(f"QwenClassifier.abatch, token ids, {name}", len(texts), abatch, run.server_pids))
        results += run_one_at_a_time(
            run, {f"QwenClassifier.invoke, token ids, {name}": classifier.invoke}, invoke_items
        )
    pairs = list(zip(answers["bf16"], answers[quantization], strict=True))
    agree = sum(a.label == b.label for a, b in pairs) / len(texts)
    diffs = [abs(a.scores[k] - b.scores[k]) for a, b in pairs if a.scores and b.scores for k in a.scores]
    return results, QuantizationCheck(round(agree, 4), round(sum(diffs) / len(diffs), 5))


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
) -> list[SweepPoint]:
    """QwenClassifier.abatch throughput for each (prompts per request, requests in flight)."""
    texts = news_items(items)
    points = []
    for size in sizes:
        for concurrency in concurrencies:
            classifier = ready_classifier(base_url, model, tokenizer, batch_size=size, max_concurrency=concurrency)
            t0 = time.perf_counter()
            asyncio.run(classifier.abatch(texts))
            points.append(SweepPoint(size, concurrency, round(items / (time.perf_counter() - t0), 1)))
            print(f"batch_size {size:>4}  in flight {concurrency:>3}: {points[-1].requests_per_s:8.1f}/s", flush=True)
    return points


def run_lab_compare(options: LabCompareOptions) -> LabCompareReport:
    """The comparison and every part asked for, on the server(s) of ``options``: measured,
    written to ``results.json`` and ``chart.png`` and printed; returns the report."""
    from benchmarks.baselines import offline_ceiling, transformers_baseline
    from benchmarks.capabilities import run_capabilities
    from benchmarks.service import run_service

    c, parts = options.comparison, options.parts
    require("tqdm", "langchain_classic", "matplotlib")
    if parts.transformers_baseline or parts.offline_ceiling:
        require(*(("transformers", "torch") if parts.transformers_baseline else ()), "vllm", extra="server")
    if parts.gpu_sample and not GpuSampler.available():
        raise ConfigurationError("gpu_sample needs nvidia-smi, which is not on the PATH")
    c.out.mkdir(parents=True, exist_ok=True)
    run = RunContext()
    sampler = GpuSampler() if parts.gpu_sample else None
    texts = news_items(c.items)
    capability_ratios: dict[str, float] = {}
    service_ratios: dict[str, float] = {}
    quantization: QuantizationCheck | None = None
    points: list[SweepPoint] = []
    prompts: list[str] = []
    try:
        with contextlib.ExitStack() as servers:
            url = servers.enter_context(served(c, run))
            results, tokens = measure_paths(run, url, c)
            if parts.offline_ceiling or parts.transformers_baseline:
                plan = ready_classifier(url, c.model).prepare()
                prompts = [plan.render(t) for t in texts]  # the classifier's own prompts, for the engines
            if parts.capabilities:
                rows, capability_ratios = run_capabilities(url, c.model, c.tokenizer, texts, pids=run.server_pids)
                results += rows
            if parts.service:
                rows, service_ratios = run_service(run, [url], c.model, c.tokenizer, texts)
                results += rows
            if parts.compare_quantization:
                method = parts.compare_quantization
                quantized = servers.enter_context(served(c, run, "server-quantized", quantization=method))
                rows, quantization = compare_quantized(
                    run, url, quantized, c.model, c.tokenizer, texts, c.invoke_items, method
                )
                results += rows
            urls = [url]
            if parts.replicas > 1:
                urls += [servers.enter_context(served(c, run, f"server-{k}")) for k in range(1, parts.replicas)]
                results += run_replicas(run, urls, c.model, c.tokenizer, texts, c.invoke_items)
            if parts.sweep:
                in_flight = [n * len(urls) for n in SWEEP_IN_FLIGHT]
                target = urls if len(urls) > 1 else url
                points = sweep(target, c.model, c.tokenizer, c.items, SWEEP_SIZES, in_flight)
        if c.start_server and parts.offline_ceiling:
            results += offline_ceiling(c.start_server, prompts)
        if c.start_server and parts.transformers_baseline:
            results += transformers_baseline(c.start_server, prompts[:2048])
    finally:
        if sampler is not None:
            sampler.stop()
    lab = LabCompareReport(
        comparison=summarize(c, url, results, tokens),
        replicas=parts.replicas,
        sweep=points,
        capability_ratios=capability_ratios,
        service_ratios=service_ratios,
        quantization=quantization,
        gpu={r.name: sampler.window(*r.window) for r in results} if sampler is not None else {},
    )
    write_report(lab.comparison, c.out, whole=lab)
    for key, value in {**lab.capability_ratios, **lab.service_ratios}.items():
        print(f"{key}: {value}")
    if lab.quantization is not None:
        print(f"quantization: {lab.quantization}")
    return lab


def build_parser() -> argparse.ArgumentParser:
    """``python -m benchmarks.compare``'s options: ``qwen-fast bench``'s and the lab's parts',
    one per leaf field of :class:`LabCompareOptions`, whose defaults they take."""
    from langchain_qwen_fast.cli import bench

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    bench.add_arguments(parser)
    add = parser.add_argument
    add(
        "--replicas",
        type=int,
        help="with --start-server: then start more servers on the same GPU and measure QwenClassifier spread "
        "over all of them",
    )
    add("--sweep", action="store_true", help="also sweep batch_size × max_concurrency")
    add("--service", action="store_true", help="also run 256 concurrent HTTP clients against qwen-fast api and vLLM")
    add(
        "--compare-quantization",
        metavar="METHOD",
        help="with --start-server: also start a server with --quantization METHOD (e.g. fp8) and compare",
    )
    add(
        "--transformers-baseline",
        action="store_true",
        help="with --start-server: also time Hugging Face transformers (generate, linear head) on the same prompts",
    )
    add(
        "--capabilities",
        action="store_true",
        help="also time multi-label, few-shot examples, an example selector and 40 labels against zero-shot",
    )
    add("--gpu-sample", action="store_true", help="sample GPU utilisation and memory per path")
    add(
        "--offline-ceiling",
        action="store_true",
        help="also run vLLM's offline engine in this process on the classifier's prompts (needs --start-server)",
    )
    parser.set_defaults(**leaf_defaults(LabParts))
    return parser


def lab_options(args: argparse.Namespace) -> LabCompareOptions:
    """The typed options of parsed arguments, the token-id paths' tokenizer resolved as
    ``qwen-fast bench`` resolves it."""
    from langchain_qwen_fast.cli.bench import compare_options

    return LabCompareOptions(comparison=compare_options(args), parts=options_from(LabParts, args))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison with ``argv`` (default: the process's arguments); the exit code."""
    args = build_parser().parse_args(argv)
    try:
        run_lab_compare(lab_options(args))
    except QwenFastError as exc:
        print(f"benchmarks.compare: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "LabCompareOptions",
    "LabCompareReport",
    "LabParts",
    "QuantizationCheck",
    "SweepPoint",
    "build_parser",
    "compare_quantized",
    "lab_options",
    "main",
    "run_lab_compare",
    "run_replicas",
    "sweep",
]
