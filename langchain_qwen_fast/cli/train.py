"""``qwen-fast train``: fine-tune Qwen3 on a labelled file, into a directory vLLM serves as it is."""

from __future__ import annotations

import argparse
import sys

from langchain_qwen_fast._core.prompting import LAYOUTS
from langchain_qwen_fast.cli.options import add_labelled_file_arguments, defaults, options_from
from langchain_qwen_fast.training import LabelledFile, TrainOptions
from langchain_qwen_fast.training.data import LabelLists, is_multi_label
from langchain_qwen_fast.training.options import MAX_EPOCHS

DESCRIPTION = """\
Fine-tune Qwen3 for a label set, into a directory vLLM serves as it is.

    qwen-fast train data.csv --base-model Qwen/Qwen3-0.6B --method head --out models/news-head
    qwen-fast train data.csv --base-model Qwen/Qwen3-0.6B --method sft --out models/news-sft
    qwen-fast train data.csv --base-model Qwen/Qwen3-0.6B --method sft --export adapter --out adapters/news
    qwen-fast train data.csv --base-model Qwen/Qwen3-0.6B --method sft --prompt-layout compact --out models/news

Methods:

* head: Qwen3ForSequenceClassification, a new linear head over the label set on the last
  token of the bare text, exactly what vLLM's pooling runner scores through /classify
  (QwenClassifier(mode="head")). Full fine-tuning by default; --lora trains LoRA adapters (and
  the head) and merges them at export.
* sft: LoRA on the classifier's own prompt (instructions, labels, the text, thinking off) with
  the label's answer token(s) as the target: at inference the served model sees exactly what
  it was trained on, and the classifier reads the same tokens' probabilities. Exported as
  merged weights (serve the directory) or, with --export adapter, a LoRA adapter for
  qwen-fast serve --lora name=DIR (several adapters on one server).

The data is the same CSV/JSONL qwen-fast eval reads (label maps included; a file whose labels
are all numbers needs --label-map to name them, or --labels to keep them). A stratified
validation split is scored (accuracy, macro-F1) after every epoch; training stops once
macro-F1 has not improved for --patience epochs, or at the --epochs cap, and the best epoch is
exported. When the cap ends the run first (the best epoch is the last one, or too near it),
validation may still have been improving: the run had not converged, and the command says so
(more epochs or a higher learning rate may help). Every
epoch writes a checkpoint; --resume continues from it. bf16 autocast on GPU, fp32 on CPU.

Multi-label data: a list of labels per row, a JSON list in JSONL (detected) or, with
--multi-label, a CSV cell of labels joined with --label-separator. A head then has a sigmoid
per label (binary cross-entropy; vLLM's /classify applies the sigmoid); SFT trains the
classifier's multi-label prompt, a yes/no question per label, answered yes or no. Epochs are
scored by micro- and macro-F1 at threshold 0.5; each label's threshold is then tuned on the
validation split (best F1) and saved with multi_label=True in classifier.json.

Prompt layouts (--prompt-layout): chat, Qwen3's chat format, which an untrained chat model
understands; compact, the fixed part (instructions, labels) padded to whole prefix-cache blocks,
then the bare text and one special token (multi-label: each label's question), fewer tokens
computed a text. A model trained in a layout is served in it: the layout is saved with the
classifier. A head served through /classify reads the bare text and has no layout (compact is
refused there; --export generate trains the head on the classifier's prompt in either).

The output directory also holds classifier.json (labels in class order, mode, prompt layout)
and training.json (options, per-epoch history, samples/s), so
QwenClassifier.load(DIR, base_url=..., model=...) points at the served model with no hand
mapping. Needs the 'train' extra (transformers, peft, accelerate, scikit-learn, tqdm).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``train``'s options: one per field of :class:`LabelledFile`, :class:`LabelLists` and
    :class:`TrainOptions` (but ``label_descriptions``), whose defaults they show; and ``--labels``."""
    p.add_argument("--base-model", required=True, help="model directory (or hub id) to start from")
    p.add_argument("--method", choices=["head", "sft"], required=True)
    p.add_argument("--out", required=True, help="output directory (served by vLLM as it is)")
    p.add_argument("--labels", nargs="+", help="label set in class order (default: the file's, sorted)")
    add_labelled_file_arguments(p, "labelled CSV or JSONL (the layouts qwen-fast eval reads)")
    p.add_argument(
        "--multi-label",
        action=argparse.BooleanOptionalAction,
        help="a list of labels per row (default: yes for a JSONL file whose labels are JSON lists)",
    )
    p.add_argument("--label-separator", help="what joins a CSV cell's labels (default: %(default)s)")
    p.add_argument(
        "--epochs",
        type=int,
        help=f"the most epochs (default: {MAX_EPOCHS}, with validation to stop early; without it, give this)",
    )
    p.add_argument("--batch-size", type=int, help="default: %(default)s")
    p.add_argument("--learning-rate", type=float, help="default: 3e-5 full fine-tuning, 2e-4 LoRA")
    p.add_argument(
        "--lora", action=argparse.BooleanOptionalAction, help="train LoRA adapters (default: sft yes, head no)"
    )
    p.add_argument("--lora-rank", type=int, help="default: %(default)s")
    p.add_argument("--lora-alpha", type=int, help="default: %(default)s")
    p.add_argument("--val-fraction", type=float, help="validation share (default: %(default)s)")
    p.add_argument(
        "--patience",
        type=int,
        help="epochs without a better validation macro-F1 before stopping (default: %(default)s)",
    )
    p.add_argument(
        "--seed",
        type=int,
        help="seed of the validation split, each epoch's order and the new weights: the same seed, data and options "
        "give the same model on one device and thread count (OMP_NUM_THREADS) (default: %(default)s)",
    )
    p.add_argument("--max-text-tokens", type=int, help="tokens kept per text (default: %(default)s)")
    p.add_argument("--max-steps", type=int, help="stop after this many optimiser steps in all")
    p.add_argument(
        "--export",
        choices=["merged", "adapter", "generate"],
        help="merged weights; a LoRA adapter (sft); or generate (head: served by the generate runner)",
    )
    p.add_argument("--instructions", help="sft: the classifier's instructions (default: its default)")
    p.add_argument(
        "--prompt-layout",
        choices=list(LAYOUTS),
        help="the classifier's prompt the model is trained on and served with (sft, and head with --export "
        "generate): chat, Qwen3's chat format; compact, fewer tokens a text, for a model trained in it "
        "(default: %(default)s)",
    )
    p.add_argument("--served-model-name", help="the model name in classifier.json (default: qwen3, or the adapter's)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.pt")
    p.add_argument("--device", help="cpu or cuda (default: cuda where there is one)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.set_defaults(**defaults(TrainOptions), **defaults(LabelLists))


def run(args: argparse.Namespace) -> int:
    """Read the file, train, and say how it went; a bad file or options that cannot work are
    a usage error (exit code 2), as a bad flag is."""
    from langchain_qwen_fast.errors import ConfigurationError, DataFileError
    from langchain_qwen_fast.training import train

    options = options_from(TrainOptions, args)
    try:
        items, labels = options_from(LabelLists, args).read(options_from(LabelledFile, args), args.labels)
        kind = "multi-label " if is_multi_label(items) else ""
        layout = f", {options.prompt_layout} prompt layout" if options.reads_prompt else ""
        print(f"training {options.method} on {len(items)} {kind}items, labels {labels}{layout}", flush=True)
        report = train(items, labels, options)
    except (ConfigurationError, DataFileError) as exc:
        print(f"qwen-fast train: {exc}", file=sys.stderr)
        return 2
    epochs = len(report["history"])
    done = (
        f"best epoch {report['best_epoch']} of {epochs}: validation macro-F1 {report['validation_macro_f1']}"
        if report["finished"]
        else f"stopped after {report['steps']} steps (--max-steps; --resume continues)"
    )
    if report.get("thresholds"):
        at = report["validation_at_thresholds"]
        done += f"; thresholds {report['thresholds']} (validation micro-F1 {at['micro_f1']:.4f} at them)"
    print(f"{done}; {report['train_samples_per_s']} samples/s on {report['device']}; wrote {options.out}")
    return 0
