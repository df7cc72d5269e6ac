"""The one percentile definition that every report uses."""

from __future__ import annotations

import math
from collections.abc import Sequence

from langchain_qwen_fast.errors import ConfigurationError


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by the nearest-rank method: the smallest value with at
    least ``q`` % of the values at or below it. None for no values."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ConfigurationError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]
