"""What is trained, per method: how a task encodes texts, loads its model, computes its loss
and scores texts as the served classifier will.

* :class:`HeadTask` (``--method head``): a sequence-classification head on the last token of
  the bare text, exactly what vLLM's pooling runner scores through ``/classify``; with
  ``--export generate``, on the last token of the classifier's own prompt.
* :class:`SFTTask` (``--method sft``): the classifier's own prompt (instructions, labels, the
  text, thinking off) with the label's answer token(s) as the target: the served model sees
  exactly what it was trained on, and the classifier reads the same tokens' probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_qwen_fast._core.prompting import ClassifierPlan, LabelSet, local_plan, neutralize_control_tokens
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.training.options import TrainOptions

_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class Task:
    """How one method encodes items, computes its loss and scores texts (the base of both)."""

    #: the torch device training runs on
    device: Any = "cpu"
    #: the classifier's prompt plan, where the model reads the classifier's prompt
    plan: ClassifierPlan | None = None

    def __init__(self, options: TrainOptions, labels: Sequence[str], tokenizer: Any, torch: Any) -> None:
        self.options = options
        self.labels = list(labels)
        self.tokenizer = tokenizer
        self.torch = torch
        self.pad_id = tokenizer.token_to_id("<|endoftext|>")

    def autocast(self) -> Any:
        """The precision context of a forward pass: bf16 autocast on GPU, none (fp32) on CPU."""
        if self.device.type == "cuda":
            return self.torch.autocast("cuda", dtype=self.torch.bfloat16)
        return self.torch.autocast("cpu", enabled=False)

    def _batch(self, sequences: Sequence[Sequence[int]]) -> tuple[Any, Any]:
        """Right-padded ids and attention mask on the training device."""
        torch = self.torch
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = torch.tensor(list(seq), dtype=torch.long)
            mask[row, : len(seq)] = 1
        return ids.to(self.device), mask.to(self.device)

    def _with_lora(self, model: Any, task_type: str, **extra: Any) -> Any:
        """``model`` with LoRA adapters on every projection when the options ask for LoRA."""
        if not self.options.uses_lora:
            return model
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(
            task_type=task_type,
            r=self.options.lora_rank,
            lora_alpha=self.options.lora_alpha,
            lora_dropout=0.0,
            target_modules=list(_LORA_TARGETS),
            **extra,
        )
        return get_peft_model(model, config)

    def _prompt_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's prompt ids, exactly as the classifier sends them (first step)."""
        assert self.plan is not None
        bodies = self.plan.encode_bodies([self.plan.body(t) for t in texts])
        limit = self.options.max_text_tokens + 3  # the user turn's opening
        return [self.plan.prompt_ids(body[:limit], 0) for body in bodies]


class HeadTask(Task):
    """``--method head``: a sequence-classification head on the last token of the bare text
    (``/classify``), or, with ``--export generate``, of the classifier's prompt."""

    def __init__(self, options: TrainOptions, labels: Sequence[str], tokenizer: Any, torch: Any) -> None:
        super().__init__(options, labels, tokenizer, torch)
        if options.export == "generate":
            label_set = LabelSet.build(labels, options.label_descriptions, options.instructions)
            self.plan = local_plan(label_set, tokenizer)
            if self.plan.scoring != "label_tokens":
                raise ConfigurationError("--export generate needs labels whose first tokens differ (one decode step)")

    def load(self, base_model: str) -> Any:
        """The base model with a new linear head over the labels (LoRA-wrapped if asked)."""
        from transformers import AutoModelForSequenceClassification

        model: Any = AutoModelForSequenceClassification.from_pretrained(
            base_model,
            num_labels=len(self.labels),
            id2label=dict(enumerate(self.labels)),
            label2id={label: i for i, label in enumerate(self.labels)},
            problem_type="single_label_classification",
            pad_token_id=self.pad_id,
            dtype=self.torch.float32,
        )
        return self._with_lora(model, "SEQ_CLS", modules_to_save=["score"])

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids as the server reads them: the bare text (``/classify``), or
        the classifier's prompt (``--export generate``)."""
        if self.plan is not None:
            return self._prompt_ids(texts)
        encoded = self.tokenizer.encode_batch_fast([neutralize_control_tokens(t) for t in texts])
        return [e.ids[: self.options.max_text_tokens] or [self.pad_id] for e in encoded]

    def loss(self, model: Any, encoded: Sequence[list[int]], targets: Sequence[int]) -> Any:
        """Cross-entropy of the head's logits against the labels."""
        ids, mask = self._batch(encoded)
        logits = model(input_ids=ids, attention_mask=mask).logits
        return self.torch.nn.functional.cross_entropy(
            logits.float(), self.torch.tensor(list(targets), device=self.device)
        )

    def probabilities(self, model: Any, encoded: Sequence[list[int]]) -> Any:
        """Each text's label probabilities (rows), as ``/classify`` gives them."""
        ids, mask = self._batch(encoded)
        return self.torch.softmax(model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)


class SFTTask(Task):
    """``--method sft``: the classifier's prompt, trained to answer the label's token(s)."""

    plan: ClassifierPlan

    def __init__(self, options: TrainOptions, labels: Sequence[str], tokenizer: Any, torch: Any) -> None:
        super().__init__(options, labels, tokenizer, torch)
        label_set = LabelSet.build(labels, options.label_descriptions, options.instructions)
        self.plan = local_plan(label_set, tokenizer)

    def load(self, base_model: str) -> Any:
        """The base causal LM with LoRA adapters (or fully trainable without ``--lora``)."""
        from transformers import AutoModelForCausalLM

        model: Any = AutoModelForCausalLM.from_pretrained(base_model, dtype=self.torch.float32)
        return self._with_lora(model, "CAUSAL_LM")

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's prompt ids, exactly as the classifier sends them (first step)."""
        return self._prompt_ids(texts)

    def _answer_logits(self, model: Any, sequences: Sequence[Sequence[int]], starts: Sequence[int], width: int) -> Any:
        """Logits over the vocabulary at ``width`` positions from each ``start - 1``: the
        positions that predict the answer tokens (only those go through the output layer)."""
        torch = self.torch
        lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        ids, mask = self._batch(sequences)
        hidden = lm.model(input_ids=ids, attention_mask=mask).last_hidden_state
        offsets = torch.arange(width, device=self.device)
        at = (torch.tensor(list(starts), device=self.device)[:, None] - 1 + offsets).clamp(max=ids.shape[1] - 1)
        picked = hidden.gather(1, at[:, :, None].expand(-1, -1, hidden.shape[-1]))
        return lm.lm_head(picked).float()

    def loss(self, model: Any, encoded: Sequence[list[int]], targets: Sequence[int]) -> Any:
        """Cross-entropy of the answer tokens given the prompt (prompt tokens are not targets)."""
        torch = self.torch
        answers = [self.plan.answer_tokens(t) for t in targets]
        width = max(map(len, answers))
        sequences = [prompt + list(answer[:-1]) for prompt, answer in zip(encoded, answers)]
        logits = self._answer_logits(model, sequences, [len(p) for p in encoded], width)
        gold = torch.full((len(answers), width), -100, dtype=torch.long)
        for row, answer in enumerate(answers):
            gold[row, : len(answer)] = torch.tensor(answer)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), gold.reshape(-1).to(self.device))

    def probabilities(self, model: Any, encoded: Sequence[list[int]]) -> Any:
        """Each text's label probabilities, computed as the classifier computes them from the
        server's logprobs: label tokens' logprobs summed along each label, softmax over labels."""
        torch = self.torch
        starts = [len(p) for p in encoded]
        if self.plan.scoring == "label_tokens":  # one step scores every label
            logits = self._answer_logits(model, encoded, starts, 1)
            return torch.softmax(logits[:, 0, list(self.plan.answer_token_ids)], dim=-1)
        totals = []
        for index in range(len(self.labels)):
            answer = self.plan.answer_tokens(index)
            sequences = [prompt + list(answer[:-1]) for prompt in encoded]
            logprobs = torch.log_softmax(self._answer_logits(model, sequences, starts, len(answer)), dim=-1)
            target = torch.tensor(answer, device=self.device)
            totals.append(logprobs.gather(2, target[None, :, None].expand(len(encoded), -1, 1)).sum(dim=(1, 2)))
        return torch.softmax(torch.stack(totals, dim=1), dim=-1)


def make_task(options: TrainOptions, labels: Sequence[str], tokenizer: Any) -> HeadTask | SFTTask:
    """The task object for ``options.method``."""
    import torch

    task = (HeadTask if options.method == "head" else SFTTask)(options, labels, tokenizer, torch)
    task.device = torch.device(options.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return task


def load_tokenizer(model_dir: str) -> Any:
    """The ``tokenizers`` tokenizer of a local model directory (or a hub id, through its cache);
    :class:`ConfigurationError` when it is neither."""
    from tokenizers import Tokenizer

    path = Path(model_dir) / "tokenizer.json"
    if path.is_file():
        return Tokenizer.from_file(str(path))
    from huggingface_hub import hf_hub_download

    try:
        downloaded = hf_hub_download(model_dir, "tokenizer.json")
    except (OSError, ValueError) as exc:  # the hub's errors: a bad id, no such model, no network
        raise ConfigurationError(f"{model_dir}: no tokenizer.json here, nor from the model hub ({exc})") from exc
    return Tokenizer.from_file(downloaded)


def score(task: HeadTask | SFTTask, model: Any, texts: Sequence[str], batch_size: int = 64) -> list[list[float]]:
    """Label probabilities of ``texts`` from a model in memory (rows in label order)."""
    torch = task.torch
    rows: list[list[float]] = []
    model.eval()
    with torch.no_grad(), task.autocast():
        for start in range(0, len(texts), batch_size):
            encoded = task.encode(texts[start : start + batch_size])
            rows += task.probabilities(model, encoded).float().cpu().tolist()
    return rows
