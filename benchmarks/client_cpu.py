"""The client's CPU a text, where the client is the bottleneck: one client process against
:mod:`benchmarks.stand_in` (vLLM's replies, nothing computed), each tree of the package given
measured side by side in one run.

    python -m benchmarks.client_cpu --tokenizer .models/qwen3-tiny \\
        --tree after=. --tree before=/tmp/before --texts 16384 --rounds 5

``--tree NAME=PATH`` names a checkout of the package (``git worktree add /tmp/before REF``);
each round runs every path of every tree in a fresh client process of its own (``PYTHONPATH``
the tree), the trees' order turning each round, so that drift and the stand-in's state hit all
alike. The paths (:data:`PATHS`): ``abatch`` and ``batch`` of texts sent as text, ``abatch`` of
texts sent as token ids (``tokenizer_path``), alone or over 4 client processes (whose CPU is
not the calling process's, so not counted), and ``QwenDecisionModel.abatch`` of one ``Choice``
over as many states, on the same kind of texts (new ones every call). Each row is the median
over the rounds of the client process's CPU time a text (every thread of it) and of texts/s
(one call's texts over its wall time); the ratios compare each tree with the first one given.
``--paused NAME=PATH`` names a tree whose clients hold
:func:`langchain_qwen_fast.process.collector_paused` around each call, as an application that
opts in does (give the same checkout as a ``--tree`` too, to compare it with and without).
``--profile`` samples each client of the first tree with py-spy and writes its profile.
``--paced R`` paces each stand-in at R texts a second (:class:`benchmarks.stand_in.Pace`), and
``--stand-ins N`` starts N of them, the client's replicas: with N x R below what the client can
do, the client is not the bottleneck, as in front of GPU servers, and each row also gives its
rate over N x R, the part of the servers' ceiling a call reaches, which the client's work
before its first request and after its last reply keep below 1.
Writes client-cpu.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from langchain_qwen_fast.bench.report import Header, header, write_json

#: The paths measured: what each client process runs (see the module docstring).
PATHS = ("abatch-text", "batch-text", "abatch-ids", "abatch-ids-4-processes", "decisions-choice")
_LABELS = ["World", "Sports", "Business", "Sci/Tech"]


@dataclass
class Row:
    """One path of one tree: each round's CPU a text (µs) and texts/s, and their medians."""

    tree: str
    path: str
    cpu_us: list[float] = field(default_factory=list)
    per_s: list[float] = field(default_factory=list)
    median_cpu_us: float | None = None
    median_per_s: float | None = None
    #: the first tree's median CPU a text over this tree's (above 1: this tree costs less)
    cpu_gain: float | None = None
    #: with paced stand-ins, each round's texts/s over their paces' sum, and their median
    over_ceiling: list[float] = field(default_factory=list)
    median_over_ceiling: float | None = None


@dataclass
class ClientCpuReport:
    header: Header
    texts: int
    rounds: int
    trees: dict[str, str]
    #: each stand-in's pace, texts a second (None: unpaced)
    paced: float | None = None
    stand_ins: int = 1
    rows: list[Row] = field(default_factory=list)
    profiles: dict[str, str] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client(
    path: str, url: str, tokenizer: str, texts: int, start: int, profile: Path | None, paused: bool = False
) -> dict[str, float]:
    """One client process's measurement of ``path`` (run with ``--client``): after a warm-up
    call, one call of ``texts`` texts new to the stand-in; its CPU a text and texts/s. With
    ``profile``, py-spy samples that call (and only it) into that file. ``paused``: each call
    holds the process's collector pause."""
    import contextlib
    import gc

    from langchain_qwen_fast import QwenClassifier
    from langchain_qwen_fast.process import collector_paused
    from langchain_qwen_fast.testing.samples import news_items

    tokenizer_path = tokenizer if path.startswith("abatch-ids") else None
    processes = 4 if path == "abatch-ids-4-processes" else 1
    if path == "decisions-choice":
        from langchain_core.decisions import Choice

        from langchain_qwen_fast import QwenDecisionModel

        model = QwenDecisionModel(base_url=url.split(","), model="qwen3", tokenizer_path=tokenizer)
        question = Choice(instructions="Which section is this news item for?", criteria=dict.fromkeys(_LABELS))
        questions = {"topic": question}

        def call(batch: list[str]) -> Any:
            return asyncio.run(model.abatch([{"state": t, "questions": questions} for t in batch]))

    else:
        classifier = QwenClassifier(
            labels=_LABELS,
            base_url=url.split(","),
            model="qwen3",
            tokenizer_path=tokenizer_path,
            client_processes=processes,
        )

        def call(batch: list[str]) -> Any:
            if path == "batch-text":
                return classifier.batch(batch)
            return asyncio.run(classifier.abatch(batch))

    with collector_paused() if paused else contextlib.nullcontext():  # the workers started too
        call(news_items(512 if processes == 1 else 1024 * processes, start + 10**7))
    batch = news_items(texts, start)
    spy = None if profile is None else _sampler(profile)
    cpu, wall = time.process_time(), time.perf_counter()
    with collector_paused() if paused else contextlib.nullcontext():
        results = call(batch)
    gc.collect(0)  # the collection a pause leaves due, counted with the call
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    if len(results) != texts or any(isinstance(r, Exception) for r in results):
        raise SystemExit(f"{path}: {len(results)} results for {texts} texts, or errors among them")
    return {"cpu_us": cpu / texts * 1e6, "per_s": texts / wall}


def _sampler(out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling this process into ``out`` (raw), once it has started."""
    spy = str(Path(sys.executable).parent / "py-spy")
    command = [spy, "record", "--pid", str(os.getpid()), "--rate", "250", "--format", "raw", "--output", str(out)]
    sampler = subprocess.Popen([*command, "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    return sampler


def _run_client(
    tree: str, path: str, url: str, options: argparse.Namespace, start: int, profile: Path | None, paused: bool
) -> dict[str, float]:
    # Run as a script, so that the package comes from the tree (``PYTHONPATH``) alone.
    command = [sys.executable, str(Path(__file__).resolve()), "--client", path, "--url", url]
    command += ["--tokenizer", str(options.tokenizer), "--texts", str(options.texts), "--start", str(start)]
    if profile is not None:
        command += ["--profile-to", str(profile)]
    if paused:
        command += ["--collector-paused"]
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise SystemExit(f"client {path} of {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(options: argparse.Namespace) -> ClientCpuReport:
    trees = dict(t.split("=", 1) for t in options.tree + options.paused)
    paused = {t.split("=", 1)[0] for t in options.paused}
    report = ClientCpuReport(
        header(options.label), options.texts, options.rounds, trees, options.paced, options.stand_ins
    )
    rows = {(name, path): Row(name, path) for name in trees for path in options.paths}
    ceiling = options.paced * options.stand_ins
    servers, urls = [], []
    for _ in range(options.stand_ins):
        port = _free_port()
        command = [sys.executable, "-m", "benchmarks.stand_in", "--port", str(port)]
        command += ["--tokenizer", str(options.tokenizer)]
        if options.paced:
            command += ["--texts-per-second", str(options.paced)]
        servers.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        urls.append(f"http://127.0.0.1:{port}/v1")
    url = ",".join(urls)
    try:
        for one, server in zip(urls, servers, strict=True):
            _wait_for(one, server)
        names = list(trees)
        start = 0
        for round_ in range(options.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                for path in options.paths:
                    start += options.texts
                    result = _run_client(trees[name], path, url, options, start, None, name in paused)
                    rows[name, path].cpu_us.append(round(result["cpu_us"], 2))
                    rows[name, path].per_s.append(round(result["per_s"], 1))
                    if options.paced:
                        rows[name, path].over_ceiling.append(round(result["per_s"] / ceiling, 3))
                    print(
                        f"round {round_} {name:>8} {path:<17} {result['cpu_us']:7.1f} µs a text, "
                        f"{result['per_s']:9.1f} texts/s",
                        file=sys.stderr,
                    )
        if options.profile:
            out = Path(options.out)
            for path in options.paths:
                raw = out / f"py-spy-{names[0]}-{path}.txt"
                _run_client(trees[names[0]], path, url, options, start + 10**8, raw, names[0] in paused)
                report.profiles[path] = str(raw)
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=30)
    first = names[0]
    for row in rows.values():
        row.median_cpu_us = round(statistics.median(row.cpu_us), 2)
        row.median_per_s = round(statistics.median(row.per_s), 1)
        if row.over_ceiling:
            row.median_over_ceiling = round(statistics.median(row.over_ceiling), 3)
    for row in rows.values():
        base = rows[first, row.path].median_cpu_us
        row.cpu_gain = round(base / row.median_cpu_us, 3) if base and row.median_cpu_us else None
    report.rows = list(rows.values())
    return report


def _wait_for(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit("the stand-in server exited")
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit("the stand-in server did not answer within 30 s")


def render(report: ClientCpuReport) -> str:
    lines = [f"{'tree':>8} {'path':<17} {'µs a text':>10} {'texts/s':>9} {'CPU gain':>9} {'over pace':>9}"]
    for r in report.rows:
        paced = r.median_over_ceiling if r.median_over_ceiling is not None else ""
        lines.append(f"{r.tree:>8} {r.path:<17} {r.median_cpu_us:>10} {r.median_per_s:>9} {r.cpu_gain!s:>9} {paced:>9}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH, a checkout of the package")
    parser.add_argument(
        "--paused", action="append", default=[], help="NAME=PATH, a checkout whose clients hold the collector pause"
    )
    parser.add_argument("--tokenizer", type=Path, default=Path(".models/qwen3-tiny"), help="the model folder")
    parser.add_argument("--texts", type=int, default=16384, help="texts a call")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--profile", action="store_true", help="py-spy profiles of the first tree's clients")
    parser.add_argument("--paced", type=float, default=0.0, help="each stand-in's pace, texts a second (0: unpaced)")
    parser.add_argument("--stand-ins", type=int, default=1, help="stand-in servers, the client's replicas")
    parser.add_argument("--out", default="out/client-cpu")
    parser.add_argument("--label", default="")
    parser.add_argument("--client", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--collector-paused", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    if options.client:
        result = client(
            options.client,
            options.url,
            str(options.tokenizer),
            options.texts,
            options.start,
            options.profile_to,
            options.collector_paused,
        )
        print(json.dumps(result))
        return 0
    if not options.tree and not options.paused:
        options.tree = ["this=."]
    Path(options.out).mkdir(parents=True, exist_ok=True)
    report = measure(options)
    write_json(Path(options.out) / "client-cpu.json", report)
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
