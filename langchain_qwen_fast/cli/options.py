"""Typed options from parsed arguments: a command's flags are named after the fields of the
dataclass its library function takes, so the fields are listed once, in the dataclass, and
neither their names nor their defaults are copied by hand.

Options split into parts (the benchmarks' tools) are dataclasses whose fields are dataclasses of
their own, each marked in its metadata: ``field(default_factory=Part, metadata={"part": Part})``.
A part's fields are flags like the others (its leaves), and the part is built from them."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator
from typing import Any, TypeVar

from langchain_qwen_fast.training.data import LabelledFile

Options = TypeVar("Options")


def whole_numbers(text: str) -> tuple[int, ...]:
    """A comma-separated list of whole numbers such as ``1,2,4`` or ``10000,100000`` (empty:
    none), as an argument type."""
    try:
        return tuple(int(word) for word in text.split(",") if word.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"want whole numbers such as 1,2,4, got {text!r}") from None


def _leaves(cls: type[Any]) -> Iterator[dataclasses.Field[Any]]:
    """``cls``'s fields, each part's fields in place of the part."""
    for f in dataclasses.fields(cls):
        part = f.metadata.get("part")
        if part is not None:
            yield from _leaves(part)
        else:
            yield f


def field_names(cls: type[Any]) -> set[str]:
    """The names of ``cls``'s fields (its parts' fields in place of the parts): its flags."""
    return {f.name for f in _leaves(cls)}


def defaults(cls: type[Any]) -> dict[str, Any]:
    """The defaults of the dataclass ``cls``'s fields (its parts' in place of the parts), for
    ``parser.set_defaults``: the parser shows (``%(default)s``) and uses the dataclass's own.
    Required fields have none."""
    found: dict[str, Any] = {}
    for f in _leaves(cls):
        if f.default is not dataclasses.MISSING:
            found[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            found[f.name] = f.default_factory()
    return found


def options_from(cls: type[Options], args: argparse.Namespace) -> Options:
    """The dataclass ``cls`` with every field that ``args`` has an argument of the same name
    for (its parts built alike); the others keep their defaults."""
    given = vars(args)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        part = f.metadata.get("part")
        if part is not None:
            values[f.name] = options_from(part, args)
        elif f.name in given:
            values[f.name] = given[f.name]
    return cls(**values)


def add_labelled_file_arguments(p: argparse.ArgumentParser, path_help: str) -> None:
    """The arguments of a :class:`LabelledFile`, one per field, as ``train`` and ``eval`` take them."""
    p.add_argument("path", help=path_help)
    p.add_argument("--label-map", help="the file's label -> the classifier's: '1=World,2=Sports' or JSON")
    p.add_argument("--text-column", help="the text's column or key (default: %(default)s, else title and description)")
    p.add_argument("--label-column", help="the label's column or key (default: %(default)s)")
    p.set_defaults(**defaults(LabelledFile))
