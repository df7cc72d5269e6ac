"""The public surface, pinned: what ``langchain_qwen_fast`` exports, the import paths the README,
the guides and the examples show, the command's entry point, and the lazy top level that imports
no LangChain until a LangChain name is asked for."""

from __future__ import annotations

import collections.abc
import importlib
import importlib.metadata
import json
import re
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest

import langchain_qwen_fast

ROOT = Path(__file__).resolve().parents[2]

TOP_LEVEL = [
    "ChatQwenFast",
    "Classification",
    "ClassifierDecisionModel",
    "ClassifierInput",
    "ClassifierRouter",
    "ConfigurationError",
    "ContextLengthError",
    "InvalidInputError",
    "LabelParseError",
    "QwenClassifier",
    "QwenDecisionModel",
    "QwenFastError",
    "ResponseFormatError",
    "ServerConnectionError",
    "ServerStatusError",
    "ServerTimeoutError",
    "TransportError",
    "__version__",
    "classifier_tool",
    "label_edge",
]

#: ``__all__`` of the other public modules that declare one (``_core``'s are the engine's own
#: business: its tests import what they use).
MODULE_ALL = {
    "langchain_qwen_fast.jobs": [
        "ClassifyOptions",
        "ClassifyStage",
        "HTTPServers",
        "RayOptions",
        "VLLMInActor",
        "classify_dataset",
        "classify_table",
    ],
}

#: Names the README, the guides and the examples import, by module (kept even if a page stops
#: showing one: a user's code may still import it).
DOCUMENTED = {
    "langchain_qwen_fast": ["ChatQwenFast", "Classification", "QwenClassifier", "QwenDecisionModel", "label_edge"],
    "langchain_qwen_fast.caches": ["ClassificationCache", "InMemoryCache", "SQLiteCache"],
    "langchain_qwen_fast.errors": ["ConfigurationError", "DataFileError", "MissingDependencyError", "ServerStartError"],
    "langchain_qwen_fast.routing": ["ClassifierRouter", "classifier_tool", "label_edge"],
    "langchain_qwen_fast.testing.samples": ["AG_NEWS_LABELS", "SAMPLE_HEADLINES", "headlines", "labelled_news"],
    "langchain_qwen_fast.testing.tiny_model": ["build_test_model"],
    "langchain_qwen_fast.serving": ["DEFAULT_MODEL", "VLLMServer", "hub_model_available"],
    "langchain_qwen_fast.serving.service": ["ServiceOptions", "create_app", "serve_api"],
    "langchain_qwen_fast.training": ["build_news_model"],
    "langchain_qwen_fast.training.data": ["write_labelled"],
    "langchain_qwen_fast.cli": ["main"],
}

LANGCHAIN = ("langchain_core", "langchain_openai")

#: ``from langchain_qwen_fast.x import a, b as c`` on one line, or in parentheses over several
IMPORT = re.compile(r"from (langchain_qwen_fast[\w.]*) import (?:\(([^)]*)\)|([\w ,]+))")


def test_top_level_all_is_pinned_and_sorted() -> None:
    assert langchain_qwen_fast.__all__ == TOP_LEVEL == sorted(TOP_LEVEL)


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_each_top_level_name_is_the_packages_object_of_that_name(name: str) -> None:
    value = getattr(langchain_qwen_fast, name)
    if name == "__version__":
        assert value == importlib.metadata.version("langchain-qwen-fast")
    elif name == "ClassifierInput":  # a type alias: what invoke takes
        kinds = {typing.get_origin(a) or a for a in typing.get_args(value)}
        assert {str, collections.abc.Mapping, collections.abc.Sequence} <= kinds
    else:
        assert (value.__name__, value.__module__.split(".")[0]) == (name, "langchain_qwen_fast")


def test_the_errors_users_catch_are_the_error_modules_own() -> None:
    from langchain_qwen_fast import errors

    for name in [n for n in TOP_LEVEL if n.endswith("Error")]:
        assert getattr(langchain_qwen_fast, name) is getattr(errors, name)


def test_an_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        langchain_qwen_fast.Nope  # noqa: B018


@pytest.mark.parametrize("module", sorted(MODULE_ALL))
def test_module_all_is_pinned(module: str) -> None:
    imported = importlib.import_module(module)
    assert imported.__all__ == MODULE_ALL[module]
    assert all(hasattr(imported, name) for name in imported.__all__)


@pytest.mark.parametrize(("module", "names"), sorted(DOCUMENTED.items()))
def test_documented_names_import(module: str, names: list[str]) -> None:
    imported = importlib.import_module(module)
    assert [n for n in names if not hasattr(imported, n)] == []


def shown_imports() -> list[tuple[str, str, str]]:
    """Every ``from langchain_qwen_fast... import ...`` in the README, the guides and the
    examples, and every dotted ``langchain_qwen_fast.x.y`` they name: (file, module, name)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*.py"))]
    found = []
    for page in pages:
        text = page.read_text()
        where = str(page.relative_to(ROOT))
        for module, grouped, names in re.findall(IMPORT, text):
            found += [(where, module, name.split()[0]) for name in (grouped or names).split(",") if name.strip()]
        for dotted in re.findall(r"(?<!from )\blangchain_qwen_fast(?:\.\w+)+", text):
            found.append((where, dotted, ""))
    return found


def resolve_dotted(path: str) -> Any:
    """A module, or a name in one, from its dotted path."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            value = getattr(value, name)
        return value
    raise ModuleNotFoundError(path)


def test_the_pages_show_imports() -> None:
    shown = shown_imports()
    assert any(module == "langchain_qwen_fast" and name == "QwenClassifier" for _, module, name in shown)


@pytest.mark.parametrize(("page", "module", "name"), sorted(set(shown_imports())))
def test_every_import_the_pages_show_works(page: str, module: str, name: str) -> None:
    resolved = resolve_dotted(f"{module}.{name}" if name else module)  # raises where it does not resolve
    # and it is the package's own: a module, or a class or function defined in one (a constant
    # such as AG_NEWS_LABELS names no module; it lives where it was found)
    home = resolved.__name__ if isinstance(resolved, types.ModuleType) else getattr(resolved, "__module__", module)
    assert home.split(".")[0] == "langchain_qwen_fast", f"{page} shows {module}.{name}, which is {home}'s"


def test_the_command_entry_point_resolves() -> None:
    scripts = re.search(r"^\[project\.scripts\]\n((?:.+\n)+)", (ROOT / "pyproject.toml").read_text(), re.M)
    assert scripts is not None
    targets = re.findall(r'^[\w-]+ = "([\w.]+):(\w+)"', scripts.group(1), re.M)
    assert targets and all(callable(getattr(importlib.import_module(m), name)) for m, name in targets)


def imported_langchain(statement: str) -> list[str]:
    """The LangChain modules a fresh interpreter holds after ``statement``."""
    listing = f"sorted(m for m in sys.modules if m.split('.')[0] in {LANGCHAIN!r})"
    script = f"import json, sys\n{statement}\nprint(json.dumps({listing}))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout)


def test_importing_the_package_imports_no_langchain() -> None:
    statement = (
        "import langchain_qwen_fast, langchain_qwen_fast.errors, langchain_qwen_fast.classification, "
        "langchain_qwen_fast.caches, langchain_qwen_fast.calibration, langchain_qwen_fast.testing.samples\n"
        "from langchain_qwen_fast import QwenFastError, InvalidInputError\n"
        "from langchain_qwen_fast.classification import Classification, Scoring, text_of\n"
        "text_of('plain text')"
    )
    assert imported_langchain(statement) == []


def test_a_langchain_name_imports_langchain_on_first_use() -> None:
    assert "langchain_core" in imported_langchain("from langchain_qwen_fast import ClassifierInput")
