"""Typed options from parsed arguments, by field name."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from langchain_qwen_fast.cli.options import defaults, options_from


@dataclass(frozen=True)
class Options:
    name: str
    size: int = 3
    tags: tuple[str, ...] = ()


def test_defaults_skip_required_fields() -> None:
    assert defaults(Options) == {"size": 3, "tags": ()}


def test_fields_without_an_argument_keep_their_defaults_and_other_arguments_are_ignored() -> None:
    args = argparse.Namespace(name="n", size=5, command="x")
    assert options_from(Options, args) == Options(name="n", size=5)
