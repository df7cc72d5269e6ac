"""``qwen-fast bench-job``: ``qwen-fast classify``'s job against ``QwenClassifier.abatch`` on the
same server, and the job's memory (:mod:`langchain_qwen_fast.bench.classify_job`)."""

from __future__ import annotations

import argparse

from langchain_qwen_fast.bench.classify_job import JobBenchOptions
from langchain_qwen_fast.cli.options import defaults, options_from, whole_numbers

DESCRIPTION = """\
The classify job against QwenClassifier.abatch on the same texts and server, side by side.

    qwen-fast bench-job --base-url http://127.0.0.1:8000/v1 --rows 65536 --rounds 3
    qwen-fast bench-job --start-server .models/qwen3-tiny --rows 4096
    qwen-fast bench-job --memory 10000,100000,1000000 --canned     # from a checkout of the repository
    qwen-fast bench-job --memory 10000,50000 --base-url http://127.0.0.1:8000/v1
    qwen-fast bench-job --start-server .models/qwen3-tiny --rows 2048 --ray local

Each round times abatch over --rows fresh texts in one call and the whole job on a CSV of as
many other fresh texts (read, classified in --chunk-rows chunks, written, joined, reported;
no progress bar or histogram), the order swapped each round. Prints both rates per round,
their medians and the ratio job/abatch; writes results.json. --memory runs the job at each
size in a fresh process and reports its peak resident memory; --canned answers from the
tests' canned vLLM in the same process instead of a server. --ray adds the job on Ray Data
(a Parquet file of other fresh texts; Ray's read and actor start included) as a third path.
Figures: docs/benchmarks.md.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``bench-job``'s options: one per field of :class:`JobBenchOptions`, whose defaults they take."""
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
    parser.add_argument("--ray", metavar="ADDRESS", help="also on Ray: local, auto or ray://HOST:10001")
    parser.add_argument("--ray-actors", type=int, help="with --ray: classifier actors (default: %(default)s)")
    parser.add_argument("--out", help="folder for results.json (default: %(default)s)")
    parser.set_defaults(**defaults(JobBenchOptions))


def run(args: argparse.Namespace) -> int:
    """Run ``qwen-fast bench-job``."""
    from langchain_qwen_fast.bench.classify_job import run_job_bench

    run_job_bench(options_from(JobBenchOptions, args))
    return 0
