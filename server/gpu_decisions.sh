#!/usr/bin/env bash
# The decision model's benchmark on a GPU host where vLLM imports, from the repository's root
# (e.g. PYTHONPATH=/tmp/site:$PWD, no console scripts, so qwen-fast runs as
# `python3 -m langchain_qwen_fast.cli`).
#   TOK=DIR bash server/gpu_decisions.sh [benchmarks.decisions flags...]
# builds the random-weight Qwen3-0.6B-shaped model (TOK=DIR: copy its tokenizer) and runs
# `python3 -m benchmarks.decisions` on it (one Choice over many states against
# QwenClassifier.abatch, eight Nouls over long states with vLLM's prefix-cache counters, the
# service through the openai SDK, each beside vLLM's own ceiling), e.g.
#   TOK=DIR bash server/gpu_decisions.sh --gpus 0 --servers-per-gpu 6 --mps \
#     --server-arg=--quantization --server-arg=fp8 --states 49152 --long-states 2048
# Results: ${OUT:-out}/gpu-decisions${TAG:-}/decisions.json.
set -euo pipefail
out=${OUT:-out}/gpu-decisions${TAG:-}
mkdir -p "$out"
model=/tmp/qwen3-0.6b-random
qwen_fast=(python3 -m langchain_qwen_fast.cli)
[ -f "$model/config.json" ] || "${qwen_fast[@]}" build-test-model --size 0.6b --out "$model" \
  ${TOK:+--tokenizer-from "$TOK"}
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
python3 -m benchmarks.decisions --model "$model" --tokenizer "$model" --out "$out" \
  --label "$(nvidia-smi -L | wc -l) x $gpu, vLLM $(python3 -c 'import vllm; print(vllm.__version__)')" "$@"
