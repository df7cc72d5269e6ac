"""Import paths of modules that moved when the package took its layout by job, kept working.

``import langchain_qwen_fast.samples`` (say) gives the very module object now at
``langchain_qwen_fast.testing.samples``: one object under both names, so patching either patches
both. An old package (``langchain_qwen_fast.server``) is a module that forwards every name to its
new one. New code uses the new paths; this map is the one home of the old ones.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

MOVED = {
    "langchain_qwen_fast.server": "langchain_qwen_fast.serving",
    "langchain_qwen_fast.server.launcher": "langchain_qwen_fast.serving",
    "langchain_qwen_fast.server.test_model": "langchain_qwen_fast.testing.tiny_model",
    "langchain_qwen_fast.api": "langchain_qwen_fast.serving.api",
    "langchain_qwen_fast.samples": "langchain_qwen_fast.testing.samples",
    "langchain_qwen_fast.data": "langchain_qwen_fast.training.data",
    "langchain_qwen_fast.benchmark": "langchain_qwen_fast.bench.compare",
    "langchain_qwen_fast.scale_benchmark": "langchain_qwen_fast.bench.scale",
    "langchain_qwen_fast.endpoints": "langchain_qwen_fast._core.base_urls",
}


def _is_package(name: str) -> bool:
    return any(other.startswith(name + ".") for other in MOVED)


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path in :data:`MOVED` and loads it as the module at its new path."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=_is_package(fullname))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        target = MOVED[spec.name]
        if not _is_package(spec.name):
            return importlib.import_module(target)
        # An old package gets a module of its own that forwards to the new one: importing an
        # old submodule sets it as an attribute of its parent, which must not overwrite the
        # new package's real submodule of the same name.
        forward = ModuleType(spec.name, f"Moved to :mod:`{target}`.")
        forward.__path__ = []
        forward.__getattr__ = lambda name: getattr(importlib.import_module(target), name)  # type: ignore[method-assign]
        return forward

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path ran when it was imported."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        # First: a submodule of a moved package would otherwise be found again, as a second copy,
        # in the new package's folder.
        sys.meta_path.insert(0, _MovedModuleFinder())
