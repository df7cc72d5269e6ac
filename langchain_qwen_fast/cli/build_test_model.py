"""``qwen-fast build-test-model``: a random-weight Qwen3 with the real vocabulary and chat template,
for tests and offline demos."""

from __future__ import annotations

import argparse
import sys
import time

DESCRIPTION = (
    "Write a Qwen3-architecture model with random weights, the real Qwen3 tokenizer (from the "
    "dashscope package's qwen.tiktoken) and Qwen3's chat template. Its labels carry no meaning; its "
    "request path, token counts and speed are the real model's. Needs the 'test-model' extra "
    "(transformers, torch, dashscope)."
)


def label_count(value: str) -> int:
    """``--num-labels``: a whole number of at least 2 (a head needs two classes to choose from)."""
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {value!r}") from None
    if count < 2:
        raise argparse.ArgumentTypeError("must be at least 2")
    return count


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``build-test-model``'s options."""
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--size", choices=["tiny", "0.6b"], default="tiny", help="tiny (CI) or the Qwen3-0.6B shape")
    p.add_argument(
        "--num-labels", type=label_count, help="write a Qwen3ForSequenceClassification head with N classes (N >= 2)"
    )
    p.add_argument("--multi-label", action="store_true", help="with --num-labels: a multi-label (sigmoid) head")
    p.add_argument("--seed", type=int, default=0, help="weights' random seed (default: %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="rebuild even if OUT holds the same model")
    p.add_argument("--tokenizer-from", help="copy the tokenizer from this model directory instead of building it")


def run(args: argparse.Namespace) -> int:
    """Build the model and say where it is."""
    if args.multi_label and args.num_labels is None:
        print("qwen-fast build-test-model: --multi-label needs --num-labels", file=sys.stderr)
        return 2
    from langchain_qwen_fast.testing.tiny_model import build_test_model

    start = time.perf_counter()
    path = build_test_model(
        args.out,
        args.size,
        num_labels=args.num_labels,
        multi_label=args.multi_label,
        seed=args.seed,
        overwrite=args.overwrite,
        tokenizer_from=args.tokenizer_from,
    )
    print(f"built {args.size} test model in {path} ({time.perf_counter() - start:.1f} s)")
    return 0
