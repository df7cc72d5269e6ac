"""``qwen-fast bench-scale``: independent servers on the GPUs, measured side by side in one run
(:func:`langchain_qwen_fast.bench.scale.run_scale`)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from langchain_qwen_fast.bench.capabilities import CAPABILITY_ROWS
from langchain_qwen_fast.bench.scale import ScaleOptions
from langchain_qwen_fast.bench.variants import PROFILE_CHOICES
from langchain_qwen_fast.cli.options import defaults, options_from, whole_numbers
from langchain_qwen_fast.serving import ROUTER_POLICIES
from langchain_qwen_fast.serving.profiles import FRONTENDS

DESCRIPTION = """\
Independent servers on the GPUs, side by side in one run.

    qwen-fast bench-scale --model DIR --gpus all --servers-per-gpu 4 --subsets 1,2,3,4,8 \\
        --sweep-subsets 1,4 --router round_robin --profile-seconds 15 --out out/scale

Starts servers-per-gpu servers on each GPU (the first GPU's servers come first), then, for
each subset size k, spreads QwenClassifier.abatch over the first k servers at the classifier's
default load, twice, and (--sweep-subsets) over a grid of prompts per request x requests in
flight per server, to show how far the defaults are from the best point. Also, on request:
vLLM's router in front of the servers against the client's own spreading, at the same load
(--router); the request shape with and without allowed_token_ids on one server
(--compare-request-shape); where one server's CPU goes, from py-spy samples of its API process
and engine core (--profile-seconds; --profile-one-at-a-time: under single requests); the
defaults with the batch spread over client processes (--client-processes); the defaults over
the smallest and the largest subset in interleaved rounds, with each role's CPU per
classification (--scaling-rounds); the capability rows of qwen-fast bench over the first k
servers (--capabilities-subsets); and one-at-a-time latency of server variants started side
by side on the first GPU, with and without logprobs, engine steps split into CPU and GPU time
by vLLM's torch profiler (--latency-variants FILE). Also reports one-at-a-time p50, GPU memory,
and the cores each role (and the client's event loop) kept busy. --mode head measures a
classification-head model. Needs the 'bench' extra; uses vLLM and nvidia-smi where present.
Figures measured with it: docs/benchmarks.md.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``bench-scale``'s options: one per field of :class:`ScaleOptions`, whose defaults they take."""
    parser.add_argument("--model", required=True, help="model directory (or hub id) to serve")
    parser.add_argument("--gpus", help="'all' or indices such as 0,1 (default: every GPU there is; none: CPU servers)")
    parser.add_argument("--servers-per-gpu", type=int, help="servers on each GPU (default: %(default)s)")
    parser.add_argument("--profile", choices=PROFILE_CHOICES, help="the servers' flag set (default: %(default)s)")
    parser.add_argument(
        "--frontend", choices=FRONTENDS, help="vLLM's HTTP frontend, as qwen-fast serve takes it (default: %(default)s)"
    )
    parser.add_argument("--model-name", help="served model name (default: %(default)s)")
    parser.add_argument("--tokenizer", help="the model's tokenizer for token-id prompts (default: MODEL)")
    parser.add_argument("--subsets", type=whole_numbers, help="numbers of servers to use, e.g. 1,2,4 (default: all)")
    parser.add_argument("--sweep-subsets", type=whole_numbers, help="subsets that also get the sweep, e.g. 1,4")
    parser.add_argument("--items", type=int, help="items per throughput run (default: %(default)s)")
    parser.add_argument("--router", choices=ROUTER_POLICIES, help="also measure the router")
    parser.add_argument("--router-servers", type=int, help="servers behind the router (default: all)")
    parser.add_argument("--compare-request-shape", action="store_true", help="with and without allowed_token_ids")
    parser.add_argument("--profile-seconds", type=float, help="py-spy one server under load this long")
    parser.add_argument(
        "--profile-one-at-a-time", action="store_true", help="--profile-seconds under single requests, not batches"
    )
    parser.add_argument(
        "--server-arg", dest="server_args", metavar="FLAG", action="append", default=[],
        help="extra vLLM flag (repeatable; --server-arg=--flag)",
    )  # fmt: skip
    parser.add_argument("--mps", action="store_true", help="run the servers under NVIDIA MPS (see qwen-fast serve)")
    parser.add_argument("--mode", choices=["generate", "head"], help="the model's kind (default: %(default)s)")
    parser.add_argument(
        "--client-processes", type=whole_numbers, help="also run the defaults spread over N client processes, e.g. 2,4"
    )
    parser.add_argument(
        "--capabilities-subsets", type=whole_numbers, help="capability rows over the first k servers, e.g. 1,4"
    )
    parser.add_argument(
        "--capabilities-items-per-server", type=int, help="texts per capability run, per server (default: %(default)s)"
    )
    parser.add_argument("--capabilities-rounds", type=int, help="alternating rounds of the capability rows")
    parser.add_argument(
        "--capabilities-row",
        dest="capabilities_rows",
        action="append",
        choices=CAPABILITY_ROWS,
        help="a capability row to run (repeatable; default: all; zero-shot always runs)",
    )
    parser.add_argument(
        "--scaling-rounds",
        type=int,
        help="then the defaults over the smallest and the largest subset in this many interleaved rounds",
    )
    parser.add_argument(
        "--service-workers",
        type=whole_numbers,
        help="also clients sending one text each to qwen-fast api over every server, with each of these "
        "worker counts (e.g. 1,4), beside vLLM taking one request per text",
    )
    parser.add_argument(
        "--service-clients", type=int, help="with --service-workers: how many clients (default: %(default)s)"
    )
    parser.add_argument(
        "--service-groups-in-flight",
        type=whole_numbers,
        help="with --service-workers: each of these --groups-in-flight for every worker count (e.g. 2,8; "
        "default: the service's own)",
    )
    parser.add_argument(
        "--latency-variants",
        type=Path,
        metavar="FILE",
        help="JSON file of server variants ({name: {flags, drop, env}}) for one-at-a-time latency, after the group",
    )
    parser.add_argument("--out", type=Path, help="folder for scale.json and the py-spy samples (default: %(default)s)")
    parser.add_argument("--label", help="free text naming the machine, kept in the JSON")
    parser.set_defaults(**defaults(ScaleOptions))


def scale_options(args: argparse.Namespace) -> ScaleOptions:
    """The typed options of parsed ``bench-scale`` arguments, the tokenizer defaulting to the
    model's own when it has one."""
    from langchain_qwen_fast.bench.measure import own_tokenizer

    options = options_from(ScaleOptions, args)
    return dataclasses.replace(options, tokenizer=options.tokenizer or own_tokenizer(options.model))


def run(args: argparse.Namespace) -> int:
    """Run ``qwen-fast bench-scale``."""
    from langchain_qwen_fast.bench.scale import run_scale

    run_scale(scale_options(args))
    return 0
