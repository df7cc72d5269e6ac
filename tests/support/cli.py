"""Parsing one command's arguments the way ``qwen-fast`` does, without running it."""

from __future__ import annotations

import argparse
from types import ModuleType


def parse_command(command: ModuleType, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed by a parser holding only ``command``'s arguments (a ``cli`` module)."""
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(argv)
