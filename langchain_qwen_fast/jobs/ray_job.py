"""``qwen-fast classify --ray``: a job as a Ray Data pipeline, the ``ray`` extra.

    from langchain_qwen_fast.jobs.options import ClassifyOptions
    from langchain_qwen_fast.jobs.ray_job import RayOptions, classify_dataset

    job = ClassifyOptions("s3://bucket/news/*.jsonl", "s3://bucket/labelled/",
                          labels=("World", "Sports"), base_url="/etc/qwen-fast/urls.txt")
    report = classify_dataset(job, RayOptions(address="auto", concurrency=(2, 16)))

The pipeline is Ray Data's own: the input (a file, a folder, a glob; local paths every node
sees or ``s3://``, ``gs://`` through ``pyarrow.fs``) is read on the workers
(:mod:`.ray_read`), classified by a :class:`~.ray_data.ClassifyStage`, and written **from
the workers** (``write_parquet``, ``write_json`` or ``write_csv``) into the output folder,
streaming: no row passes through the driver. The output folder is a dataset any reader opens
(``pyarrow.parquet.read_table(folder)``, pandas, Spark): its data files, and the job's own
files under names that start with ``_``, which readers skip: ``_job.json`` (what the rows
were made with), ``_report.json``, ``_histogram.png`` and ``_checkpoint/``.

A job with questions (``ClassifyOptions.questions``) answers them about every row instead of
classifying it: the file is read on the driver, its answers' columns written (:mod:`.questions`).

Resuming is Ray Data's checkpointing keyed on an id column: the input's (``id_column``) or the
one the reader derives from each row's file and place. Killed at any moment, the same command
classifies only the rows not yet written, and writes none twice. Other options, or an input
whose files changed (their sizes and modification times), are refused, naming what differs,
unless ``fresh``.

The report (label distribution, abstained, errors, the confidence histogram, the review
queue) is counted on the workers from the written rows' own columns, and only the counts come
to the driver. While the job runs, the actors tell a counter actor of each batch, from which
the driver prints rows/s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from langchain_qwen_fast._core.decisions import QuestionSet
from langchain_qwen_fast._extras import require_extra
from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.errors import ConfigurationError, DataFileError, InfrastructureFailure, RecordedError
from langchain_qwen_fast.jobs.answerers import RowAnswerer
from langchain_qwen_fast.jobs.columns import probability_column
from langchain_qwen_fast.jobs.options import ClassifyOptions
from langchain_qwen_fast.jobs.questions import outcome_of
from langchain_qwen_fast.jobs.ray_data import ClassifyStage, HTTPServers, VLLMInActor, peak_rss_mib, stage_of
from langchain_qwen_fast.jobs.ray_read import EXTENSIONS, ROW_ID_COLUMN, read_table, row_id
from langchain_qwen_fast.jobs.restart import differences, fingerprint
from langchain_qwen_fast.jobs.review import ReviewChunk, write_review
from langchain_qwen_fast.jobs.summary import Counts, JobReport, draw_histogram
from langchain_qwen_fast.jobs.tables import STDIN, Format, TextSource, format_of

#: The job's own files in the output folder (``_``: readers of the dataset skip them).
JOB_FILE = "_job.json"
REPORT_FILE = "_report.json"
HISTOGRAM_FILE = "_histogram.png"
CHECKPOINT_FOLDER = "_checkpoint"
JOB_FILE_VERSION = 2
#: ClassifyOptions fields this path does not do (each with why), refused when set.
_UNSUPPORTED = {
    "max_error_rate": "a Ray job retries the servers' errors and writes every input error in its row",
}
#: The fewest logical CPUs of a Ray this job starts for itself.
LOCAL_CPUS = 4
#: Seconds between two progress lines.
PROGRESS_EVERY = 10.0


@dataclass(frozen=True)
class RayOptions:
    """How a job runs on Ray (``qwen-fast classify --ray ADDRESS``)."""

    #: the cluster: ``auto`` (the one this machine belongs to), ``ray://HOST:10001``, or None
    #: for a Ray already started in this process (else a local one is started and stopped)
    address: str | None = None
    #: classifier actors: the fewest and the most, Ray Data scales between them
    actors: tuple[int, int] = (1, 4)
    #: logical CPUs each actor takes (its client's event loop and parsing)
    actor_cpus: float = 1.0
    #: custom Ray resources each actor takes: with each node started as
    #: ``ray start --resources='{"qwen_fast": 2}'``, ``{"qwen_fast": 1}`` puts two actors a node
    actor_resources: Mapping[str, float] = field(default_factory=dict)
    #: rows per actor call
    batch_rows: int = 1024
    #: actor calls each actor works on at once
    batches_in_flight: int = 4
    #: the input's id column; None: an id from each row's file and place
    id_column: str | None = None
    #: a vLLM engine inside each actor, of this model (None: the servers at ``base_url``)
    vllm_model: str | None = None
    #: more ``vllm serve`` flags for the in-actor engines
    vllm_args: tuple[str, ...] = ()
    #: GPUs each in-actor engine reserves (1/N: N engines a GPU, under MPS; 0: vLLM's CPU build)
    gpus_per_actor: float = 1.0
    #: environment variables of the in-actor engines
    vllm_env: Mapping[str, str] = field(default_factory=dict)

    def engine(self, options: ClassifyOptions) -> HTTPServers | VLLMInActor:
        """How the actors reach vLLM."""
        if self.vllm_model is None:
            return HTTPServers(options.base_url, options.model)
        return VLLMInActor(
            self.vllm_model, options.model or "qwen3", self.vllm_args, self.gpus_per_actor, dict(self.vllm_env)
        )


def cluster_address(given: str) -> str | None:
    """The address to start or join Ray with for ``--ray GIVEN``: ``local`` is a Ray started in
    this process (None), anything else (``auto``, ``ray://HOST:10001``) is joined as given."""
    return None if given == "local" else given


# -- where things are --------------------------------------------------------------------------
@dataclass(frozen=True)
class Location:
    """A path on a ``pyarrow`` filesystem: local (made absolute) or remote (``s3://``, ...)."""

    filesystem: Any
    path: str
    #: as the user gave it, for Ray's readers and writers and for messages
    given: str

    @classmethod
    def of(cls, given: str) -> Location:
        import pyarrow.fs as pafs

        if "://" not in given:
            return cls(pafs.LocalFileSystem(), os.path.abspath(given), os.path.abspath(given))
        try:
            filesystem, path = pafs.FileSystem.from_uri(given)
        except (ValueError, OSError) as exc:
            raise ConfigurationError(f"{given}: {exc}") from None
        return cls(filesystem, path, given)

    def child(self, name: str) -> str:
        """The path of ``name`` inside this folder, as given (so Ray reaches it the same way)."""
        return f"{self.given.rstrip('/')}/{name}"

    def info(self) -> Any:
        return self.filesystem.get_file_info(self.path)

    def read(self, name: str) -> bytes | None:
        import pyarrow.fs as pafs

        path = f"{self.path.rstrip('/')}/{name}"
        if self.filesystem.get_file_info(path).type != pafs.FileType.File:
            return None
        with self.filesystem.open_input_stream(path) as f:
            return bytes(f.read())

    def write(self, name: str, data: bytes) -> None:
        """Write the file ``name`` in this folder whole: beside, then moved (a local or
        POSIX-like filesystem renames; an object store's put is whole anyway)."""
        path = f"{self.path.rstrip('/')}/{name}"
        temporary = f"{self.path.rstrip('/')}/_{name}.{os.getpid()}.tmp"
        with self.filesystem.open_output_stream(temporary) as f:
            f.write(data)
        self.filesystem.move(temporary, path)


def input_files(options: ClassifyOptions, kind: Format) -> tuple[Location, list[Any]]:
    """The input's files (a file, a folder's files of its kind, or a glob's matches), each with
    its size and modification time: what the job reads, and its identity."""
    import pyarrow.fs as pafs

    pattern = options.input
    glob = any(ch in pattern for ch in "*?[")
    base = Location.of(pattern.rsplit("/", 1)[0] if glob else pattern)
    where = base.info()
    if glob:
        selector = pafs.FileSelector(base.path, recursive=False, allow_not_found=True)
        name = pattern.rsplit("/", 1)[1]
        found = [
            f
            for f in base.filesystem.get_file_info(selector)
            if fnmatch.fnmatch(f.base_name, name) and not _hidden(f.base_name, "")
        ]
    elif where.type == pafs.FileType.Directory:
        found = base.filesystem.get_file_info(pafs.FileSelector(base.path, recursive=True))
        found = [f for f in found if f.extension.lower() in EXTENSIONS[kind] and not _hidden(f.path, base.path)]
    elif where.type == pafs.FileType.File:
        found = [where]
    else:
        raise DataFileError(f"no such file or folder: {options.input}")
    files = sorted((f for f in found if f.type == pafs.FileType.File), key=lambda f: f.path)
    if not files:
        raise DataFileError(f"{options.input} holds no {kind} file (names ending in {', '.join(EXTENSIONS[kind])})")
    return base, files


def _hidden(path: str, root: str) -> bool:
    return any(part.startswith((".", "_")) for part in path[len(root) :].split("/") if part)


def identity(files: list[Any]) -> list[list[Any]]:
    """What says the input is the same: each file's path, size and modification time."""
    return [[f.path, f.size, f.mtime_ns] for f in files]


def job_record(
    options: ClassifyOptions,
    ray_options: RayOptions,
    answerer: RowAnswerer,
    kinds: tuple[Format, Format],
    files: list[Any],
) -> dict[str, Any]:
    """What must be the same for a re-run to keep the rows already written: as a local job's
    (the classifier's configuration or the questions), and the input's files."""
    same = fingerprint(dataclasses.replace(options, input=STDIN), answerer, kinds)
    same.pop("input", None)
    return {**same, "id_column": ray_options.id_column or ROW_ID_COLUMN, "files": identity(files)}


def check_apart(base: Location, output: Location) -> None:
    """:class:`ConfigurationError` when the output folder is the input, holds it, or lies in
    it: the job would read its own rows, or ``--fresh`` would empty the input."""
    if type(base.filesystem) is not type(output.filesystem):
        return
    given, out = base.path.rstrip("/"), output.path.rstrip("/")
    if given == out or given.startswith(out + "/") or out.startswith(given + "/"):
        raise ConfigurationError(f"--out {output.given} and the input {base.given} overlap; pick a folder apart")


def open_output(output: Location, record: dict[str, Any], *, fresh: bool) -> None:
    """The output folder with this job's record: a new or empty one, one of the same job (its
    rows kept), or with ``fresh`` one emptied. Another job's, or a folder of other files:
    refused."""
    import pyarrow.fs as pafs

    where = output.info()
    if where.type == pafs.FileType.File:
        raise ConfigurationError(f"--out is a file; --ray writes a folder: {output.given}")
    raw = output.read(JOB_FILE) if where.type == pafs.FileType.Directory else None
    if raw is not None and not fresh:
        try:
            saved = dict(orjson.loads(raw))
        except orjson.JSONDecodeError as exc:
            raise DataFileError(
                f"{output.child(JOB_FILE)} cannot be read ({exc}); give --fresh to start over"
            ) from None
        if saved.get("version") != JOB_FILE_VERSION:
            raise DataFileError(
                f"{output.child(JOB_FILE)} has version {saved.get('version')}; give --fresh to start over"
            )
        found = differences(saved.get("job", {}), record)
        if found:
            raise ConfigurationError(
                f"{output.given} holds rows of another job ({'; '.join(found)}): give --fresh or another --out"
            )
        return
    if where.type == pafs.FileType.Directory:
        held = output.filesystem.get_file_info(pafs.FileSelector(output.path, recursive=False))
        if held and raw is None and not fresh:
            raise ConfigurationError(f"{output.given} holds files of no qwen-fast job; empty it or pick another --out")
        output.filesystem.delete_dir_contents(output.path, missing_dir_ok=True)
    output.filesystem.create_dir(output.path, recursive=True)
    output.write(JOB_FILE, orjson.dumps({"version": JOB_FILE_VERSION, "job": record}, option=orjson.OPT_INDENT_2))


# -- progress --------------------------------------------------------------------------------
class BatchCounter:
    """A Ray actor the classifier actors tell of each batch they finish (its rows and errors,
    the actor's peak resident memory, and which actor it is): the driver's progress line, the
    report's memory figure and the job's pace (:class:`Pace`). A batch tried again is counted
    again, so the figures are the work done, the report's counts the rows written.

    Times are the counter's own clock, read as each batch's figures arrive."""

    def __init__(self) -> None:
        self.rows = 0
        self.errors = 0
        self.peak_rss_mib = 0.0
        self.started = time.monotonic()
        #: each actor's first batch: when it arrived and the rows counted with it
        self.first: dict[str, tuple[float, int]] = {}
        self.last = self.started

    def add(self, rows: int, errors: int, peak_rss_mib: float = 0.0, actor: str = "") -> None:
        now = time.monotonic()
        self.first.setdefault(actor, (now, self.rows + rows))
        self.rows += rows
        self.errors += errors
        self.peak_rss_mib = max(self.peak_rss_mib, peak_rss_mib)
        self.last = now

    def totals(self) -> tuple[int, int, float]:
        return self.rows, self.errors, self.peak_rss_mib

    def pace(self) -> Pace:
        """The pace so far (see :class:`Pace`)."""
        if not self.first:
            return Pace(0, None, None)
        warm, counted = max(self.first.values())
        steady = None
        if self.last > warm:
            steady = round((self.rows - counted) / (self.last - warm), 1)
        return Pace(len(self.first), round(warm - self.started, 3), steady)


@dataclass(frozen=True)
class Pace:
    """How fast a Ray job's actors worked, apart from what it costs once."""

    #: the actors that classified
    actors: int
    #: seconds from the pipeline's start until every actor had finished its first batch: the
    #: actors' start, their engines' set-up (an in-actor engine's load) and the first reads
    first_answers_seconds: float | None
    #: rows/s of the batches finished after that, until the last one (None: no batch
    #: finished after that)
    steady_rows_per_s: float | None


# -- the report -------------------------------------------------------------------------------
def count_block(
    table: Any,
    labels: tuple[str, ...],
    multi_label: bool,
    text: TextSource,
    review: Any,
    id_column: str,
    questions: QuestionSet | None = None,
) -> Any:
    """One written block's counts and review entries, as a one-row table of JSON (a worker's
    share of the report). A review entry's ``row`` is the row's id (an id that is not a whole
    number, by a number made from it). ``questions``: a questions job's rows, read back as
    answers."""
    import pyarrow as pa

    counts = Counts()
    chunk = ReviewChunk(review) if review is not None else None
    names = set(table.column_names)
    for row in table.to_pylist():
        if questions is not None:
            counts.add(outcome_of(row, questions))
            continue
        result = result_of(row, labels, multi_label)
        counts.add(result)
        if chunk is not None:
            value, _ = text.of({k: v for k, v in row.items() if k in names})
            given = row.get(id_column)
            chunk.add(given if isinstance(given, int) else row_id(str(given), 0), str(value), result)
    entries = chunk.entries() if chunk is not None else []
    return pa.table({"counts": [orjson.dumps(counts.to_json()).decode()], "review": [orjson.dumps(entries).decode()]})


def result_of(row: Mapping[str, Any], labels: tuple[str, ...], multi_label: bool) -> Classification | BaseException:
    """A written row's result, read back from its columns."""
    if row.get("error") is not None:
        return RecordedError(str(row["error"]))
    scores = {label: row.get(probability_column(label)) for label in labels}
    kept = {label: float(p) for label, p in scores.items() if p is not None}
    chosen = row.get("labels")
    if isinstance(chosen, str):
        chosen = [part for part in chosen.split("|") if part]
    # Read back, not made: the fields the counts and the review read, unvalidated.
    return Classification.model_construct(
        label=row.get("label"),
        labels=list(chosen or ([] if row.get("label") is None else [row["label"]])),
        scores=kept or None,
        multi_label=multi_label,
        abstained=bool(row.get("abstained")),
    )


# -- the job -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RayJobReport(JobReport):
    """What a Ray job did (:class:`~.summary.JobReport`, over every row of the output), and
    the peak resident memory of the driver and of the busiest classifier actor (MiB; an
    in-actor vLLM engine's own engine-core process is not in it)."""

    driver_peak_rss_mib: float = 0.0
    actor_peak_rss_mib: float = 0.0
    #: seconds before the pipeline started (Ray's start or join, the output folder's checks)
    start_seconds: float = 0.0
    #: seconds from the pipeline's start until every actor had answered its first batch
    first_answers_seconds: float | None = None
    #: rows/s once every actor had answered its first batch (the rate a longer job keeps)
    steady_rows_per_s: float | None = None
    #: seconds of the pipeline: reading, classifying and writing
    pipeline_seconds: float = 0.0
    #: seconds of the report's pass over the written rows
    report_seconds: float = 0.0

    def phases(self) -> str:
        """One line: the steady rate and what the job cost once, apart from it."""
        steady = "unknown" if self.steady_rows_per_s is None else f"{self.steady_rows_per_s:.1f} rows/s"
        first = "-" if self.first_answers_seconds is None else f"{self.first_answers_seconds:.1f} s"
        return (
            f"steady rate {steady} once every actor had answered; start {self.start_seconds:.1f} s, "
            f"first answers {first}, pipeline {self.pipeline_seconds:.1f} s, report {self.report_seconds:.1f} s"
        )


def check_options(options: ClassifyOptions, ray_options: RayOptions) -> tuple[Format, Format]:
    """Refuse what this path cannot do; the input's and the output's table kinds."""
    options.check()
    for name, why in _UNSUPPORTED.items():
        if getattr(options, name) is not None:
            raise ConfigurationError(f"--{name.replace('_', '-')} is not done on Ray: {why}")
    if options.input == STDIN:
        raise ConfigurationError("--ray reads files that the cluster's nodes can read, not stdin")
    low, high = ray_options.actors
    if not 1 <= low <= high:
        raise ConfigurationError(f"--actors must be N or MIN,MAX with 1 <= MIN <= MAX, got {low},{high}")
    kind = format_of(options.input.rstrip("/"), options.input_format, "--input-format")
    out_kind = format_of("out.parquet", options.output_format, "--output-format")
    return kind, out_kind


def classify_dataset(options: ClassifyOptions, ray_options: RayOptions | None = None) -> RayJobReport:
    """Classify ``options.input`` on Ray into the folder ``options.out`` (see the module
    docstring) and return the report. Uses the Ray already started in this process if there
    is one, else starts or joins ``ray_options.address`` (and leaves it at the end)."""
    ray_options = ray_options or RayOptions()
    kinds = check_options(options, ray_options)
    require_extra("ray", "ray", "pyarrow", what="classifying on Ray")
    import ray

    stage = stage_of(
        options,
        ray_options.engine(options),
        concurrency=ray_options.actors,
        batch_size=ray_options.batch_rows,
        batches_in_flight=ray_options.batches_in_flight,
        num_cpus=ray_options.actor_cpus,
        resources=dict(ray_options.actor_resources),
    )
    stage.check()
    review = options.review()
    if review is not None:
        review.check()
    base, files = input_files(options, kinds[0])
    output = Location.of(options.out)
    check_apart(base, output)
    answerer = stage.answerer_only()
    try:
        record = job_record(options, ray_options, answerer, kinds, files)
    finally:
        answerer.close()
    started = time.perf_counter()
    own = not ray.is_initialized()
    if own:
        # A Ray started here gets at least LOCAL_CPUS logical CPUs: the actors wait on the
        # servers, and with as many as a small machine's cores an actor and a read task would
        # leave none to the writes.
        local = {"num_cpus": max(LOCAL_CPUS, os.cpu_count() or 1)} if ray_options.address is None else {}
        ray.init(address=ray_options.address, log_to_driver=False, **local)
    try:
        open_output(output, record, fresh=options.fresh)
        with _checkpointing(output, ray_options.id_column or ROW_ID_COLUMN):
            piped = time.perf_counter()
            classified, actor_peak, pace = _run(options, ray_options, stage, kinds, base, files, output)
        counted = time.perf_counter()
        report = _report(
            options, stage, kinds[1], output, ray_options.id_column or ROW_ID_COLUMN, classified, counted - started
        )
        return dataclasses.replace(
            report,
            driver_peak_rss_mib=round(peak_rss_mib(), 1),
            actor_peak_rss_mib=actor_peak,
            start_seconds=round(piped - started, 3),
            first_answers_seconds=pace.first_answers_seconds,
            steady_rows_per_s=pace.steady_rows_per_s,
            pipeline_seconds=round(counted - piped, 3),
            report_seconds=round(time.perf_counter() - counted, 3),
        )
    finally:
        if own:
            ray.shutdown()


@contextlib.contextmanager
def _checkpointing(output: Location, id_column: str) -> Iterator[None]:
    """Ray Data's checkpoints of the rows written, in the output's ``_checkpoint/``."""
    import ray.data
    from ray.data.checkpoint import CheckpointConfig

    context = ray.data.DataContext.get_current()
    before = context.checkpoint_config, context.actor_task_retry_on_errors
    context.checkpoint_config = CheckpointConfig(
        id_column=id_column,
        checkpoint_path=output.child(CHECKPOINT_FOLDER),
        delete_checkpoint_on_success=False,
        override_filesystem=output.filesystem,
    )
    try:
        yield
    finally:
        context.checkpoint_config, context.actor_task_retry_on_errors = before


def _run(
    options: ClassifyOptions,
    ray_options: RayOptions,
    stage: ClassifyStage,
    kinds: tuple[Format, Format],
    base: Location,
    files: list[Any],
    output: Location,
) -> tuple[int, float, Pace]:
    """Read, classify and write; the rows classified in this run, the actors' peak memory and
    their pace."""
    import ray
    from ray.exceptions import RayError

    paths = [_given(base, f.path) for f in files]
    dataset = read_table(kinds[0], paths, options.text_column, filesystem=base.filesystem)
    if ray_options.id_column is not None and kinds[0] == "parquet":
        dataset = dataset.drop_columns([ROW_ID_COLUMN])
    counter = ray.remote(num_cpus=0)(BatchCounter).remote()
    classified = dataclasses.replace(stage, counter=counter)(dataset)
    if kinds[1] == "csv" and stage.questions is None:
        classified = classified.map_batches(_joined_labels, batch_format="pyarrow")
    done = threading.Event()
    progress = threading.Thread(target=_print_progress, args=(counter, done, options.progress), daemon=True)
    progress.start()
    try:
        write = {"parquet": classified.write_parquet, "jsonl": classified.write_json, "csv": classified.write_csv}[
            kinds[1]
        ]
        write(output.given, filesystem=output.filesystem)
    except RayError as exc:
        raise InfrastructureFailure(
            f"the Ray job stopped ({type(exc).__name__}: {str(exc)[:500]}); run the same command again "
            "to carry on from the rows written"
        ) from None
    finally:
        done.set()
        progress.join(timeout=5)
    rows, _, actor_peak = ray.get(counter.totals.remote(), timeout=60)
    pace = ray.get(counter.pace.remote(), timeout=60)
    return int(rows), float(actor_peak), pace


def _given(base: Location, path: str) -> str:
    """``path`` on ``base``'s filesystem as Ray is given it (with the scheme, if any)."""
    if "://" not in base.given:
        return path
    scheme = base.given.split("://", 1)[0]
    return f"{scheme}://{path}"


def _joined_labels(table: Any) -> Any:
    """A CSV output's ``labels`` cell: the chosen labels joined with ``|``, as qwen-fast train reads them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if "labels" not in table.column_names:
        return table
    index = table.column_names.index("labels")
    joined = pc.binary_join(table.column("labels"), "|")
    return table.set_column(index, pa.field("labels", pa.string()), joined)


def _print_progress(counter: Any, done: threading.Event, shown: bool) -> None:
    import ray

    started = time.perf_counter()
    while not done.wait(PROGRESS_EVERY):
        if not shown:
            continue
        with contextlib.suppress(Exception):
            rows, errors, _ = ray.get(counter.totals.remote(), timeout=PROGRESS_EVERY)
            seconds = time.perf_counter() - started
            print(f"classified {rows} rows ({errors} with an error), {rows / seconds:.1f} rows/s", flush=True)


def _report(
    options: ClassifyOptions,
    stage: ClassifyStage,
    kind: Format,
    output: Location,
    id_column: str,
    classified: int,
    seconds: float,
) -> RayJobReport:
    """Count the written rows on the workers, then write the report, histogram and review file."""
    import ray.data

    columns = stage.columns()
    text = TextSource(options.text_column)
    review = options.review()
    reader = {"parquet": ray.data.read_parquet, "jsonl": ray.data.read_json, "csv": ray.data.read_csv}[kind]
    written = reader(output.given, filesystem=output.filesystem, file_extensions=["parquet", "json", "jsonl", "csv"])
    parts = written.map_batches(
        count_block,
        fn_kwargs={
            "labels": columns.labels,
            "multi_label": columns.multi_label,
            "text": text,
            "review": review,
            "id_column": id_column,
            "questions": columns.questions,
        },
        batch_format="pyarrow",
        batch_size=None,
    ).take_all()
    counts = Counts()
    entries: list[dict[str, Any]] = []
    for part in parts:
        counts.merge(Counts.from_json(orjson.loads(part["counts"])))
        entries.extend(orjson.loads(part["review"]))
    local = Path(output.path) if "://" not in output.given else None
    histogram = None
    if options.histogram and local is not None and counts.rows:
        histogram = str(draw_histogram(counts, local / HISTOGRAM_FILE))
    review_written = None
    if review is not None:
        entries.sort(key=lambda entry: int(entry["row"]))
        review_written = write_review(review, columns.multi_label, lambda: iter([entries]))
    report = RayJobReport.of(
        counts,
        multi_label=columns.multi_label,
        output=output.given,
        classified_rows=classified,
        resumed_rows=max(0, counts.rows - classified),
        seconds=seconds,
        histogram=histogram,
        report=output.child(REPORT_FILE),
        review=review_written,
        options={"input": options.input, "out": options.out},
        questions=columns.questions is not None,
    )
    output.write(REPORT_FILE, orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2))
    return report
