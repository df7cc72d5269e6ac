"""``qwen-fast classify``'s job: a whole table classified in a stream, resumable, with its report.

    from langchain_qwen_fast.jobs.job import ClassifyOptions, classify_table

    report = classify_table(ClassifyOptions("news.csv", "labelled.parquet", labels=("World", "Sports")))

Rows are read a chunk at a time (``chunk_rows``, :mod:`.readers`), each chunk answered with
one engine call (several chunks in flight, so that the servers always have the next requests
while a chunk is written), and written, in input order, as a part file of the work folder
(:mod:`.parts`, :mod:`.writers`). Memory holds the chunks in flight, not the table. Each output
row is the input row's cells and the columns its answerer adds (:mod:`.answerers`: a
classifier's labels, :mod:`.columns`, or the questions', :mod:`.questions`). Reading and
writing are the table side's (:mod:`.table_side`): on Linux a process forked from the job's
once its input is open, so that the process that drives the classifier does little more per
row than ``QwenClassifier.abatch`` does.

Rules that keep every row once, in order, and nothing else's:

* **Errors of the input stay in place.** A row that cannot be read or classified for what it
  holds (:func:`is_input_error`: empty, too long, not text, a reply that names no label, a
  request the server refuses as malformed) gets its error in its ``error`` column, in its place.
* **Errors of the servers stop the job.** Any other error (the server unreachable, timing out,
  answering 429 or 5xx after the retries, a reply that cannot be read, the set-up failing) is
  never written as a row's result: the chunk it struck is dropped and the job stops with
  :class:`InfrastructureFailure` (``qwen-fast classify`` exits 3); run again, it carries on from
  the last whole chunk.
* **Too many input errors stop the job** (:class:`TooManyInputErrors`, exit 4), before the chunk
  that crossed the line is written. ``max_error_rate`` R: more than R of the rows read so far
  have input errors (R = 1 never stops). Without it, a systematic error: a chunk of at least
  :data:`SYSTEMATIC_ROWS` rows whose every row failed with an error of one kind. A text column
  that no row has is refused before anything is sent (:mod:`.tables`).
* **A restart carries on only over the same input.** Each finished chunk keeps the digest of
  every input row it was read from (stdin too); a restart reads those rows again and refuses
  (:class:`ConfigurationError`) at the first that differs, naming it, or when the input ends
  before them. Started again with other options, it refuses too, naming what differs, unless
  ``fresh``; a work folder with no finished chunk is simply started over (:mod:`.restart`).
* **One run at a time.** A run holds the work folder's lock for its life (its table process
  with it, which it waits for before letting go); a second run on the same output refuses at
  once. ``review_out`` may be neither the input nor the output, nor the
  output the input.
* **An interrupt stops the job cleanly.** A ``KeyboardInterrupt`` (Ctrl-C; ``asyncio.run``
  turns the first into a cancellation of the job) drops the chunks being classified, waits
  for the commits already sent to the table side (the table side does them all the same), ends
  the table process, lets the lock go and raises :class:`JobInterrupted` with the rows saved,
  the count the progress bar shows. No signal handler is set here: which signals become an
  interrupt is the application's choice (``qwen-fast classify`` adds SIGTERM).

At the end the parts are joined into the output, and the report (``OUTPUT.report.json``), the
confidence histogram (``OUTPUT.histogram.png``) and the review file are written from the
chunks' digests; then the work folder is removed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import orjson

from langchain_qwen_fast._core.decisions import DecisionOutcome
from langchain_qwen_fast._extras import require_extra
from langchain_qwen_fast.errors import (
    DataFileError,
    InfrastructureFailure,
    JobInterrupted,
    TooManyInputErrors,
    is_input_error,
)
from langchain_qwen_fast.jobs.answerers import LabelAnswerer, Result, RowAnswerer, named_classifier
from langchain_qwen_fast.jobs.columns import ClassifiedColumns, classified_table, error_text, result_table
from langchain_qwen_fast.jobs.options import ClassifyOptions
from langchain_qwen_fast.jobs.parts import WorkFolder, atomic_bytes, encode_digests, part_files, saved_rows, work_folder
from langchain_qwen_fast.jobs.questions import QuestionAsker, decision_model, load_questions
from langchain_qwen_fast.jobs.readers import table_reader
from langchain_qwen_fast.jobs.restart import check_same_columns, check_same_input, fingerprint, resumable
from langchain_qwen_fast.jobs.review import ReviewChunk, write_review
from langchain_qwen_fast.jobs.summary import Counts, JobReport, draw_histogram, total
from langchain_qwen_fast.jobs.table_side import ReadChunk, Tables, TableSide, open_tables
from langchain_qwen_fast.jobs.tables import Format, InputRow, TextSource, format_of
from langchain_qwen_fast.jobs.writers import OutputTable, join_parts, write_columns, write_part

if TYPE_CHECKING:
    from langchain_qwen_fast.engine import DecisionModelLike, EngineClassifier

#: The fewest rows of a chunk whose failing all alike is a systematic error (a file's last few
#: rows may fail alike by chance).
SYSTEMATIC_ROWS = 10
#: The fewest rows a chunk the job sizes itself holds: a part file and a restart's step.
MIN_CHUNK_ROWS = 128
#: Commits on their way to the table side at most: each holds its chunk's rows there.
COMMITS_AHEAD = 4
#: Chunks asked of the table side ahead of those being classified: the next is read while the
#: job's event loop is busy with replies, so a chunk is ready when one is done.
READ_AHEAD = 2


def build_answerer(
    options: ClassifyOptions, classifier: EngineClassifier | None = None, decisions: DecisionModelLike | None = None
) -> RowAnswerer:
    """What answers the options' rows: their questions (checked whole here, before anything is
    sent) on ``decisions`` or a decision model of the server options, else ``classifier`` or
    the classifier they name."""
    if options.questions is not None:
        questions = load_questions(options.questions)
        model = decisions or decision_model(options.base_url, options.model, options.abstain_below)
        return QuestionAsker(model, questions)
    return LabelAnswerer(classifier or build_classifier(options))


def build_classifier(options: ClassifyOptions) -> EngineClassifier:
    """The classifier the options name: the saved one with the server options on top, or one
    over ``labels``."""
    return named_classifier(
        options.classifier,
        options.labels,
        options.multi_label,
        base_url=options.base_url,
        model=options.model,
        mode=options.mode,
        abstain_below=options.abstain_below,
    )


def renamed_columns(columns: list[str], added: list[str]) -> dict[str, str]:
    """Input columns named like an added one, and the name each is kept under (``input_label``)."""
    taken = set(columns) | set(added)
    renames = {}
    for name in columns:
        if name in added:
            new = f"input_{name}"
            while new in taken:
                new = f"input_{new}"
            taken.add(new)
            renames[name] = new
    return renames


def classify_table(
    options: ClassifyOptions, classifier: EngineClassifier | None = None, decisions: DecisionModelLike | None = None
) -> JobReport:
    """Run the job (see the module docstring) and return its report. ``classifier`` (or, with
    questions, ``decisions``): use this one instead of the one the options name (its
    configuration is fingerprinted the same way); it is not closed here."""
    options.check()
    kinds = (
        format_of(options.input, options.input_format, "--input-format"),
        format_of(options.out, options.output_format, "--output-format"),
    )
    if "parquet" in kinds:
        require_extra("jobs", "pyarrow", what="Parquet files")
    if options.progress:
        require_extra("jobs", "tqdm", what="the progress bar (or --no-progress)")
    if options.histogram:
        require_extra("jobs", "matplotlib", what="the histogram (or --no-histogram)")
    own = (decisions if options.questions is not None else classifier) is None
    answerer: RowAnswerer | None = None
    job: _Job | None = None
    try:
        answerer = build_answerer(options, classifier, decisions)
        job = _Job(options, answerer, kinds)
        job.folder.lock()
        try:
            return asyncio.run(job.run())
        finally:
            job.folder.release()
    except KeyboardInterrupt:
        if job is not None and job.report is not None:
            return job.report  # the interrupt came once the output was whole: nothing to stop
        raise _interrupted(options, job) from None
    finally:
        if own and answerer is not None:
            answerer.close()


def _interrupted(options: ClassifyOptions, job: _Job | None) -> JobInterrupted:
    """What an interrupted job keeps: the rows it counted as saved, or where it had not read its
    work folder yet, the rows the folder holds."""
    folder = work_folder(Path(options.out))
    rows = job.saved_rows if job is not None and job.saved_rows is not None else saved_rows(folder)
    return JobInterrupted(rows=rows, folder=str(folder))


@dataclass(frozen=True)
class _Committing:
    """A chunk's commit, sent to the table side and not yet confirmed, and its rows."""

    sent: asyncio.Future[None]
    rows: int


async def _ended(committing: deque[_Committing]) -> BaseException | None:
    """Wait for every commit on its way to end; the failure of the first that failed."""
    if not committing:
        return None
    await asyncio.wait({c.sent for c in committing})
    failures = [c.sent.exception() for c in committing if not c.sent.cancelled()]
    return next((f for f in failures if f is not None), None)


class _Job:
    """One run of a job: resume, stream, finish."""

    def __init__(self, options: ClassifyOptions, answerer: RowAnswerer, kinds: tuple[Format, Format]) -> None:
        self.options = options
        self.answerer = answerer
        self.kinds = kinds
        self.out = Path(options.out)
        self.multi_label = answerer.multi_label
        self.added = answerer.added
        self.review = options.review()
        self.folder = WorkFolder(self.out, kinds[1])
        self.table: OutputTable | None = None
        self.renames: dict[str, str] = {}
        #: the input's columns, as it names them (the output's, renamed: ``self.table.columns``)
        self.source_columns: list[str] = []
        #: rows in chunks committed or on their way to be, and those of them with an input error
        #: (the error rate's, and what a stopped job says it keeps)
        self.finished_rows = 0
        self.finished_errors = 0
        #: rows in chunks whose commit is confirmed, a resumed job's included (None until the
        #: work folder is read): what the progress bar shows and an interrupted job says it keeps
        self.saved_rows: int | None = None
        self.set_up = False
        self.tables: Tables | None = None
        #: the report, once the output is whole
        self.report: JobReport | None = None

    async def run(self) -> JobReport:
        try:
            self.report = await self._run()
            return self.report
        finally:
            if self.tables is not None:  # gone before the work folder is let go
                self.tables.reap()

    async def _run(self) -> JobReport:
        started = time.perf_counter()
        options = self.options
        # A JSONL input's columns matter to CSV and Parquet output only (JSONL rows keep their keys).
        scan = self.kinds[1] != "jsonl"
        reader = table_reader(options.input, self.kinds[0], TextSource(options.text_column), scan_keys=scan)
        now = fingerprint(options, self.answerer, self.kinds)
        manifest, chunks = resumable(self.folder, now, fresh=options.fresh)
        done = sum(chunk.rows for chunk in chunks)
        finished = total(chunk.digest() for chunk in chunks)
        self.finished_rows, self.finished_errors = finished.rows, finished.errors
        self.saved_rows = done
        expected = reader.count() if options.progress else None  # the bar's total, read first
        rows = reader.rows()
        await check_same_input(rows, chunks, options.input, self.folder)
        first = [] if chunks else list(itertools.islice(rows, 1))  # the reader knows its columns from here
        columns = list(reader.columns or [])
        if manifest is None:
            self.folder.start(now, columns)
        else:
            check_same_columns(manifest, columns, options.input, self.folder)
        self.renames = renamed_columns(columns, self.added)
        self.source_columns = columns
        kept = [self.renames.get(name, name) for name in columns]
        self.table = OutputTable(self.kinds[1], kept, self.added, reader.arrow_schema, self.answerer.text_columns)
        classified = await self._stream(itertools.chain(first, rows), done, expected)
        return self._finish(done, classified, time.perf_counter() - started)

    async def _stream(self, rows: Iterator[InputRow], start: int, expected: int | None) -> int:
        """Classify and commit every remaining row; returns how many. The rows are read and
        committed on the table side (:mod:`.table_side`: a process of its own where the
        platform forks), so that this process's event loop does little but classify. A chunk's
        commit is sent as soon as its rows are checked, and the next chunk starts classifying
        without waiting for it: up to ``COMMITS_AHEAD`` commits are on their way, done by the
        table side in order, so the servers never wait on it writing and syncing parts."""
        bar = _progress(self.options.progress, expected, start)
        pending: deque[tuple[ReadChunk, asyncio.Task[list[Result]]]] = deque()
        at = start
        tables = self.tables = open_tables(TableSide(rows, start, self._write_chunk))
        reads: deque[asyncio.Future[ReadChunk | None]] = deque()
        committing: deque[_Committing] = deque()
        try:
            if not await tables.any_left():  # nothing left to classify: no server needed
                return 0
            await self._set_up()
            reads.extend(tables.read(self._chunk_rows()) for _ in range(READ_AHEAD))
            while (chunk := await reads.popleft()) is not None:
                reads.append(tables.read(self._chunk_rows()))
                pending.append((chunk, asyncio.ensure_future(self._classify(chunk))))
                at += len(chunk)
                while len(pending) >= self.options.chunks_in_flight:
                    await self._commit(*pending.popleft(), tables, committing, bar)
            while pending:
                await self._commit(*pending.popleft(), tables, committing, bar)
            while committing:
                await self._confirmed(committing, bar)
        except (asyncio.CancelledError, KeyboardInterrupt):
            # Interrupted: no more requests, and the commits already sent, which the table side
            # does all the same, are waited for, so that the rows counted as saved (and shown
            # on the bar) are the rows the work folder holds.
            for _, task in pending:
                task.cancel()
            await self._settle(committing, bar)
            raise
        except Exception as exc:
            # The job stops: the commits on their way end first, and one that failed is the
            # cause given (the rows its message counts as kept include that commit's chunk).
            failed = await _ended(committing)
            if failed is not None and failed is not exc:
                raise failed from exc
            raise
        finally:
            for _, task in pending:
                task.cancel()
            for read in reads:
                if read.done() and not read.cancelled():
                    read.exception()  # a chunk read ahead that failed: the job stopped for its own cause first
            tables.close()
            if bar is not None:
                bar.close()
            await self.answerer.aclose()
        return at - start

    def _chunk_rows(self) -> int:
        """The next chunk's rows: as many as the options say, else as the servers' windows
        hold now (small at first, so the servers get their first requests as soon as a few
        rows are read; larger as the windows open on fast servers; small still on slow ones,
        so a chunk is saved, and counted, every few seconds)."""
        return self.options.chunk_rows or max(MIN_CHUNK_ROWS, self.answerer.rows_in_flight())

    async def _set_up(self) -> None:
        """The engine's set-up with the server, before the first chunk (a job with nothing
        left to classify needs no server); its failure stops the job."""
        if self.set_up:
            return
        try:
            await self.answerer.aprepare()
        except Exception as exc:
            raise InfrastructureFailure(
                f"stopped: the set-up with the server failed ({error_text(exc)}); {self._kept()}.{_RESUME}"
            ) from exc
        self.set_up = True

    def _kept(self) -> str:
        """What a stopped job leaves."""
        if not self.finished_rows:
            return "no row was written"
        return f"the {self.finished_rows} rows finished before are kept in {self.folder.path}"

    async def _classify(self, chunk: ReadChunk) -> list[Result]:
        """Each row's classification or error: rows that cannot be read get their error without
        a request; the others go in one engine call, which puts the error of a value that is not
        text to classify in its place."""
        answers = await self.answerer.aanswer(chunk.texts) if chunk.texts else []
        if not chunk.problems:
            return list(answers)
        results: list[Result] = []
        given = iter(answers)
        for offset in range(len(chunk)):
            problem = chunk.problems.get(offset)
            results.append(next(given) if problem is None else DataFileError(problem))
        return results

    async def _commit(
        self,
        chunk: ReadChunk,
        task: asyncio.Task[list[Result]],
        tables: Tables,
        committing: deque[_Committing],
        bar: Any,
    ) -> None:
        """Once ``chunk`` is classified, check its rows and send its commit to the table side
        (after the commits confirmed by then, and a place among ``COMMITS_AHEAD``); its rows
        count as finished from then on."""
        results = await task
        while committing and (committing[0].sent.done() or len(committing) >= COMMITS_AHEAD):
            await self._confirmed(committing, bar)
        errors = self._check(chunk.start, chunk.places, results)
        committing.append(_Committing(tables.commit(chunk.start, results), len(chunk)))
        self.finished_rows += len(chunk)
        self.finished_errors += errors

    async def _confirmed(self, committing: deque[_Committing], bar: Any) -> None:
        """Wait for the first commit on its way (raising its failure) and count its rows as
        saved, on the bar too. The wait does not cancel the commit, and it leaves the line only
        once confirmed: an interrupt meanwhile finds it still on its way."""
        first = committing[0]
        await asyncio.shield(first.sent)
        committing.popleft()
        assert self.saved_rows is not None
        self.saved_rows += first.rows
        if bar is not None:
            bar.update(first.rows)

    async def _settle(self, committing: deque[_Committing], bar: Any) -> None:
        """Once interrupted: count each commit on its way as it is confirmed, in order, up to
        the first that fails (its chunk, and any after it, are not part of the unbroken run a
        rerun carries on from)."""
        while committing:
            try:
                await self._confirmed(committing, bar)
            except Exception:  # the interrupt is the cause given; the failed chunk is done again
                return

    def _check(self, start: int, places: list[str], results: list[Result]) -> int:
        """The chunk's rows with input errors; :class:`JobStopped` when the chunk is not to be
        written (see the module docstring)."""
        failed = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
        for i, error in failed:
            if not is_input_error(error):
                raise InfrastructureFailure(
                    f"stopped: row {start + i + 1} ({places[i]}) got {error_text(error)}, an error of the "
                    f"server or the way to it, not of the row; {self._kept()}.{_RESUME}"
                ) from error
        if not failed:
            return 0
        i, example = failed[0]
        first = f"row {start + i + 1} ({places[i]}): {error_text(example)}"
        limit = self.options.max_error_rate
        if limit is None:
            alike = len({type(error) for _, error in failed}) == 1
            if len(places) >= SYSTEMATIC_ROWS and len(failed) == len(places) and alike:
                raise TooManyInputErrors(
                    f"stopped: all {len(places)} rows from row {start + 1} failed alike ({first}), a systematic "
                    f"error (a wrong column, option or server?); none of them was written, and {self._kept()}. "
                    "Fix the cause and run again, or pass --max-error-rate 1 to write such rows with their error"
                )
            return len(failed)
        rows = self.finished_rows + len(places)
        errors = self.finished_errors + len(failed)
        if errors > limit * rows:
            raise TooManyInputErrors(
                f"stopped: {errors} of the {rows} rows read have input errors ({errors / rows:.1%}), over "
                f"--max-error-rate {limit} (the first in the chunk from row {start + 1}: {first}); that chunk was "
                f"not written, and {self._kept()}. Run again with a higher --max-error-rate to carry on, or fix "
                "the input and pass --fresh"
            )
        return len(failed)

    def _write_chunk(self, start: int, chunk: list[InputRow], results: Sequence[Result]) -> None:
        """Count, pick review entries and commit one chunk's rows (on the table side). A chunk
        classified without error may come as its :class:`ClassifiedColumns`: counted and made
        into the output's columns a column at a time where no review is picked and the output
        is made of columns."""
        table = self.table
        assert table is not None and len(results) == len(chunk)
        counts = Counts()
        review = ReviewChunk(self.review) if self.review is not None else None
        if isinstance(results, ClassifiedColumns):
            if review is None and self._by_columns() and results.multi_label == self.multi_label:
                counts.add_classified(results)
            else:
                results = results.rows()
        if not isinstance(results, ClassifiedColumns):
            for offset, (row, result) in enumerate(zip(chunk, results)):
                counts.add(result)
                if review is not None and isinstance(row.text, str) and not isinstance(result, DecisionOutcome):
                    review.add(start + offset, row.text, result)
        digest = {
            **counts.to_json(),
            "review": review.entries() if review is not None else [],
            "inputs": encode_digests([row.digest for row in chunk]),
        }
        columns = self._columns(chunk, results)
        if columns is not None:
            self.folder.commit(start, digest, lambda path: write_columns(path, table, columns))
            return
        out_rows = []
        for row, result in zip(chunk, results):
            cells = {self.renames.get(k, k): v for k, v in row.cells.items()} if self.renames else row.cells
            out_rows.append({**cells, **self.answerer.columns(result)})
        self.folder.commit(start, digest, lambda path: write_part(path, table, out_rows))

    def _by_columns(self) -> bool:
        """Whether a chunk's output is made a column at a time: a classifier's chunk of a CSV
        or Parquet input, bound for CSV or Parquet. The others' rows are made one at a time (a
        JSONL row may hold keys that are no column, a questions job's answers are its own)."""
        return self.table is not None and "jsonl" not in self.kinds and isinstance(self.answerer, LabelAnswerer)

    def _columns(self, chunk: list[InputRow], results: Sequence[Result]) -> dict[str, list[Any]] | None:
        """The chunk as the output's columns where :meth:`_by_columns`, else None."""
        table = self.table
        if table is None or not self._by_columns():
            return None
        columns = {
            name: [row.cells.get(source) for row in chunk] for source, name in zip(self.source_columns, table.columns)
        }
        answerer = cast(LabelAnswerer, self.answerer)
        if isinstance(results, ClassifiedColumns):
            columns.update(classified_table(results, answerer.labels))
        else:
            columns.update(result_table(cast(Any, results), answerer.labels, answerer.multi_label))
        return columns

    def _report_options(self) -> dict[str, Any]:
        """The options as the report shows them: questions given as objects by their names."""
        shown = {k: v for k, v in dataclasses.asdict(self.options).items() if k != "fresh"}
        if self.options.questions is not None and not isinstance(self.options.questions, str):
            shown["questions"] = list(self.answerer.fingerprint()["questions"])
        return shown

    def _finish(self, resumed: int, classified: int, seconds: float) -> JobReport:
        """Join the parts into the output, write the histogram, review file and report, and
        remove the work folder (each step may run again after a kill)."""
        assert self.table is not None
        chunks = self.folder.chunks()
        rows = sum(chunk.rows for chunk in chunks)
        if rows != resumed + classified:
            raise DataFileError(f"{self.folder.path} lost chunks while the job ran ({rows} rows in its parts)")
        counts = total(chunk.digest() for chunk in chunks)
        histogram = None
        if self.options.histogram:
            target = self.out.with_name(self.out.name + ".histogram.png")
            histogram = str(draw_histogram(counts, target, self.folder.path))
        review = None
        if self.review is not None:
            review = write_review(self.review, self.multi_label, lambda: (chunk.digest()["review"] for chunk in chunks))
        report_path = self.out.with_name(self.out.name + ".report.json")
        report = JobReport.of(
            counts,
            multi_label=self.multi_label,
            output=str(self.out),
            classified_rows=classified,
            resumed_rows=resumed,
            seconds=seconds,
            histogram=histogram,
            report=str(report_path),
            review=review,
            options=self._report_options(),
            questions=self.options.questions is not None,
        )
        self.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_bytes(report_path, orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2), self.folder.path)
        tmp = self.folder.temporary(self.out)
        join_parts(tmp, self.table, part_files(chunks))
        os.replace(tmp, self.out)
        self.folder.remove()
        return report


#: How a job stopped by the servers ends its message.
_RESUME = " Run the same command again once the server answers: it carries on from there"


def _progress(enabled: bool, expected: int | None, done: int) -> Any:
    """A tqdm bar of rows with rows/s and ETA (no total, so no ETA, for stdin)."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=expected, initial=done, unit="row", desc="classifying", dynamic_ncols=True, smoothing=0.1)
