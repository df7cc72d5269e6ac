"""What is trained, per method: how a task encodes texts, loads its model, computes its loss
and scores texts as the served classifier will.

* :class:`HeadTask` (``--method head``): a sequence-classification head on the last token of
  the bare text, exactly what vLLM's pooling runner scores through ``/classify``; with
  ``--export generate``, on the last token of the classifier's own prompt.
* :class:`SFTTask` (``--method sft``): the classifier's own prompt (instructions, labels, the
  text, thinking off) with the label's answer token(s) as the target: the served model sees
  exactly what it was trained on, and the classifier reads the same tokens' probabilities.

The classifier's prompt is laid out as ``options.prompt_layout`` says: ``chat`` (Qwen3's chat
format) or ``compact`` (the fixed part padded to whole cache blocks, the bare text, then one
special token or a multi-label question), built by the classifier's own code, padding included.

Multi-label data (each item's target: the indices of the labels that apply): a head has one
sigmoid per label (``problem_type="multi_label_classification"``, binary cross-entropy), which
vLLM's pooling runner applies too; SFT trains the classifier's yes/no step of every label (its
multi-label prompt and question) with ``yes`` or ``no`` as the answer token.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_qwen_fast._core.prompting import (
    ClassifierPlan,
    LabelSet,
    fit_format_to_tokenizer,
    local_plan,
    neutralize_control_tokens,
    yes_no_steps,
)
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.training.options import TrainOptions

_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class Task:
    """How one method encodes items, computes its loss and scores texts (the base of both)."""

    #: the torch device training runs on
    device: Any = "cpu"
    #: the classifier's prompt plan, where the model reads the classifier's prompt
    plan: ClassifierPlan | None = None
    #: full fine-tuning's trained vocabulary rows (:meth:`prepare`)
    rows: Any = None

    def __init__(
        self, options: TrainOptions, labels: Sequence[str], tokenizer: Any, torch: Any, multi_label: bool = False
    ) -> None:
        options.check(multi_label)
        self.options = options
        self.labels = list(labels)
        #: several labels per item: a target is a tuple of label indices, a score row independent probabilities
        self.multi_label = multi_label
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

    def _bodies(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's body ids (the user turn's opening, in the chat layout, and the text), its
        text cut to ``max_text_tokens``."""
        assert self.plan is not None
        opening, *bodies = self.plan.encode_bodies([self.plan.label_set.body_open, *map(self.plan.body, texts)])
        limit = self.options.max_text_tokens + len(opening)  # the user turn's opening (chat), nothing (compact)
        return [body[:limit] for body in bodies]

    def _prompt_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's prompt ids, exactly as the classifier sends them (first step)."""
        assert self.plan is not None
        return [self.plan.prompt_ids(body, 0) for body in self._bodies(texts)]

    def prepare(self, model: Any, encoded: Sequence[list[int]]) -> None:
        """Set ``model`` (on its device) up to train on ``encoded``. Full fine-tuning, where no
        loss reads the output layer beyond a fixed set of rows (:meth:`_output_rows`): train
        only the vocabulary rows the data can move, the same run step for step
        (:mod:`~langchain_qwen_fast.training.rows`)."""
        outputs = self._output_rows()
        if self.options.uses_lora or outputs is None:
            return
        from langchain_qwen_fast.training.rows import TouchedRows

        self.rows = TouchedRows(model, {t for p in self._input_sequences(encoded) for t in p}, outputs)

    def finish(self, model: Any) -> None:
        """Undo what :meth:`prepare` did to ``model``, before it is exported: fold the trained
        rows back into its weights."""
        if self.rows is not None:
            self.rows.fold()
            self.rows = None

    def _output_rows(self) -> Sequence[int] | None:
        """The output layer's rows the loss reads (None: maybe any): a head has no output layer
        over the vocabulary."""
        return ()

    def _input_sequences(self, encoded: Sequence[list[int]]) -> Sequence[Sequence[int]]:
        """The token ids the model reads when it trains on ``encoded``."""
        return encoded

    def label_rows(self, targets: Sequence[Any]) -> Any:
        """Multi-label targets (tuples of label indices) as rows of 0/1, one column per label."""
        rows = self.torch.zeros((len(targets), len(self.labels)), dtype=self.torch.float32)
        for row, given in enumerate(targets):
            rows[row, list(given)] = 1.0
        return rows.to(self.device)


class HeadTask(Task):
    """``--method head``: a sequence-classification head on the last token of the bare text
    (``/classify``), or, with ``--export generate``, of the classifier's prompt; multi-label,
    a sigmoid per label (``/classify`` only)."""

    def __init__(
        self, options: TrainOptions, labels: Sequence[str], tokenizer: Any, torch: Any, multi_label: bool = False
    ) -> None:
        super().__init__(options, labels, tokenizer, torch, multi_label)
        if options.export == "generate":
            label_set = LabelSet.build(
                labels, options.label_descriptions, options.instructions, layout=options.prompt_layout
            )
            self.plan = local_plan(label_set, tokenizer)
            if self.plan.scoring != "label_tokens":
                raise ConfigurationError("--export generate needs labels whose first tokens differ (one decode step)")

    def load(self, base_model: str) -> Any:
        """The base model with a new linear head over the labels (LoRA-wrapped if asked); its
        ``problem_type`` tells vLLM to apply a softmax, or a sigmoid per label (multi-label)."""
        from transformers import AutoModelForSequenceClassification

        model: Any = AutoModelForSequenceClassification.from_pretrained(
            base_model,
            num_labels=len(self.labels),
            id2label=dict(enumerate(self.labels)),
            label2id={label: i for i, label in enumerate(self.labels)},
            problem_type="multi_label_classification" if self.multi_label else "single_label_classification",
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

    def loss(self, model: Any, encoded: Sequence[list[int]], targets: Sequence[Any]) -> Any:
        """Cross-entropy of the head's logits against the labels; multi-label, binary
        cross-entropy of each label's logit against whether it applies."""
        ids, mask = self._batch(encoded)
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
        functional = self.torch.nn.functional
        if self.multi_label:
            return functional.binary_cross_entropy_with_logits(logits, self.label_rows(targets))
        return functional.cross_entropy(logits, self.torch.tensor(list(targets), device=self.device))

    def probabilities(self, model: Any, encoded: Sequence[list[int]]) -> Any:
        """Each text's label probabilities (rows), as ``/classify`` gives them: a softmax over
        the labels, or multi-label a sigmoid of each."""
        ids, mask = self._batch(encoded)
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
        return self.torch.sigmoid(logits) if self.multi_label else self.torch.softmax(logits, dim=-1)


class SFTTask(Task):
    """``--method sft``: the classifier's prompt, trained to answer the label's token(s);
    multi-label, each label's yes/no question, trained to answer ``yes`` or ``no``."""

    plan: ClassifierPlan

    def __init__(
        self, options: TrainOptions, labels: Sequence[str], tokenizer: Any, torch: Any, multi_label: bool = False
    ) -> None:
        super().__init__(options, labels, tokenizer, torch, multi_label)
        label_set = LabelSet.build(
            labels,
            options.label_descriptions,
            options.instructions,
            multi_label=multi_label,
            layout=options.prompt_layout,
        )
        self.plan = local_yes_no_plan(label_set, tokenizer) if multi_label else local_plan(label_set, tokenizer)

    def load(self, base_model: str) -> Any:
        """The base causal LM with LoRA adapters (or fully trainable without ``--lora``)."""
        from transformers import AutoModelForCausalLM

        model: Any = AutoModelForCausalLM.from_pretrained(base_model, dtype=self.torch.float32)
        return self._with_lora(model, "CAUSAL_LM")

    def _output_rows(self) -> Sequence[int] | None:
        """The answer tokens, where one step reads fixed ones (the labels' first tokens, or yes
        and no); labels of several tokens read the whole vocabulary."""
        return None if self.plan.scoring == "label_sequences" else self.plan.answer_token_ids

    def _input_sequences(self, encoded: Sequence[list[int]]) -> Sequence[Sequence[int]]:
        """The prompts, multi-label every label's."""
        return self._label_prompts(encoded) if self.multi_label else encoded

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's prompt ids, exactly as the classifier sends them (first step); multi-label,
        each text's body ids, which every label's step follows with its question."""
        return self._bodies(texts) if self.multi_label else self._prompt_ids(texts)

    def _label_prompts(self, bodies: Sequence[list[int]]) -> list[list[int]]:
        """Multi-label: every body's prompt for every label's step, text by text, label by label."""
        return [self.plan.prompt_ids(body, k) for body in bodies for k in range(len(self.labels))]

    def _yes_minus_no(self, model: Any, bodies: Sequence[list[int]]) -> Any:
        """Multi-label: logit(yes) - logit(no) after each label's question, shaped (texts,
        labels); its sigmoid is P(yes) / (P(yes) + P(no)), what the classifier reads."""
        logits = self._branch_logits(model, bodies, self.plan.answer_token_ids)
        return logits[:, :, 0] - logits[:, :, 1]

    def _branch_logits(self, model: Any, bodies: Sequence[list[int]], tokens: Sequence[int]) -> Any:
        """Multi-label: the logits of ``tokens`` after every label's question, shaped (texts,
        labels, tokens), in one pass per text. A text's label prompts share the head, the body
        and the questions' common opening, and differ after it: the pass reads the shared part
        once and each question's rest as a branch that attends to the shared part and to itself
        alone, at the positions it has in its own prompt. Each label's answer then sees exactly
        its own prompt, as the server reads it, and the shared part is run once, not once a label."""
        torch = self.torch
        lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        tails = [list(step.tail_ids) for step in self.plan.steps]
        common = 0  # the questions' common opening, short of every question's last token
        while common < min(map(len, tails)) - 1 and len({t[common] for t in tails}) == 1:
            common += 1
        stems = [[*body, *tails[0][:common]] for body in bodies]
        branches = [t[common:] for t in tails]
        cache, shared = self._head_cache(lm, len(stems))
        lengths = torch.tensor([len(s) for s in stems], device=self.device)
        ids, stem_mask = self._batch(stems)  # right-padded to the longest stem
        width = ids.shape[1]
        flat = torch.tensor([t for b in branches for t in b], dtype=torch.long, device=self.device)
        ids = torch.cat([ids, flat.expand(len(stems), -1)], 1)
        owner = torch.tensor([k for k, b in enumerate(branches) for _ in b], device=self.device)
        step = torch.cat([torch.arange(len(b), device=self.device) for b in branches])
        positions = torch.cat([torch.arange(width, device=self.device).expand(len(stems), -1),
                               lengths[:, None] + step], 1) + shared  # fmt: skip
        # Who attends to whom: every token to the head; a stem token to the stem's tokens up to
        # itself (a padding one to itself alone); a branch token to the whole stem and to its own
        # branch up to itself.
        valid = stem_mask.bool()
        causal = torch.ones((width, width), dtype=torch.bool, device=self.device).tril()
        eye = torch.eye(width, dtype=torch.bool, device=self.device)
        own = (owner[:, None] == owner[None, :]) & (step[:, None] >= step[None, :])
        texts, branch_tokens = len(stems), len(flat)
        stem_rows = torch.cat([(causal & valid[:, None, :]) | eye, torch.zeros((texts, width, branch_tokens),
                               dtype=torch.bool, device=self.device)], 2)  # fmt: skip
        branch_rows = torch.cat([valid[:, None, :].expand(-1, branch_tokens, -1), own.expand(texts, -1, -1)], 2)
        allowed = torch.cat([stem_rows, branch_rows], 1)
        allowed = torch.cat(
            [torch.ones((*allowed.shape[:2], shared), dtype=torch.bool, device=self.device), allowed], 2
        )
        hidden = lm.model(
            input_ids=ids, attention_mask=allowed[:, None], position_ids=positions, past_key_values=cache
        ).last_hidden_state
        ends = width + torch.tensor([len(b) for b in branches], device=self.device).cumsum(0) - 1
        picked = hidden[:, ends]  # (texts, labels, hidden): each question's last token
        return self._output(lm, picked, tokens)

    def _answer_logits(
        self,
        model: Any,
        sequences: Sequence[Sequence[int]],
        starts: Sequence[int],
        width: int,
        tokens: Sequence[int] | None = None,
    ) -> Any:
        """Logits at ``width`` positions from each ``start - 1``: the positions that predict
        the answer tokens (only those go through the output layer), over the vocabulary or
        over ``tokens`` alone. The prompt's head, which every sequence starts with, is run
        once and shared: the same attention, once instead of once per sequence."""
        torch = self.torch
        lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        cache, shared = self._head_cache(lm, len(sequences))
        assert all(list(s[:shared]) == list(self.plan.head_ids) for s in sequences)
        ids, mask = self._batch([s[shared:] for s in sequences])
        mask = torch.cat([torch.ones((len(sequences), shared), dtype=mask.dtype, device=self.device), mask], 1)
        hidden = lm.model(input_ids=ids, attention_mask=mask, past_key_values=cache).last_hidden_state
        offsets = torch.arange(width, device=self.device)
        at = (torch.tensor(list(starts), device=self.device)[:, None] - 1 - shared + offsets).clamp(
            max=ids.shape[1] - 1
        )
        picked = hidden.gather(1, at[:, :, None].expand(-1, -1, hidden.shape[-1]))
        return self._output(lm, picked, tokens)

    def _head_cache(self, lm: Any, batch: int) -> tuple[Any, int]:
        """The prompt's head run once, its key/value cache repeated for ``batch`` sequences
        (gradient flows back through it); and the head's length."""
        head = self.torch.tensor([list(self.plan.head_ids)], dtype=self.torch.long, device=self.device)
        cache = lm.model(input_ids=head, use_cache=True).past_key_values
        cache.batch_repeat_interleave(batch)
        return cache, head.shape[1]

    def _output(self, lm: Any, hidden: Any, tokens: Sequence[int] | None) -> Any:
        """The output layer on ``hidden``: over the vocabulary, or over ``tokens`` alone (only
        their rows, with their trained deltas under :class:`~.rows.TouchedRows`)."""
        if tokens is None:
            return lm.lm_head(hidden).float()
        rows = self.torch.tensor(list(tokens), device=self.device)
        bias = None if lm.lm_head.bias is None else lm.lm_head.bias[rows]
        weight = lm.lm_head.weight[rows] if self.rows is None else self.rows.output_rows(rows)
        return self.torch.nn.functional.linear(hidden, weight, bias).float()

    def loss(self, model: Any, encoded: Sequence[list[int]], targets: Sequence[Any]) -> Any:
        """The cross-entropy of what the classifier reads. One step over the labels' first
        tokens (``label_tokens``): of the label's token over those tokens alone, as the
        classifier renormalises their probabilities over the labels. Labels of several tokens:
        of each answer token over the vocabulary (the classifier sums those logprobs along
        each label). Multi-label: of each label's ``yes`` (it applies) or ``no`` after its
        question, over those two tokens."""
        torch = self.torch
        if self.multi_label:
            margin = self._yes_minus_no(model, encoded)
            return torch.nn.functional.binary_cross_entropy_with_logits(margin, self.label_rows(targets))
        if self.plan.scoring == "label_tokens":
            tokens = self.plan.answer_token_ids
            logits = self._answer_logits(model, encoded, [len(p) for p in encoded], 1, tokens)
            gold = torch.tensor(list(targets), dtype=torch.long, device=self.device)  # a label's index
            return torch.nn.functional.cross_entropy(logits[:, 0], gold)
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
        server's logprobs: label tokens' logprobs summed along each label, softmax over labels;
        multi-label, each label's P(yes) / (P(yes) + P(no)) after its question."""
        torch = self.torch
        if self.multi_label:
            return torch.sigmoid(self._yes_minus_no(model, encoded))
        starts = [len(p) for p in encoded]
        if self.plan.scoring == "label_tokens":  # one step scores every label
            logits = self._answer_logits(model, encoded, starts, 1, self.plan.answer_token_ids)
            return torch.softmax(logits[:, 0], dim=-1)
        totals = []
        for index in range(len(self.labels)):
            answer = self.plan.answer_tokens(index)
            sequences = [prompt + list(answer[:-1]) for prompt in encoded]
            logprobs = torch.log_softmax(self._answer_logits(model, sequences, starts, len(answer)), dim=-1)
            target = torch.tensor(answer, device=self.device)
            totals.append(logprobs.gather(2, target[None, :, None].expand(len(encoded), -1, 1)).sum(dim=(1, 2)))
        return torch.softmax(torch.stack(totals, dim=1), dim=-1)


def local_yes_no_plan(label_set: LabelSet, tokenizer: Any, max_model_len: int = 4096) -> ClassifierPlan:
    """The classifier's multi-label plan made with a local ``tokenizers.Tokenizer`` (as
    :func:`~langchain_qwen_fast._core.prompting.local_plan` makes a single-label one): the
    multi-label prompt in the format the tokenizer's vocabulary takes (Qwen3's or plain ChatML;
    a compact head padded to whole cache blocks), then one step per label, its question as the
    tail, ``yes`` and ``no`` as the answer tokens, as the classifier learns them from a server
    of that tokenizer. :class:`ConfigurationError` when ``yes`` or ``no`` is not a token of its
    own, or the vocabulary has no ChatML turns (or, compact, the compact layout's tokens)."""
    if not label_set.multi_label:
        raise ConfigurationError("a yes/no plan is multi-label")
    label_set = fit_format_to_tokenizer(label_set, tokenizer)  # the served format, as local_plan fits it
    yes, no, head = (
        e.ids for e in tokenizer.encode_batch(["yes", "no", label_set.unpadded_head()], add_special_tokens=False)
    )
    label_set = label_set.padded(len(head))  # a compact head, as the classifier pads it
    yes_no = [yes, no]
    steps = yes_no_steps(label_set, yes_no, "for this tokenizer")
    return ClassifierPlan.generate(label_set, "yes_no", steps, 0, max_model_len).with_tokenizer(tokenizer)


def make_task(
    options: TrainOptions, labels: Sequence[str], tokenizer: Any, multi_label: bool = False
) -> HeadTask | SFTTask:
    """The task object for ``options.method``, for single- or ``multi_label`` data."""
    import torch

    task = (HeadTask if options.method == "head" else SFTTask)(options, labels, tokenizer, torch, multi_label)
    task.device = make_device(options)
    return task


def make_device(options: TrainOptions) -> Any:
    """The torch device ``options`` train on: ``options.device``, else cuda where there is one."""
    import torch

    return torch.device(options.device or ("cuda" if torch.cuda.is_available() else "cpu"))


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
