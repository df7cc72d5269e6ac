"""The Python the package declares is the Python its checks check: pyproject's
``requires-python`` floor, mypy's ``python_version`` and ruff's ``target-version`` name one
version, so that code needing a newer Python fails the checks instead of the users' installs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def test_requires_python_mypy_and_ruff_name_one_floor() -> None:
    config = _pyproject()
    floor = re.fullmatch(r">=\s*(\d+)\.(\d+)", config["project"]["requires-python"].strip())
    assert floor is not None, "requires-python is not a plain floor (>=X.Y)"
    major, minor = floor.groups()
    assert config["tool"]["mypy"]["python_version"] == f"{major}.{minor}"
    assert config["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
    for classifier in config["project"].get("classifiers", []):
        version = re.fullmatch(r"Programming Language :: Python :: (\d+)\.(\d+)", classifier)
        if version is not None:
            assert tuple(map(int, version.groups())) >= (int(major), int(minor)), classifier


def test_tiktoken_which_the_fast_tokenizer_imports_is_a_declared_dependency() -> None:
    names = [re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0] for spec in _pyproject()["project"]["dependencies"]]
    assert "tiktoken" in names
