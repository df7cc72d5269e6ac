"""What ``qwen-fast eval`` does: :class:`EvalOptions`, one typed record with one field per
option, and the rules about options that cannot work together.

Light on purpose (no LangChain, no scikit-learn): the command takes its defaults from here when
it builds its parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from langchain_qwen_fast.errors import ConfigurationError


@dataclass(frozen=True)
class EvalOptions:
    """Which classifier to evaluate and what to report; every field has a ``qwen-fast eval``
    flag of the same name."""

    #: a saved classifier (directory or ``classifier.json``): its labels, mode and prompt
    classifier: str | None = None
    #: the vLLM server (None: the saved classifier's, else the classifier's default)
    base_url: str | None = None
    #: the served model name (None: the saved classifier's, else the classifier's default)
    model: str | None = None
    mode: Literal["generate", "head"] = "generate"
    #: the label set without ``classifier`` (None: the file's labels, sorted; ``head`` mode
    #: needs them given, in the head's class order)
    labels: list[str] | None = None
    #: only the first N items
    limit: int | None = None
    #: prompts per request
    batch_size: int = 64
    abstain_below: float | None = None
    #: fit a temperature and draw the reliability and coverage plots
    calibrate: bool = False
    #: with ``calibrate``: find the ``abstain_below`` that reaches this accuracy
    target_accuracy: float | None = None
    #: write the fitted temperature and ``abstain_below`` into ``classifier``
    save_calibration: bool = False
    #: bootstrap resamples for the intervals
    bootstrap: int = 1000
    #: items timed one at a time
    latency_samples: int = 50
    #: folder for ``report.json`` and the plots
    out: str = "out/eval"

    def check(self) -> None:
        """Raise :class:`ConfigurationError` for options that cannot work together."""
        if self.save_calibration and not (self.calibrate and self.classifier):
            raise ConfigurationError("--save-calibration needs --calibrate and --classifier")
        if self.mode == "head" and not (self.classifier or self.labels):
            # A head answers by class index: the file's labels, sorted, need not be its order.
            raise ConfigurationError("--mode head needs the head's labels in class order: --labels or --classifier")
