"""Typed options from parsed arguments: a command's flags are named after the fields of the
dataclass its library function takes, so the fields are listed once, in the dataclass, and
neither their names nor their defaults are copied by hand."""

from __future__ import annotations

import argparse
import dataclasses
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


def defaults(cls: type[Any]) -> dict[str, Any]:
    """The defaults of the dataclass ``cls``'s fields, for ``parser.set_defaults``: the parser
    shows (``%(default)s``) and uses the dataclass's own."""
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


def options_from(cls: type[Options], args: argparse.Namespace) -> Options:
    """The dataclass ``cls`` with every field that ``args`` has an argument of the same name
    for; the others keep their defaults."""
    given = vars(args)
    return cls(**{f.name: given[f.name] for f in dataclasses.fields(cls) if f.name in given})  # type: ignore[arg-type]


def add_labelled_file_arguments(p: argparse.ArgumentParser, path_help: str) -> None:
    """The arguments of a :class:`LabelledFile`, one per field, as ``train`` and ``eval`` take them."""
    p.add_argument("path", help=path_help)
    p.add_argument("--label-map", help="the file's label -> the classifier's: '1=World,2=Sports' or JSON")
    p.add_argument("--text-column", help="the text's column or key (default: %(default)s, else title and description)")
    p.add_argument("--label-column", help="the label's column or key (default: %(default)s)")
    p.set_defaults(**defaults(LabelledFile))
