"""One server per flag set, started in turn and each measured briefly.

    python -m benchmarks.flags --start-server DIR --flags server/gpu_flags.json --profile gpu --gpu-sample
    python -m benchmarks.flags --start-server DIR --mode head --flags server/gpu_head_flags.json

FILE is {"name": {"profile": ..., "drop": [...], "flags": [...], "env": {...}}, ...}: a server
per entry with the profile's flags without those in drop, then flags. Each is measured one
request at a time (raw HTTP with the classifier's exact request, and QwenClassifier.invoke,
with vLLM's own per-stage means where the server keeps stats) and with QwenClassifier.abatch
(text and token-id prompts), with GPU utilisation and memory on request (--gpu-sample).
--mode head measures a classification-head model (/classify). --offline-ceiling adds vLLM's
offline engine in this process on the classifier's prompts. Writes flags.json after each
server, so a run cut short keeps what it measured. Needs the 'benchmarks' extra.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from benchmarks._options import leaf_defaults, options_from
from benchmarks.sampling import GpuSampler, GpuWindow, histogram_totals, stage_means
from benchmarks.variants import PROFILE_CHOICES, load_variants, variant_flags
from langchain_qwen_fast.bench.compare import CompareOptions, served
from langchain_qwen_fast.bench.measure import (
    PathResult,
    RunContext,
    own_tokenizer,
    ready_classifier,
    require,
    run_one_at_a_time,
    timed,
)
from langchain_qwen_fast.bench.paths import IDS, all_classifier_runs, build_paths, head_request
from langchain_qwen_fast.bench.report import Header, header, write_json
from langchain_qwen_fast.errors import ConfigurationError, QwenFastError
from langchain_qwen_fast.testing.samples import news_items

if TYPE_CHECKING:
    from langchain_qwen_fast.serving import ProfileName


@dataclass(frozen=True)
class FlagsOptions:
    """One run: the model each server serves and its served name, the variants file, the
    profile its variants start from, flags every server gets, the token-id paths' tokenizer
    (None: none), the model's kind, the texts measured, and the parts on request."""

    start_server: str
    flags: Path
    profile: ProfileName = "auto"
    server_args: list[str] = field(default_factory=list)
    model: str = "qwen3"
    tokenizer: str | None = None
    mode: Literal["generate", "head"] = "generate"
    items: int = 512
    invoke_items: int = 200
    gpu_sample: bool = False
    offline_ceiling: bool = False
    out: Path = Path("out/flags")
    label: str = ""

    def server(self) -> CompareOptions:
        """The options :func:`~langchain_qwen_fast.bench.compare.served` starts a server with."""
        return CompareOptions(
            start_server=self.start_server,
            profile=self.profile,
            server_args=list(self.server_args),
            model=self.model,
            tokenizer=self.tokenizer,
            items=self.items,
            invoke_items=self.invoke_items,
            out=self.out,
            label=self.label,
        )


@dataclass
class PathFigures:
    """One path on one server: its rate, p50 (one at a time), the cores busy, the GPUs."""

    requests_per_s: float
    p50_ms: float | None = None
    cores_busy: dict[str, float] | None = None
    gpu: GpuWindow | None = None


@dataclass
class FlagsRun:
    """One server: its profile and flags, seconds to start, each path's figures, vLLM's stage
    means one at a time (where it keeps stats), or why it was not measured."""

    profile: str
    flags: list[str]
    startup_s: float | None = None
    paths: dict[str, PathFigures] = field(default_factory=dict)
    server_stage_mean_ms: dict[str, float] = field(default_factory=dict)
    error: str | None = None


@dataclass
class FlagsReport:
    """What ``flags.json`` holds: each server's run, and the offline engine's rows."""

    header: Header
    runs: dict[str, FlagsRun] = field(default_factory=dict)
    offline: dict[str, PathFigures] = field(default_factory=dict)


def build_head_paths(
    base_url: str, model: str, tokenizer: str | None
) -> tuple[dict[str, Callable[[str], Any]], Any, Any]:
    """A classification-head server's one-at-a-time paths (raw HTTP with the classifier's exact
    ``/classify`` request, and the classifier), the classifier, and the token-id one (or None)."""
    import httpx

    classifier = ready_classifier(base_url, model, mode="head")
    plan = classifier.prepare()
    http = httpx.Client(timeout=30)
    root = base_url.rstrip("/").removesuffix("/v1")

    def raw_http(text: str) -> Any:
        path, body = head_request(plan, model, [plan.render(text)])
        return http.post(root + path, json=body).json()["data"][0]

    paths: dict[str, Callable[[str], Any]] = {
        "raw HTTP (httpx), same request": raw_http,
        "QwenClassifier.invoke": classifier.invoke,
    }
    with_ids = ready_classifier(base_url, model, tokenizer, mode="head") if tokenizer else None
    if with_ids is not None:
        paths[f"QwenClassifier.invoke{IDS}"] = with_ids.invoke
    return paths, classifier, with_ids


def measure_flags(run: RunContext, url: str, options: FlagsOptions, sampler: GpuSampler | None) -> FlagsRun:
    """A short measurement of the server at ``url``: one-at-a-time latency (raw HTTP and
    QwenClassifier, with vLLM's own per-stage means when it keeps stats) and
    QwenClassifier.abatch throughput with text and token-id prompts (the run's profile and
    flags are filled in by the caller)."""
    if options.mode == "head":
        paths, classifier, with_ids = build_head_paths(url, options.model, options.tokenizer)
    else:
        paths, objects = build_paths(url, options.model, options.tokenizer)
        classifier, with_ids = objects.classifier, objects.classifier_ids
    keep = {name: fn for name, fn in paths.items() if name.startswith(("raw HTTP", "QwenClassifier.invoke"))}
    root = url.rstrip("/").removesuffix("/v1")
    before = histogram_totals(root)
    results: list[PathResult] = run_one_at_a_time(run, keep, options.invoke_items)
    after = histogram_totals(root)
    runs = all_classifier_runs(classifier, with_ids, news_items(options.items), None)
    results += [timed(name, n, fn, run.server_pids) for name, n, fn in runs if ".abatch" in name]
    measured = FlagsRun(profile="", flags=[], server_stage_mean_ms=stage_means(before, after))
    for r in results:
        measured.paths[r.name] = PathFigures(
            requests_per_s=round(r.rps, 1),
            p50_ms=r.summary(r.rps).p50_ms,
            cores_busy=r.summary(r.rps).cores_busy,
            gpu=sampler.window(*r.window) if sampler else None,
        )
    return measured


def run_flags(options: FlagsOptions) -> FlagsReport:
    """One server per entry of ``options.flags`` (see :mod:`benchmarks.variants`), started in
    turn and measured by :func:`measure_flags`; ``flags.json`` in ``options.out`` is written
    after each."""
    from benchmarks.baselines import offline_ceiling

    require("tqdm", *(("langchain_classic",) if options.mode == "generate" else ()))
    if options.offline_ceiling:
        require("vllm", extra="server")
    if options.gpu_sample and not GpuSampler.available():
        raise ConfigurationError("gpu_sample needs nvidia-smi, which is not on the PATH")
    configs = load_variants(options.flags)
    server = options.server()
    run = RunContext()
    sampler = GpuSampler() if options.gpu_sample else None
    report = FlagsReport(header=header(options.label))
    prompts: list[str] = []
    try:
        for n, (name, config) in enumerate(configs.items()):
            profile, flags = variant_flags(config, options.profile)
            t0 = time.perf_counter()
            try:
                with served(server, run, f"flags-{n}", flags, profile) as url:
                    started = round(time.perf_counter() - t0, 1)
                    measured = measure_flags(run, url, options, sampler)
                    if not prompts and options.offline_ceiling:
                        plan = ready_classifier(url, options.model, mode=options.mode).prepare()
                        prompts = [plan.render(t) for t in news_items(options.items)]
                measured.profile, measured.flags, measured.startup_s = profile, flags, started
                report.runs[name] = measured
            except Exception as exc:  # one configuration that does not start must not lose the others
                error = f"{type(exc).__name__}: {str(exc)[-2000:]}"
                report.runs[name] = FlagsRun(profile=profile, flags=flags, error=error)
            write_json(options.out / "flags.json", report)
            print(name, json.dumps(asdict(report.runs[name]), indent=1, default=str), flush=True)
        if options.offline_ceiling and prompts:
            for r in offline_ceiling(options.start_server, prompts):
                gpu = sampler.window(*r.window) if sampler else None
                report.offline[r.name] = PathFigures(requests_per_s=round(r.rps, 1), gpu=gpu)
            write_json(options.out / "flags.json", report)
    finally:
        if sampler is not None:
            sampler.stop()
    print(f"wrote {options.out / 'flags.json'}")
    return report


def build_parser() -> argparse.ArgumentParser:
    """``python -m benchmarks.flags``'s options: one per field of :class:`FlagsOptions`."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.flags", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--start-server", required=True, metavar="MODEL", help="the model every server serves (dir or hub id)")
    add("--flags", required=True, type=Path, metavar="FILE", help="the server variants (JSON, see above)")
    add("--profile", choices=PROFILE_CHOICES, help="the profile the variants start from (default: %(default)s)")
    add(
        "--server-arg",
        dest="server_args",
        metavar="FLAG",
        action="append",
        help="extra vLLM flag for every server (repeatable; --server-arg=--flag)",
    )
    add("--model", help="served model name (default: %(default)s)")
    add(
        "--tokenizer",
        help="the model's tokenizer: adds the token-id paths (default: MODEL when it has a tokenizer.json; "
        "'none' turns them off)",
    )
    add("--mode", choices=["generate", "head"], help="the served model is a chat model or a classification head")
    add("--items", type=int, help="items for the abatch paths (default: %(default)s)")
    add("--invoke-items", type=int, help="items for each one-at-a-time path (default: %(default)s)")
    add("--gpu-sample", action="store_true", help="sample GPU utilisation and memory per path")
    add("--offline-ceiling", action="store_true", help="also run vLLM's offline engine on the classifier's prompts")
    add("--out", type=Path, help="folder for flags.json and the servers' logs (default: %(default)s)")
    add("--label", help="free text naming the machine/model, kept in the JSON")
    parser.set_defaults(**leaf_defaults(FlagsOptions))
    return parser


def flags_options(args: argparse.Namespace) -> FlagsOptions:
    """The typed options of parsed arguments, the tokenizer resolved as ``qwen-fast bench``
    resolves it."""
    tokenizer = own_tokenizer(args.start_server) if args.tokenizer is None else args.tokenizer
    args.tokenizer = None if tokenizer == "none" else tokenizer
    return options_from(FlagsOptions, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison with ``argv`` (default: the process's arguments); the exit code."""
    args = build_parser().parse_args(argv)
    try:
        run_flags(flags_options(args))
    except QwenFastError as exc:
        print(f"benchmarks.flags: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["FlagsOptions", "FlagsReport", "FlagsRun", "PathFigures", "build_parser", "measure_flags", "run_flags"]
