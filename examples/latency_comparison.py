"""The latency comparison: direct QwenClassifier against ChatOpenAI, LCEL and LLMChain.

    python examples/latency_comparison.py [--base-url URL] [--items 512] [--invoke-items 200]

A thin front for ``qwen-fast bench`` (all its options work) that starts a local server with
the tiny test model when no server is given.
"""

from __future__ import annotations

import sys

from _local import ROOT, TINY_MODEL

from langchain_qwen_fast.cli import main
from langchain_qwen_fast.testing.tiny_model import build_test_model

if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--base-url" not in argv and "--start-server" not in argv:
        argv += ["--start-server", str(build_test_model(TINY_MODEL, "tiny"))]
    sys.exit(main(["bench", *argv, *([] if "--out" in argv else ["--out", str(ROOT / "out" / "benchmark")])]))
