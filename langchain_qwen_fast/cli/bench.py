"""``qwen-fast bench``: latency and throughput side by side against one server in one run
(:func:`langchain_qwen_fast.bench.compare.run_compare`)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from langchain_qwen_fast.bench.compare import CompareOptions
from langchain_qwen_fast.bench.variants import PROFILE_CHOICES
from langchain_qwen_fast.cli.options import defaults, options_from

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
'bench' extra. Figures measured with it: docs/benchmarks.md.
"""


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
    parser.add_argument(
        "--replicas",
        type=int,
        help="with --start-server: then start more servers on the same GPU "
        "and measure QwenClassifier spread over all of them",
    )
    parser.add_argument(
        "--compare-flags",
        metavar="JSON",
        type=Path,
        help='instead of the comparison, with --start-server: {"name": {"profile": ..., "drop": [...], '
        '"flags": [...]}, ...}; starts a server per entry (the profile\'s flags without those in drop, then '
        "flags) and measures latency, throughput, GPU memory and vLLM's stage times",
    )
    parser.add_argument(
        "--mode",
        choices=["generate", "head"],
        help="with --compare-flags: the served model is a chat model (generate) or a classification head",
    )
    parser.add_argument("--out", type=Path, help="folder for results.json and chart.png (default: %(default)s)")
    parser.add_argument("--label", help="free text naming the machine/model, kept in the JSON")
    parser.add_argument("--sweep", action="store_true", help="also sweep batch_size × max_concurrency")
    parser.add_argument(
        "--service", action="store_true", help="also run 256 concurrent HTTP clients against qwen-fast api and vLLM"
    )
    parser.add_argument(
        "--compare-quantization",
        metavar="METHOD",
        help="with --start-server: also start a server with --quantization METHOD (e.g. fp8) and compare",
    )
    parser.add_argument(
        "--transformers-baseline",
        action="store_true",
        help="with --start-server: also time Hugging Face transformers (generate, linear head) on the same prompts",
    )
    parser.add_argument(
        "--capabilities",
        action="store_true",
        help="also time multi-label, few-shot examples, an example selector and 40 labels against zero-shot",
    )
    parser.add_argument("--gpu-sample", action="store_true", help="sample GPU utilisation and memory per path")
    parser.add_argument(
        "--offline-ceiling", action="store_true", help="also run vLLM's offline engine (needs --start-server)"
    )
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
