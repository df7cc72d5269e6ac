"""Shared by the examples: use the server given by --base-url, or start a local one."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

from langchain_qwen_fast.serving import DEFAULT_MODEL, VLLMServer, hub_model_available
from langchain_qwen_fast.testing.tiny_model import build_test_model
from langchain_qwen_fast.training import build_news_model

ROOT = Path(__file__).resolve().parent.parent
TINY_MODEL = ROOT / ".models" / "qwen3-tiny"
NEWS_MODEL = ROOT / ".models" / "qwen3-tiny-news"


def add_server_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", help="a running vLLM server (…/v1); default: start one here")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model for the local server")
    parser.add_argument("--served-model-name", default="qwen3")


@contextlib.contextmanager
def server_url(args: argparse.Namespace) -> Iterator[str]:
    """Yield a base URL: the given server's, or a local server's started for this run."""
    if args.base_url:
        yield args.base_url
        return
    model = args.model
    if not hub_model_available(model):
        print(
            f"The model hub cannot be reached and {model} is not cached here. Serving a stand-in "
            "instead: the tiny Qwen3-shaped test model (real Qwen3 vocabulary and chat template), "
            "fine-tuned here with `qwen-fast train --method sft` on generated news headlines "
            "(built once, then cached). Its labels mean something for news headlines; it is not "
            "Qwen3-0.6B."
        )
        built = build_news_model(NEWS_MODEL, build_test_model(TINY_MODEL, "tiny"), log=lambda line: None)
        print(
            f"Stand-in: held-out accuracy {built['held_out_accuracy']:.3f} on {built['held_out_items']} generated "
            f"headlines (built in {built['seconds']:.0f} s)."
        )
        model = str(NEWS_MODEL)
    server = VLLMServer(model, served_model_name=args.served_model_name)
    print(f"Starting vLLM ({server.profile.name} profile) for {model}; log: {server.log_path}")
    with server:
        print(f"Server ready in {server.startup_seconds:.0f} s at {server.base_url}")
        yield server.base_url
