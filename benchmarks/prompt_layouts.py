"""The prompt layouts side by side: the tokens each computes a text, and on servers the
throughput of each beside vLLM's own ceiling for that layout, in one run.

    python -m benchmarks.prompt_layouts --tokens-only --tokenizer .models/qwen3-tiny
    python -m benchmarks.prompt_layouts --model DIR --gpus 0 --servers-per-gpu 6 --mps \\
        --server-arg=--quantization --server-arg=fp8 --server-arg=--skip-tokenizer-init \\
        --items 49152 --client-processes 8 --out out/prompt-layouts

For each text set (``benchmark``: the throughput benchmark's ~60-token news paragraphs;
``short``: AG-News-length items, a headline and a sentence) and each layout (``chat``,
``compact``): the classifier's prompts' tokens a text, and the tokens vLLM computes a text
once the prefix cache holds the whole blocks of the shared part. With ``--model``: the servers
start once; each (text set, layout) is measured with ``abatch`` at the client's defaults and
over client processes, on texts new to the servers, ``--rounds`` times (the order changed each
round); then, after the servers stop, one engine in process per server (under MPS where the
servers were) answers each (text set, layout)'s prompts ``--rounds`` times, on prompts new to
it each time, started once for all of them (benchmarks/ceiling.py). Each rate is the median of
its rounds (every round's is kept), beside where the CPU went in each run: each role's CPU
microseconds a text (the client with its client processes, the servers' API processes and
engine cores) and the host's busy cores, with their medians. Every rate is also given over
its own layout's ceiling and over the chat layout's ceiling of its text set (the compact
layout's gain). Random weights: the layouts' accuracy is measured by training, not here
(docs/training-and-calibration.md). Writes prompt-layouts.json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.ceiling import Ceiling, CeilingWork, engine_spec, measure_ceilings, sampling_from_body
from benchmarks.common import require_lab
from benchmarks.sampling import HostCpuSampler, client_cpu_seconds
from langchain_qwen_fast._core.prompting import CACHE_BLOCK_TOKENS, LAYOUTS, LabelSet, PromptLayout, local_plan
from langchain_qwen_fast.bench.measure import LABELS, server_cpu_seconds
from langchain_qwen_fast.bench.paths import request_body
from langchain_qwen_fast.bench.report import Header, header, write_json
from langchain_qwen_fast.testing.samples import headlines, news_items

#: Warm-up texts for each classifier and engine (not timed).
_WARM = 256


def short_items(n: int, start: int = 0) -> list[str]:
    """``n`` distinct AG-News-length items: a headline and one sentence, no two alike."""
    heads = headlines(start + n)[start:]
    return [
        f"{h}. Officials said on day {i} that more details would follow, and analysts expect the companies "
        "involved to comment later this week."
        for i, h in enumerate(heads, start)
    ]


TEXT_SETS: dict[str, Callable[[int, int], list[str]]] = {"benchmark": news_items, "short": short_items}


@dataclass
class Tokens:
    """A layout's tokens on a text set: a prompt's mean, the shared part, and what vLLM
    computes a text once its prefix cache holds the shared part's whole blocks."""

    prompt_mean: float
    shared: int
    computed_mean: float


@dataclass
class RunCpu:
    """Where one run's CPU went: each role's CPU microseconds a text (``client``: this process
    and its client processes; ``api_server``, ``engine_core``, ``other``: the servers'
    processes), and the host's busy cores over the run."""

    us_a_text: dict[str, float]
    host_cores_busy: float | None = None


def cpu_a_text(before: dict[str, float], after: dict[str, float], texts: int) -> dict[str, float]:
    """Each role's CPU microseconds a text between two readings of CPU seconds by role."""
    return {role: round((after[role] - before[role]) / texts * 1e6, 1) for role in after if role in before}


def median_cpu(runs: Sequence[RunCpu]) -> RunCpu | None:
    """Each role's median over ``runs``, and the median busy cores (None where no run has them)."""
    if not runs:
        return None
    roles = {role for run in runs for role in run.us_a_text}
    busy = [run.host_cores_busy for run in runs if run.host_cores_busy is not None]
    return RunCpu(
        us_a_text={
            role: round(statistics.median(run.us_a_text[role] for run in runs if role in run.us_a_text), 1)
            for role in sorted(roles)
        },
        host_cores_busy=round(statistics.median(busy), 2) if busy else None,
    )


@dataclass
class Cell:
    """One (text set, layout): its tokens and rates, and its fractions of the ceilings."""

    texts: str
    layout: PromptLayout
    tokens: Tokens
    defaults_per_s: float | None = None
    processes_per_s: float | None = None
    #: the ceiling of the median round
    ceiling: Ceiling | None = None
    #: each round's rate: at the defaults, over client processes, and the ceiling's
    rounds: dict[str, list[float]] = field(default_factory=dict)
    #: each round's CPU by path (``defaults``, ``client_processes``), and each path's medians
    cpu_rounds: dict[str, list[RunCpu]] = field(default_factory=dict)
    cpu: dict[str, RunCpu | None] = field(default_factory=dict)
    #: each rate over this layout's ceiling, and over the chat layout's ceiling of the text set
    over_own_ceiling: dict[str, float | None] = field(default_factory=dict)
    over_chat_ceiling: dict[str, float | None] = field(default_factory=dict)


@dataclass
class LayoutsReport:
    header: Header
    servers: int = 0
    server_args: list[str] = field(default_factory=list)
    items: int = 0
    client_processes: int = 0
    rounds: int = 1
    cells: list[Cell] = field(default_factory=list)


def tokens_of(plan: Any, texts: Sequence[str]) -> Tokens:
    """``plan``'s prompt tokens for ``texts`` (a plan with a tokenizer), and those computed a
    text after the shared part's whole cache blocks (a padded compact head has no remainder)."""
    lengths = [len(ids) for ids in plan.encode(list(texts))]
    shared = len(plan.head_ids)
    cached = shared // CACHE_BLOCK_TOKENS * CACHE_BLOCK_TOKENS
    mean = sum(lengths) / len(lengths)
    return Tokens(prompt_mean=round(mean, 1), shared=shared, computed_mean=round(mean - cached, 1))


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def with_fractions(report: LayoutsReport) -> None:
    """Fill in every cell's fractions of its own ceiling and of its text set's chat ceiling."""
    chat = {c.texts: c.ceiling.per_s for c in report.cells if c.layout == "chat" and c.ceiling}
    for cell in report.cells:
        own = cell.ceiling.per_s if cell.ceiling else None
        rates = {"defaults": cell.defaults_per_s, "client_processes": cell.processes_per_s, "ceiling": own}
        cell.over_own_ceiling = {k: _ratio(v, own) for k, v in rates.items()}
        cell.over_chat_ceiling = {k: _ratio(v, chat.get(cell.texts)) for k, v in rates.items()}


def tokens_only(tokenizer_path: str, items: int) -> LayoutsReport:
    """The tokens a text of each layout, with a local tokenizer (no server)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(tokenizer_path) / "tokenizer.json"))
    report = LayoutsReport(header=header("tokens only"), items=items)
    for texts, make in TEXT_SETS.items():
        for layout in LAYOUTS:
            plan = local_plan(LabelSet.build(LABELS, layout=layout), tokenizer)
            report.cells.append(Cell(texts, layout, tokens_of(plan, make(items, 0))))
    return report


def measure(options: argparse.Namespace) -> LayoutsReport:
    """Start the servers, measure every (text set, layout), then the ceilings after they stop."""
    from langchain_qwen_fast.serving import ServerGroup, parse_gpus

    require_lab("psutil")
    out = Path(options.out)
    report = LayoutsReport(
        header=header(options.label),
        server_args=list(options.server_arg),
        items=options.items,
        client_processes=options.client_processes,
        rounds=options.rounds,
    )
    group = ServerGroup(
        options.model,
        gpus=parse_gpus(options.gpus),
        servers_per_gpu=options.servers_per_gpu,
        mps=options.mps,
        log_dir=out / "logs",
        profile="gpu",
        served_model_name="qwen3",
        extra_args=list(options.server_arg),
    )
    tokenizer = options.tokenizer or options.model
    works: list[CeilingWork] = []
    offset = 0
    with group:
        urls, pids = group.base_urls, group.pids
        report.servers = len(urls)
        for texts, make in TEXT_SETS.items():
            for layout in LAYOUTS:
                cell, cell_works = _measure_cell(urls, pids, tokenizer, texts, make, layout, options, offset)
                offset += 3 * options.items * options.rounds
                works += cell_works
                report.cells.append(cell)
                print(f"{texts} texts, {layout}: {cell.defaults_per_s}/s at the defaults, {cell.processes_per_s}/s "
                      f"over processes, {cell.tokens.computed_mean} tokens computed a text")  # fmt: skip
                for name, run_cpu in cell.cpu.items():
                    if run_cpu is not None:
                        print(f"  {name}: CPU us a text {run_cpu.us_a_text}, host cores busy {run_cpu.host_cores_busy}")
                write_json(out / "prompt-layouts.json", report)
    specs = [engine_spec(server) for server in group.servers]
    daemon = None
    if options.mps:
        from langchain_qwen_fast.serving.mps import MPSDaemon

        daemon = MPSDaemon()
        daemon.start()
    try:
        env = daemon.env if daemon is not None else {}
        specs = [type(spec)(spec.model, spec.flags, {**spec.env, **env}) for spec in specs]
        found = measure_ceilings(specs, works, options.ceiling_timeout)
        for k, cell in enumerate(report.cells):
            cell.ceiling = median_ceiling(cell, found[k * options.rounds : (k + 1) * options.rounds])
    finally:
        if daemon is not None:
            daemon.stop()
    with_fractions(report)
    write_json(out / "prompt-layouts.json", report)
    return report


def _measure_cell(
    urls: list[str],
    pids: Sequence[int],
    tokenizer: str,
    texts: str,
    make: Callable[[int, int], list[str]],
    layout: PromptLayout,
    options: argparse.Namespace,
    offset: int,
) -> tuple[Cell, list[CeilingWork]]:
    """One (text set, layout) on the servers (their API processes ``pids``), ``options.rounds``
    times, each run on texts new to them; and the works its ceiling answers later, one a round."""
    from langchain_qwen_fast import QwenClassifier

    def classifier(**load: Any) -> Any:
        made = QwenClassifier(
            labels=LABELS, base_url=list(urls), tokenizer_path=tokenizer, prompt_layout=layout, **load
        )
        made.batch(make(_WARM, 10**7 + offset))  # every server's prefix cache warm
        made.prepare()
        return made

    items = options.items
    one = classifier()
    plan = one.prepare()
    spread = classifier(client_processes=options.client_processes) if options.client_processes > 1 else None
    cell = Cell(texts, layout, tokens_of(plan, make(512, 0)))
    paths = {"defaults": one, "client_processes": spread}
    rates: dict[str, list[float]] = {name: [] for name, made in paths.items() if made is not None}
    cpu: dict[str, list[RunCpu]] = {name: [] for name in rates}
    works = []
    for round_number in range(options.rounds):
        at = offset + 3 * items * round_number
        order = list(rates) if round_number % 2 == 0 else list(reversed(rates))  # each path goes first in turn
        for name in order:
            rate, run_cpu = _run(paths[name], make(items, at + (name != "defaults") * items), pids)
            rates[name].append(rate)
            cpu[name].append(run_cpu)
        timed = plan.encode(make(items, at + 2 * items))
        sampling = sampling_from_body(request_body(plan, "qwen3", timed[:1]))
        warm_ups = plan.encode(make(64, 2 * 10**7 + at))
        works.append(CeilingWork(prompts=timed, warm_ups=warm_ups, sampling=sampling))
    if spread is not None:
        spread.close()
    cell.rounds = rates
    cell.cpu_rounds = cpu
    cell.cpu = {name: median_cpu(runs) for name, runs in cpu.items()}
    cell.defaults_per_s = _median(rates["defaults"])
    cell.processes_per_s = _median(rates.get("client_processes", []))
    return cell, works


def _median(rates: list[float]) -> float | None:
    return round(statistics.median(rates), 1) if rates else None


def median_ceiling(cell: Cell, ceilings: list[Ceiling]) -> Ceiling:
    """The ceiling of the median round (each round's rate kept in ``cell.rounds``); the first
    that failed where any did."""
    failed = [c for c in ceilings if c.per_s is None]
    cell.rounds["ceiling"] = [c.per_s for c in ceilings if c.per_s is not None]
    if failed:
        return failed[0]
    ranked = sorted(ceilings, key=lambda c: c.per_s or 0.0)
    return ranked[(len(ranked) - 1) // 2]


def _run(classifier: Any, texts: list[str], pids: Sequence[int]) -> tuple[float, RunCpu]:
    """One ``abatch`` over ``texts``: its rate, and where the CPU went meanwhile."""
    host = HostCpuSampler()
    before = {**server_cpu_seconds(pids), "client": client_cpu_seconds(pids)}
    start = time.perf_counter()
    results = asyncio.run(classifier.abatch(texts))
    seconds = time.perf_counter() - start
    after = {**server_cpu_seconds(pids), "client": client_cpu_seconds(pids)}
    assert len(results) == len(texts)
    run_cpu = RunCpu(cpu_a_text(before, after, len(texts)), host.stop().host_cores_busy)
    return round(len(texts) / seconds, 1), run_cpu


def render(report: LayoutsReport) -> str:
    # Each rate over the cell's own ceiling, then the client processes' over the chat layout's.
    lines = [
        "texts      layout   prompt  computed  defaults/s  processes/s  ceiling/s"
        "  defaults/own  processes/own  processes/chat"
    ]
    for c in report.cells:
        ceiling = c.ceiling.per_s if c.ceiling else None
        lines.append(
            f"{c.texts:<10} {c.layout:<8} {c.tokens.prompt_mean:>6} {c.tokens.computed_mean:>9} "
            f"{c.defaults_per_s or '':>11} {c.processes_per_s or '':>12} {ceiling or '':>10} "
            f"{c.over_own_ceiling.get('defaults') or '':>13} {c.over_own_ceiling.get('client_processes') or '':>14} "
            f"{c.over_chat_ceiling.get('client_processes') or '':>15}"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.prompt_layouts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", help="model directory to serve (omit with --tokens-only)")
    parser.add_argument("--tokens-only", action="store_true", help="count tokens with --tokenizer; start nothing")
    parser.add_argument("--tokenizer", help="the model's tokenizer directory (default: the model's)")
    parser.add_argument("--gpus", default="0", help="GPU indices, e.g. 0 or 0,1 (default: 0)")
    parser.add_argument("--servers-per-gpu", type=int, default=1)
    parser.add_argument("--mps", action="store_true", help="servers and engines under NVIDIA MPS")
    parser.add_argument(
        "--server-arg", action="append", default=[], metavar="FLAG", help="extra vLLM flag (repeatable)"
    )
    parser.add_argument("--items", type=int, default=16384, help="texts a run (default: 16384)")
    parser.add_argument("--client-processes", type=int, default=8, help="the second run's client processes")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each rate, their median kept (default: 1)")
    parser.add_argument("--ceiling-timeout", type=float, default=1800.0, help="seconds for the engines")
    parser.add_argument("--out", default="out/prompt-layouts")
    parser.add_argument("--label", default="", help="free text naming the machine, kept in the JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.tokens_only:
        if not args.tokenizer:
            raise SystemExit("--tokens-only needs --tokenizer DIR")
        report = tokens_only(args.tokenizer, min(args.items, 2048))
    elif not args.model:
        raise SystemExit("give --model DIR (or --tokens-only --tokenizer DIR)")
    else:
        report = measure(args)
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
