"""The capability rows: asked for by name, checked before any request."""

from __future__ import annotations

import pytest

from benchmarks.capabilities import CAPABILITY_ROWS, check_rows, run_capabilities
from langchain_qwen_fast.errors import ConfigurationError


def test_an_unknown_capability_row_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown capability rows \['8 examples'\]"):
        run_capabilities("http://127.0.0.1:9/v1", "qwen3", None, ["a text"], rows=["8 examples"])


def test_a_wrong_row_is_a_configuration_error_and_the_known_ones_pass() -> None:
    with pytest.raises(ConfigurationError, match="known: "):
        check_rows(["zero-shot, 4 labels", "nine labels"])
    check_rows(CAPABILITY_ROWS)
    assert CAPABILITY_ROWS[0] == "zero-shot, 4 labels"  # the baseline every ratio is taken against
