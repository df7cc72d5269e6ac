"""``qwen-fast classify``: label every row of a CSV, JSONL or Parquet file, streaming and resumable."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from langchain_qwen_fast.cli.options import defaults, options_from, whole_numbers
from langchain_qwen_fast.errors import JobInterrupted, JobStopped
from langchain_qwen_fast.jobs.job import SYSTEMATIC_ROWS, ClassifyOptions
from langchain_qwen_fast.jobs.ray_job import RayOptions, cluster_address

DESCRIPTION = f"""\
Label every row of a table with a classifier, in a stream that resumes where it stopped.

    qwen-fast classify news.csv --out labelled.parquet --labels World,Sports,Business,Sci/Tech
    qwen-fast classify rows.jsonl --out labelled.jsonl --classifier models/news --base-url http://127.0.0.1:8000/v1
    cat rows.jsonl | qwen-fast classify - --input-format jsonl --out labelled.csv --labels A,B,C
    qwen-fast classify news.csv --out labelled.csv --classifier models/news \\
        --review-below 0.8 --review-sample 200 --review-out review.csv
    qwen-fast classify tickets.jsonl --out answered.parquet --questions questions.json

Input: CSV with a header (a text column, --text-column, or title and description columns;
AG News's layout without a header is read as is), JSONL, Parquet, or - for stdin (with
--input-format). Output: any of these, by its name or --output-format. Every input column is
kept and each row gains label (and labels under multi-label, joined with "|" in CSV), p_<label>
per label, abstained and error. A row that cannot be read or classified for what it holds
(empty, too long, bytes that are not UTF-8, a missing key, a line that is not JSON) gets its
error in the error column, in its place; the job goes on. A text column that no row has is
refused before anything is sent.

Exit codes: 0 done; 1 refused (options, input, or another run writing the same --out); 3
stopped by the servers: an error that is not the row's (unreachable, timed out, 429 or 5xx
after the retries, a reply that cannot be read, the set-up failing) is never written as a row's
result: run the same command again once the server answers and it carries on from the last
whole chunk; 4 stopped by input errors: by default when all rows of a chunk ({SYSTEMATIC_ROWS}
or more) fail alike, a systematic error; with --max-error-rate R when more than R of the rows
read have input errors (1: never). The chunk that stopped the job is not written; 130 or 143
stopped by Ctrl-C (SIGINT) or SIGTERM: the chunks being classified are dropped, the commits
under way finish, and one line says how many rows are saved and the command that carries on.

Rows are read and classified a chunk at a time (--chunk-rows per QwenClassifier.abatch call,
--chunks-in-flight at once) and written as they finish, so memory does not grow with the
file. Each chunk is committed to OUT.partial/ beside the output: killed at any moment, the same
command carries on after the last chunk written; other options are refused (naming what
differs) unless --fresh. A restart reads the rows the finished chunks were read from again
and refuses, naming the row, when one differs (stdin too). One run at a time writes an output:
a second refuses at once. At the end: OUT, OUT.report.json (label counts, abstained, errors,
rows/s), OUT.histogram.png (confidence per label) and, with --review-out, a review file in
qwen-fast train's layout (text, an empty label to fill, model_label, model_probability, row):
the rows under --review-below and a sample of --review-sample others, stratified by predicted
label. Filled in, it trains the next model as it is. The API key comes from VLLM_API_KEY.
Needs the 'jobs' extra (pyarrow, tqdm, matplotlib).

Questions (--questions FILE, instead of --classifier or --labels): every row's text column is
the state of a decision (QwenDecisionModel's, over --base-url and --model), asked each question
of FILE, a JSON object of answer ids to questions as LangChain's question types dump them:
  {{"team": {{"type": "choice", "instructions": "Which team?", "criteria": {{"billing": "Payments.", "tech": null}}}},
   "urgent": {{"type": "noul", "instructions": "Is this urgent?"}},
   "anger": {{"type": "score", "instructions": "How angry?", "criteria": ["Calm.", "Annoyed.", "Furious."]}}}}
A bad file is refused before anything is sent, naming the question. Each row gains, per
question in the file's order: a noul Q, its probability of yes; a choice Q, its label (empty
where refused under --abstain-below), Q.confidence and Q.p_<label> per label; a score Q, its
expected level, Q.confidence and Q.p_<level> per level 0..n-1; then error. The questions are
part of what a restart compares. The report counts each choice's labels; the histogram has a
panel per choice and score; --review-out, --multi-label and --mode are a classifier's and are
refused. Works with --ray too.

With --ray ADDRESS (auto, ray://HOST:10001, or local for a Ray started here and stopped at the
end) the job is a Ray Data pipeline: the input (a file, a folder, a glob; local paths every
node sees, s3://, gs://) is read on the workers, classified by an autoscaling pool of
--actors MIN,MAX actors (each over its own node's servers: --base-url may name a --urls-file
that every node has; or, with --vllm-model, a vLLM engine inside each actor), and written
from the workers into the folder OUT, a dataset any Parquet, JSON or CSV reader opens
(the job's files in it start with _ and readers skip them). An error that is not the row's
own retries the batch on Ray; killed at any moment, the same command carries on from the
rows written (keyed on --id-column, or on each row's file and place). At the end:
OUT/_report.json, OUT/_histogram.png and, with --review-out, the review file, counted on the
workers. Needs the 'ray' extra (docs/gpu-deployment.md).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``classify``'s options: one per field of :class:`ClassifyOptions`, whose defaults they show."""
    p.add_argument("input", help="CSV, JSONL or Parquet file, or - for stdin")
    p.add_argument("--out", required=True, help="the output file (CSV, JSONL or Parquet, by its name)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--classifier", help="a saved classifier (qwen-fast train's output, or classifier.json)")
    which.add_argument("--labels", nargs="+", help="the labels: A,B,C (or A B C)")
    which.add_argument(
        "--questions",
        metavar="FILE",
        help="a JSON file of questions to answer about every row instead of labels (see Questions above)",
    )
    p.add_argument("--multi-label", action="store_true", help="with --labels: several labels may apply")
    p.add_argument("--abstain-below", type=float, help="abstain when the best probability is below this")
    p.add_argument("--base-url", help="the vLLM server (default: the saved one, else QWEN_FAST_BASE_URL, else local)")
    p.add_argument("--model", help="served model name (default: the saved one, else qwen3)")
    p.add_argument("--mode", choices=["generate", "head"], help="default: the saved one, else generate")
    p.add_argument("--input-format", choices=["csv", "jsonl", "parquet"], help="default: from the name")
    p.add_argument("--output-format", choices=["csv", "jsonl", "parquet"], help="default: from the name")
    p.add_argument("--text-column", help="the text's column or key (default: %(default)s, else title and description)")
    p.add_argument(
        "--chunk-rows",
        type=int,
        help="rows per abatch call and per part (default: enough to keep every request in flight full, "
        "from what the servers' windows hold as each chunk is read, at least 128)",
    )
    p.add_argument("--chunks-in-flight", type=int, help="chunks classified at once (default: %(default)s)")
    p.add_argument("--review-out", help="the review file (.csv or .jsonl)")
    p.add_argument("--review-below", type=float, help="review the rows whose confidence is under this")
    p.add_argument("--review-sample", type=int, help="and this many others, stratified by label (default: %(default)s)")
    p.add_argument("--review-seed", type=int, help="the sample's seed (default: %(default)s)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument("--no-histogram", dest="histogram", action="store_false", help="no histogram PNG")
    p.add_argument("--fresh", action="store_true", help="discard an interrupted job's OUT.partial/ and start over")
    p.add_argument(
        "--max-error-rate",
        type=float,
        metavar="R",
        help="stop (exit 4) when more than R (0 to 1) of the rows read have input errors; 1: never "
        "(default: stop only when all rows of a chunk fail alike)",
    )
    ray = p.add_argument_group("on a Ray cluster (the 'ray' extra)")
    ray.add_argument("--ray", metavar="ADDRESS", help="auto, ray://HOST:10001, or local (a Ray started for the job)")
    ray.add_argument("--actors", type=whole_numbers, help="classifier actors: N, or MIN,MAX to scale between")
    ray.add_argument("--actor-cpus", type=float, help="logical CPUs each actor takes (default: %(default)s)")
    ray.add_argument("--batch-rows", type=int, help="rows per actor call (default: %(default)s)")
    ray.add_argument(
        "--batches-in-flight", type=int, help="actor calls each actor works on at once (default: %(default)s)"
    )
    ray.add_argument("--id-column", help="the input's unique row id (default: one from each row's file and place)")
    ray.add_argument("--vllm-model", help="run a vLLM engine of this model inside each actor (no servers needed)")
    ray.add_argument(
        "--vllm-arg", dest="vllm_args", action="append", help="a vllm serve flag for those engines (repeatable)"
    )
    ray.add_argument("--gpus-per-actor", type=float, help="GPUs each in-actor engine takes (default: %(default)s)")
    p.set_defaults(**defaults(ClassifyOptions), **{**defaults(RayOptions), "vllm_args": None}, ray=None)


def classify_options(args: argparse.Namespace) -> ClassifyOptions:
    """The typed options of parsed ``classify`` arguments (``--labels A,B C`` is A, B, C)."""
    options = options_from(ClassifyOptions, args)
    if args.labels is None:
        return options
    labels = tuple(label.strip() for word in args.labels for label in word.split(",") if label.strip())
    return dataclasses.replace(options, labels=labels)


def ray_options(args: argparse.Namespace) -> RayOptions | None:
    """The Ray options of parsed ``classify`` arguments, or None without ``--ray`` (``local``:
    a Ray started in this process for the job)."""
    if args.ray is None:
        return None
    options = options_from(RayOptions, args)
    actors = tuple(args.actors) if args.actors else options.actors
    if len(actors) == 1:
        actors = (actors[0], actors[0])
    if len(actors) != 2:
        raise argparse.ArgumentTypeError(f"--actors is N or MIN,MAX, got {args.actors}")
    return dataclasses.replace(
        options,
        address=cluster_address(args.ray),
        actors=(int(actors[0]), int(actors[1])),
        vllm_args=tuple(args.vllm_args or ()),
    )


def run(args: argparse.Namespace) -> int:
    """Run the job and print its summary. A job that stopped part way exits with its code (3:
    the servers failed, 4: too many input errors); other errors reach ``qwen-fast``'s one rule
    (exit code 1)."""
    options, on_ray = classify_options(args), ray_options(args)
    from langchain_qwen_fast.jobs.summary import render

    if on_ray is not None:
        from langchain_qwen_fast.jobs.ray_job import classify_dataset

        try:
            done = classify_dataset(options, on_ray)
            print(f"{render(done)}\n{done.phases()}", flush=True)
        except JobStopped as exc:
            print(f"qwen-fast classify: {exc}", file=sys.stderr, flush=True)
            return exc.exit_code
        return 0
    with _terminate_interrupts() as terminated:
        try:
            from langchain_qwen_fast.jobs.job import classify_table
            from langchain_qwen_fast.process import collector_paused

            with collector_paused():  # the command owns its process, and the job ends
                report = classify_table(options)
        except JobInterrupted as exc:
            return _stopped(exc, terminated)
        except JobStopped as exc:
            print(f"qwen-fast classify: {exc}", file=sys.stderr, flush=True)
            return exc.exit_code
        except KeyboardInterrupt:  # before the job began: what its work folder holds is kept
            from langchain_qwen_fast.jobs.parts import saved_rows, work_folder

            folder = work_folder(Path(options.out))
            return _stopped(JobInterrupted(rows=saved_rows(folder), folder=str(folder)), terminated)
    print(render(report), flush=True)
    return 0


@contextlib.contextmanager
def _terminate_interrupts() -> Iterator[list[int]]:
    """SIGTERM does what SIGINT does while the job runs (then the handler before is back): it
    calls SIGINT's handler of the moment, which in the job's event loop is ``asyncio.run``'s
    (the job is cancelled and stops cleanly, a second one interrupts at once), else Python's
    (``KeyboardInterrupt``). SIGINT's own handler is left alone, so that ``asyncio.run`` sets its
    own. Yields the SIGTERMs received, for the exit code."""
    terminated: list[int] = []

    def interrupt(signum: int, frame: FrameType | None) -> None:
        terminated.append(signum)
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):  # SIGINT ignored (started in the background): an interrupt all the same
            raise KeyboardInterrupt
        handler(signal.SIGINT, frame)

    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield terminated
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield terminated
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _stopped(exc: JobInterrupted, terminated: list[int]) -> int:
    """Say in one line what the interrupted job keeps and the command that carries on from
    there (this process's own, as typed); the exit code is the shell's for the signal."""
    signum = signal.SIGTERM if terminated else signal.SIGINT
    command = shlex.join(["qwen-fast", *sys.argv[1:]])
    again = "carries on from there" if exc.rows else "starts it again"
    print(f"qwen-fast classify: stopped by {signum.name}: {exc.saved}; the same command {again}: {command}",
          file=sys.stderr, flush=True)  # fmt: skip
    return 128 + signum if terminated else exc.exit_code
