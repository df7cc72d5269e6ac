"""``qwen-fast classify``'s job against ``QwenClassifier.abatch``, and the job's memory.

Speed (:func:`run_job_bench`): on one server and one classifier, each round times
``abatch`` over ``rows`` fresh texts in one call, and the whole job (a CSV of as many other
fresh texts read, classified in chunks, written, joined, its report written; no progress bar
or histogram) one after the other, the order swapped each round, so drift hits both alike.
Prints both rates per round, their medians and the ratio job / abatch; writes JSON. With
``ray``, the same job on Ray Data (:func:`~langchain_qwen_fast.jobs.ray_data.classify_dataset`,
a Parquet file of other fresh texts, Ray's read and actor start included) is a third path.

Memory (:func:`run_memory`): for each size, a fresh process generates a CSV of that many rows
(row by row), runs the job on it and reports its peak resident memory (``ru_maxrss``) before
and after the job. Against a server, or (``canned``) against the canned vLLM of the
repository's tests (``tests/support/fake_vllm.py``, in the process: no server, so far more rows
per second than a CPU server gives; only from a checkout of the repository).
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import importlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from langchain_qwen_fast.bench.measure import LABELS, FreshTexts
from langchain_qwen_fast.errors import ConfigurationError, MeasurementError
from langchain_qwen_fast.testing.samples import headlines


@dataclass(frozen=True)
class JobBenchOptions:
    """One ``qwen-fast bench-job`` run; each field has a flag of the same name."""

    base_url: str | None = None
    #: a model to serve here for the run (a CPU or GPU server, by the machine)
    start_server: str | None = None
    model: str = "qwen3"
    #: rows per path per round
    rows: int = 4096
    rounds: int = 3
    chunk_rows: int = 1024
    chunks_in_flight: int = 3
    #: instead of the speed comparison: the job's peak memory at each of these sizes
    memory: tuple[int, ...] = ()
    #: with ``memory``: against the repository's canned vLLM instead of a server
    canned: bool = False
    #: also time the job on Ray: ``local`` (a Ray started here for the run, unless this process
    #: has one), ``auto`` or ``ray://HOST:10001``
    ray: str | None = None
    #: with ``ray``: classifier actors, each taking half a CPU (the shards: two an actor)
    ray_actors: int = 2
    out: str = "out/bench-job"


def _write_csv(path: Path, texts: Iterator[str] | list[str]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        for i, text in enumerate(texts):
            writer.writerow([i, text])
    return path


def run_job_bench(options: JobBenchOptions) -> dict[str, Any]:
    """The speed comparison (see the module docstring); prints it and writes results.json."""
    from langchain_qwen_fast.serving import VLLMServer

    if options.memory and options.canned:
        return run_memory(options)
    if (options.base_url is None) == (options.start_server is None):
        raise ConfigurationError("give --base-url URL or --start-server MODEL (one of them), or --memory with --canned")
    measure = run_memory if options.memory else _compare
    if options.start_server is None:
        return measure(options)
    with VLLMServer(options.start_server, served_model_name=options.model) as server:
        print(f"server ready in {server.startup_seconds:.0f} s at {server.base_url}", flush=True)
        return measure(replace(options, base_url=server.base_url, start_server=None))


def _compare(options: JobBenchOptions) -> dict[str, Any]:
    from langchain_qwen_fast import QwenClassifier

    fresh = FreshTexts()
    classifier = QwenClassifier(labels=LABELS, base_url=options.base_url or "", model=options.model)
    classifier.batch(fresh(64))  # set-up done, connections open, the server warm
    work = Path(tempfile.mkdtemp(prefix="bench-job-"))
    paths = ["abatch", "job", *(["ray"] if options.ray else [])]
    rounds = []
    try:
        with _ray_for(options):
            for round_number in range(options.rounds):
                rates: dict[str, float] = {}
                shift = round_number % len(paths)  # each path goes first in turn
                for path in paths[shift:] + paths[:shift]:
                    texts = fresh(options.rows)
                    seconds, failed = _time_path(path, options, classifier, texts, work / f"{path}-{round_number}")
                    if failed:
                        raise MeasurementError(
                            f"{path}: {failed} of {options.rows} rows failed; is the server healthy?"
                        )
                    rates[path] = options.rows / seconds
                rounds.append(rates)
                shown = ", ".join(f"{path} {rates[path]:.1f} rows/s" for path in paths)
                print(f"round {round_number + 1}: {shown}, job/abatch {rates['job'] / rates['abatch']:.3f}", flush=True)
    finally:
        classifier.close()
    medians = {path: statistics.median(r[path] for r in rounds) for path in paths}
    ratios = [r["job"] / r["abatch"] for r in rounds]
    result: dict[str, Any] = {
        "options": asdict(options),
        "rounds": rounds,
        "abatch_rows_per_s": round(medians["abatch"], 1),
        "job_rows_per_s": round(medians["job"], 1),
        "ratio_of_medians": round(medians["job"] / medians["abatch"], 4),
        "ratios": [round(r, 4) for r in ratios],
    }
    shown = ", ".join(f"{path} {medians[path]:.1f} rows/s" for path in paths)
    spread = f"rounds {min(ratios):.3f}-{max(ratios):.3f}"
    summary = f"median: {shown}; job/abatch {result['ratio_of_medians']:.3f} ({spread})"
    if options.ray:
        result["ray_rows_per_s"] = round(medians["ray"], 1)
        result["ray_over_abatch"] = round(medians["ray"] / medians["abatch"], 4)
        summary += f"; ray/abatch {result['ray_over_abatch']:.3f}"
    print(summary)
    _save(options, result)
    return result


def _time_path(path: str, options: JobBenchOptions, classifier: Any, texts: list[str], work: Path) -> tuple[float, int]:
    """Seconds that ``path`` took over ``texts``, and how many of them failed."""
    from langchain_qwen_fast.jobs.job import ClassifyOptions, classify_table

    work.mkdir(parents=True)
    if path == "abatch":
        t0 = time.perf_counter()
        results = asyncio.run(_abatch(classifier, texts))
        return time.perf_counter() - t0, sum(isinstance(r, BaseException) for r in results)
    settings: dict[str, Any] = {"labels": tuple(LABELS), "progress": False, "histogram": False}
    if path == "job":
        job = ClassifyOptions(str(_write_csv(work / "in.csv", texts)), str(work / "out.csv"),
                              chunk_rows=options.chunk_rows, chunks_in_flight=options.chunks_in_flight,
                              **settings)  # fmt: skip
        t0 = time.perf_counter()
        report = classify_table(job, classifier)
        return time.perf_counter() - t0, report.errors
    import pyarrow as pa
    import pyarrow.parquet as pq

    from langchain_qwen_fast.jobs.ray_data import RayOptions, classify_dataset

    source = work / "in.parquet"
    pq.write_table(pa.table({"text": texts}), source)
    job = ClassifyOptions(str(source), str(work / "out"), base_url=options.base_url, model=options.model, **settings)
    actors = options.ray_actors
    on_ray = RayOptions(shard_rows=max(1, -(-options.rows // (2 * actors))), actors=actors, actor_cpus=0.5,
                        batch_rows=min(8192, max(1, options.rows // (4 * actors))))  # fmt: skip
    t0 = time.perf_counter()
    ray_report = classify_dataset(job, on_ray)
    return time.perf_counter() - t0, ray_report.error_rows + options.rows - ray_report.classified_rows


@contextlib.contextmanager
def _ray_for(options: JobBenchOptions) -> Iterator[None]:
    """The Ray that the ``ray`` path runs on, for the whole run: the one this process has, or
    one connected to (``local``: started) here and shut down at the end."""
    if not options.ray:
        yield
        return
    from langchain_qwen_fast._extras import require_extra

    require_extra("ray", "ray", "pyarrow", what="the benchmark's Ray path")
    import ray

    from langchain_qwen_fast.jobs.ray_data import cluster_address

    if ray.is_initialized():
        yield
        return
    ray.init(address=cluster_address(options.ray), include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


async def _abatch(classifier: Any, texts: list[str]) -> list[Any]:
    try:
        return list(await classifier.abatch(texts, return_exceptions=True))
    finally:
        await classifier.aclose()


def _save(options: JobBenchOptions, result: dict[str, Any]) -> None:
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'results.json'}")


def run_memory(options: JobBenchOptions) -> dict[str, Any]:
    """The job's peak memory at each size in ``options.memory``, each in a fresh process."""
    if not options.canned and options.base_url is None:
        raise ConfigurationError("--memory needs --base-url URL or --canned")
    sizes = []
    for rows in options.memory:
        command = [sys.executable, "-m", "langchain_qwen_fast.bench.classify_job", str(rows), options.model,
                   "canned" if options.canned else (options.base_url or ""), str(options.chunk_rows),
                   str(options.chunks_in_flight)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise MeasurementError(f"the memory run of {rows} rows failed:\n{done.stderr[-3000:]}")
        sizes.append(json.loads(done.stdout.strip().splitlines()[-1]))
        row = sizes[-1]
        print(
            f"{rows:>9} rows: peak RSS {row['peak_rss_mib']:.0f} MiB (before the job {row['before_job_mib']:.0f} "
            f"MiB), {row['rows_per_s']:.0f} rows/s, input {row['input_mib']:.0f} MiB",
            flush=True,
        )
    result = {"options": asdict(options), "sizes": sizes}
    _save(options, result)
    return result


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _memory_one(rows: int, model: str, where: str, chunk_rows: int, in_flight: int) -> dict[str, Any]:
    """One size of :func:`run_memory`, in this process: generate, classify, measure."""
    from langchain_qwen_fast import QwenClassifier
    from langchain_qwen_fast.jobs.job import ClassifyOptions, classify_table

    settings: dict[str, Any] = {"labels": LABELS, "model": model}
    if where == "canned":
        root = Path(__file__).resolve().parents[2]
        if not (root / "tests" / "support" / "fake_vllm.py").is_file():
            raise ConfigurationError("--canned needs a checkout of the repository (tests/support/fake_vllm.py)")
        sys.path.insert(0, str(root))
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
    return {
        "rows": rows,
        "peak_rss_mib": round(_peak_mib(), 1),
        "before_job_mib": round(before, 1),
        "seconds": round(seconds, 1),
        "rows_per_s": round(rows / seconds, 1),
        "errors": report.errors,
        "input_mib": round(size, 1),
        "server": "canned (tests/support/fake_vllm.py, in process)" if where == "canned" else where,
    }


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


if __name__ == "__main__":
    print(json.dumps(_memory_one(int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
