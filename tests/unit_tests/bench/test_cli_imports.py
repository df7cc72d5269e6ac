"""``qwen-fast bench``'s module imports nothing heavy: its parser is built (and its ``--help``
answered) without LangChain, vLLM, plotting or the bench extra."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("langchain_core", "langchain_openai", "openai", "vllm", "matplotlib", "tqdm", "psutil", "aiohttp", "torch")


def test_building_the_bench_parser_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from langchain_qwen_fast.cli.main import build_parser\n"
        "build_parser(['bench'])\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
