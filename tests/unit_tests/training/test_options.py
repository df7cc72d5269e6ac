"""TrainOptions: the defaults that follow from the method, the epoch cap, and which options
cannot work together (checked before any model loads)."""

from __future__ import annotations

import pytest

from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.training import TrainOptions
from langchain_qwen_fast.training.options import MAX_EPOCHS


def test_lora_and_learning_rate_follow_the_method_unless_given() -> None:
    sft = TrainOptions(method="sft", base_model="m", out="o")
    head = TrainOptions(method="head", base_model="m", out="o")
    assert (sft.uses_lora, sft.lr) == (True, 2e-4)
    assert (head.uses_lora, head.lr) == (False, 3e-5)
    assert TrainOptions(method="head", base_model="m", out="o", lora=True).lr == 2e-4
    assert TrainOptions(method="sft", base_model="m", out="o", learning_rate=1e-3).lr == 1e-3


def test_the_epochs_are_a_generous_cap_unless_given() -> None:
    options = TrainOptions(method="head", base_model="m", out="o")
    assert options.epochs is None and options.epoch_cap == MAX_EPOCHS
    assert TrainOptions(method="head", base_model="m", out="o", epochs=8).epoch_cap == 8
    with pytest.raises(ConfigurationError, match="at least 1"):
        TrainOptions(method="head", base_model="m", out="o", epochs=0).check()


@pytest.mark.parametrize(
    "settings",
    [
        {"method": "head"},
        {"method": "head", "export": "generate"},
        {"method": "head", "lora": True},
        {"method": "sft", "export": "adapter"},
        {"method": "sft", "lora": False},
        {"method": "sft", "prompt_layout": "compact"},
        {"method": "sft", "prompt_layout": "compact", "export": "adapter"},
        {"method": "head", "prompt_layout": "compact", "export": "generate"},
        {"method": "head", "prompt_layout": "chat"},
    ],
)
def test_exports_that_can_work_pass_the_check(settings: dict) -> None:
    TrainOptions(base_model="m", out="o", **settings).check()


def test_an_export_that_cannot_work_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="needs LoRA"):
        TrainOptions(method="sft", base_model="m", out="o", lora=False, export="adapter").check()


def test_a_layout_is_for_a_model_that_reads_the_classifiers_prompt() -> None:
    """A head served through /classify reads the bare text: a compact layout there would train
    the same model and save a layout nothing reads, so it is refused, naming the way to one."""
    assert TrainOptions(method="sft", base_model="m", out="o").reads_prompt
    assert TrainOptions(method="head", base_model="m", out="o", export="generate").reads_prompt
    assert not TrainOptions(method="head", base_model="m", out="o").reads_prompt
    with pytest.raises(ConfigurationError, match=r"reads the bare text.*--export generate"):
        TrainOptions(method="head", base_model="m", out="o", prompt_layout="compact").check()
    with pytest.raises(ConfigurationError, match=r"one of \['chat', 'compact'\]"):
        TrainOptions(method="sft", base_model="m", out="o", prompt_layout="short").check()  # type: ignore[arg-type]
