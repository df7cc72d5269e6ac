"""Clients sending lists of texts to ``qwen-fast api`` beside ``QwenClassifier.abatch`` on
the same servers, side by side in one run: what the service keeps of a batch's throughput when
its callers send lists.

    python -m benchmarks.service_lists --tokenizer .models/qwen3-tiny --texts 16384 --rounds 5
    python -m benchmarks.service_lists --base-url urls.txt --model qwen3 --tokenizer DIR --texts 65536

Without ``--base-url`` the run starts :mod:`benchmarks.stand_in` (vLLM's replies, nothing
computed) on a free port, so that the service's and the client's CPU are the bottleneck; with
it, the servers it names (a URL, several, or ``qwen-fast serve --urls-file``'s file). The
classifier (its defaults over those servers) is saved and served by ``qwen-fast api`` with each
``--workers`` count, every service started once and kept for the run. Each round measures, in
an order that turns each round, each service under ``--clients`` concurrent clients each
sending one request of ``--list-texts`` texts at a time until ``--texts`` texts are done
(aiohttp, in ``--client-processes`` processes), and one ``QwenClassifier.abatch`` call of
``--texts`` texts in this process; every text is new to the servers. A list request answered
other than 200 fails the run. Each service's rate over the same round's ``abatch`` rate is
its ratio; the report gives each path's median over the rounds. ``--profile-seconds`` samples
the first service (and its workers) with py-spy during the last round. Writes
service-lists.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_qwen_fast.bench.report import Header, header, write_json

#: The most texts a request by the service's defaults (``qwen-fast api --max-texts``).
_DEFAULT_MAX_TEXTS = 1024


@dataclass
class Measurement:
    """One path in one round: texts, seconds, texts/s, the list requests' latency and the
    cores each process kept busy (the clients', the service's with its workers, the servers')."""

    round: int
    path: str
    texts: int
    seconds: float
    per_s: float
    p50_ms: float | None = None
    p95_ms: float | None = None
    cores: dict[str, float] = field(default_factory=dict)


@dataclass
class PathSummary:
    """One path over the rounds: the median texts/s, and (a service) each round's rate over
    that round's ``abatch`` rate and their median."""

    path: str
    median_per_s: float
    ratios_to_abatch: list[float] = field(default_factory=list)
    median_ratio_to_abatch: float | None = None


@dataclass
class ServiceListsReport:
    header: Header
    base_urls: list[str]
    stand_in: bool
    model: str
    texts: int
    list_texts: int
    clients: int
    client_processes: int
    workers: list[int]
    rounds: int
    measurements: list[Measurement] = field(default_factory=list)
    summary: list[PathSummary] = field(default_factory=list)
    profiles: dict[str, str] = field(default_factory=dict)


def _service_name(workers: int) -> str:
    return f"qwen-fast api, {workers} worker{'s' if workers > 1 else ''}"


class _Service:
    """A ``qwen-fast api`` process serving the saved classifier on a free port."""

    def __init__(self, saved: str, workers: int, max_texts: int, more: Sequence[str] = ()) -> None:
        from langchain_qwen_fast.serving import free_port

        self.workers = workers
        self.port = free_port()
        command = [sys.executable, "-m", "langchain_qwen_fast.cli", "api", saved, "--port", str(self.port),
                   "--workers", str(workers)]  # fmt: skip
        command += more
        if max_texts > _DEFAULT_MAX_TEXTS:  # only what the lists need: every other option at its default
            command += ["--max-texts", str(max_texts), "--max-queued-texts", str(max(4096, max_texts))]
        self.process = subprocess.Popen(command)
        self.url = f"http://127.0.0.1:{self.port}/v1/classify"

    def ready(self, texts: list[str]) -> None:
        """Wait for it, then check that a list of ``texts`` gets as many results, none an error."""
        import httpx

        from benchmarks.service import wait_healthy

        wait_healthy(f"http://127.0.0.1:{self.port}/health", self.process, timeout=120)
        answer = httpx.post(self.url, json={"input": texts}, timeout=120)
        results = answer.json().get("results", []) if answer.status_code == 200 else []
        if len(results) != len(texts) or any("error" in r for r in results):
            raise SystemExit(f"{_service_name(self.workers)}: a warm-up list was answered {answer.text[:500]}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)


def _profiler(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` and its children (the workers) for ``seconds`` into ``out`` (raw),
    only where a thread holds the GIL: the CPU each frame took, not its waits."""
    spy = str(Path(sys.executable).parent / "py-spy")
    command = [spy, "record", "--pid", str(pid), "--subprocesses", "--threads", "--gil", "--format", "raw", "--rate",
               "250", "--duration", str(max(1, round(seconds))), "--output", str(out), "--nonblocking"]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _lists(service: _Service, texts: list[str], size: int) -> list[tuple[str, dict[str, Any]]]:
    return [(service.url, {"input": texts[k : k + size]}) for k in range(0, len(texts), size)]


def measure(options: argparse.Namespace) -> ServiceListsReport:
    """Run the benchmark that ``options`` describes (see the module docstring)."""
    from benchmarks.service import load_test
    from langchain_qwen_fast._core.base_urls import resolve_base_url
    from langchain_qwen_fast.bench.measure import RunContext, ready_classifier

    stand_in = None
    if options.base_url is None:
        stand_in = _start_stand_in(options)
        base_urls = [f"http://127.0.0.1:{stand_in[1]}/v1"]
    else:
        resolved = resolve_base_url(options.base_url[0] if len(options.base_url) == 1 else options.base_url)
        base_urls = [resolved] if isinstance(resolved, str) else list(resolved)
    model = options.model or _served_model(base_urls[0])
    report = ServiceListsReport(
        header(options.label), base_urls, stand_in is not None, model, options.texts, options.list_texts,
        options.clients, options.client_processes, list(options.workers), options.rounds,
    )  # fmt: skip
    run = RunContext(server_pids=[stand_in[0].pid] if stand_in is not None else [])
    services: list[_Service] = []
    out = Path(options.out)
    try:
        classifier = ready_classifier(base_urls, model, options.tokenizer, warm_ups=1)
        asyncio.run(classifier.abatch(run.fresh_texts(min(options.texts, 4096))))  # connections open, code warm
        with tempfile.TemporaryDirectory() as saved:
            classifier.save(saved)
            services = [
                _Service(saved, count, options.list_texts, shlex.split(options.api_args)) for count in options.workers
            ]
            for started in services:
                started.ready(run.fresh_texts(options.list_texts))
                load_test(run, "warm-up", _lists(started, run.fresh_texts(options.list_texts * options.clients),
                          options.list_texts), options.clients, processes=options.client_processes)  # fmt: skip
        paths: list[_Service | None] = [None, *services]  # None: abatch
        for round_ in range(options.rounds):
            turn = round_ % len(paths)
            for service in paths[turn:] + paths[:turn]:
                texts = run.fresh_texts(options.texts)
                if service is None:
                    row = _abatch(run, classifier, texts, round_)
                else:
                    profile = None
                    if options.profile_seconds and round_ == options.rounds - 1 and service is services[0]:
                        profile = out / f"py-spy-api-{service.workers}-workers.txt"
                        report.profiles[_service_name(service.workers)] = str(profile)
                    row = _lists_row(run, service, texts, round_, options, profile)
                report.measurements.append(row)
                print(f"round {round_} {row.path:<28} {row.per_s:>10.1f} texts/s  cores {row.cores}", file=sys.stderr)
            report.summary = summarise(report.measurements)
            write_json(out / "service-lists.json", report)
    finally:
        for service in services:
            service.stop()
        if stand_in is not None:
            stand_in[0].terminate()
            stand_in[0].wait(30)
    return report


def _abatch(run: Any, classifier: Any, texts: list[str], round_: int) -> Measurement:
    """One ``abatch`` call of ``texts``."""
    from langchain_qwen_fast.bench.measure import timed

    result = timed("QwenClassifier.abatch", len(texts), lambda: asyncio.run(classifier.abatch(texts)), run.server_pids)
    cores = {"client": round(result.cpu_seconds / result.seconds, 2), **result.server_cores}
    return Measurement(round_, result.name, len(texts), round(result.seconds, 3), round(result.rps, 1), cores=cores)


def _lists_row(
    run: Any, service: _Service, texts: list[str], round_: int, options: argparse.Namespace, profile: Path | None
) -> Measurement:
    """The clients sending ``texts`` to ``service`` in lists; with ``profile``, py-spy samples
    the service meanwhile into that file."""
    from benchmarks.service import load_test

    spy = None
    if profile is not None:
        spy = _profiler(service.process.pid, profile, options.profile_seconds)
        time.sleep(1.0)  # py-spy attached before the load starts
    name = _service_name(service.workers)
    requests = _lists(service, texts, options.list_texts)
    result = load_test(run, name, requests, options.clients, run.server_pids, options.client_processes,
                       service.process.pid)  # fmt: skip
    if spy is not None:
        spy.wait(timeout=options.profile_seconds + 60)
    return Measurement(
        round_, name, len(texts), round(result.seconds, 3), round(len(texts) / result.seconds, 1),
        _round(result.percentile(50)), _round(result.percentile(95)),
        {"client": round(result.cpu_seconds / result.seconds, 2), **result.server_cores},
    )  # fmt: skip


def summarise(measurements: Sequence[Measurement]) -> list[PathSummary]:
    """Each path's median texts/s over the rounds; a service's ratio to the same round's
    ``abatch`` rate, each round's and their median."""
    abatch = {m.round: m.per_s for m in measurements if m.path == "QwenClassifier.abatch"}
    paths = list(dict.fromkeys(m.path for m in measurements))
    summary = []
    for path in paths:
        rows = [m for m in measurements if m.path == path]
        entry = PathSummary(path, round(statistics.median(m.per_s for m in rows), 1))
        if path != "QwenClassifier.abatch":
            entry.ratios_to_abatch = [round(m.per_s / abatch[m.round], 3) for m in rows if m.round in abatch]
            if entry.ratios_to_abatch:
                entry.median_ratio_to_abatch = round(statistics.median(entry.ratios_to_abatch), 3)
        summary.append(entry)
    return summary


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _start_stand_in(options: argparse.Namespace) -> tuple[subprocess.Popen[bytes], int]:
    """:mod:`benchmarks.stand_in` on ``--stand-in-port`` (or a free port), answering."""
    import httpx

    from langchain_qwen_fast.serving import free_port

    port = options.stand_in_port or free_port()
    command = [sys.executable, "-m", "benchmarks.stand_in", "--port", str(port), "--model", options.model or "qwen3"]
    if options.tokenizer:
        command += ["--tokenizer", str(options.tokenizer)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the stand-in server exited (is port {port} taken?)")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                return server, port
        except httpx.HTTPError:
            time.sleep(0.2)
    server.terminate()
    raise SystemExit("the stand-in server did not answer within 60 s")


def _served_model(base_url: str) -> str:
    """The first model the server at ``base_url`` serves."""
    import httpx

    return str(httpx.get(base_url.rstrip("/") + "/models", timeout=30).json()["data"][0]["id"])


def render(report: ServiceListsReport) -> str:
    lines = [f"{'path':<30} {'texts/s':>10} {'/ abatch':>9}  each round"]
    for s in report.summary:
        ratio = "" if s.median_ratio_to_abatch is None else f"{s.median_ratio_to_abatch:.3f}"
        lines.append(f"{s.path:<30} {s.median_per_s:>10.1f} {ratio:>9}  {s.ratios_to_abatch or ''}")
    return "\n".join(lines)


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every count must be 1 or more")
    return counts


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", nargs="+", help="the servers: URLs or a file of URLs (default: a stand-in)")
    parser.add_argument("--model", help="the served model name (default: the server's first; qwen3 for the stand-in)")
    parser.add_argument("--tokenizer", help="the served model's folder (token ids sent; default: text prompts)")
    parser.add_argument("--stand-in-port", type=int, help="the stand-in's port (default: a free one)")
    parser.add_argument("--texts", type=_positive, default=16384, help="texts each path classifies a round")
    parser.add_argument("--list-texts", type=_positive, default=256, help="texts a list request")
    parser.add_argument(
        "--clients",
        type=_positive,
        default=16,
        help="concurrent clients, each with one list request at a time (default %(default)s: with 256 texts a "
        "list, the 4096 texts a service worker takes at once)",
    )
    parser.add_argument("--client-processes", type=_positive, default=1, help="processes the clients run in")
    parser.add_argument("--workers", type=_counts, default=[1], help="qwen-fast api --workers counts, e.g. 1,4")
    parser.add_argument("--api-args", default="", help="more qwen-fast api options, e.g. '--groups-in-flight 4'")
    parser.add_argument("--rounds", type=_positive, default=3)
    parser.add_argument("--profile-seconds", type=float, default=0.0, help="py-spy the first service, last round")
    parser.add_argument("--out", default="out/service-lists")
    parser.add_argument("--label", default="")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    if options.texts < options.list_texts:
        raise SystemExit("--texts must be at least --list-texts")
    os.makedirs(options.out, exist_ok=True)
    report = measure(options)
    write_json(Path(options.out) / "service-lists.json", report)
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
