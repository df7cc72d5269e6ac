"""Typed options from parsed arguments, for options split into parts: a tool's flags are named
after the leaf fields of its options dataclass, whose parts are dataclasses of their own (a
field whose metadata names its class, ``field(default_factory=Part, metadata={"part":
Part})``), so that the fields are listed once, in the dataclasses, and neither their names
nor their defaults are copied by hand into the parser."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator
from typing import Any, TypeVar

from langchain_qwen_fast.cli.options import whole_numbers

Options = TypeVar("Options")


def _leaves(cls: type[Any]) -> Iterator[dataclasses.Field[Any]]:
    for f in dataclasses.fields(cls):
        inner = f.metadata.get("part")
        if inner is not None:
            yield from _leaves(inner)
        else:
            yield f


def leaf_names(cls: type[Any]) -> set[str]:
    """The names of ``cls``'s fields, its parts' fields in place of the parts."""
    return {f.name for f in _leaves(cls)}


def leaf_defaults(cls: type[Any]) -> dict[str, Any]:
    """The defaults of ``cls``'s leaf fields, for ``parser.set_defaults``: the parser shows
    (``%(default)s``) and uses the dataclasses' own."""
    found: dict[str, Any] = {}
    for f in _leaves(cls):
        if f.default is not dataclasses.MISSING:
            found[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            found[f.name] = f.default_factory()
    return found


def options_from(cls: type[Options], args: argparse.Namespace) -> Options:
    """``cls`` with its parts built alike, each leaf field taken from the argument of the same
    name where ``args`` has one (the others keep their defaults)."""
    given = vars(args)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        inner = f.metadata.get("part")
        if inner is not None:
            values[f.name] = options_from(inner, args)
        elif f.name in given:
            values[f.name] = given[f.name]
    return cls(**values)


__all__ = ["leaf_defaults", "leaf_names", "options_from", "whole_numbers"]
