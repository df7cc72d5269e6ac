"""The client core imports no LangChain, directly or through the modules it uses: a process
that only needs the core (a client worker, a tool) starts without it."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import langchain_qwen_fast._core

CORE_MODULES = sorted(
    m.name for m in pkgutil.iter_modules(langchain_qwen_fast._core.__path__, "langchain_qwen_fast._core.")
)
LANGCHAIN = ("langchain_core", "langchain_openai")


def test_there_are_core_modules_to_check() -> None:
    assert "langchain_qwen_fast._core.procedure" in CORE_MODULES and len(CORE_MODULES) >= 7


def test_importing_the_core_imports_no_langchain() -> None:
    script = (
        "import importlib, json, sys\n"
        f"for name in {CORE_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {LANGCHAIN!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_the_core_imports_no_public_module_but_errors() -> None:
    """``_core`` is the bottom layer: what it needs of the package lives in it, except the
    error types (every import, at the top of a module or inside a function, is read)."""
    import ast
    from pathlib import Path

    allowed = ("langchain_qwen_fast._core", "langchain_qwen_fast.errors")
    found = []
    for path in sorted(Path(langchain_qwen_fast._core.__path__[0]).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = (
                    [node.module]
                    if node.module != "langchain_qwen_fast"
                    else [f"{node.module}.{a.name}" for a in node.names]
                )
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [
                f"{path.name}: {name}"
                for name in names
                if name.split(".")[0] == "langchain_qwen_fast" and not name.startswith(allowed)
            ]
    assert found == []
