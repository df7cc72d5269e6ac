"""Classify a dataset on a Ray cluster with Ray Data: the ``ray`` extra.

    from langchain_qwen_fast.jobs.job import ClassifyOptions
    from langchain_qwen_fast.jobs.ray_data import RayOptions, classify_dataset

    job = ClassifyOptions("s3://bucket/news/", "labelled/", labels=("World", "Sports"),
                          input_format="parquet", base_url="/etc/qwen-fast/urls.txt")
    report = classify_dataset(job, RayOptions(address="auto", actors=8))

The input (a file or a folder of CSV with a header row, JSONL or Parquet, anywhere Ray Data
reads: a local path every node sees, ``s3://``, ``gs://``...) is read with ``ray.data.read_*``
and cut into fixed shards of ``shard_rows`` rows in input order. The shards still to do go
through ``map_batches`` with :class:`QwenClassifierBatch`, a pool of Ray actors each holding a
:class:`~langchain_qwen_fast.QwenClassifier` over the servers of the node it runs on (built
there, so ``base_url`` may be the path of the node's own ``qwen-fast serve --urls-file`` file,
or ``http://127.0.0.1:PORT/v1``), and come back to this process in input order
(``preserve_order``), where each shard is written as one Parquet file of the output folder,
``shard-000000.parquet``, ``shard-000001.parquet``, ...: whole or absent (written beside,
then renamed).

Every output row is its input row's columns (one named like an added column is kept as
``input_<name>``) and the columns of :mod:`.columns`; a row whose text is empty or missing,
or whose request failed after the classifier's retries, gets its error in its ``error``
column, in its place, and the batch goes on.

Run again with the same options, the job skips every shard whose file exists and classifies
only the others; with other options it refuses (:class:`ConfigurationError` naming what
differs) unless ``fresh``. The output folder's ``job.json`` records what the shards were made
with. The input is read whole into Ray's object store before the shards are cut (spilled to
disk past its size), on every run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from langchain_qwen_fast._extras import require_extra
from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.errors import ConfigurationError, DataFileError, ResponseFormatError
from langchain_qwen_fast.jobs.columns import added_columns, result_columns
from langchain_qwen_fast.jobs.job import ClassifyOptions, build_classifier, differences, fingerprint, renamed_columns
from langchain_qwen_fast.jobs.parts import atomic_bytes, atomic_write
from langchain_qwen_fast.jobs.tables import STDIN, Format, Layout, TextSource, format_of

if TYPE_CHECKING:
    from langchain_qwen_fast.classifiers import QwenClassifier

#: The output folder's record of the job its shards belong to.
JOB_FILE = "job.json"
JOB_FILE_VERSION = 1
#: A shard's file name: its index, zero-padded, so that names sort in input order.
SHARD_PREFIX = "shard-"
SHARD_SUFFIX = ".parquet"
#: The driver builds the classifier only to read its labels and settings, and sends nothing:
#: this base URL stands in for the servers, which only the nodes' actors may see.
_DRIVER_BASE_URL = "http://127.0.0.1:9/v1"
#: ClassifyOptions fields this path does not do (each with why), refused when set.
_UNSUPPORTED = {
    "review_out": "the review file is written by `qwen-fast classify` without --ray",
    "max_error_rate": "the error-rate stop is `qwen-fast classify`'s without --ray",
}


@dataclass(frozen=True)
class RayOptions:
    """How a job runs on Ray (``qwen-fast classify --ray ADDRESS``)."""

    #: the cluster: ``auto`` (the one this machine belongs to), ``ray://HOST:10001``, or None
    #: for a Ray already started in this process (else a local one is started and stopped)
    address: str | None = None
    #: rows per shard: per output file, and the unit a re-run redoes
    shard_rows: int = 100_000
    #: classifier actors in the pool, across the cluster
    actors: int = 1
    #: logical CPUs each actor takes (its client's event loop and parsing)
    actor_cpus: float = 1.0
    #: custom Ray resources each actor takes: with each node started as
    #: ``ray start --resources='{"qwen_fast": 2}'``, ``{"qwen_fast": 1}`` puts two actors a node
    actor_resources: Mapping[str, float] = field(default_factory=dict)
    #: rows per ``map_batches`` call: per ``QwenClassifier.batch`` call of an actor
    batch_rows: int = 8192

    def check(self) -> None:
        """:class:`ConfigurationError` for values that cannot work."""
        if self.shard_rows < 1 or self.actors < 1 or self.batch_rows < 1:
            raise ConfigurationError(
                f"shard_rows, actors and batch_rows must be at least 1, got "
                f"{self.shard_rows}, {self.actors}, {self.batch_rows}"
            )
        if self.actor_cpus < 0:
            raise ConfigurationError(f"actor_cpus must be 0 or more, got {self.actor_cpus}")


def cluster_address(given: str) -> str | None:
    """The address to start or join Ray with for ``--ray GIVEN``: ``local`` is a Ray started in
    this process (None), anything else (``auto``, ``ray://HOST:10001``) is joined as given."""
    return None if given == "local" else given


@dataclass(frozen=True)
class RayJobReport:
    """What a Ray job did."""

    output: Path
    #: input rows, and shards of ``shard_rows`` they make
    rows: int
    shards: int
    #: shards whose file existed and were skipped, and those classified and written this run
    skipped: list[int]
    written: list[int]
    #: rows classified this run, and those of them with an error
    classified_rows: int
    error_rows: int
    seconds: float

    @property
    def rows_per_second(self) -> float:
        """Rows classified this run per second of the run (reading included)."""
        return self.classified_rows / self.seconds if self.seconds > 0 else 0.0


# -- shards ----------------------------------------------------------------------------------
def shard_name(index: int) -> str:
    """The file name of shard ``index``: ``shard-000042.parquet``."""
    if index < 0:
        raise ConfigurationError(f"a shard index is 0 or more, got {index}")
    return f"{SHARD_PREFIX}{index:06d}{SHARD_SUFFIX}"


def shard_bounds(rows: int, shard_rows: int) -> list[tuple[int, int]]:
    """Each shard's ``(start, stop)`` rows: fixed runs of ``shard_rows``, the last one shorter."""
    if shard_rows < 1:
        raise ConfigurationError(f"shard_rows must be at least 1, got {shard_rows}")
    return [(start, min(start + shard_rows, rows)) for start in range(0, rows, shard_rows)]


def pending_shards(output: Path, shards: int) -> list[int]:
    """The shards of ``output`` still to do: those without their file."""
    return [i for i in range(shards) if not (output / shard_name(i)).is_file()]


def shard_files(output: Path) -> list[Path]:
    """The shard files in ``output``, in input order."""
    if not output.is_dir():
        return []
    return sorted(p for p in output.iterdir() if p.name.startswith(SHARD_PREFIX) and p.name.endswith(SHARD_SUFFIX))


# -- one batch ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchColumns:
    """How a batch's output columns are made: the input's, renamed where they clash with an
    added one, then the added columns with their types (:class:`~.tables.Layout`)."""

    labels: tuple[str, ...]
    multi_label: bool
    renames: Mapping[str, str] = field(default_factory=dict)

    @property
    def added(self) -> list[str]:
        return added_columns(self.labels, self.multi_label)

    def assemble(self, table: Any, results: Sequence[Classification | BaseException]) -> Any:
        """``table`` (a ``pyarrow.Table``) with its columns renamed and the added columns of
        ``results`` (one per row, in order) after them."""
        import pyarrow as pa

        if len(results) != table.num_rows:
            raise ResponseFormatError(f"{len(results)} results for {table.num_rows} rows")
        if self.renames:
            table = table.rename_columns([self.renames.get(name, name) for name in table.column_names])
        rows = [result_columns(r, self.labels, self.multi_label) for r in results]
        layout = Layout("parquet", [], self.added, self.multi_label)
        for spec in layout.schema():
            table = table.append_column(spec, pa.array([row[spec.name] for row in rows], type=spec.type))
        return table


def texts_of(table: Any, source: TextSource) -> list[Any]:
    """Each row's value to classify (:class:`~.tables.TextSource`: the text column, else title
    and description), or the error it has instead."""
    names = [n for n in (source.column, "title", "description") if n in table.column_names]
    if source.column in names:
        names = [source.column]
    picked = table.select(names).to_pylist() if names else [{}] * table.num_rows
    values: list[Any] = []
    for cells in picked:
        value, problem = source.of(cells)
        values.append(DataFileError(f"the row {problem}") if problem is not None else value)
    return values


def classify_rows(classifier: QwenClassifier, values: Sequence[Any]) -> list[Classification | BaseException]:
    """Each value's classification or error, in order: values that are already an error keep
    it without a request; the others go in one ``QwenClassifier.batch``, which puts the error
    of a value that is not text to classify in its place."""
    results: list[Classification | BaseException | None] = [None] * len(values)
    readable = []
    for i, value in enumerate(values):
        if isinstance(value, BaseException):
            results[i] = value
        else:
            readable.append(i)
    if readable:
        picked = [values[i] for i in readable]
        for i, result in zip(readable, classifier.engine.classify(picked)):
            results[i] = result
    return [r for r in results if r is not None]


class QwenClassifierBatch:
    """The ``map_batches`` callable: built once per Ray actor, on its node, it holds the
    classifier ``options`` name (:func:`~.job.build_classifier`: a saved classifier or labels,
    ``base_url`` a URL list or a ``--urls-file`` path read on that node) and turns each
    ``pyarrow.Table`` batch into the same rows with the added columns.

    ``classifier`` (tests, or a process that is its own worker): use this one instead.
    """

    def __init__(
        self,
        options: ClassifyOptions,
        columns: BatchColumns,
        classifier: QwenClassifier | None = None,
    ) -> None:
        self.classifier = build_classifier(options) if classifier is None else classifier
        self.columns = columns
        self.source = TextSource(options.text_column)

    def __call__(self, table: Any) -> Any:
        return self.columns.assemble(table, classify_rows(self.classifier, texts_of(table, self.source)))


# -- the job -----------------------------------------------------------------------------------
def check_options(options: ClassifyOptions, ray_options: RayOptions) -> Format:
    """Refuse what this path cannot do; the input's table kind."""
    options.check()
    ray_options.check()
    for name, why in _UNSUPPORTED.items():
        if getattr(options, name) is not None:
            raise ConfigurationError(f"--{name.replace('_', '-')} is not done on Ray: {why}")
    if options.input == STDIN:
        raise ConfigurationError("--ray reads a file or folder that the cluster's nodes can read, not stdin")
    if options.output_format not in (None, "parquet"):
        raise ConfigurationError(f"--ray writes a folder of Parquet shards, not {options.output_format}")
    return format_of(options.input, options.input_format, "--input-format")


def job_record(
    options: ClassifyOptions, classifier: QwenClassifier, kind: Format, rows: int, shard_rows: int
) -> dict[str, Any]:
    """What must be the same for a re-run to keep the shards already written: the input, how it
    is read, the classifier's configuration (:func:`~.job.fingerprint`), its rows and the
    shard size."""
    same = fingerprint(dataclasses.replace(options, input=STDIN, review_out=None), classifier, (kind, "parquet"))
    for key in ("input", "review_below", "review_sample", "review_seed"):
        same.pop(key, None)
    return {"input": options.input, **same, "rows": rows, "shard_rows": shard_rows}


def classify_dataset(options: ClassifyOptions, ray_options: RayOptions | None = None) -> RayJobReport:
    """Classify ``options.input`` on Ray into the folder ``options.out`` (see the module
    docstring) and return the report. Uses the Ray already started in this process if there
    is one, else connects to ``ray_options.address`` (and disconnects at the end)."""
    ray_options = ray_options or RayOptions()
    kind = check_options(options, ray_options)
    require_extra("ray", "ray", "pyarrow", what="classifying on Ray")
    import ray

    labels_only = build_classifier(dataclasses.replace(options, base_url=_DRIVER_BASE_URL))
    columns = BatchColumns(tuple(labels_only.label_names), labels_only.multi_label)
    started = time.perf_counter()
    own = not ray.is_initialized()
    if own:
        ray.init(address=ray_options.address)
    try:
        with _ordered():
            return _run(options, ray_options, kind, labels_only, columns, started)
    finally:
        labels_only.close()
        if own:
            ray.shutdown()


def _run(
    options: ClassifyOptions,
    ray_options: RayOptions,
    kind: Format,
    labels_only: QwenClassifier,
    columns: BatchColumns,
    started: float,
) -> RayJobReport:
    import ray

    dataset = _read(kind, options.input).materialize()
    rows = dataset.count()
    names = list(dataset.columns() or [])
    columns = dataclasses.replace(columns, renames=renamed_columns(names, columns.added))
    output = Path(options.out)
    record = job_record(options, labels_only, kind, rows, ray_options.shard_rows)
    open_output(output, record, fresh=options.fresh)
    bounds = shard_bounds(rows, ray_options.shard_rows)
    pending = pending_shards(output, len(bounds))
    skipped = sorted(set(range(len(bounds))) - set(pending))
    if not pending:
        return RayJobReport(output, rows, len(bounds), skipped, [], 0, 0, time.perf_counter() - started)
    parts = dataset.split_at_indices([stop for _, stop in bounds[:-1]])
    # The pending shards' blocks, in input order: Dataset.union does not keep the order of
    # its inputs' blocks (seen with Ray 2.60 on JSONL input), a dataset of block refs does.
    selected = ray.data.from_arrow_refs([ref for i in pending for ref in parts[i].to_arrow_refs()])
    classified = selected.map_batches(
        QwenClassifierBatch,
        fn_constructor_kwargs={"options": options, "columns": columns},
        batch_size=ray_options.batch_rows,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=ray_options.actors),
        num_cpus=ray_options.actor_cpus,
        resources=dict(ray_options.actor_resources) or None,
    )
    sizes = [bounds[i][1] - bounds[i][0] for i in pending]
    errors = 0
    for index, table in zip(
        pending, cut_into_shards(classified.iter_batches(batch_format="pyarrow", batch_size=None), sizes)
    ):
        errors += table.num_rows - table.column("error").null_count
        _write_shard(output / shard_name(index), table)
    return RayJobReport(output, rows, len(bounds), skipped, pending, sum(sizes), errors, time.perf_counter() - started)


def _read(kind: Format, path: str) -> Any:
    import ray.data

    if kind == "parquet":
        return ray.data.read_parquet(path)
    if kind == "csv":
        return ray.data.read_csv(path)
    return ray.data.read_json(path, lines=True)


@contextlib.contextmanager
def _ordered() -> Iterator[None]:
    """Ray Data keeps the order of blocks between operators while this is on."""
    import ray.data

    options = ray.data.DataContext.get_current().execution_options
    before = options.preserve_order
    options.preserve_order = True
    try:
        yield
    finally:
        options.preserve_order = before


def open_output(output: Path, record: dict[str, Any], *, fresh: bool) -> None:
    """The output folder with this job's record: a new one, one of the same job (its shards
    kept), or, with ``fresh``, one whose shards are removed. Another job's: refused."""
    file = output / JOB_FILE
    if output.exists() and not output.is_dir():
        raise ConfigurationError(f"--out is a file; --ray writes a folder of shards: {output}")
    saved: dict[str, Any] | None = None
    if file.is_file():
        try:
            saved = dict(orjson.loads(file.read_bytes()))
        except orjson.JSONDecodeError as exc:
            raise DataFileError(f"{file} cannot be read ({exc}); remove {output} to start over") from None
    elif shard_files(output):
        raise ConfigurationError(f"{output} holds shards without {JOB_FILE}; remove them or pick another --out")
    if saved is not None and not fresh:
        if saved.get("version") != JOB_FILE_VERSION:
            raise DataFileError(f"{file} has version {saved.get('version')}; this release reads {JOB_FILE_VERSION}")
        found = differences(saved.get("job", {}), record)
        if found:
            raise ConfigurationError(
                f"{output} holds shards of another job ({'; '.join(found)}): give fresh (--fresh) or another --out"
            )
        return
    for shard in shard_files(output):
        shard.unlink()
    output.mkdir(parents=True, exist_ok=True)
    atomic_bytes(file, orjson.dumps({"version": JOB_FILE_VERSION, "job": record}, option=orjson.OPT_INDENT_2))


def cut_into_shards(tables: Iterable[Any], sizes: Sequence[int]) -> Iterator[Any]:
    """The stream of ``pyarrow`` tables in order, cut into one table of each size in turn."""
    import pyarrow as pa

    pieces: list[Any] = []
    held = 0
    wanted = iter(sizes)
    size = next(wanted, None)
    for table in tables:
        while table.num_rows and size is not None:
            take = min(size - held, table.num_rows)
            pieces.append(table.slice(0, take))
            table, held = table.slice(take), held + take
            if held == size:
                yield pa.concat_tables(pieces)
                pieces, held, size = [], 0, next(wanted, None)
        if table.num_rows:
            raise DataFileError(f"Ray returned {table.num_rows} rows more than the shards hold")
    if size is not None:
        raise DataFileError(f"Ray returned {held} rows of a {size}-row shard, then nothing more")


def _write_shard(target: Path, table: Any) -> None:
    import pyarrow.parquet as pq

    def write(path: Path) -> None:
        with path.open("wb") as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())

    atomic_write(target, write)
