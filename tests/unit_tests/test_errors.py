"""Every error the package raises is a ``QwenFastError``: a caller catches one base class.

Each module is parsed and every ``raise`` checked: the class it names (looked up in the
module's namespace, then among the names it imports inside functions), or the class a factory
function says it returns, must derive from :class:`QwenFastError`. Allowed besides:
a bare ``raise``, re-raising a variable (a caught error, an item's error handed back), the
``AttributeError`` of a module-level ``__getattr__``, under ``cli/`` what argparse itself
expects (``SystemExit``, ``argparse.ArgumentTypeError``), and in the HTTP service FastAPI's
``HTTPException``, which FastAPI turns into an HTTP answer: it never reaches a caller.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import importlib
import inspect
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

import langchain_qwen_fast
from langchain_qwen_fast import errors
from langchain_qwen_fast.errors import QwenFastError

PACKAGE = Path(langchain_qwen_fast.__file__).parent

#: What argparse asks of a command's code: it turns these into a usage message and an exit code.
#: what the command line may raise besides: its exit, an argument's refusal, and the
#: interrupt a stop signal becomes during a server's start-up
CLI_ALLOWED = (SystemExit, argparse.ArgumentTypeError, KeyboardInterrupt)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(("langchain_qwen_fast", *parts)).removesuffix(".__init__")


#: every module of the package by name, with its file
MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def local_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Every name a function binds: its parameters, assignments, loop and ``except`` targets."""
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    names = {a.arg for a in every if a is not None}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


class Raises(ast.NodeVisitor):
    """Each ``raise`` with the names bound around it and whether it is in a module ``__getattr__``."""

    def __init__(self) -> None:
        self.scopes: list[set[str]] = []
        self.in_module_getattr = False
        self.factories: list[str] = []
        self.found: list[tuple[ast.Raise, set[str], bool]] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = self.in_module_getattr
        # A module's own __getattr__, or the one _extras.lazy_exports makes for a module.
        if node.name == "__getattr__" and (not self.scopes or self.factories[-1:] == ["lazy_exports"]):
            self.in_module_getattr = True
        self.scopes.append(local_names(node))
        self.factories.append(node.name)
        self.generic_visit(node)
        self.factories.pop()
        self.scopes.pop()
        self.in_module_getattr = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Raise(self, node: ast.Raise) -> None:
        self.found.append((node, set().union(*self.scopes), self.in_module_getattr))
        self.generic_visit(node)


#: name -> (module, attribute); the attribute None for an imported module
Imports = dict[str, tuple[str, str | None]]


def imported_names(tree: ast.Module) -> Imports:
    """Names the module imports anywhere (function-level, lazy imports included): each as
    (module, attribute), the attribute None for a module."""
    names: Imports = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update({alias.asname or alias.name: (node.module, alias.name) for alias in node.names})
        elif isinstance(node, ast.Import):
            names.update({alias.asname or alias.name: (alias.name, None) for alias in node.names})
    return names


def resolve(node: ast.expr, namespace: dict[str, Any], imports: Imports) -> Any:
    """The object a dotted name stands for: in the module's namespace, else what the module
    imports under that name (imported now), else a builtin."""
    if isinstance(node, ast.Attribute):
        return getattr(resolve(node.value, namespace, imports), node.attr)
    if not isinstance(node, ast.Name):
        raise LookupError(ast.unparse(node))
    if node.id in namespace:
        return namespace[node.id]
    if node.id in imports:
        module, attribute = imports[node.id]
        imported = importlib.import_module(module)
        return imported if attribute is None else getattr(imported, attribute)
    return getattr(builtins, node.id)


def root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def raised_classes(exc: ast.expr, names: set[str], namespace: dict[str, Any], imports: Imports) -> list[Any]:
    """The classes ``raise exc`` may raise; ``[]`` for a variable (its class is not ours to see)."""
    if isinstance(exc, ast.IfExp):
        return [
            *raised_classes(exc.body, names, namespace, imports),
            *raised_classes(exc.orelse, names, namespace, imports),
        ]
    target = exc.func if isinstance(exc, ast.Call) else exc
    if root_name(target) in names:
        return []  # a variable: re-raising a caught error, or an item's error handed back
    value = resolve(target, namespace, imports)
    if isinstance(value, BaseException):
        return [type(value)]
    if inspect.isclass(value) or not isinstance(exc, ast.Call):
        return [value]
    # A factory function: the class it says it returns.
    return [typing.get_type_hints(value).get("return")]


def violations(tree: ast.Module, namespace: dict[str, Any], *, in_cli: bool) -> list[str]:
    visitor = Raises()
    visitor.visit(tree)
    imports = imported_names(tree)
    problems = []
    for node, names, in_module_getattr in visitor.found:
        if node.exc is None:
            continue  # bare raise: the error being handled
        try:
            classes = raised_classes(node.exc, names, namespace, imports)
        except (AttributeError, LookupError, ImportError):
            problems.append(f"line {node.lineno}: {ast.unparse(node)}  (cannot tell what it raises)")
            continue
        for cls in classes:
            if inspect.isclass(cls) and issubclass(cls, QwenFastError):
                continue
            if in_module_getattr and cls is AttributeError:
                continue
            if in_cli and inspect.isclass(cls) and issubclass(cls, CLI_ALLOWED):
                continue
            if getattr(cls, "__name__", None) == "HTTPException" and getattr(cls, "__module__", "").startswith(
                ("fastapi", "starlette")
            ):
                continue  # an HTTP answer of the service, made by FastAPI
            if inspect.isclass(cls) and issubclass(cls, httpx.TimeoutException):
                continue  # an httpx transport's timeout, which the core types as ServerTimeoutError
            problems.append(f"line {node.lineno}: {ast.unparse(node)}  ({getattr(cls, '__name__', cls)})")
    return problems


def namespace_of(name: str) -> dict[str, Any]:
    if name.endswith(".__main__"):
        return {}  # importing it would run the command
    module: ModuleType = importlib.import_module(name)
    return vars(module)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_raise_is_a_qwen_fast_error(name: str) -> None:
    path = MODULES[name]
    tree = ast.parse(path.read_text(), filename=str(path))
    problems = violations(tree, namespace_of(name), in_cli=name.startswith("langchain_qwen_fast.cli."))
    where = path.relative_to(PACKAGE.parent)
    assert not problems, f"{where} raises errors outside QwenFastError:\n" + "\n".join(problems)


def test_the_check_tells_a_foreign_error_from_ours() -> None:
    source = """
def bad():
    raise ValueError("no")

def good(value):
    try:
        return int(value)
    except ValueError as exc:
        if value:
            raise exc
        raise
    raise InvalidInputError("empty")

def factory() -> InvalidInputError:
    return InvalidInputError("x")

def uses_factory():
    raise factory()

def __getattr__(name):
    raise AttributeError(name)

def not_at_module_level():
    def __getattr__(name):
        raise AttributeError(name)
"""
    namespace: dict[str, Any] = {"InvalidInputError": errors.InvalidInputError}
    exec(compile(source, "<check>", "exec"), namespace)
    found = violations(ast.parse(source), namespace, in_cli=False)
    assert [line.split(":", 1)[1].split("  (")[0].strip() for line in found] == [
        "raise ValueError('no')",
        "raise AttributeError(name)",  # the nested __getattr__: not a module's
    ]
    cli = violations(ast.parse("def run():\n    raise SystemExit(2)\n"), {}, in_cli=True)
    assert cli == [] and violations(ast.parse("def run():\n    raise SystemExit(2)\n"), {}, in_cli=False)


def test_every_error_class_is_a_qwen_fast_error() -> None:
    # CarriedError is never raised (the raise check above would refuse it): it only stands for
    # a row's error of any type as the other process of a job receives it.
    classes = [v for v in vars(errors).values() if inspect.isclass(v) and issubclass(v, BaseException)]
    raised = [cls for cls in classes if cls is not errors.CarriedError]
    assert raised and all(issubclass(cls, QwenFastError) for cls in raised)
