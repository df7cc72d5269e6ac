"""``qwen-fast train``: fine-tune Qwen3 for a label set, into a directory vLLM serves as it is.

    qwen-fast train data.csv --base-model Qwen/Qwen3-0.6B --method head --out models/news-head
    qwen-fast train data.csv --base-model Qwen/Qwen3-0.6B --method sft --out models/news-sft
    qwen-fast train data.csv --base-model Qwen/Qwen3-0.6B --method sft --export adapter --out adapters/news

Methods:

* ``head``: ``Qwen3ForSequenceClassification``, a new linear head over the label set on the
  last token of the bare text, exactly what vLLM's pooling runner scores through ``/classify``
  (``QwenClassifier(mode="head")``). Full fine-tuning by default; ``--lora`` trains LoRA
  adapters (and the head) and merges them at export.
* ``sft``: LoRA on the classifier's own prompt (instructions, labels, the text, thinking off)
  with the label's answer token(s) as the target: at inference the served model sees exactly
  what it was trained on, and the classifier reads the same tokens' probabilities. Exported as
  merged weights (serve the directory) or, with ``--export adapter``, a LoRA adapter for
  ``qwen-fast serve --lora name=DIR`` (several adapters on one server).

The data is the same CSV/JSONL ``qwen-fast eval`` reads (label maps included). A stratified
validation split is scored (accuracy, macro-F1) after every epoch; training stops early when
macro-F1 stops improving, and the best epoch is exported. Every epoch writes a checkpoint;
``--resume`` continues from it. bf16 autocast on GPU, fp32 on CPU.

The output directory also holds ``classifier.json`` (labels in class order, mode, prompt
layout) and ``training.json`` (options, per-epoch history, samples/s), so
``QwenClassifier.load(DIR, base_url=..., model=...)`` points at the served model with no hand
mapping. Needs the ``train`` extra (transformers, peft, accelerate, scikit-learn, tqdm).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from langchain_qwen_fast._core.prompting import ClassifierPlan, LabelSet, local_plan, neutralize_control_tokens
from langchain_qwen_fast.training.data import labelled_items

Method = Literal["head", "sft"]

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
_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_CHECKPOINT = "checkpoints/last.pt"


@dataclass(frozen=True)
class TrainOptions:
    """What ``qwen-fast train`` does; each field has a CLI flag of the same name."""

    method: Method
    base_model: str
    out: str
    epochs: int = 3
    batch_size: int = 16
    #: None: 3e-5 for full fine-tuning, 2e-4 for LoRA
    learning_rate: float | None = None
    #: None: LoRA for sft, full fine-tuning for head
    lora: bool | None = None
    lora_rank: int = 16
    lora_alpha: int = 32
    val_fraction: float = 0.1
    #: epochs without a better validation macro-F1 before stopping
    patience: int = 2
    seed: int = 0
    #: tokens kept of each text
    max_text_tokens: int = 256
    #: ``merged`` weights; a LoRA ``adapter`` (sft); or, for a head, ``generate``: the head
    #: trained on the classifier's prompt and written into the output layer of a causal LM,
    #: served by vLLM's generate runner (its one-at-a-time latency) as a generate-mode model
    export: Literal["merged", "adapter", "generate"] = "merged"
    instructions: str | None = None
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
    def uses_lora(self) -> bool:
        """Whether LoRA adapters are trained."""
        return self.method == "sft" if self.lora is None else self.lora

    @property
    def lr(self) -> float:
        """The learning rate used."""
        if self.learning_rate is not None:
            return self.learning_rate
        return 2e-4 if self.uses_lora else 3e-5


def split(
    items: Sequence[tuple[str, str]], val_fraction: float, seed: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A stratified (train, validation) split: ``val_fraction`` of each label's items (at
    least one where a label has two or more) go to validation, reproducibly from ``seed``."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be within [0, 1), got {val_fraction}")
    rng = random.Random(seed)
    by_label: dict[str, list[tuple[str, str]]] = {}
    for item in items:
        by_label.setdefault(item[1], []).append(item)
    train, val = [], []
    for label in sorted(by_label):
        group = by_label[label][:]
        rng.shuffle(group)
        n = 0 if val_fraction == 0 else max(1 if len(group) > 1 else 0, round(len(group) * val_fraction))
        val += group[:n]
        train += group[n:]
    rng.shuffle(train)
    return train, val


class _Task:
    """How one method encodes items, computes its loss and scores texts."""

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


class HeadTask(_Task):
    """``--method head``: a sequence-classification head on the last token of the bare text
    (``/classify``), or, with ``--export generate``, of the classifier's prompt."""

    def __init__(self, options: TrainOptions, labels: Sequence[str], tokenizer: Any, torch: Any) -> None:
        super().__init__(options, labels, tokenizer, torch)
        if options.export == "generate":
            label_set = LabelSet.build(labels, options.label_descriptions, options.instructions)
            self.plan = local_plan(label_set, tokenizer)
            if self.plan.scoring != "label_tokens":
                raise ValueError("--export generate needs labels whose first tokens differ (one decode step)")

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


class SFTTask(_Task):
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
    """The ``tokenizers`` tokenizer of a local model directory (or a hub id, through its cache)."""
    from tokenizers import Tokenizer

    path = Path(model_dir) / "tokenizer.json"
    if path.is_file():
        return Tokenizer.from_file(str(path))
    from huggingface_hub import hf_hub_download

    return Tokenizer.from_file(hf_hub_download(model_dir, "tokenizer.json"))


def score(task: HeadTask | SFTTask, model: Any, texts: Sequence[str], batch_size: int = 64) -> list[list[float]]:
    """Label probabilities of ``texts`` from a model in memory (rows in label order)."""
    torch = task.torch
    rows: list[list[float]] = []
    model.eval()
    with torch.no_grad(), _autocast(task):
        for start in range(0, len(texts), batch_size):
            encoded = task.encode(texts[start : start + batch_size])
            rows += task.probabilities(model, encoded).float().cpu().tolist()
    return rows


def _autocast(task: HeadTask | SFTTask) -> Any:
    torch = task.torch
    if task.device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def _trainable_state(model: Any) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def train(
    items: Sequence[tuple[str, str]],
    labels: Sequence[str],
    options: TrainOptions,
    *,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Fine-tune ``options.base_model`` on ``items`` (text, label) and export to ``options.out``.
    Returns the training report (also written as ``training.json``)."""
    import torch
    from tqdm import tqdm

    if options.method == "sft" and not options.uses_lora and options.export == "adapter":
        raise ValueError("--export adapter needs LoRA")
    if options.method == "head" and options.export == "adapter":
        raise ValueError("a head model is exported merged or for the generate runner, not as an adapter")
    if options.method == "sft" and options.export == "generate":
        raise ValueError("--export generate is for --method head (an SFT model is served by the generate runner)")
    out = Path(options.out)
    torch.manual_seed(options.seed)  # the new head's and the LoRA weights' initialisation
    tokenizer = load_tokenizer(options.base_model)
    task = make_task(options, labels, tokenizer)
    index = {label: i for i, label in enumerate(labels)}
    train_items, val_items = split(items, options.val_fraction, options.seed)
    if not train_items:
        raise ValueError("no training items")
    encoded = task.encode([t for t, _ in train_items])
    targets = [index[y] for _, y in train_items]

    model = task.load(options.base_model).to(task.device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    steps_per_epoch = math.ceil(len(train_items) / options.batch_size)
    # The schedule follows the epochs, not max_steps: a run stopped early and resumed trains
    # exactly as one that was never stopped.
    total_steps = steps_per_epoch * options.epochs
    optimizer = torch.optim.AdamW(trainable, lr=options.lr, weight_decay=0.0)
    warmup = max(1, total_steps // 20)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (total_steps - step) / max(1, total_steps - warmup)))
    )
    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {"macro_f1": -1.0, "epoch": 0, "state": None}
    first_epoch, step, samples, train_seconds = 1, 0, 0, 0.0
    checkpoint = out / _CHECKPOINT
    fingerprint = _fingerprint(options, labels, items)
    if options.resume and checkpoint.is_file():
        saved = torch.load(checkpoint, map_location=task.device, weights_only=False)
        if saved["fingerprint"] != fingerprint:
            raise ValueError(f"{checkpoint} is from another run (data, labels or options differ); drop --resume")
        model.load_state_dict(saved["trainable"], strict=False)
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        history, best = saved["history"], saved["best"]
        first_epoch, step, samples = saved["epoch"] + 1, saved["step"], saved["samples"]
        train_seconds = saved["seconds"]
        log(f"resumed from {checkpoint} after epoch {saved['epoch']}")
    elif options.resume:
        log(f"no checkpoint at {checkpoint}: starting from the base model")
    stale = sum(1 for h in history if h["epoch"] > best["epoch"])
    stopped = False  # by max_steps: the checkpoint stays for --resume
    for epoch in range(first_epoch, options.epochs + 1):
        if stale >= options.patience:
            break
        if options.max_steps is not None and step >= options.max_steps:
            stopped = True
            break
        model.train()
        order = list(range(len(train_items)))
        random.Random(options.seed * 1000 + epoch).shuffle(order)
        started = time.perf_counter()
        losses = []
        bar = tqdm(total=steps_per_epoch, desc=f"epoch {epoch}/{options.epochs}", disable=not options.progress)
        for start in range(0, len(order), options.batch_size):
            if options.max_steps is not None and step >= options.max_steps:
                stopped = True
                break
            picked = order[start : start + options.batch_size]
            with _autocast(task):
                loss = task.loss(model, [encoded[i] for i in picked], [targets[i] for i in picked])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            samples += len(picked)
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
        bar.close()
        if task.device.type == "cuda":
            torch.cuda.synchronize()
        train_seconds += time.perf_counter() - started
        record: dict[str, Any] = {"epoch": epoch, "step": step, "loss": sum(losses) / max(1, len(losses))}
        if val_items:
            from langchain_qwen_fast.evaluation.report import metrics

            probs = score(task, model, [t for t, _ in val_items])
            predicted = [labels[max(range(len(row)), key=row.__getitem__)] for row in probs]
            report = metrics([y for _, y in val_items], predicted, labels)
            record.update(accuracy=report["accuracy"], macro_f1=report["macro_f1"])
        history.append(record)
        log(
            f"epoch {epoch}: loss {record['loss']:.4f}"
            + (f", validation accuracy {record['accuracy']:.4f} macro-F1 {record['macro_f1']:.4f}" if val_items else "")
        )
        if stopped:  # a partial epoch: not scored, not saved; --resume repeats it
            break
        improved = record.get("macro_f1", 0.0) > best["macro_f1"]
        if improved or not val_items:
            best = {"macro_f1": record.get("macro_f1", 0.0), "epoch": epoch, "state": _trainable_state(model)}
            stale = 0
        else:
            stale += 1
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "fingerprint": fingerprint,
                "epoch": epoch,
                "step": step,
                "samples": samples,
                "seconds": train_seconds,
                "trainable": _trainable_state(model),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "history": history,
                "best": best,
            },
            checkpoint,
        )
    if best["state"] is not None:
        model.load_state_dict(best["state"], strict=False)
    report = {
        "method": options.method,
        "base_model": options.base_model,
        "labels": list(labels),
        "train_items": len(train_items),
        "validation_items": len(val_items),
        "best_epoch": best["epoch"],
        "validation_macro_f1": best["macro_f1"] if val_items else None,
        "history": history,
        "steps": step,
        "train_seconds": round(train_seconds, 2),
        "train_samples_per_s": round(samples / train_seconds, 1) if train_seconds else None,
        "device": str(task.device),
        "options": {k: v for k, v in dataclasses.asdict(options).items() if k != "progress"},
        "finished": not stopped,
    }
    export(task, model, options, labels)
    if not stopped:  # finished: nothing left to resume
        shutil.rmtree(checkpoint.parent, ignore_errors=True)
    (out / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def export(task: HeadTask | SFTTask, model: Any, options: TrainOptions, labels: Sequence[str]) -> Path:
    """Write what vLLM serves (merged weights, or a LoRA adapter) and the classifier's
    configuration into ``options.out``."""
    from langchain_qwen_fast.classifiers import QwenClassifier

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
    QwenClassifier(
        labels=list(labels),
        mode="head" if options.method == "head" and options.export != "generate" else "generate",
        instructions=options.instructions,
        label_descriptions=options.label_descriptions,
        model=name,
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
        raise RuntimeError(f"the head written as a causal LM scores differently (max gap {gap:.2e})")
    return causal


def _fingerprint(options: TrainOptions, labels: Sequence[str], items: Sequence[tuple[str, str]]) -> str:
    import hashlib

    # What a resumed run may change: where it runs, how far it goes, and the display.
    kept = {
        k: v
        for k, v in dataclasses.asdict(options).items()
        if k not in {"resume", "progress", "device", "max_steps", "epochs"}
    }
    blob = json.dumps({"options": kept, "labels": list(labels), "items": list(items)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


# -- the command ------------------------------------------------------------------------------
def add_parser(sub: Any) -> None:
    """Add the ``train`` subcommand to the ``qwen-fast`` parser."""
    p = sub.add_parser(
        "train",
        help="fine-tune Qwen3 on a labelled CSV/JSONL file (head or SFT), ready to serve",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", help="labelled CSV or JSONL (the layouts qwen-fast eval reads)")
    p.add_argument("--base-model", required=True, help="model directory (or hub id) to start from")
    p.add_argument("--method", choices=["head", "sft"], required=True)
    p.add_argument("--out", required=True, help="output directory (served by vLLM as it is)")
    p.add_argument("--labels", nargs="+", help="label set in class order (default: the file's, sorted)")
    p.add_argument("--label-map", help="file label -> label: '1=World,2=Sports' or JSON")
    p.add_argument("--text-column", default="text")
    p.add_argument("--label-column", default="label")
    p.add_argument("--epochs", type=int, default=3, help="default: %(default)s")
    p.add_argument("--batch-size", type=int, default=16, help="default: %(default)s")
    p.add_argument("--learning-rate", type=float, help="default: 3e-5 full fine-tuning, 2e-4 LoRA")
    p.add_argument(
        "--lora", action=argparse.BooleanOptionalAction, help="train LoRA adapters (default: sft yes, head no)"
    )
    p.add_argument("--lora-rank", type=int, default=16, help="default: %(default)s")
    p.add_argument("--lora-alpha", type=int, default=32, help="default: %(default)s")
    p.add_argument("--val-fraction", type=float, default=0.1, help="validation share (default: %(default)s)")
    p.add_argument("--patience", type=int, default=2, help="epochs without improvement before stopping")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-text-tokens", type=int, default=256, help="tokens kept per text (default: %(default)s)")
    p.add_argument("--max-steps", type=int, help="stop after this many optimiser steps in all")
    p.add_argument(
        "--export",
        choices=["merged", "adapter", "generate"],
        default="merged",
        help="merged weights; a LoRA adapter (sft); or generate (head: served by the generate runner)",
    )
    p.add_argument("--instructions", help="sft: the classifier's instructions (default: its default)")
    p.add_argument("--served-model-name", help="the model name in classifier.json (default: qwen3, or the adapter's)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.pt")
    p.add_argument("--device", help="cpu or cuda (default: cuda where there is one)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``qwen-fast train``."""
    if not Path(args.path).is_file():
        print(f"qwen-fast train: no such file: {args.path}", file=sys.stderr)
        return 2
    try:
        items, labels = labelled_items(
            args.path, args.labels, args.label_map, text_column=args.text_column, label_column=args.label_column
        )
    except ValueError as exc:
        print(f"qwen-fast train: {exc}", file=sys.stderr)
        return 2
    options = TrainOptions(
        method=args.method,
        base_model=args.base_model,
        out=args.out,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        lora=args.lora,
        lora_rank=args.lora_rank,
        lora_alpha=args.lora_alpha,
        val_fraction=args.val_fraction,
        patience=args.patience,
        seed=args.seed,
        max_text_tokens=args.max_text_tokens,
        export=args.export,
        instructions=args.instructions,
        served_model_name=args.served_model_name,
        resume=args.resume,
        device=args.device,
        max_steps=args.max_steps,
        progress=not args.no_progress,
    )
    print(f"training {args.method} on {len(items)} items, labels {labels}", flush=True)
    try:
        report = train(items, labels, options)
    except ValueError as exc:
        print(f"qwen-fast train: {exc}", file=sys.stderr)
        return 2
    done = (
        f"best epoch {report['best_epoch']}: validation macro-F1 {report['validation_macro_f1']}"
        if report["finished"]
        else f"stopped after {report['steps']} steps (--max-steps; --resume continues)"
    )
    print(f"{done}; {report['train_samples_per_s']} samples/s on {report['device']}; wrote {args.out}")
    return 0


# -- the offline stand-in for the quickstart ----------------------------------------------------
#: how the stand-in is trained; a change rebuilds it
_NEWS_RECIPE: dict[str, Any] = {
    "train_items": 1200,
    "test_items": 400,
    "seed": 0,
    "epochs": 3,
    "learning_rate": 2e-3,
    "version": 1,
}


def build_news_model(out: str | Path, base_model: str | Path, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The quickstart's offline stand-in: ``base_model`` (the tiny test model) fine-tuned with
    ``--method sft`` on :func:`~langchain_qwen_fast.testing.samples.labelled_news` headlines over AG
    News's labels, merged into ``out``. Built once: a second call with the same base and recipe
    returns the cached model's report. The report's ``held_out_accuracy`` is measured here on
    headlines of another seed."""
    from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, labelled_news

    out = Path(out)
    base = Path(base_model)
    recipe = {
        **_NEWS_RECIPE,
        "base": json.loads((base / ".built.json").read_text()) if (base / ".built.json").is_file() else str(base),
    }
    marker = out / ".built.json"
    if marker.is_file() and json.loads(marker.read_text()).get("recipe") == recipe:
        return dict(json.loads(marker.read_text())["report"])
    options = TrainOptions(
        method="sft",
        base_model=str(base),
        out=str(out),
        epochs=_NEWS_RECIPE["epochs"],
        learning_rate=_NEWS_RECIPE["learning_rate"],
        seed=_NEWS_RECIPE["seed"],
        progress=False,
    )
    labels = list(AG_NEWS_LABELS)
    started = time.perf_counter()
    report = train(labelled_news(_NEWS_RECIPE["train_items"], _NEWS_RECIPE["seed"]), labels, options, log=log)
    from transformers import AutoModelForCausalLM

    held_out = labelled_news(_NEWS_RECIPE["test_items"], _NEWS_RECIPE["seed"] + 1)
    task = make_task(options, labels, load_tokenizer(str(out)))
    model = AutoModelForCausalLM.from_pretrained(out, dtype=task.torch.float32).to(task.device)
    rows = score(task, model, [t for t, _ in held_out])
    right = sum(labels[row.index(max(row))] == y for row, (_, y) in zip(rows, held_out))
    summary = {
        "held_out_accuracy": right / len(held_out),
        "held_out_items": len(held_out),
        "seconds": round(time.perf_counter() - started, 1),
        "train_samples_per_s": report["train_samples_per_s"],
    }
    marker.write_text(json.dumps({"recipe": recipe, "report": summary}))
    return summary
