"""The one check that a tool's optional extra is installed: made before the tool starts any work,
so a missing package is named with its ``pip install`` line instead of failing half-way."""

from __future__ import annotations

import importlib.util

from langchain_qwen_fast.errors import MissingDependencyError


def require_extra(extra: str, *modules: str, what: str) -> None:
    """Raise :class:`MissingDependencyError` naming ``extra`` if any of ``modules`` (top-level
    import names) cannot be imported; ``what`` names the tool in the message."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependencyError(f"{what} needs {', '.join(missing)}: pip install 'langchain-qwen-fast[{extra}]'")
