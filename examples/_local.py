"""Shared by the examples: use the server given by --base-url, or start a local one."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

from langchain_qwen_fast.errors import MissingDependencyError
from langchain_qwen_fast.serving import DEFAULT_MODEL, VLLMServer, hub_model_available
from langchain_qwen_fast.testing.smollm2 import build_smollm2
from langchain_qwen_fast.testing.tiny_model import build_test_model
from langchain_qwen_fast.training import build_news_model

ROOT = Path(__file__).resolve().parent.parent
TINY_MODEL = ROOT / ".models" / "qwen3-tiny"
SMOLLM2_MODEL = ROOT / ".models" / "smollm2-135m"
NEWS_MODEL = ROOT / ".models" / "smollm2-news"
TINY_NEWS_MODEL = ROOT / ".models" / "qwen3-tiny-news"


def add_server_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", help="a running vLLM server (…/v1); default: start one here")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model for the local server")
    parser.add_argument("--served-model-name", default="qwen3")


def stand_in(model: str) -> Path:
    """The offline stand-in for ``model``, built once, then cached: SmolLM2-135M-Instruct (a real
    pretrained model from the package index) fine-tuned on generated headlines; the tiny
    random model fine-tuned alike where the test-model extra is not installed."""
    try:
        base, out, name = build_smollm2(SMOLLM2_MODEL), NEWS_MODEL, "SmolLM2-135M-Instruct (a real pretrained model)"
    except MissingDependencyError as exc:
        print(f"SmolLM2-135M cannot be built here ({exc}); falling back to the tiny random test model.")
        base, out, name = build_test_model(TINY_MODEL, "tiny"), TINY_NEWS_MODEL, "the tiny random test model"
    print(
        f"The model hub cannot be reached and {model} is not cached here. Serving a stand-in instead: "
        f"{name}, fine-tuned here with `qwen-fast train --method sft` on generated news headlines "
        f"(built once, then cached; a few minutes on a laptop's CPU). It is not {model}."
    )
    built = build_news_model(out, base, log=lambda line: None)
    print(
        f"Stand-in: accuracy {built['natural_accuracy']:.3f} on {built['natural_items']} natural headlines "
        f"written by hand apart from the generator, {built['held_out_accuracy']:.3f} on {built['held_out_items']} "
        f"generated ones (built in {built['seconds']:.0f} s)."
    )
    return out


@contextlib.contextmanager
def server_url(args: argparse.Namespace) -> Iterator[str]:
    """Yield a base URL: the given server's, or a local server's started for this run."""
    if args.base_url:
        yield args.base_url
        return
    model = args.model
    if not hub_model_available(model):
        model = str(stand_in(model))
    server = VLLMServer(model, served_model_name=args.served_model_name)
    print(f"Starting vLLM ({server.profile.name} profile) for {model}; log: {server.log_path}")
    with server:
        print(f"Server ready in {server.startup_seconds:.0f} s at {server.base_url}")
        yield server.base_url
