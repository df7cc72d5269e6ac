"""EvalOptions: the combination of options that cannot work."""

from __future__ import annotations

import pytest

from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.evaluation import EvalOptions


@pytest.mark.parametrize(
    "settings", [{"save_calibration": True, "classifier": "c"}, {"save_calibration": True, "calibrate": True}]
)
def test_saving_a_calibration_needs_one_fitted_and_a_saved_classifier(settings: dict) -> None:
    with pytest.raises(ConfigurationError, match="--save-calibration needs --calibrate and --classifier"):
        EvalOptions(**settings).check()


def test_a_head_needs_its_labels_in_class_order() -> None:
    with pytest.raises(ConfigurationError, match="--mode head needs the head's labels in class order"):
        EvalOptions(mode="head").check()
    EvalOptions(mode="head", labels=["b", "a"]).check()
    EvalOptions(mode="head", classifier="c").check()


def test_options_that_work_pass_the_check() -> None:
    EvalOptions().check()
    EvalOptions(classifier="c", calibrate=True, save_calibration=True, target_accuracy=0.9).check()
