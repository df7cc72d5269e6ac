"""``qwen-fast classify --ray`` measured: each way to reach vLLM, rows/s and memory, beside
``qwen-fast classify`` without Ray on the same rows and servers.

    python -m benchmarks.ray_classify --base-url http://127.0.0.1:8000/v1 --rows 8192 --actors 2
    python -m benchmarks.ray_classify --vllm-model /models/qwen3 --engines-per-gpu 4 --actors 4 \\
        --vllm-arg=--max-model-len=512 --rows 49152

Each round writes --rows fresh news texts as a Parquet file and runs the job on them:

* over HTTP (--base-url: the servers; a comma-separated list or a --urls-file path), the job
  without Ray (``classify_table``) and the job on Ray, one after the other, the order changed
  each round, and their ratio;
* with --vllm-model, on Ray with a vLLM engine inside each of --actors actors, each taking
  1/--engines-per-gpu of a GPU (more than one a GPU wants MPS); there is no path without Ray
  to set beside it, the rate is its own.

The Ray ways start a local Ray for the run (or join --ray ADDRESS); the actors' start (and the
in-actor engines' load) is in the first round only, which is reported apart. Prints each
round's rates, the medians, the driver's and the busiest actor's peak resident memory, and
writes results.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks._options import leaf_defaults, options_from
from langchain_qwen_fast.bench.measure import LABELS, FreshTexts
from langchain_qwen_fast.errors import ConfigurationError, MeasurementError, QwenFastError
from langchain_qwen_fast.jobs.ray_data import VLLMInActor


@dataclass(frozen=True)
class RayWay:
    """How the actors reach vLLM: the servers at ``base_url``, or an engine of ``vllm_model``
    in each actor."""

    base_url: str | None = None
    vllm_model: str | None = None
    vllm_args: tuple[str, ...] = ()
    #: the in-actor engines get the flags and environment ``qwen-fast serve --profile`` gives a
    #: server of the model (its address left out), then ``vllm_args``
    vllm_profile: str = "gpu"
    engines_per_gpu: int = 1
    model: str = "qwen3"


@dataclass(frozen=True)
class RayLoad:
    """Rows a round, rounds, and the Ray job's shape."""

    rows: int = 8192
    rounds: int = 3
    actors: int = 2
    actor_cpus: float = 1.0
    batch_rows: int = 1024
    batches_in_flight: int = 4
    ray: str = "local"
    #: with --vllm-model: first time ``abatch`` over one engine of the actors' flags inside
    #: this process (no Ray), the ceiling an in-actor engine is set beside
    in_process_ceiling: bool = False


@dataclass(frozen=True)
class RayBenchOptions:
    """One run; each leaf field has a flag of the same name."""

    way: RayWay = field(default_factory=RayWay, metadata={"part": RayWay})
    load: RayLoad = field(default_factory=RayLoad, metadata={"part": RayLoad})
    out: Path = Path("out/bench-ray")


@dataclass
class RayRound:
    """One round: rows/s on Ray (the whole job, and its steady rate once every actor had
    answered), without Ray (HTTP only), the Ray job's fixed costs, and the memory seen."""

    ray: float
    job: float | None
    driver_peak_rss_mib: float
    actor_peak_rss_mib: float
    ray_steady: float | None = None
    start_seconds: float = 0.0
    first_answers_seconds: float | None = None
    report_seconds: float = 0.0


@dataclass
class RayReport:
    """The run: its options, each round, and the medians of the rounds after the first."""

    options: RayBenchOptions
    rounds: list[RayRound]
    ray_rows_per_s: float
    job_rows_per_s: float | None
    ray_over_job: float | None
    driver_peak_rss_mib: float
    actor_peak_rss_mib: float
    #: the median of the Ray job's steady rates (rows/s once every actor had answered)
    ray_steady_rows_per_s: float | None = None
    #: that over the job without Ray
    steady_over_job: float | None = None
    #: with --in-process-ceiling: ``QwenClassifier.abatch`` over one engine of the actors'
    #: flags in this process, rows/s (the median of its rounds)
    in_process_rows_per_s: float | None = None
    #: the in-actor engines' steady rate per engine over that
    steady_per_engine_over_in_process: float | None = None


def served_alike(way: RayWay) -> tuple[tuple[str, ...], dict[str, str]]:
    """The in-actor engines' flags past the model and its name, and their environment: those
    ``qwen-fast serve --profile`` gives a server of the model, less its address, then the
    extra ``vllm_args``."""
    from langchain_qwen_fast.serving.launcher import VLLMServer
    from langchain_qwen_fast.serving.profiles import drop_flags

    assert way.vllm_model is not None
    server = VLLMServer(way.vllm_model, profile=way.vllm_profile, served_model_name=way.model)  # type: ignore[arg-type]
    command = server.command()
    flags = drop_flags(command[command.index("serve") + 2 :], ["--host", "--port", "--served-model-name"])
    return (*flags, *way.vllm_args), {**server.profile.env, **server.command_env}


def in_process_ceiling(engine: VLLMInActor, fresh: FreshTexts, rows: int, rounds: int = 2) -> float:
    """``QwenClassifier.abatch`` of ``rows`` fresh texts over one vLLM engine of the in-actor
    engines' flags inside this process (no Ray, no HTTP server), the median rows/s of
    ``rounds`` after a warm-up; the engine is shut down before the Ray rounds."""
    import asyncio
    import os

    from langchain_qwen_fast import QwenClassifier
    from langchain_qwen_fast.serving.in_process import InProcessVLLM

    os.environ.update(engine.env_vars)

    async def measure() -> list[float]:
        rates = []
        async with InProcessVLLM(engine.args()) as started:
            classifier = QwenClassifier(
                labels=LABELS,
                base_url=started.base_url,
                model=engine.served_model_name,
                http_transport=started.transport,
            )
            await classifier.abatch(fresh(256))
            for _ in range(rounds):
                texts = fresh(rows)
                t0 = time.perf_counter()
                await classifier.abatch(texts)
                rates.append(rows / (time.perf_counter() - t0))
            await classifier.aclose()
        return rates

    rates = asyncio.run(measure())
    print(f"one engine in this process: {', '.join(f'{r:.1f}' for r in rates)} rows/s", flush=True)
    return statistics.median(rates)


def run(options: RayBenchOptions) -> RayReport:
    """Measure (see the module docstring), print and write results.json. Uses the Ray already
    started in this process if there is one (and leaves it running), else starts or joins one
    by ``options.load.ray`` and shuts it down at the end."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray

    from langchain_qwen_fast.jobs.job import ClassifyOptions, classify_table
    from langchain_qwen_fast.jobs.ray_job import RayOptions, classify_dataset, cluster_address

    way, load = options.way, options.load
    if (way.base_url is None) == (way.vllm_model is None):
        raise ConfigurationError("give --base-url URL or --vllm-model MODEL (one of them)")
    if load.rounds < 2:
        raise ConfigurationError("--rounds must be 2 or more: the first one starts the actors")
    engine_args, engine_env = served_alike(way) if way.vllm_model is not None else ((), {})
    on_ray = RayOptions(
        actors=(load.actors, load.actors),
        actor_cpus=load.actor_cpus,
        batch_rows=load.batch_rows,
        batches_in_flight=load.batches_in_flight,
        vllm_model=way.vllm_model,
        vllm_args=engine_args,
        gpus_per_actor=1.0 / way.engines_per_gpu,
        vllm_env=engine_env,
    )
    fresh = FreshTexts()
    ceiling = None
    if load.in_process_ceiling:
        if way.vllm_model is None:
            raise ConfigurationError("--in-process-ceiling is for --vllm-model (the in-actor engines' ceiling)")
        engine = VLLMInActor(way.vllm_model, way.model, engine_args, on_ray.gpus_per_actor, dict(engine_env))
        ceiling = in_process_ceiling(engine, fresh, load.rows)
    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    quiet: dict[str, Any] = {"labels": tuple(LABELS), "model": way.model, "progress": False, "histogram": False}
    rounds: list[RayRound] = []
    own = not ray.is_initialized()  # a Ray already started in this process is used, and left running
    if own:
        address = cluster_address(load.ray)
        local = {"num_cpus": max(4, load.actors * 2)} if address is None else {}
        ray.init(address=address, log_to_driver=False, **local)
    try:
        for number in range(load.rounds):
            source = work / f"in-{number}.parquet"
            texts = fresh(load.rows)
            pq.write_table(pa.table({"id": list(range(load.rows)), "text": texts}), source)
            job_rate = None
            order = ["ray", "job"] if way.base_url is not None else ["ray"]
            if number % 2:
                order.reverse()
            for path in order:
                if path == "job":
                    out = work / f"job-{number}.parquet"
                    t0 = time.perf_counter()
                    report = classify_table(ClassifyOptions(str(source), str(out), base_url=way.base_url, **quiet))
                    job_rate = load.rows / (time.perf_counter() - t0)
                    if report.errors:
                        raise MeasurementError(f"the job without Ray: {report.errors} rows failed")
                    continue
                job = ClassifyOptions(str(source), str(work / f"ray-{number}"), base_url=way.base_url, **quiet)
                t0 = time.perf_counter()
                done = classify_dataset(job, dataclasses.replace(on_ray, id_column="id"))
                ray_rate = load.rows / (time.perf_counter() - t0)
                if done.errors or done.rows != load.rows:
                    raise MeasurementError(f"on Ray: {done.errors} errors, {done.rows} of {load.rows} rows")
                driver, actor = done.driver_peak_rss_mib, done.actor_peak_rss_mib
                phases = done
            rounds.append(
                RayRound(
                    round(ray_rate, 1),
                    job_rate and round(job_rate, 1),
                    driver,
                    actor,
                    phases.steady_rows_per_s,
                    phases.start_seconds,
                    phases.first_answers_seconds,
                    phases.report_seconds,
                )
            )
            shown = f"round {number + 1}: ray {ray_rate:.1f} rows/s"
            if job_rate:
                shown += f", job without Ray {job_rate:.1f} rows/s, ray/job {ray_rate / job_rate:.3f}"
            print(f"{shown}; {phases.phases()}; driver {driver:.0f} MiB, busiest actor {actor:.0f} MiB", flush=True)
    finally:
        if own:
            ray.shutdown()
    timed = rounds[1:]
    ray_median = statistics.median(r.ray for r in timed)
    job_median = statistics.median(r.job for r in timed if r.job) if way.base_url is not None else None
    steady = [r.ray_steady for r in timed if r.ray_steady is not None]
    steady_median = statistics.median(steady) if steady else None
    per_engine = steady_median / load.actors if steady_median is not None and way.vllm_model is not None else None
    result = RayReport(
        options=options,
        rounds=rounds,
        ray_rows_per_s=round(ray_median, 1),
        job_rows_per_s=job_median and round(job_median, 1),
        ray_over_job=round(ray_median / job_median, 4) if job_median else None,
        driver_peak_rss_mib=max(r.driver_peak_rss_mib for r in rounds),
        actor_peak_rss_mib=max(r.actor_peak_rss_mib for r in rounds),
        ray_steady_rows_per_s=steady_median and round(steady_median, 1),
        steady_over_job=round(steady_median / job_median, 4) if steady_median and job_median else None,
        in_process_rows_per_s=ceiling and round(ceiling, 1),
        steady_per_engine_over_in_process=round(per_engine / ceiling, 4) if per_engine and ceiling else None,
    )
    summary = f"median of rounds 2-{load.rounds}: ray {result.ray_rows_per_s} rows/s, steady {steady_median} rows/s"
    if result.ray_over_job is not None:
        summary += f", job without Ray {result.job_rows_per_s} rows/s, ray/job {result.ray_over_job:.3f}"
        summary += f", steady/job {result.steady_over_job}"
    if result.in_process_rows_per_s is not None:
        summary += (
            f", one engine in this process {result.in_process_rows_per_s} rows/s, steady per engine / that "
            f"{result.steady_per_engine_over_in_process}"
        )
    print(summary, flush=True)
    options.out.mkdir(parents=True, exist_ok=True)
    raw = orjson.dumps(dataclasses.asdict(result), default=str, option=orjson.OPT_INDENT_2)
    (options.out / "results.json").write_bytes(raw)
    return result


def build_parser() -> argparse.ArgumentParser:
    """``python -m benchmarks.ray_classify``'s options: one per leaf field of
    :class:`RayBenchOptions`, whose defaults they take."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ray_classify",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    way = parser.add_mutually_exclusive_group()
    way.add_argument("--base-url", help="the servers (…/v1, a comma-separated list, or a --urls-file path)")
    way.add_argument("--vllm-model", help="a vLLM engine of this model inside each actor")
    parser.add_argument("--vllm-arg", dest="vllm_args", action="append", help="a vllm serve flag (repeatable)")
    parser.add_argument(
        "--vllm-profile",
        choices=["gpu", "cpu", "default"],
        help="the engines' flag set, as qwen-fast serve's (default: %(default)s)",
    )
    parser.add_argument("--engines-per-gpu", type=int, help="in-actor engines a GPU (default: %(default)s)")
    parser.add_argument("--model", help="served model name (default: %(default)s)")
    parser.add_argument("--rows", type=int, help="rows a round (default: %(default)s)")
    parser.add_argument("--rounds", type=int, help="rounds, the first one starting the actors (default: %(default)s)")
    parser.add_argument("--actors", type=int, help="classifier actors (default: %(default)s)")
    parser.add_argument("--actor-cpus", type=float, help="logical CPUs an actor takes (default: %(default)s)")
    parser.add_argument("--batch-rows", type=int, help="rows an actor call (default: %(default)s)")
    parser.add_argument("--batches-in-flight", type=int, help="actor calls at once (default: %(default)s)")
    parser.add_argument("--ray", help="local (a Ray started for the run), auto or ray://HOST:10001")
    parser.add_argument(
        "--in-process-ceiling",
        action="store_true",
        help="with --vllm-model: first abatch over one engine of the same flags in this process",
    )
    parser.add_argument("--out", type=Path, help="folder for results.json (default: %(default)s)")
    parser.set_defaults(**{**leaf_defaults(RayBenchOptions), "vllm_args": None})
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark with ``argv`` (default: the process's arguments); the exit code."""
    args = build_parser().parse_args(argv)
    args.vllm_args = tuple(args.vllm_args or ())
    try:
        run(options_from(RayBenchOptions, args))
    except QwenFastError as exc:
        print(f"benchmarks.ray_classify: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
