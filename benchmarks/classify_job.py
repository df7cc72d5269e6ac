"""``qwen-fast classify``'s job against ``QwenClassifier.abatch`` on the same texts and server,
side by side, and the job's memory.

    python -m benchmarks.classify_job --base-url http://127.0.0.1:8000/v1 --rows 65536 --rounds 3
    python -m benchmarks.classify_job --start-server .models/qwen3-tiny --rows 4096
    python -m benchmarks.classify_job --memory 10000,100000,1000000 --canned
    python -m benchmarks.classify_job --memory 10000,50000 --base-url http://127.0.0.1:8000/v1

Speed: on one server and one classifier, each round times abatch over --rows fresh texts in
one call and the whole job on a CSV of as many other fresh texts (read, classified in
--chunk-rows chunks, written, joined, its report written; no progress bar or histogram), one
after the other, the order changed each round, so drift hits both alike. Prints both rates per
round, their medians and the ratio job/abatch; writes results.json. (The job on Ray beside the
job without it: ``python -m benchmarks.ray_classify``.)

Memory (--memory): for each size, a fresh process generates a CSV of that many rows (row by
row), runs the job on it and reports its peak resident memory (ru_maxrss) before and after the
job, and that of the job's table process (the process it forks to read and write its rows);
against a server, or (--canned) against the canned vLLM of the repository's tests
(tests/support/fake_vllm.py, in that process: no server, so far more rows per second than a
CPU server gives).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import importlib
import multiprocessing
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks._options import leaf_defaults, options_from, whole_numbers
from langchain_qwen_fast.bench.measure import LABELS, FreshTexts
from langchain_qwen_fast.bench.report import write_json
from langchain_qwen_fast.errors import ConfigurationError, MeasurementError, QwenFastError
from langchain_qwen_fast.testing.samples import headlines

#: the checkout of the repository this folder is part of
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class JobServer:
    """The server: a running one (``base_url``) or a model served here for the run
    (``start_server``, a CPU or GPU server by the machine), and its served model name."""

    base_url: str | None = None
    start_server: str | None = None
    model: str = "qwen3"


@dataclass(frozen=True)
class JobLoad:
    """The job as timed: rows per path per round, rounds, and the job's chunking."""

    rows: int = 4096
    rounds: int = 3
    chunk_rows: int | None = None
    chunks_in_flight: int = 3


@dataclass(frozen=True)
class JobExtras:
    """Instead of the speed comparison, the job's peak memory at each size of ``memory``
    (``canned``: against the repository's canned vLLM, no server)."""

    memory: tuple[int, ...] = ()
    canned: bool = False


@dataclass(frozen=True)
class JobBenchOptions:
    """One run; each leaf field has a flag of the same name."""

    server: JobServer = field(default_factory=JobServer, metadata={"part": JobServer})
    load: JobLoad = field(default_factory=JobLoad, metadata={"part": JobLoad})
    extras: JobExtras = field(default_factory=JobExtras, metadata={"part": JobExtras})
    out: Path = Path("out/bench-job")


@dataclass
class JobRound:
    """One round's rates, rows/s."""

    abatch: float
    job: float


@dataclass
class JobSpeedReport:
    """The speed comparison: its options, each round's rates, the medians, and the ratios."""

    options: JobBenchOptions
    rounds: list[JobRound]
    abatch_rows_per_s: float
    job_rows_per_s: float
    ratio_of_medians: float
    ratios: list[float]


@dataclass
class MemoryRun:
    """One size of the memory run: peak resident memory after and before the job (and of the
    job's table process, which reads and writes its rows), the job's time and rate, its failed
    rows, the input's size, and the server it ran against."""

    rows: int
    peak_rss_mib: float
    before_job_mib: float
    table_process_peak_mib: float
    seconds: float
    rows_per_s: float
    errors: int
    input_mib: float
    server: str


@dataclass
class MemoryReport:
    """The memory run: its options and each size's figures."""

    options: JobBenchOptions
    sizes: list[MemoryRun]


def _write_csv(path: Path, texts: Iterator[str] | list[str]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        for i, text in enumerate(texts):
            writer.writerow([i, text])
    return path


def run_job_bench(options: JobBenchOptions) -> JobSpeedReport | MemoryReport:
    """The speed comparison, or the memory run (see the module docstring); prints it and
    writes results.json."""
    from langchain_qwen_fast.serving import VLLMServer

    server, extras = options.server, options.extras
    if extras.memory and extras.canned:
        return run_memory(options)
    if (server.base_url is None) == (server.start_server is None):
        raise ConfigurationError("give --base-url URL or --start-server MODEL (one of them), or --memory with --canned")
    measure = run_memory if extras.memory else run_speed
    if server.start_server is None:
        return measure(options)
    with VLLMServer(server.start_server, served_model_name=server.model) as started:
        print(f"server ready in {started.startup_seconds:.0f} s at {started.base_url}", flush=True)
        running = replace(server, base_url=started.base_url, start_server=None)
        return measure(replace(options, server=running))


def run_speed(options: JobBenchOptions) -> JobSpeedReport:
    """The speed comparison against ``options.server.base_url``."""
    from langchain_qwen_fast import QwenClassifier

    rows = options.load.rows
    fresh = FreshTexts()
    classifier = QwenClassifier(labels=LABELS, base_url=options.server.base_url or "", model=options.server.model)
    classifier.batch(fresh(64))  # set-up done, connections open, the server warm
    work = Path(tempfile.mkdtemp(prefix="bench-job-"))
    paths = ["abatch", "job"]
    rounds = []
    try:
        for round_number in range(options.load.rounds):
            rates: dict[str, float] = {}
            shift = round_number % len(paths)  # each path goes first in turn
            for path in paths[shift:] + paths[:shift]:
                seconds, failed = _time_path(path, options, classifier, fresh(rows), work / f"{path}-{round_number}")
                if failed:
                    raise MeasurementError(f"{path}: {failed} of {rows} rows failed; is the server healthy?")
                rates[path] = rows / seconds
            rounds.append(JobRound(**rates))
            shown = ", ".join(f"{path} {rates[path]:.1f} rows/s" for path in paths)
            print(f"round {round_number + 1}: {shown}, job/abatch {rates['job'] / rates['abatch']:.3f}", flush=True)
    finally:
        classifier.close()
    medians = {path: statistics.median(getattr(r, path) for r in rounds) for path in paths}
    ratios = [r.job / r.abatch for r in rounds]
    report = JobSpeedReport(
        options=options,
        rounds=rounds,
        abatch_rows_per_s=round(medians["abatch"], 1),
        job_rows_per_s=round(medians["job"], 1),
        ratio_of_medians=round(medians["job"] / medians["abatch"], 4),
        ratios=[round(r, 4) for r in ratios],
    )
    shown = ", ".join(f"{path} {medians[path]:.1f} rows/s" for path in paths)
    print(f"median: {shown}; job/abatch {report.ratio_of_medians:.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")
    _save(options, report)
    return report


def _time_path(path: str, options: JobBenchOptions, classifier: Any, texts: list[str], work: Path) -> tuple[float, int]:
    """Seconds that ``path`` took over ``texts``, and how many of them failed."""
    from langchain_qwen_fast.jobs.job import ClassifyOptions, classify_table

    work.mkdir(parents=True)
    if path == "abatch":
        t0 = time.perf_counter()
        results = asyncio.run(_abatch(classifier, texts))
        return time.perf_counter() - t0, sum(isinstance(r, BaseException) for r in results)
    load = options.load
    source = _write_csv(work / "in.csv", texts)
    job = ClassifyOptions(
        str(source),
        str(work / "out.csv"),
        labels=tuple(LABELS),
        chunk_rows=load.chunk_rows,
        chunks_in_flight=load.chunks_in_flight,
        progress=False,
        histogram=False,
    )
    t0 = time.perf_counter()
    report = classify_table(job, classifier)
    return time.perf_counter() - t0, report.errors


async def _abatch(classifier: Any, texts: list[str]) -> list[Any]:
    try:
        return list(await classifier.abatch(texts, return_exceptions=True))
    finally:
        await classifier.aclose()


def _save(options: JobBenchOptions, report: object) -> None:
    write_json(options.out / "results.json", report)
    print(f"wrote {options.out / 'results.json'}")


def run_memory(options: JobBenchOptions) -> MemoryReport:
    """The job's peak memory at each size in ``options.extras.memory``, each in a fresh process."""
    extras, server = options.extras, options.server
    if not extras.canned and server.base_url is None:
        raise ConfigurationError("--memory needs --base-url URL or --canned")
    where = "canned" if extras.canned else (server.base_url or "")
    sizes = []
    for rows in extras.memory:
        # A fresh interpreter for each size: its peak memory is this size's alone.
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            load = options.load
            try:
                row = pool.submit(
                    memory_run, rows, server.model, where, load.chunk_rows, load.chunks_in_flight
                ).result()
            except QwenFastError:
                raise
            except Exception as exc:  # the worker's failure, named with the size it failed at
                raise MeasurementError(f"the memory run of {rows} rows failed: {type(exc).__name__}: {exc}") from exc
        sizes.append(row)
        print(
            f"{rows:>9} rows: peak RSS {row.peak_rss_mib:.0f} MiB (before the job {row.before_job_mib:.0f} MiB; "
            f"its table process {row.table_process_peak_mib:.0f} MiB), "
            f"{row.rows_per_s:.0f} rows/s, input {row.input_mib:.0f} MiB",
            flush=True,
        )
    report = MemoryReport(options=options, sizes=sizes)
    _save(options, report)
    return report


def _peak_mib(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # KiB on Linux


def memory_run(rows: int, model: str, where: str, chunk_rows: int | None, in_flight: int) -> MemoryRun:
    """One size of :func:`run_memory`, in this process: generate, classify, measure."""
    from langchain_qwen_fast import QwenClassifier
    from langchain_qwen_fast.jobs.job import ClassifyOptions, classify_table

    settings: dict[str, Any] = {"labels": LABELS, "model": model}
    if where == "canned":
        if not (ROOT / "tests" / "support" / "fake_vllm.py").is_file():
            raise ConfigurationError("--canned needs a checkout of the repository (tests/support/fake_vllm.py)")
        sys.path.insert(0, str(ROOT))
        canned = importlib.import_module("tests.support.fake_vllm")
        settings.update(base_url="http://canned.test/v1", http_transport=canned.FakeVLLM(requests=_Discard()).transport)
    else:
        settings["base_url"] = where
    classifier = QwenClassifier(**settings)
    classifier.batch(["warm-up"])
    with tempfile.TemporaryDirectory(prefix="bench-job-memory-") as work:
        source = _write_csv(Path(work) / "in.csv", distinct_texts(rows))
        before = _peak_mib()
        job = ClassifyOptions(str(source), str(Path(work) / "out.csv"), labels=tuple(LABELS), chunk_rows=chunk_rows,
                              chunks_in_flight=in_flight, progress=False, histogram=True)  # fmt: skip
        t0 = time.perf_counter()
        report = classify_table(job, classifier)
        seconds = time.perf_counter() - t0
        size = source.stat().st_size / 2**20
    classifier.close()
    return MemoryRun(
        rows=rows,
        peak_rss_mib=round(_peak_mib(), 1),
        before_job_mib=round(before, 1),
        table_process_peak_mib=round(_peak_mib(resource.RUSAGE_CHILDREN), 1),
        seconds=round(seconds, 1),
        rows_per_s=round(rows / seconds, 1),
        errors=report.errors,
        input_mib=round(size, 1),
        server="canned (tests/support/fake_vllm.py, in process)" if where == "canned" else where,
    )


def distinct_texts(rows: int) -> Iterator[str]:
    """``rows`` distinct headlines, made one at a time (nothing held): a headline and the row's
    number spelt digit by digit, so that the words stay few (the canned server's toy tokenizer
    keeps every word it has seen)."""
    base = headlines(240)
    for i in range(rows):
        yield f"{base[i % len(base)]}, item {' '.join(str(i))}"


class _Discard(list[Any]):
    """A request log that keeps nothing (the canned server records every request otherwise)."""

    def append(self, item: Any) -> None:
        pass


def build_parser() -> argparse.ArgumentParser:
    """``python -m benchmarks.classify_job``'s options: one per leaf field of
    :class:`JobBenchOptions`, whose defaults they take."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.classify_job",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--base-url", help="a running vLLM server (…/v1)")
    where.add_argument("--start-server", metavar="MODEL", help="serve MODEL here for the run")
    parser.add_argument("--model", help="served model name (default: %(default)s)")
    parser.add_argument("--rows", type=int, help="rows per path per round (default: %(default)s)")
    parser.add_argument("--rounds", type=int, help="default: %(default)s")
    parser.add_argument("--chunk-rows", type=int, help="the job's rows per chunk (default: %(default)s)")
    parser.add_argument("--chunks-in-flight", type=int, help="the job's chunks at once (default: %(default)s)")
    parser.add_argument("--memory", type=whole_numbers, metavar="N,N", help="peak memory of the job at these sizes")
    parser.add_argument("--canned", action="store_true", help="with --memory: the tests' canned vLLM, no server")
    parser.add_argument("--out", type=Path, help="folder for results.json (default: %(default)s)")
    parser.set_defaults(**leaf_defaults(JobBenchOptions))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark with ``argv`` (default: the process's arguments); the exit code."""
    args = build_parser().parse_args(argv)
    try:
        run_job_bench(options_from(JobBenchOptions, args))
    except QwenFastError as exc:
        print(f"benchmarks.classify_job: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
