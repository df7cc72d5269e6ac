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
