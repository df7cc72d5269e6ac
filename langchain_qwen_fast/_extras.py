"""Imports a tool may not find, or should not make before they are needed: the one check that an
optional extra is installed (made before the tool starts any work, so a missing package is named
with its ``pip install`` line instead of failing half-way), and a package's names imported from
their homes on first use."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any

from langchain_qwen_fast.errors import MissingDependencyError


def require_extra(extra: str, *modules: str, what: str) -> None:
    """Raise :class:`MissingDependencyError` naming ``extra`` if any of ``modules`` (top-level
    import names) cannot be imported; ``what`` names the tool in the message."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependencyError(f"{what} needs {', '.join(missing)}: pip install 'langchain-qwen-fast[{extra}]'")


def lazy_exports(module_name: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A ``__getattr__`` for the module ``module_name``: each name of ``homes`` is imported from
    its home module (``{name: home}``) when first asked for, and kept in the module; any other
    name is an :class:`AttributeError`.

    Use as ``__getattr__ = lazy_exports(__name__, {...})``, with the same names imported under
    ``TYPE_CHECKING`` for type checkers."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[module_name], name, value)
        return value

    return __getattr__
