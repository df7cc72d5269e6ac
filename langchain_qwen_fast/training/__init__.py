"""``qwen-fast train``: fine-tune Qwen3 for a label set (a linear head, or SFT on the
classifier's own prompt) into a directory vLLM serves as it is.

    from langchain_qwen_fast.training import LabelledFile, TrainOptions, train

    items, labels = LabelledFile("data.csv").read()
    report = train(items, labels, TrainOptions(method="head", base_model="Qwen/Qwen3-0.6B", out="models/news"))

Modules: ``data`` (labelled CSV/JSONL files, read the same way by ``qwen-fast eval``; label
lists for multi-label training), ``thresholds`` (per-label thresholds tuned for F1),
``options`` (:class:`TrainOptions`), ``tasks`` (what each method trains and how it scores),
``trainer`` (the loop, checkpoints, early stopping), ``export`` (what the output directory
holds) and ``news_model`` (the examples' offline stand-in). Training needs the ``train`` extra;
reading data files needs nothing beyond the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_qwen_fast.training.data import LabelledFile, LabelLists
from langchain_qwen_fast.training.options import TrainOptions

if TYPE_CHECKING:
    from langchain_qwen_fast.training.news_model import build_news_model
    from langchain_qwen_fast.training.trainer import train

__all__ = ["LabelLists", "LabelledFile", "TrainOptions", "build_news_model", "train"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the trainer reads the classifier's prompt code, which imports
    # LangChain, and `qwen-fast train --help` needs only the options.
    if name == "train":
        from langchain_qwen_fast.training.trainer import train

        return train
    if name == "build_news_model":
        from langchain_qwen_fast.training.news_model import build_news_model

        return build_news_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
