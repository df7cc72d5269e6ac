"""The benchmarks' typed options from parsed arguments: :mod:`langchain_qwen_fast.cli.options`'s,
under the names the benchmark tools import (their options are split into parts, whose fields
are the flags: the leaves). Private to the tools: tests use :mod:`langchain_qwen_fast.cli.options`'s
own names (``field_names``, ``defaults``)."""

from __future__ import annotations

from langchain_qwen_fast.cli.options import defaults as leaf_defaults
from langchain_qwen_fast.cli.options import field_names as leaf_names
from langchain_qwen_fast.cli.options import options_from, whole_numbers

__all__ = ["leaf_defaults", "leaf_names", "options_from", "whole_numbers"]
