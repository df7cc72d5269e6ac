"""The ``qwen-fast`` command: serve, train, evaluate and benchmark Qwen3 classifiers on vLLM.

    qwen-fast serve --model Qwen/Qwen3-0.6B            # a vLLM server tuned for classification
    qwen-fast train data.csv --base-model Qwen/Qwen3-0.6B --method head --out models/news
    qwen-fast eval data.csv --base-url http://127.0.0.1:8000/v1
    qwen-fast classify rows.csv --out labelled.parquet --classifier models/news
    qwen-fast bench --start-server .models/qwen3-tiny     # against ChatOpenAI, LCEL, raw HTTP...
    qwen-fast api models/news --base-url http://127.0.0.1:8000/v1   # HTTP service
    qwen-fast build-test-model --out .models/qwen3-tiny

The command is lazy: ``qwen-fast X`` imports only X's module (``COMMANDS``), and that module
imports its library (vLLM, transformers, LangChain, plotting) only when it runs. Each command
module has the same three parts: ``DESCRIPTION``, ``add_arguments(parser)`` and
``run(args) -> exit code``; ``run`` turns the arguments into typed options and calls a library
function, whose typed errors (:class:`~langchain_qwen_fast.errors.QwenFastError`) become a
message and exit code 1 here, in one place.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from langchain_qwen_fast._version import __version__
from langchain_qwen_fast.errors import QwenFastError


@dataclass(frozen=True)
class Command:
    """One subcommand: the module that implements it and the line ``qwen-fast --help`` shows."""

    module: str
    help: str


COMMANDS: dict[str, Command] = {
    "serve": Command("langchain_qwen_fast.cli.serve", "run a vLLM server (or several) tuned for classification"),
    "train": Command("langchain_qwen_fast.cli.train", "fine-tune a classifier (head or SFT) on a labelled file"),
    "eval": Command("langchain_qwen_fast.cli.eval", "accuracy, macro-F1 and calibration on a labelled file"),
    "classify": Command("langchain_qwen_fast.cli.classify", "label every row of a CSV/JSONL/Parquet file, resumable"),
    "bench": Command("langchain_qwen_fast.cli.bench", "side-by-side latency and throughput against LangChain paths"),
    "api": Command("langchain_qwen_fast.cli.api", "an HTTP classification service in front of vLLM"),
    "build-test-model": Command(
        "langchain_qwen_fast.cli.build_test_model",
        "write a test model: a random-weight Qwen3, or the pretrained SmolLM2-135M",
    ),
}

_EPILOG = "Docs: README.md and docs/ in the project; every subcommand has --help."


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The ``qwen-fast`` parser. Every subcommand is listed; only those in ``commands`` (default:
    all) get their arguments, which imports their modules."""
    wanted = set(COMMANDS if commands is None else commands)
    parser = argparse.ArgumentParser(
        prog="qwen-fast",
        description="Fast text classification and routing with Qwen3 on vLLM, for LangChain.",
        epilog=_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        if name not in wanted:
            sub.add_parser(name, help=command.help, add_help=False)
            continue
        module = importlib.import_module(command.module)
        command_parser = sub.add_parser(
            name,
            help=command.help,
            description=module.DESCRIPTION,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(command_parser)
        command_parser.set_defaults(run=module.run)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``qwen-fast`` with ``argv`` (default: the process's arguments); returns the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(words)
    parser = build_parser([command] if command in COMMANDS else [])
    args = parser.parse_args(words)
    try:
        code: int = args.run(args)
    except QwenFastError as exc:
        print(f"qwen-fast {args.command}: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
