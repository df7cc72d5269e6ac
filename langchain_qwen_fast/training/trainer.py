"""The training loop: fine-tune a base model on (text, label) items and export what vLLM serves.

A stratified validation split is scored (accuracy, macro-F1) after every epoch; training stops
when macro-F1 has not improved for ``patience`` epochs (or at the epoch cap), and the best
epoch is exported. When the cap ends a run first (the best epoch is the last one, or too near
it for early stopping to have ended the run), the report says the run had not converged
(``converged``: False) and the log warns of it. Every epoch writes a checkpoint that
``resume`` continues from. bf16 autocast on GPU, fp32 on CPU. The output
directory also holds ``training.json`` (options, per-epoch history, samples/s, torch's threads).

A run is reproducible from ``seed``: the split, each epoch's order and the new weights are drawn
from it, and the process's random generators are seeded with it. On CPU, torch's deterministic
algorithms are on and the same seed, data and options give the same model on the same thread
count (``OMP_NUM_THREADS``, recorded in ``training.json``): another thread count adds the
floating-point sums in another order, which over a run can change what it learns.

Multi-label data (items of (text, labels)): the split is stratified by label combination, each
epoch is scored by micro- and macro-F1 at threshold 0.5 (macro-F1 picks the best epoch), and
each label's threshold is then tuned on the validation split (best F1,
:mod:`~langchain_qwen_fast.training.thresholds`) and saved in ``classifier.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from langchain_qwen_fast._extras import require_extra
from langchain_qwen_fast.errors import ConfigurationError, DataFileError
from langchain_qwen_fast.training.data import LabelledItem, is_multi_label
from langchain_qwen_fast.training.export import export
from langchain_qwen_fast.training.options import TrainOptions
from langchain_qwen_fast.training.tasks import HeadTask, SFTTask, load_tokenizer, make_device, make_task, score
from langchain_qwen_fast.training.thresholds import multi_label_scores, tune_thresholds

_CHECKPOINT = "checkpoints/last.pt"
#: what the ``train`` extra brings that training imports
_TRAIN_MODULES = ("torch", "transformers", "peft", "tokenizers", "tqdm", "sklearn")
#: options a resumed run may change: where it runs, how far it goes, and the display
_RESUMABLE_CHANGES = frozenset({"resume", "progress", "device", "max_steps", "epochs"})
#: how the log names each validation score
_SCORE_NAMES = {
    "accuracy": "accuracy",
    "macro_f1": "macro-F1",
    "micro_f1": "micro-F1",
    "subset_accuracy": "subset accuracy",
}
#: The learning rate warms up over one ``_WARMUP_SHARE``-th of the steps of the run's first
#: ``_WARMUP_EPOCHS`` epochs (of all of them in a shorter run): a short stretch at the start
#: however high the epoch cap, which early stopping seldom reaches.
_WARMUP_SHARE, _WARMUP_EPOCHS = 20, 3


Item = TypeVar("Item", bound=tuple[str, Any])


def split(items: Sequence[Item], val_fraction: float, seed: int) -> tuple[list[Item], list[Item]]:
    """A stratified (train, validation) split: ``val_fraction`` of each label's items (at
    least one where a label has two or more) go to validation, reproducibly from ``seed``;
    multi-label items are stratified by their label combination."""
    if not 0.0 <= val_fraction < 1.0:
        raise ConfigurationError(f"val_fraction must be within [0, 1), got {val_fraction}")
    rng = random.Random(seed)
    by_label: dict[Any, list[Item]] = {}
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


@dataclass
class _Progress:
    """Where a run stands after its last finished epoch: what a checkpoint keeps."""

    epoch: int = 0
    step: int = 0
    samples: int = 0
    seconds: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)
    #: the best epoch so far, its validation macro-F1 and its trainable weights
    best: dict[str, Any] = field(default_factory=lambda: {"macro_f1": -1.0, "epoch": 0, "state": None})

    @property
    def stale(self) -> int:
        """Epochs since the best one: early stopping's count."""
        return sum(1 for record in self.history if record["epoch"] > self.best["epoch"])


@dataclass
class _Run:
    """What one training run works with: the task, the model and its optimiser, the encoded items."""

    task: HeadTask | SFTTask
    model: Any
    optimizer: Any
    scheduler: Any
    encoded: list[list[int]]
    #: label indices: one per item, or multi-label a tuple per item
    targets: list[Any]
    val_items: list[tuple[str, Any]]

    def epoch(self, options: TrainOptions, progress: _Progress, number: int) -> tuple[float, bool]:
        """Train epoch ``number``; its mean loss, and whether ``max_steps`` cut it short."""
        torch = self.task.torch
        from tqdm import tqdm

        self.model.train()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        order = list(range(len(self.encoded)))
        random.Random(options.seed * 1000 + number).shuffle(order)
        started = time.perf_counter()
        losses: list[float] = []
        stopped = False
        steps = math.ceil(len(order) / options.batch_size)
        bar = tqdm(total=steps, desc=f"epoch {number}/{options.epoch_cap}", disable=not options.progress)
        for start in range(0, len(order), options.batch_size):
            if options.max_steps is not None and progress.step >= options.max_steps:
                stopped = True
                break
            picked = order[start : start + options.batch_size]
            with self.task.autocast():
                loss = self.task.loss(self.model, [self.encoded[i] for i in picked], [self.targets[i] for i in picked])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            progress.step += 1
            progress.samples += len(picked)
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
        bar.close()
        if self.task.device.type == "cuda":
            torch.cuda.synchronize()
        progress.seconds += time.perf_counter() - started
        return sum(losses) / max(1, len(losses)), stopped

    def validation_scores(self) -> dict[str, float]:
        """Accuracy and macro-F1 on the validation items (none without them); multi-label,
        micro- and macro-F1 and subset accuracy at threshold 0.5."""
        if not self.val_items:
            return {}
        from langchain_qwen_fast.evaluation.metrics import classification_metrics

        labels = self.task.labels
        rows = score(self.task, self.model, [t for t, _ in self.val_items])
        if self.task.multi_label:
            return multi_label_scores([y for _, y in self.val_items], rows, labels)
        predicted = [labels[max(range(len(row)), key=row.__getitem__)] for row in rows]
        report = classification_metrics([y for _, y in self.val_items], predicted, labels)
        return {"accuracy": report["accuracy"], "macro_f1": report["macro_f1"]}

    def tuned_thresholds(self) -> tuple[dict[str, float], dict[str, float]] | None:
        """Multi-label: each label's best-F1 threshold on the validation items, and the
        validation scores at those thresholds (None without validation items, or for
        single-label data)."""
        if not self.task.multi_label or not self.val_items:
            return None
        truth = [y for _, y in self.val_items]
        rows = score(self.task, self.model, [t for t, _ in self.val_items])
        thresholds = tune_thresholds(truth, rows, self.task.labels)
        return thresholds, multi_label_scores(truth, rows, self.task.labels, thresholds)

    def trainable_state(self) -> dict[str, Any]:
        """A copy of the weights being trained."""
        return {name: p.detach().clone() for name, p in self.model.named_parameters() if p.requires_grad}

    def save(self, checkpoint: Path, fingerprint: str, progress: _Progress) -> None:
        """Write the checkpoint ``resume`` continues from."""
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        self.task.torch.save(
            {
                "fingerprint": fingerprint,
                "epoch": progress.epoch,
                "step": progress.step,
                "samples": progress.samples,
                "seconds": progress.seconds,
                "trainable": self.trainable_state(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "history": progress.history,
                "best": progress.best,
            },
            checkpoint,
        )

    def restore(self, checkpoint: Path, fingerprint: str) -> _Progress:
        """Load a checkpoint of this very run (:class:`ConfigurationError` for another's)."""
        saved = self.task.torch.load(checkpoint, map_location=self.task.device, weights_only=False)
        if saved["fingerprint"] != fingerprint:
            raise ConfigurationError(
                f"{checkpoint} is from another run (data, labels or options differ); drop --resume"
            )
        self.model.load_state_dict(saved["trainable"], strict=False)
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        return _Progress(
            saved["epoch"], saved["step"], saved["samples"], saved["seconds"], saved["history"], saved["best"]
        )


def checked_items(
    items: Sequence[LabelledItem], labels: Sequence[str]
) -> tuple[list[tuple[str, str]] | list[tuple[str, tuple[str, ...]]], bool]:
    """The items as the trainer takes them, and whether they are multi-label: (text, label)
    pairs, or (text, labels) pairs, each text's labels once each in ``labels`` order.
    :class:`DataFileError` names labels outside ``labels``; :class:`ConfigurationError` says
    when some items have one label and others a list."""
    multi_label = is_multi_label(items)
    given = {x for _, y in items for x in ([y] if isinstance(y, str) else y)}
    unknown = sorted(given - set(labels))
    if unknown:
        raise DataFileError(f"items have labels that the label set lacks: {unknown}")
    if not multi_label:
        return [(t, y) for t, y in items if isinstance(y, str)], False
    order = {label: k for k, label in enumerate(labels)}
    return [(t, tuple(sorted(set(y), key=order.__getitem__))) for t, y in items], True


def learning_rate_factor(steps_per_epoch: int, epoch_cap: int) -> Callable[[int], float]:
    """The schedule, as a factor of the learning rate at each step: a linear warm-up, then a
    linear decay that reaches zero at the epoch cap. It follows the cap, not ``max_steps``: a
    run stopped early and resumed trains exactly as one that was never stopped."""
    total = steps_per_epoch * epoch_cap
    warmup = max(1, steps_per_epoch * min(epoch_cap, _WARMUP_EPOCHS) // _WARMUP_SHARE)
    return lambda step: min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup)))


def converged(best_epoch: int, last_epoch: int, patience: int, *, validated: bool, finished: bool) -> bool | None:
    """Whether validation had stopped improving when the run ended: True when early stopping
    ended it (``patience`` epochs without a better score); False when the epoch cap ended it
    first, its best epoch the last one or within ``patience`` of it (it may still have been
    learning); None where nothing says, without validation items or for a run that
    ``max_steps`` stopped."""
    if not validated or not finished or not last_epoch:
        return None
    return last_epoch - best_epoch >= patience


def not_converged_warning(best_epoch: int, last_epoch: int, patience: int) -> str:
    """What the log says of a run the epoch cap ended before early stopping could."""
    advice = "more epochs or a higher learning rate may help"
    if best_epoch == last_epoch:
        return (
            f"warning: the best epoch was the last one (epoch {last_epoch}, the epoch cap): validation was "
            f"still improving, so the run had not converged; {advice}"
        )
    return (
        f"warning: the epoch cap ended the run at epoch {last_epoch}, {last_epoch - best_epoch} after its best "
        f"(epoch {best_epoch}), before {patience} epochs without improvement (the patience) would have stopped "
        f"it: the run may not have converged; {advice}"
    )


@contextlib.contextmanager
def _reproducibly(torch: Any, seed: int, device: Any) -> Iterator[None]:
    """Seed every generator a run may draw from (torch's on every device, for the new weights;
    Python's and numpy's, for any library that draws from them) and, on CPU, turn torch's
    deterministic algorithms on, as they were again afterwards."""
    import numpy

    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    if device.type == "cpu":  # on CUDA they would slow training and need cuBLAS set up before it starts
        torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _start(items: Sequence[LabelledItem], labels: Sequence[str], options: TrainOptions) -> _Run:
    """The task, the model to train, its optimiser and schedule, and the encoded split."""
    checked, multi_label = checked_items(items, labels)
    train_items, val_items = split(checked, options.val_fraction, options.seed)
    if not train_items:
        raise DataFileError("no training items")
    if not val_items and options.epochs is None:
        raise ConfigurationError(
            "no validation items (the split needs a label with two items or more, and a val_fraction above 0): "
            "nothing would say when to stop, so give the number of epochs (--epochs)"
        )
    import torch

    task = make_task(options, labels, load_tokenizer(options.base_model), multi_label)
    index = {label: i for i, label in enumerate(labels)}
    encoded = task.encode([t for t, _ in train_items])
    targets = [index[y] if isinstance(y, str) else tuple(index[x] for x in y) for _, y in train_items]
    model = task.load(options.base_model).to(task.device)
    task.prepare(model, encoded)
    trainable = [p for p in model.parameters() if p.requires_grad]
    # The fused AdamW: one kernel over each tensor instead of a dozen passes. Full fine-tuning
    # updates the whole embedding matrix (most of a small model's weights) at every step, and
    # the step is then a large part of the run's time.
    fused = task.device.type in ("cpu", "cuda")
    optimizer = torch.optim.AdamW(trainable, lr=options.lr, weight_decay=0.0, fused=fused or None)
    steps_per_epoch = math.ceil(len(train_items) / options.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, learning_rate_factor(steps_per_epoch, options.epoch_cap))
    return _Run(task, model, optimizer, scheduler, encoded, targets, val_items)


def train(
    items: Sequence[LabelledItem],
    labels: Sequence[str],
    options: TrainOptions,
    *,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Fine-tune ``options.base_model`` on ``items`` over ``labels`` (in class order) and export
    to ``options.out``: (text, label) items train a single-label classifier, (text, labels)
    items (a list of labels each, maybe empty) a multi-label one. Returns the training report
    (also written as ``training.json``); its ``converged`` is False when the epoch cap ended
    the run before early stopping could (the best epoch the last one, say), which ``log`` also
    warns of. Raises :class:`ConfigurationError` for options that
    cannot work (checked before any model loads), for items that mix the two kinds, for a
    checkpoint of another run and for no validation items without ``epochs``,
    :class:`DataFileError` for no training items and for labels outside ``labels``,
    :class:`MissingDependencyError` without the ``train`` extra."""
    options.check(is_multi_label(items))
    require_extra("train", *_TRAIN_MODULES, what="training")
    import torch

    with _reproducibly(torch, options.seed, make_device(options)):
        return _train(items, labels, options, log)


def _train(
    items: Sequence[LabelledItem], labels: Sequence[str], options: TrainOptions, log: Callable[[str], None]
) -> dict[str, Any]:
    """:func:`train`, its generators seeded."""
    run = _start(items, labels, options)
    out = Path(options.out)
    checkpoint = out / _CHECKPOINT
    fingerprint = _fingerprint(options, labels, items)
    progress = _Progress()
    if options.resume and checkpoint.is_file():
        progress = run.restore(checkpoint, fingerprint)
        log(f"resumed from {checkpoint} after epoch {progress.epoch}")
    elif options.resume:
        log(f"no checkpoint at {checkpoint}: starting from the base model")
    stopped = False  # by max_steps: the checkpoint stays for resume
    for number in range(progress.epoch + 1, options.epoch_cap + 1):
        if progress.stale >= options.patience:
            break
        if options.max_steps is not None and progress.step >= options.max_steps:
            stopped = True
            break
        loss, stopped = run.epoch(options, progress, number)
        scores = run.validation_scores()
        record: dict[str, Any] = {"epoch": number, "step": progress.step, "loss": loss, **scores}
        progress.history.append(record)
        scored = ", validation " + " ".join(f"{_SCORE_NAMES[k]} {v:.4f}" for k, v in scores.items()) if scores else ""
        log(f"epoch {number}: loss {record['loss']:.4f}{scored}")
        if stopped:  # a partial epoch: not scored as the best, not saved; resume repeats it
            break
        if record.get("macro_f1", 0.0) > progress.best["macro_f1"] or not run.val_items:
            progress.best = {"macro_f1": record.get("macro_f1", 0.0), "epoch": number, "state": run.trainable_state()}
        progress.epoch = number
        run.save(checkpoint, fingerprint, progress)
    if progress.best["state"] is not None:
        run.model.load_state_dict(progress.best["state"], strict=False)
    tuned = run.tuned_thresholds()
    report = _report(run, progress, options, labels, finished=not stopped, tuned=tuned)
    run.task.finish(run.model)
    export(run.task, run.model, options, labels, tuned[0] if tuned else None)
    if not stopped:  # finished: nothing left to resume
        shutil.rmtree(checkpoint.parent, ignore_errors=True)
    (out / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    if report["converged"] is False:
        log(not_converged_warning(progress.best["epoch"], progress.epoch, options.patience))
    return report


def _report(
    run: _Run,
    progress: _Progress,
    options: TrainOptions,
    labels: Sequence[str],
    *,
    finished: bool,
    tuned: tuple[dict[str, float], dict[str, float]] | None,
) -> dict[str, Any]:
    """``training.json``: what was trained, how it went epoch by epoch, and how fast; for
    multi-label data, the tuned thresholds and the validation scores at them."""
    seconds = progress.seconds
    multi: dict[str, Any] = {}
    if run.task.multi_label:
        multi["thresholds"], multi["validation_at_thresholds"] = tuned or (None, None)
    return {
        "method": options.method,
        "base_model": options.base_model,
        "labels": list(labels),
        "multi_label": run.task.multi_label,
        **multi,
        "train_items": len(run.encoded),
        "validation_items": len(run.val_items),
        "best_epoch": progress.best["epoch"],
        "epoch_cap": options.epoch_cap,
        "converged": converged(
            progress.best["epoch"], progress.epoch, options.patience, validated=bool(run.val_items), finished=finished
        ),
        "validation_macro_f1": progress.best["macro_f1"] if run.val_items else None,
        "history": progress.history,
        "steps": progress.step,
        "train_seconds": round(seconds, 2),
        "train_samples_per_s": round(progress.samples / seconds, 1) if seconds else None,
        "device": str(run.task.device),
        #: what a CPU run's result depends on beside the options (see the module's docstring)
        "threads": run.task.torch.get_num_threads(),
        "options": {k: v for k, v in dataclasses.asdict(options).items() if k != "progress"},
        "finished": finished,
    }


def _fingerprint(options: TrainOptions, labels: Sequence[str], items: Sequence[LabelledItem]) -> str:
    """What makes two runs the same run, so that ``resume`` takes only its own checkpoint."""
    kept = {k: v for k, v in dataclasses.asdict(options).items() if k not in _RESUMABLE_CHANGES}
    blob = json.dumps({"options": kept, "labels": list(labels), "items": list(items)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()
