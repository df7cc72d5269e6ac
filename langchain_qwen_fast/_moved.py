"""Import paths of modules that moved when the package took its layout by job, kept working.

``import langchain_qwen_fast.samples`` (say) gives the very module object now at
``langchain_qwen_fast.testing.samples``: one object under both names, so patching either patches
both. New code uses the new paths; this map is the one home of the old ones.
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


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path in :data:`MOVED` and loads it as the module at its new path."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        is_package = any(other.startswith(fullname + ".") for other in MOVED)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=is_package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path ran when it was imported."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        # First: a submodule of a moved package would otherwise be found again, as a second copy,
        # in the new package's folder.
        sys.meta_path.insert(0, _MovedModuleFinder())
