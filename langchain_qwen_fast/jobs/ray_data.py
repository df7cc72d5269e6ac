"""Classification as a Ray Data stage: the ``ray`` extra.

    import ray
    from langchain_qwen_fast.jobs.ray_data import ClassifyStage, HTTPServers

    stage = ClassifyStage(labels=("World", "Sports", "Business", "Sci/Tech"),
                          engine=HTTPServers("/etc/qwen-fast/urls.txt"), concurrency=(1, 8))
    ds = ray.data.read_parquet("s3://bucket/news/")
    stage(ds).write_parquet("s3://bucket/labelled/")

A :class:`ClassifyStage` goes into the user's own ``read_* -> map_batches -> write_*``
pipeline: called on a ``ray.data.Dataset`` it returns a lazy one with the classification
columns (:mod:`.columns`) added to every row, streaming, from an autoscaling pool of actors
(``concurrency=(min, max)``), each with several batches in flight. With ``questions``, the
stage answers a question set about every row instead, adding the answers' columns
(:mod:`.questions`). Each actor holds a :class:`~langchain_qwen_fast.QwenClassifier`'s engine
(or a :class:`~langchain_qwen_fast.QwenDecisionModel`'s), built on its node, over one of two
ways to reach vLLM (as Ray Data LLM has):

* :class:`HTTPServers`: the servers on each node (``qwen-fast serve`` or ``vllm serve``),
  ``base_url`` a URL list or the path of a node's ``--urls-file``;
* :class:`VLLMInActor`: a vLLM engine inside each actor (``num_gpus`` reserved for it), so a
  cluster needs no servers started by hand. The actor speaks to its engine through vLLM's
  own OpenAI app in the same process, so the prompts and label-token log-probabilities are
  the servers' to the bit.

Faults go the Ray way. A row's own problem (an empty text, a row the reader could not read,
a request the server refused for its content) stays in its row's ``error`` column. Any other
error (a server down past the client's retries, an engine that died) fails the batch, so
Ray retries it (``task_retries``), restarting the actor if it died (``actor_restarts``):
an outage leaves no error rows behind once it is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_qwen_fast._extras import require_extra
from langchain_qwen_fast.errors import ConfigurationError, DataFileError, ResponseFormatError, is_input_error
from langchain_qwen_fast.jobs.answerers import (
    LabelAnswerer,
    RowAnswerer,
    check_classifier_choice,
    check_no_classifier,
    named_classifier,
)
from langchain_qwen_fast.jobs.columns import added_columns, result_columns
from langchain_qwen_fast.jobs.job import renamed_columns
from langchain_qwen_fast.jobs.questions import (
    GivenQuestions,
    QuestionAsker,
    answer_columns,
    decision_model,
    load_questions,
    question_columns,
    text_columns,
)
from langchain_qwen_fast.jobs.ray_read import PROBLEM_COLUMN
from langchain_qwen_fast.jobs.tables import TextSource
from langchain_qwen_fast.jobs.writers import OutputTable
from langchain_qwen_fast.process import collector_paused

if TYPE_CHECKING:
    from langchain_qwen_fast._core.decisions import QuestionSet
    from langchain_qwen_fast.engine import DecisionModelLike, EngineClassifier

#: Seconds an actor waits for the progress counter to take a batch's figures.
COUNTER_SECONDS = 10.0
#: Where the classifier built on the driver (for its labels only, never asked anything) points.
_NOWHERE = "http://127.0.0.1:9/v1"


@dataclass(frozen=True)
class HTTPServers:
    """vLLM servers reached over HTTP from each actor."""

    #: URLs (comma-separated), or the path of a ``qwen-fast serve --urls-file`` file read on the
    #: actor's node; None: the saved classifier's, else ``QWEN_FAST_BASE_URL``, else local
    base_url: str | None = None
    #: the served model name (None: the saved classifier's, else qwen3)
    model: str | None = None


@dataclass(frozen=True)
class VLLMInActor:
    """A vLLM engine inside each actor."""

    #: the model's folder (or hub name), as ``vllm serve`` takes it
    model: str
    #: the name the classifier asks for (a saved classifier's ``model``)
    served_model_name: str = "qwen3"
    #: more ``vllm serve`` flags, e.g. ``("--dtype", "bfloat16", "--max-model-len", "512")``
    vllm_args: tuple[str, ...] = ()
    #: GPUs each actor reserves: 1, or 1/N for N engines a GPU (under MPS); 0 for vLLM's CPU build
    num_gpus: float = 1.0
    #: environment variables of the actors, which their engines read (``VLLM_*``, ``CUDA_*``)
    env_vars: Mapping[str, str] = field(default_factory=dict)

    def args(self) -> list[str]:
        """The engine's ``vllm serve`` arguments."""
        return ["--model", self.model, "--served-model-name", self.served_model_name, *self.vllm_args]


@dataclass(frozen=True)
class ClassifyStage:
    """A classification stage for Ray Data pipelines (see the module docstring)."""

    #: a saved classifier (``qwen-fast train``'s output or ``QwenClassifier.save``'s file)...
    classifier: str | None = None
    #: ...or the labels
    labels: tuple[str, ...] | None = None
    multi_label: bool = False
    abstain_below: float | None = None
    #: generate or head (None: the saved classifier's, else generate)
    mode: str | None = None
    #: the text's column (else title and description, joined)
    text_column: str = "text"
    engine: HTTPServers | VLLMInActor = field(default_factory=HTTPServers)
    #: actors: (fewest, most), Ray Data scales between them; or a fixed number
    concurrency: tuple[int, int] | int = (1, 4)
    #: rows per actor call
    batch_size: int = 1024
    #: actor calls each actor works on at once
    batches_in_flight: int = 4
    #: logical CPUs each actor reserves
    num_cpus: float = 1.0
    #: custom Ray resources each actor reserves
    resources: Mapping[str, float] = field(default_factory=dict)
    #: tries again of a batch that failed for the servers or the actor
    task_retries: int = 10
    #: restarts of an actor that died
    actor_restarts: int = 10
    #: a Ray actor told ``add(rows, errors)`` after each batch (how ``qwen-fast classify
    #: --ray`` shows progress); None: no one
    counter: Any = None
    #: questions to answer about every row instead of a classifier's labels (a questions
    #: file's path, read on the driver, or the mapping of answer ids to questions; see
    #: :mod:`.questions`), with their columns instead of the labels'
    questions: GivenQuestions | None = None

    def check(self) -> None:
        """:class:`ConfigurationError` for settings that cannot work."""
        if self.questions is None:
            check_classifier_choice(self.classifier, self.labels, self.multi_label, flags=False)
        else:
            check_no_classifier(self.classifier, self.labels, self.multi_label, self.mode, flags=False)
            load_questions(self.questions)
        fewest, most = (self.concurrency, self.concurrency) if isinstance(self.concurrency, int) else self.concurrency
        if not 1 <= fewest <= most:
            raise ConfigurationError(
                f"concurrency must be N >= 1 or (min, max) with 1 <= min <= max, got {self.concurrency}"
            )
        if self.batch_size < 1 or self.batches_in_flight < 1:
            raise ConfigurationError(
                f"batch_size and batches_in_flight must be at least 1, got {self.batch_size}, {self.batches_in_flight}"
            )
        if self.num_cpus < 0 or self.task_retries < 0 or self.actor_restarts < 0:
            raise ConfigurationError("num_cpus, task_retries and actor_restarts must be 0 or more")
        if isinstance(self.engine, VLLMInActor) and not 0 <= self.engine.num_gpus <= 1:
            raise ConfigurationError(
                f"VLLMInActor.num_gpus is a GPU's share within [0, 1] (0: a CPU engine), got {self.engine.num_gpus}"
            )

    def build(self, base_url: str | None = None, http_transport: Any = None) -> EngineClassifier:
        """The classifier this stage names, over ``base_url`` (default: the engine's)."""
        given: dict[str, Any] = {"mode": self.mode, "abstain_below": self.abstain_below}
        if isinstance(self.engine, HTTPServers):
            given.update(base_url=self.engine.base_url, model=self.engine.model)
        else:
            given["model"] = self.engine.served_model_name
        if base_url is not None:
            given["base_url"] = base_url
        return named_classifier(self.classifier, self.labels, self.multi_label, **given, http_transport=http_transport)

    def build_decisions(self, base_url: str | None = None, http_transport: Any = None) -> DecisionModelLike:
        """The decision model this stage's questions are answered with, over ``base_url``
        (default: the engine's)."""
        if isinstance(self.engine, HTTPServers):
            where, model = self.engine.base_url, self.engine.model
        else:
            where, model = None, self.engine.served_model_name
        return decision_model(base_url or where, model, self.abstain_below, http_transport=http_transport)

    def labels_only(self) -> EngineClassifier:
        """The classifier this stage names, pointing nowhere: for its labels and settings, never
        asked anything (the caller closes it)."""
        return self.build(base_url=_NOWHERE)

    def answerer_only(self) -> RowAnswerer:
        """What answers this stage's rows (its classifier or its questions), pointing nowhere:
        for its settings, never asked anything (the caller closes it)."""
        if self.questions is not None:
            return QuestionAsker(self.build_decisions(_NOWHERE), load_questions(self.questions))
        return LabelAnswerer(self.labels_only())

    def columns(self) -> BatchColumns:
        """The columns the stage adds (the classifier is built here only to read its labels)."""
        if self.questions is not None:
            return BatchColumns((), False, load_questions(self.questions))
        classifier = self.labels_only()
        try:
            return BatchColumns(tuple(classifier.label_names), classifier.multi_label)
        finally:
            classifier.close()

    def __call__(self, dataset: Any) -> Any:
        """``dataset`` with the classification columns added, lazily (nothing runs until the
        pipeline is consumed). Infrastructure errors retry the batch (Ray retries on
        application errors only where the dataset's context says so: set here)."""
        self.check()
        require_extra("ray", "ray", "pyarrow", what="classifying on Ray")
        import ray.data

        fewest, most = (self.concurrency, self.concurrency) if isinstance(self.concurrency, int) else self.concurrency
        engine = self.engine
        # The questions go to the actors as the engine's set: a file is read here, on the driver.
        stage = self if self.questions is None else dataclasses.replace(self, questions=load_questions(self.questions))
        # Blocks of one batch each: a reader's block can hold a whole file, and one block is one
        # actor call, which would leave the other actors idle.
        batches = dataset.repartition(target_num_rows_per_block=self.batch_size)
        classified = batches.map_batches(
            ClassifyActor,
            fn_constructor_kwargs={"stage": stage, "columns": stage.columns()},
            batch_size=self.batch_size,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(
                min_size=fewest,
                max_size=most,
                max_tasks_in_flight_per_actor=self.batches_in_flight,
                max_concurrent_calls_per_actor=self.batches_in_flight,
            ),
            num_cpus=self.num_cpus,
            num_gpus=engine.num_gpus if isinstance(engine, VLLMInActor) and engine.num_gpus > 0 else None,
            resources=dict(self.resources) or None,
            runtime_env={"env_vars": dict(engine.env_vars)}
            if isinstance(engine, VLLMInActor) and engine.env_vars
            else None,
            # Bounded, where Ray's own default retries forever; Ray 2.60 names these nowhere
            # else (the extra pins the Ray releases that take them).
            max_restarts=self.actor_restarts,
            max_task_retries=self.task_retries,
        )
        retry_failed_batches(classified.context)
        return classified


def retry_failed_batches(context: Any) -> None:
    """Have Ray retry a batch whose actor call raised (only the servers' and actors' errors
    raise; a row's own stays in its row), as it retries one whose actor died."""
    context.actor_task_retry_on_errors = True


# -- one batch ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchColumns:
    """How a batch's output columns are made: the input's (less the read problem), renamed
    where they clash with an added one, then the added columns with their types."""

    labels: tuple[str, ...]
    multi_label: bool
    #: a questions stage's questions (``labels`` then empty): their columns instead
    questions: QuestionSet | None = None

    @property
    def added(self) -> list[str]:
        if self.questions is not None:
            return question_columns(self.questions)
        return added_columns(self.labels, self.multi_label)

    def row(self, result: Any) -> dict[str, Any]:
        """One row's added columns."""
        if self.questions is not None:
            return answer_columns(result, self.questions)
        return result_columns(result, self.labels, self.multi_label)

    def assemble(self, table: Any, results: Sequence[Any]) -> Any:
        """``table`` (a ``pyarrow.Table``) with the added columns of ``results`` (one per row,
        in order) after its own."""
        import pyarrow as pa

        if len(results) != table.num_rows:
            raise ResponseFormatError(f"{len(results)} results for {table.num_rows} rows")
        if PROBLEM_COLUMN in table.column_names:
            table = table.drop_columns([PROBLEM_COLUMN])
        renames = renamed_columns(table.column_names, self.added)
        if renames:
            table = table.rename_columns([renames.get(name, name) for name in table.column_names])
        rows = [self.row(r) for r in results]
        texts = text_columns(self.questions) if self.questions is not None else None
        for spec in OutputTable("parquet", [], self.added, text_columns=texts).schema():
            table = table.append_column(spec, pa.array([row[spec.name] for row in rows], type=spec.type))
        return table


def texts_of(table: Any, source: TextSource) -> list[Any]:
    """Each row's value to classify (its text column, else title and description), or the
    error it has instead (a read problem, a missing column)."""
    names = [n for n in (source.column, "title", "description") if n in table.column_names]
    if source.column in names:
        names = [source.column]
    picked = table.select(names).to_pylist() if names else [{}] * table.num_rows
    problems = table.column(PROBLEM_COLUMN).to_pylist() if PROBLEM_COLUMN in table.column_names else None
    values: list[Any] = []
    for i, cells in enumerate(picked):
        value, problem = source.of(cells)
        if problems is not None and problems[i] is not None:
            problem = problems[i]
        values.append(DataFileError(f"the row {problem}") if problem is not None else value)
    return values


async def answer_rows(answerer: RowAnswerer, values: Sequence[Any]) -> list[Any]:
    """Each value's answer (a classifier's, or a stage's questions') or its own error, in
    order. Values that are already an error keep it without a request. An error that is not
    the row's own (the servers', the way to them) is raised: the batch is tried again, not
    written with it."""
    results: list[Any] = [None] * len(values)
    readable = []
    for i, value in enumerate(values):
        if isinstance(value, BaseException):
            results[i] = value
        else:
            readable.append(i)
    if readable:
        answers = await answerer.aanswer([values[i] for i in readable])
        for i, result in zip(readable, answers):
            if isinstance(result, BaseException) and not is_input_error(result):
                raise result
            results[i] = result
    return [r for r in results if r is not None]


class ClassifyActor:
    """The ``map_batches`` callable: one per Ray actor, built on its node. Its engine (the
    classifier or, for a questions stage, the decision model, and with :class:`VLLMInActor`
    the vLLM engine under it) starts on the first batch, in the actor's event loop, where
    every batch then runs.

    ``classifier`` (tests, or a process that is its own worker): use this one instead (a
    ``QwenDecisionModel`` for a questions stage)."""

    def __init__(
        self,
        stage: ClassifyStage,
        columns: BatchColumns,
        classifier: EngineClassifier | DecisionModelLike | None = None,
    ) -> None:
        self.stage = stage
        self.columns = columns
        self.source = TextSource(stage.text_column)
        self._given = classifier
        self._answerer: RowAnswerer | None = None
        self._engine: Any = None
        self._starting: asyncio.Lock | None = None

    async def answerer(self) -> RowAnswerer:
        """What answers the actor's rows, started on first use."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._answerer is None:
                built = self._given
                if built is None:
                    base_url, transport = None, None
                    engine = self.stage.engine
                    if isinstance(engine, VLLMInActor):
                        from langchain_qwen_fast.serving.in_process import InProcessVLLM

                        self._engine = InProcessVLLM(engine.args())
                        await self._engine.start()
                        base_url, transport = self._engine.base_url, self._engine.transport
                    if self.columns.questions is None:
                        built = self.stage.build(base_url, transport)
                    else:
                        built = self.stage.build_decisions(base_url, transport)
                if self.columns.questions is None:
                    self._answerer = LabelAnswerer(built)  # type: ignore[arg-type]
                else:
                    self._answerer = QuestionAsker(built, self.columns.questions)  # type: ignore[arg-type]
            return self._answerer

    async def __call__(self, table: Any) -> Any:
        answerer = await self.answerer()
        with collector_paused():  # the actor is the job's own process; a batch ends
            results = await answer_rows(answerer, texts_of(table, self.source))
        if self.stage.counter is not None:
            errors = sum(isinstance(result, BaseException) for result in results)
            # Progress only: a counter that does not answer in time neither holds up nor fails
            # the batch.
            with contextlib.suppress(Exception):
                told = self.stage.counter.add.remote(len(results), errors, peak_rss_mib(), actor_name())
                await asyncio.wait_for(told, timeout=COUNTER_SECONDS)
        return self.columns.assemble(table, results)


def actor_name() -> str:
    """Which actor this process is, for the counter (an actor is a process of its own)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def peak_rss_mib() -> float:
    """This process's peak resident memory, MiB (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stage_of(options: Any, engine: HTTPServers | VLLMInActor, **settings: Any) -> ClassifyStage:
    """The stage of a ``qwen-fast classify`` job's options (:class:`~.job.ClassifyOptions`)."""
    if isinstance(engine, HTTPServers):
        engine = dataclasses.replace(engine, base_url=options.base_url or engine.base_url, model=options.model)
    # The fields that name the classifier and its text are the job's, under the same names.
    named = {f.name for f in dataclasses.fields(ClassifyStage)} & {f.name for f in dataclasses.fields(options)}
    return ClassifyStage(engine=engine, **{name: getattr(options, name) for name in named}, **settings)
