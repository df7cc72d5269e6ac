"""The command is lazy: ``qwen-fast --help``, ``serve --help`` and ``serve --print-command`` load
no LangChain, OpenAI client, FastAPI, vLLM, transformers or torch, and ``qwen-fast X --help``
loads X's command module and no other. Each case runs ``main`` in a fresh interpreter, since this
one has imported everything already."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from langchain_qwen_fast.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("langchain_openai", "langchain_core", "fastapi", "vllm", "transformers", "torch")
# ``main`` runs with its output captured, then the interpreter reports its exit code and modules.
_PROBE = """
import contextlib, io, json, sys
from langchain_qwen_fast.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(json.loads(sys.argv[1]))
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


@functools.cache
def run_main(*argv: str) -> tuple[int, frozenset[str]]:
    """``qwen-fast ARGV`` in a fresh interpreter: its exit code and the modules it imported
    (one interpreter for each command line, whichever tests ask)."""
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    return int(report["code"] or 0), frozenset(report["modules"])


def heavy_in(modules: frozenset[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def command_modules_in(modules: frozenset[str]) -> set[str]:
    """The command modules among ``modules`` (shared helpers of ``cli/`` do not count)."""
    return modules & {command.module for command in COMMANDS.values()}


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("serve", "--help"), ("serve", "--model", "m", "--profile", "cpu", "--print-command")],
    ids=["help", "serve-help", "serve-print-command"],
)
def test_help_and_the_serve_command_line_import_nothing_heavy(argv: tuple[str, ...]) -> None:
    code, modules = run_main(*argv)
    assert code == 0
    assert heavy_in(modules) == []


def test_the_top_level_help_imports_no_command_module() -> None:
    code, modules = run_main("--help")
    assert code == 0
    assert command_modules_in(modules) == set()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_commands_help_imports_its_own_module_only(name: str) -> None:
    code, modules = run_main(name, "--help")
    assert code == 0
    assert command_modules_in(modules) == {COMMANDS[name].module}
    assert heavy_in(modules) == []  # command modules import their library when they run
