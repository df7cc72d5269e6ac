"""What a training run leaves in its output directory: what vLLM serves as it is (merged
weights, a LoRA adapter, or a head written into a causal LM for the generate runner), the base
model's tokenizer files and chat template, and the classifier's configuration
(``classifier.json``), so that ``QwenClassifier.load(DIR, base_url=...)`` needs no hand mapping:
it sends the prompt layout the model was trained on, and a multi-label one carries
``multi_label=True`` and the tuned threshold of each label."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.training.options import TrainOptions
from langchain_qwen_fast.training.tasks import HeadTask, SFTTask

#: Files copied from the base model so the output serves with the same tokenizer and template.
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
)


def export(
    task: HeadTask | SFTTask,
    model: Any,
    options: TrainOptions,
    labels: Sequence[str],
    thresholds: Mapping[str, float] | None = None,
) -> Path:
    """Write what vLLM serves (merged weights, or a LoRA adapter) and the classifier's
    configuration into ``options.out``; a multi-label task's classifier answers a label at or
    above its threshold in ``thresholds`` (0.5 for all without them)."""
    from langchain_qwen_fast.engine import ClassifierConfig

    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    dtype = task.torch.bfloat16 if task.device.type == "cuda" else task.torch.float32
    name = options.served_model_name
    if options.export == "adapter":
        model.save_pretrained(out)
        name = name or out.name
    else:
        if options.uses_lora:
            model = model.merge_and_unload()
        if options.export == "generate":
            assert isinstance(task, HeadTask)
            model = head_as_causal_lm(task, model, options.base_model)
        model.to(dtype).save_pretrained(out)
        for file in _TOKENIZER_FILES:
            source = Path(options.base_model) / file
            if source.is_file():
                shutil.copyfile(source, out / file)
        name = name or "qwen3"
    ClassifierConfig(
        labels=list(labels),
        mode="head" if options.method == "head" and options.export != "generate" else "generate",
        instructions=options.instructions,
        label_descriptions=options.label_descriptions,
        prompt_layout=options.prompt_layout,
        model=name,
        multi_label=task.multi_label,
        threshold=dict(thresholds) if task.multi_label and thresholds else 0.5,
    ).save(out)
    return out


def head_as_causal_lm(task: HeadTask, head_model: Any, base_model: str) -> Any:
    """A causal LM that scores like ``head_model`` under the classifier's generate mode: the
    trained backbone, and an output layer whose rows for the labels' answer tokens are the
    head's rows (the others stay the base model's). The classifier reads the answer tokens'
    logprobs and renormalises them over the labels: that is the head's softmax. The output
    layer is untied from the embeddings (Qwen3-0.6B ties them). Checked on sample prompts."""
    from transformers import AutoModelForCausalLM

    torch = task.torch
    assert task.plan is not None
    causal: Any = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32).to(task.device)
    causal.model.load_state_dict(head_model.model.state_dict())
    weight = causal.get_output_embeddings().weight.detach().clone()
    rows = torch.tensor(task.plan.answer_token_ids, device=weight.device)
    weight[rows] = head_model.score.weight.detach().to(weight.dtype)
    causal.config.tie_word_embeddings = False
    causal.lm_head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device)
    causal.lm_head.weight = torch.nn.Parameter(weight)
    probe = SFTTask(task.options, task.labels, task.tokenizer, torch)
    probe.device = task.device
    prompts = task.encode(["Stocks rally as rates fall", "Late goal wins the cup", "New chip doubles battery life"])
    with torch.no_grad():
        expected = task.probabilities(head_model.eval(), prompts)
        got = probe.probabilities(causal.eval(), prompts)
    gap = float((expected - got).abs().max())
    if gap > 1e-3:
        raise ConfigurationError(
            f"--export generate: the head written as a causal LM scores differently (max gap {gap:.2e})"
        )
    return causal
