"""The bench commands' modules import nothing heavy: their parsers are built (and their
``--help`` answered) without LangChain, vLLM, plotting or the bench extra."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("langchain_core", "langchain_openai", "openai", "vllm", "matplotlib", "tqdm", "psutil", "aiohttp", "torch")


def test_building_the_bench_parsers_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from langchain_qwen_fast.cli.main import build_parser\n"
        "build_parser(['bench', 'bench-scale'])\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
