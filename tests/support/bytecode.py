"""A pytest plugin that pyproject's ``addopts`` loads before any other (``-p``): it lets this
pytest process write bytecode.

pytest keeps every module it rewrites for its assertion messages (the tests, the conftests and
every module of a pytest plugin's distribution: schemathesis, hypothesis, LangSmith's) as
bytecode in ``__pycache__``, and compiles them again only when they change. Where the
environment turns bytecode writing off (``PYTHONDONTWRITEBYTECODE``), nothing is kept, and every
pytest start rewrites and compiles them all again. The switch is turned back on in this process
only: the processes the tests start keep the environment's setting, and read the bytecode that
``setup.sh`` compiled for the installed packages.
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = False
