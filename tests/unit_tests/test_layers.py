"""The apps (serving, jobs, training, evaluation, bench, cli) reach the engine through
``langchain_qwen_fast.engine``, ``_core`` and ``errors``, never through a LangChain facade or the
package root (which loads them); and the facades' imports of one another form no circle.
Every import is read, at the top of a module or inside a function or ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

import langchain_qwen_fast

PACKAGE = Path(langchain_qwen_fast.__path__[0])
ROOT = "langchain_qwen_fast"
APPS = ("serving", "jobs", "training", "evaluation", "bench", "cli")
FACADES = tuple(f"{ROOT}.{name}" for name in ("classifiers", "decision_models", "chat_models", "routing"))
#: The benchmark measures the LangChain facade itself, side by side with LangChain's own paths.
MEASURES_THE_FACADE = {("bench/measure.py", f"{ROOT}.classifiers")}


def imported(path: Path) -> set[str]:
    """The package's modules ``path`` imports (``from langchain_qwen_fast import x`` names
    ``langchain_qwen_fast.x`` when x is a module, else the root)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == ROOT:
                for alias in node.names:
                    module = f"{ROOT}.{alias.name}"
                    is_module = (PACKAGE / f"{alias.name}.py").exists() or (PACKAGE / alias.name).is_dir()
                    names.add(module if is_module else ROOT)
            else:
                names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.split(".")[0] == ROOT}


def test_there_are_app_modules_to_check() -> None:
    assert len([p for app in APPS for p in (PACKAGE / app).rglob("*.py")]) > 30


def test_no_app_imports_a_facade_or_the_package_root() -> None:
    found = []
    for app in APPS:
        for path in sorted((PACKAGE / app).rglob("*.py")):
            where = path.relative_to(PACKAGE).as_posix()
            for name in sorted(imported(path)):
                if (name == ROOT or name.startswith(FACADES)) and (where, name) not in MEASURES_THE_FACADE:
                    found.append(f"{where}: {name}")
    assert found == []


def test_the_facades_import_one_another_in_one_direction() -> None:
    edges = {
        facade: {name for name in imported(PACKAGE / f"{facade.split('.')[-1]}.py") if name in FACADES}
        for facade in FACADES
    }
    circles = [f"{a} <-> {b}" for a in FACADES for b in edges[a] if a in edges[b]]
    assert circles == []
