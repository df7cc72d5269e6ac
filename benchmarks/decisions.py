"""The decision model on servers, side by side in one run, each row beside vLLM's own ceiling
for the same prompts:

    python -m benchmarks.decisions --model .models/qwen3-tiny --states 2048 --long-states 64
    python -m benchmarks.decisions --model DIR --gpus 0 --servers-per-gpu 6 --mps \\
        --server-arg=--quantization --server-arg=fp8 --states 49152 --long-states 2048

Rows:

* ``choice``: one ``Choice`` (the four news labels) over many states, ``QwenDecisionModel.abatch``,
  beside ``QwenClassifier.abatch`` on the same labels and texts of the same kind (new ones for
  each call), interleaved over four rounds, each path first in turn; each rate is all its
  states over all its calls' time.
* ``nouls``: eight ``Noul`` questions about each of many long (~900-token) states, requests/s,
  and the prompt tokens vLLM computes per state (its prefix-cache counters on ``/metrics``)
  beside those of one ``Noul`` about other states of that length.
* ``service``: ``qwen-fast api``'s ``POST /v1/decisions`` (in processes of its own, a worker per
  four cores) through the openai SDK (``AsyncOpenAI().decisions.create``) with many callers
  spread over client processes, one state and one ``Choice`` each.

The servers start once (the GPU profile without ``--disable-log-stats``, which would leave the
prefix-cache counters at zero); after they stop, one engine a server answers each row's prompts
(benchmarks/ceiling.py). Writes decisions.json.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.ceiling import Ceiling, CeilingWork, engine_spec, measure_ceilings, sampling_from_body
from langchain_qwen_fast.bench.measure import LABELS
from langchain_qwen_fast.bench.paths import request_body
from langchain_qwen_fast.bench.report import Header, header, write_json
from langchain_qwen_fast.testing.samples import news_items

#: Words the long states are made of (support-ticket vocabulary; random weights read nothing).
_WORDS = [
    "billing",
    "invoice",
    "crash",
    "login",
    "payment",
    "refund",
    "account",
    "error",
    "server",
    "outage",
    "slow",
    "customer",
    "order",
]
#: Words in a long state: about 900 tokens.
LONG_STATE_WORDS = 900
NOULS = 8
#: Rounds of the choice row, each path once a round (first in turn).
ROUNDS = 4
#: Callers of the service row.
CALLERS = 256


@dataclass
class Row:
    """One row: its rate, the comparison's rate, and the ceiling for the row's prompts."""

    name: str
    requests: int
    per_s: float | None = None
    compared_per_s: float | None = None
    over_compared: float | None = None
    ceiling: Ceiling | None = None
    over_ceiling: float | None = None
    #: ``nouls``: prompt tokens computed per state with eight questions, and with one
    computed_per_state: float | None = None
    computed_one_question: float | None = None
    computed_ratio: float | None = None
    error: str | None = None


@dataclass
class DecisionsReport:
    header: Header
    servers: int = 0
    server_args: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)


def long_state(seed: int) -> str:
    """A state of :data:`LONG_STATE_WORDS` words, new for every seed."""
    rng = random.Random(seed)
    return f"Ticket {seed}: " + " ".join(rng.choice(_WORDS) for _ in range(LONG_STATE_WORDS))


def choice_questions() -> dict[str, Any]:
    from langchain_core.decisions import Choice

    return {"topic": Choice(instructions="Which section is this news item for?", criteria=dict.fromkeys(LABELS))}


def noul_questions(count: int) -> dict[str, Any]:
    from langchain_core.decisions import Noul

    return {
        f"concern{i}": Noul(instructions=f"Does the ticket raise concern {i} of the triage list?") for i in range(count)
    }


def prefix_counters(urls: Sequence[str]) -> tuple[float, float]:
    """vLLM's prefix-cache queries and hits (tokens) summed over the servers."""
    queries = hits = 0.0
    for url in urls:
        text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10).text
        for name, value in re.findall(
            r"^vllm:prefix_cache_(queries|hits)_total(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.M
        ):
            if name == "queries":
                queries += float(value)
            else:
                hits += float(value)
    return queries, hits


def _timed(make: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = asyncio.run(make())
    return time.perf_counter() - start, result


def _work(model: Any, questions: dict[str, Any], states: list[str], warm: list[str]) -> CeilingWork:
    """The ceiling's work: every question's prompt for every state, as the decision model
    sends them (all its questions ask the same answer tokens)."""
    plan = model.prepare(questions)

    def prompts(texts: list[str]) -> list[Any]:
        # A state's prompts side by side, as the decision model sends them to one server: the
        # engines take the work in runs, and each state's tokens are then computed once.
        steps = range(len(plan.steps))
        if plan.tokenizer is not None:
            by_step = [plan.encode(texts, k) for k in steps]
            return [by_step[k][i] for i in range(len(texts)) for k in steps]
        return [plan.render(t, k) for t in texts for k in steps]

    timed = prompts(states)
    sampling = sampling_from_body(request_body(plan, "qwen3", timed[:1]))
    return CeilingWork(prompts=timed, warm_ups=prompts(warm), sampling=sampling)


def measure(options: argparse.Namespace) -> DecisionsReport:
    from langchain_qwen_fast import QwenClassifier, QwenDecisionModel
    from langchain_qwen_fast.serving import ServerGroup, parse_gpus
    from langchain_qwen_fast.serving.profiles import PROFILES, drop_flags

    gpus = parse_gpus(options.gpus) if options.gpus else []
    profile_flags = drop_flags(PROFILES["gpu"].args, ["--disable-log-stats"]) if gpus else []
    out = Path(options.out)
    report = DecisionsReport(header=header(options.label), server_args=list(options.server_arg))
    group = ServerGroup(
        options.model,
        gpus=gpus,
        servers_per_gpu=options.servers_per_gpu,
        mps=options.mps,
        log_dir=out / "logs",
        profile="default" if gpus else "cpu",
        served_model_name="qwen3",
        max_model_len=4096,  # room for the long states
        extra_args=[*profile_flags, *options.server_arg],
    )
    works: list[CeilingWork] = []
    with group:
        urls = list(group.base_urls)
        report.servers = len(urls)
        settings: dict[str, Any] = {"base_url": urls, "model": "qwen3", "tokenizer_path": options.tokenizer}
        decisions = QwenDecisionModel(**settings)
        classifier = QwenClassifier(labels=LABELS, **settings)
        texts = news_items((2 * ROUNDS + 1) * options.states + 512)
        warm = texts[:512]
        chunks = [texts[512 + i * options.states :][: options.states] for i in range(2 * ROUNDS + 1)]
        choice = choice_questions()
        asyncio.run(decisions.abatch([{"state": t, "questions": choice} for t in warm]))
        classifier.batch(warm)
        row = Row("choice", options.states * ROUNDS)
        spent = {"decisions": 0.0, "classifier": 0.0}
        for i in range(ROUNDS):  # interleaved, each path first in turn, on texts new to the servers
            for path in ("decisions", "classifier")[:: 1 if i % 2 == 0 else -1]:
                chunk = chunks[2 * i + (path == "classifier")]
                if path == "decisions":
                    seconds, _ = _timed(
                        lambda c=chunk: decisions.abatch([{"state": t, "questions": choice} for t in c])
                    )
                else:
                    seconds, _ = _timed(lambda c=chunk: classifier.abatch(c))
                spent[path] += seconds
        row.per_s = round(row.requests / spent["decisions"], 1)
        row.compared_per_s = round(row.requests / spent["classifier"], 1)
        report.rows.append(row)
        works.append(_work(decisions, choice, chunks[-1], warm[:64]))
        print(f"choice: {row.per_s}/s, QwenClassifier.abatch {row.compared_per_s}/s", flush=True)

        eight, one = noul_questions(NOULS), noul_questions(1)
        n = options.long_states
        for questions in (eight, one):  # each set's head in every server's cache
            decisions.batch([{"state": long_state(10**6 + i), "questions": questions} for i in range(len(urls) * 2)])
        row = Row("nouls", n)
        before = prefix_counters(urls)
        seconds, _ = _timed(lambda: decisions.abatch([{"state": long_state(i), "questions": eight} for i in range(n)]))
        after = prefix_counters(urls)
        row.per_s = round(n / seconds, 1)
        row.computed_per_state = round(((after[0] - before[0]) - (after[1] - before[1])) / n, 1)
        decisions.batch([{"state": long_state(n + i), "questions": one} for i in range(n)])
        again = prefix_counters(urls)
        row.computed_one_question = round(((again[0] - after[0]) - (again[1] - after[1])) / n, 1)
        row.computed_ratio = round(row.computed_per_state / row.computed_one_question, 3)
        report.rows.append(row)
        works.append(
            _work(decisions, eight, [long_state(2 * n + i) for i in range(n)], [long_state(-i) for i in range(8)])
        )
        print(f"nouls: {row.per_s} states/s, {row.computed_per_state} tokens computed a state with {NOULS} "
              f"questions, {row.computed_one_question} with one ({row.computed_ratio}x)", flush=True)  # fmt: skip
        if options.service:
            report.rows.append(_service_row(options, urls, texts[: options.service_requests]))
        write_json(out / "decisions.json", report)
    specs = [engine_spec(server) for server in group.servers]
    for row, ceiling in zip(report.rows, measure_ceilings(specs, works, options.ceiling_timeout), strict=False):
        row.ceiling = ceiling
        if ceiling.per_s:
            per_request = ceiling.per_s / (NOULS if row.name == "nouls" else 1)
            row.over_ceiling = round((row.per_s or 0) / per_request, 3)
    for row in report.rows:
        if row.name == "service" and report.rows[0].ceiling is not None:  # the choice row's prompts
            row.ceiling = report.rows[0].ceiling
            if row.ceiling.per_s and row.per_s:
                row.over_ceiling = round(row.per_s / row.ceiling.per_s, 3)
        if row.per_s and row.compared_per_s:
            row.over_compared = round(row.per_s / row.compared_per_s, 3)
    write_json(out / "decisions.json", report)
    return report


#: The service row's question: one ``Choice`` of the news labels, as the wire asks it.
SERVICE_QUESTION = {
    "type": "choice",
    "name": "topic",
    "instructions": "Which section is this news item for?",
    "choices": [{"value": label} for label in LABELS],
}
_SERVICE_KEY = "bench-key"


def _sdk_callers(url: str, texts: list[str], callers: int, start_at: float) -> tuple[float, float, int]:
    """One client process: ``callers`` openai SDK callers (``AsyncOpenAI().decisions.create``),
    each asking about one text at a time from ``texts`` from ``start_at`` (wall clock) on. The
    first send's and last answer's wall-clock times, and the answers that failed."""
    import openai

    async def main() -> int:
        client = openai.AsyncOpenAI(base_url=url, api_key=_SERVICE_KEY, max_retries=0, timeout=120)
        queue, failed = list(reversed(texts)), 0

        async def caller() -> None:
            nonlocal failed
            while queue:
                text = queue.pop()
                try:
                    await client.decisions.create(model="qwen3", input=text, questions=[SERVICE_QUESTION])  # type: ignore[list-item]
                except openai.OpenAIError:
                    failed += 1

        await asyncio.gather(*(caller() for _ in range(callers)))
        await client.close()
        return failed

    time.sleep(max(0.0, start_at - time.time()))
    began = time.time()
    failed = asyncio.run(main())
    return began, time.time(), failed


def _service_row(options: argparse.Namespace, urls: list[str], texts: list[str]) -> Row:
    """``POST /v1/decisions`` of ``qwen-fast api`` (in processes of its own, a worker per four
    cores, over the servers) through the openai SDK: :data:`CALLERS` callers spread over client
    processes that start together (one process is the limit at these rates, as for the
    service's other benchmark), one state and one ``Choice`` each, every state new."""
    import multiprocessing
    import os
    import subprocess
    import tempfile
    from concurrent.futures import ProcessPoolExecutor

    from benchmarks.service import load_processes, wait_healthy
    from langchain_qwen_fast import QwenClassifier
    from langchain_qwen_fast.serving import free_port

    row = Row("service", len(texts))
    classifier = QwenClassifier(labels=LABELS, base_url=urls, model="qwen3", tokenizer_path=options.tokenizer)
    processes = load_processes()
    with tempfile.TemporaryDirectory() as saved:
        classifier.save(saved)
        port = free_port()
        command = [sys.executable, "-m", "langchain_qwen_fast.cli", "api", saved, "--port", str(port),
                   "--workers", str(processes)]  # fmt: skip
        service = subprocess.Popen(command, env={**os.environ, "QWEN_FAST_API_KEY": _SERVICE_KEY})
        try:
            wait_healthy(f"http://127.0.0.1:{port}/health", service)
            url = f"http://127.0.0.1:{port}/v1"
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(processes, mp_context=context) as pool:
                list(pool.map(time.sleep, [0.0] * processes))  # every process started and importing done
                callers = max(1, CALLERS // processes)
                warm = [f"Warm-up {i}: {text}" for i, text in enumerate(texts[:CALLERS])]
                list(pool.map(_sdk_callers, [url] * processes, [warm[k::processes] for k in range(processes)],
                              [callers] * processes, [0.0] * processes))  # fmt: skip
                start_at = time.time() + 1.0
                shares = [texts[k::processes] for k in range(processes)]
                done = list(pool.map(_sdk_callers, [url] * processes, shares, [callers] * processes,
                                     [start_at] * processes))  # fmt: skip
        finally:
            service.terminate()
            service.wait(30)
    failed = sum(part[2] for part in done)
    if failed:
        row.error = f"{failed} of {len(texts)} requests failed"
    row.per_s = round(len(texts) / (max(p[1] for p in done) - min(p[0] for p in done)), 1)
    print(f"service: {row.per_s} requests/s through the openai SDK ({processes} client processes, "
          f"{processes} service workers)", flush=True)  # fmt: skip
    return row


def render(report: DecisionsReport) -> str:
    lines = ["row       requests   per_s   compared  over_compared  ceiling/s  over_ceiling  computed ratio"]
    for r in report.rows:
        ceiling = r.ceiling.per_s if r.ceiling else None
        lines.append(
            f"{r.name:<9} {r.requests:>8} {r.per_s or '':>7} {r.compared_per_s or '':>10} {r.over_compared or '':>14} "
            f"{ceiling or '':>10} {r.over_ceiling or '':>13} {r.computed_ratio or ''}"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.decisions", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="model directory to serve")
    parser.add_argument("--tokenizer", help="send token ids made with this tokenizer (default: text prompts)")
    parser.add_argument("--gpus", default="", help="GPU indices, e.g. 0 (default: CPU servers)")
    parser.add_argument("--servers-per-gpu", type=int, default=1)
    parser.add_argument("--mps", action="store_true", help="servers and engines under NVIDIA MPS")
    parser.add_argument("--server-arg", action="append", default=[], metavar="FLAG", help="extra vLLM flag")
    parser.add_argument("--states", type=int, default=2048, help="states of the choice row (default: 2048)")
    parser.add_argument("--long-states", type=int, default=64, help="long states of the nouls row (default: 64)")
    parser.add_argument("--no-service", dest="service", action="store_false", help="skip the service row")
    parser.add_argument("--service-requests", type=int, default=2048, help="requests of the service row")
    parser.add_argument("--ceiling-timeout", type=float, default=1800.0, help="seconds for the engines")
    parser.add_argument("--out", default="out/decisions")
    parser.add_argument("--label", default="", help="free text naming the machine, kept in the JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    report = measure(build_parser().parse_args(argv))
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
