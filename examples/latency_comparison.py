"""The latency comparison: direct QwenClassifier against ChatOpenAI, LCEL and LLMChain.

    python examples/latency_comparison.py [--base-url URL] [--items 512] [--invoke-items 200]

A thin front for ``python -m langchain_qwen_fast.benchmark`` (all its options work).
"""

from __future__ import annotations

import sys

from _local import ROOT, TINY_MODEL

from langchain_qwen_fast.benchmark import main
from server.test_model import build_test_model

if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--base-url" not in argv and "--start-server" not in argv:
        argv += ["--start-server", str(build_test_model(TINY_MODEL, "tiny"))]
    main([*argv, "--out", str(ROOT / "out" / "benchmark")] if "--out" not in argv else argv)
