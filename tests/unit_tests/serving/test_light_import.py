"""``import langchain_qwen_fast.serving`` stays light: the launcher, groups, MPS and the router are
standard library only (vLLM runs in a child process); the HTTP service is a package of its own,
whose options load without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_importing_serving_loads_no_langchain_fastapi_or_vllm() -> None:
    probe = "import json, sys, langchain_qwen_fast.serving; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    roots = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert roots.isdisjoint({"langchain_core", "langchain_openai", "fastapi", "uvicorn", "vllm", "torch"})
    loaded = json.loads(done.stdout)
    assert [m for m in loaded if m.startswith("langchain_qwen_fast.serving.service")] == []


def test_the_service_options_load_nothing_of_the_service_itself() -> None:
    """``qwen-fast api --help`` and the service's options need no LangChain, FastAPI or vLLM."""
    probe = "import json, sys, langchain_qwen_fast.serving.service; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    roots = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert roots.isdisjoint({"langchain_core", "langchain_openai", "fastapi", "uvicorn", "prometheus_client", "vllm"})
