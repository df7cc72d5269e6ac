"""Temperature scaling of label probabilities, applied to every result a classifier gives
(``QwenClassifier(temperature=T)``; ``qwen-fast eval --calibrate`` fits ``T``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from langchain_qwen_fast.errors import ConfigurationError, InvalidInputError


def apply_temperature(scores: Sequence[float], temperature: float, multi_label: bool = False) -> list[float]:
    """``scores`` scaled by ``temperature``: a softmax over ``log p / T`` for a single-label
    distribution (labels at 0 stay 0), each label's ``sigmoid(logit(p) / T)`` for independent
    multi-label probabilities. ``T > 1`` softens, ``T < 1`` sharpens, ``T = 1`` is the identity."""
    if temperature <= 0 or not math.isfinite(temperature):
        raise ConfigurationError(f"temperature must be a positive number, got {temperature}")
    if temperature == 1.0:
        return list(scores)
    if multi_label:
        out = []
        for p in scores:
            if p <= 0.0 or p >= 1.0:
                out.append(float(p))
                continue
            z = math.log(p / (1.0 - p)) / temperature
            out.append(1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z)))
        return out
    logs = [math.log(p) / temperature if p > 0 else -math.inf for p in scores]
    top = max(logs)
    if top == -math.inf:
        raise InvalidInputError("no score is positive")
    weights = [math.exp(v - top) for v in logs]
    total = sum(weights)
    return [w / total for w in weights]
