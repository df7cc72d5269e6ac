"""What ``qwen-fast train`` does: :class:`TrainOptions`, one typed record with one field per
option, and the rules about options that cannot work together.

Light on purpose (no torch, no transformers): the command takes its defaults from here when it
builds its parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from langchain_qwen_fast._core.prompting import LAYOUTS, PromptLayout
from langchain_qwen_fast.errors import ConfigurationError

Method = Literal["head", "sft"]
Export = Literal["merged", "adapter", "generate"]

#: The most epochs a run trains when ``epochs`` is not given. Generous on purpose: early stopping
#: ends a run once validation stops improving, and a cap that cuts a run short while it is still
#: learning leaves a model that looks trained and is not.
MAX_EPOCHS = 50


@dataclass(frozen=True)
class TrainOptions:
    """How to fine-tune; every field but ``label_descriptions`` has a ``qwen-fast train`` flag
    of the same name."""

    method: Method
    base_model: str
    out: str
    #: the most epochs; None: up to :data:`MAX_EPOCHS`, which needs a validation split (early
    #: stopping ends the run once validation stops improving, well before the cap as a rule)
    epochs: int | None = None
    batch_size: int = 16
    #: None: 3e-5 for full fine-tuning, 2e-4 for LoRA
    learning_rate: float | None = None
    #: None: LoRA for sft, full fine-tuning for head
    lora: bool | None = None
    lora_rank: int = 16
    lora_alpha: int = 32
    val_fraction: float = 0.1
    #: epochs without a better validation macro-F1 (multi-label: at threshold 0.5) before stopping
    patience: int = 2
    #: what the split, each epoch's order and the new weights are drawn from: the same seed,
    #: data and options give the same model on one device and thread count
    seed: int = 0
    #: tokens kept of each text
    max_text_tokens: int = 256
    #: ``merged`` weights; a LoRA ``adapter`` (sft); or, for a head, ``generate``: the head
    #: trained on the classifier's prompt and written into the output layer of a causal LM,
    #: served by vLLM's generate runner as a generate-mode model
    export: Export = "merged"
    instructions: str | None = None
    #: the layout of the classifier's prompt that the model is trained on and the saved
    #: classifier sends (``chat`` or ``compact``); only a model that reads a prompt has one
    #: (:attr:`reads_prompt`)
    prompt_layout: PromptLayout = "chat"
    label_descriptions: dict[str, str] | None = None
    #: the name the classifier asks for (``--served-model-name``, or the adapter's name)
    served_model_name: str | None = None
    resume: bool = False
    #: ``cpu``, ``cuda``; None picks cuda where there is one
    device: str | None = None
    #: stop after this many optimiser steps in all (a time box; None: no limit)
    max_steps: int | None = None
    #: show a progress bar
    progress: bool = True

    @property
    def epoch_cap(self) -> int:
        """The most epochs this run trains."""
        return MAX_EPOCHS if self.epochs is None else self.epochs

    @property
    def uses_lora(self) -> bool:
        """Whether LoRA adapters are trained."""
        return self.method == "sft" if self.lora is None else self.lora

    @property
    def reads_prompt(self) -> bool:
        """Whether the trained model reads the classifier's prompt (SFT, and a head for the
        generate runner), not the bare text (a head served through ``/classify``)."""
        return self.method == "sft" or self.export == "generate"

    @property
    def lr(self) -> float:
        """The learning rate used."""
        if self.learning_rate is not None:
            return self.learning_rate
        return 2e-4 if self.uses_lora else 3e-5

    def check(self, multi_label: bool = False) -> None:
        """Raise :class:`ConfigurationError` for an export these options cannot make, for
        single- or ``multi_label`` data (checked before any model loads)."""
        if self.epochs is not None and self.epochs < 1:
            raise ConfigurationError(f"--epochs must be at least 1, got {self.epochs}")
        if multi_label and self.method == "head" and self.export == "generate":
            raise ConfigurationError(
                "--export generate is single-label: a multi-label (sigmoid) head is served through /classify"
            )
        if self.method == "sft" and not self.uses_lora and self.export == "adapter":
            raise ConfigurationError("--export adapter needs LoRA")
        if self.method == "head" and self.export == "adapter":
            raise ConfigurationError("a head model is exported merged or for the generate runner, not as an adapter")
        if self.method == "sft" and self.export == "generate":
            raise ConfigurationError(
                "--export generate is for --method head (an SFT model is served by the generate runner)"
            )
        if self.prompt_layout not in LAYOUTS:
            raise ConfigurationError(f"--prompt-layout must be one of {list(LAYOUTS)}, got {self.prompt_layout!r}")
        if self.prompt_layout != "chat" and not self.reads_prompt:
            # Silently training the same head and saving a layout that nothing reads would let
            # a user believe the served model got shorter prompts.
            raise ConfigurationError(
                f"--prompt-layout {self.prompt_layout}: a head served through /classify reads the bare text, with "
                "no prompt to lay out (already the fewest tokens a text); add --export generate to train the head "
                "on the classifier's prompt in that layout, or drop --prompt-layout"
            )
