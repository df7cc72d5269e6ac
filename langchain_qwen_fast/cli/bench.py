"""``qwen-fast bench``: latency and throughput side by side against one server in one run
(:func:`langchain_qwen_fast.bench.compare.run_compare`)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from langchain_qwen_fast.bench.compare import CompareOptions
from langchain_qwen_fast.cli.options import defaults, options_from
from langchain_qwen_fast.serving.profiles import PROFILES

DESCRIPTION = """\
Latency and throughput, side by side against one server in one run.

    qwen-fast bench --base-url http://127.0.0.1:8000/v1
    qwen-fast bench --start-server .models/qwen3-tiny

Paths, all on the same texts: raw HTTP (httpx) with QwenClassifier's exact request, the
openai SDK, ChatOpenAI.invoke/.batch/.abatch, LCEL prompt | ChatOpenAI, LLMChain
(langchain-classic) and QwenClassifier.invoke/.batch/.abatch. One-at-a-time paths are
interleaved item by item, so drift on a noisy machine hits all of them alike, and every
request sends a text new to the server. Reports requests/s, p50/p95/p99 latency, client CPU
ms per request and the ratio to the fastest path; writes JSON and a PNG chart. Needs the
'bench' extra. Figures measured with it: docs/performance.md.
"""

#: The flag sets a started server can have: the launcher's profiles, or auto (gpu where
#: nvidia-smi sees a GPU, else cpu).
PROFILE_CHOICES = ("auto", *PROFILES)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``bench``'s options: one per field of :class:`CompareOptions`, whose defaults they take."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="a running vLLM server (…/v1)")
    where.add_argument("--start-server", metavar="MODEL", help="start a local server for MODEL (dir or hub id)")
    parser.add_argument(
        "--profile", choices=PROFILE_CHOICES, help="the started server's flag set (default: %(default)s)"
    )
    parser.add_argument(
        "--server-arg", dest="server_args", metavar="FLAG", action="append", default=[],
        help="extra vLLM flag for --start-server (repeatable; --server-arg=--flag)",
    )  # fmt: skip
    parser.add_argument("--model", help="served model name (default: %(default)s)")
    parser.add_argument(
        "--tokenizer",
        help="the model's tokenizer (dir or tokenizer.json): adds the token-id prompt paths "
        "(default: MODEL of --start-server when it has a tokenizer.json; 'none' turns them off)",
    )
    parser.add_argument("--items", type=int, help="items for the batch paths (default: %(default)s)")
    parser.add_argument("--chat-items", type=int, help="items for ChatOpenAI.batch/.abatch (default: --items)")
    parser.add_argument("--invoke-items", type=int, help="items for each one-at-a-time path (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, help="max_concurrency for abatch/batch (default: each's own)")
    parser.add_argument("--out", type=Path, help="folder for results.json and chart.png (default: %(default)s)")
    parser.add_argument("--label", help="free text naming the machine/model, kept in the JSON")
    parser.set_defaults(**defaults(CompareOptions))


def compare_options(args: argparse.Namespace) -> CompareOptions:
    """The typed options of parsed ``bench`` arguments, the token-id paths' tokenizer resolved:
    the started model's own unless ``--tokenizer`` names one (``none``: no token-id paths)."""
    from langchain_qwen_fast.bench.measure import own_tokenizer

    tokenizer = own_tokenizer(args.start_server) if args.tokenizer is None else args.tokenizer
    return dataclasses.replace(options_from(CompareOptions, args), tokenizer=None if tokenizer == "none" else tokenizer)


def run(args: argparse.Namespace) -> int:
    """Run ``qwen-fast bench``."""
    from langchain_qwen_fast.bench.compare import run_compare

    run_compare(compare_options(args))
    return 0
