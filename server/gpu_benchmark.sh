#!/usr/bin/env bash
# One command on a GPU host (vLLM importable, e.g. PYTHONPATH=/tmp/site:$PWD on the lent H200):
# builds the random-weight Qwen3-0.6B-shaped model, starts the server with the GPU profile,
# runs the side-by-side comparison with GPU sampling and the batch-size sweep, then vLLM's
# offline ceiling on the same prompts. Results go to ${OUT:-out}/gpu-bench.
#   usage: bash server/gpu_benchmark.sh [TOKENIZER_DIR]
set -euo pipefail
out=${OUT:-out}/gpu-bench
mkdir -p "$out"
tok=${1:-}
model=/tmp/qwen3-0.6b-random
python3 -m server.test_model --size 0.6b --out "$model" ${tok:+--tokenizer-from "$tok"}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -m langchain_qwen_fast.benchmark --start-server "$model" --profile gpu \
  --items "${ITEMS:-8192}" --invoke-items "${INVOKE_ITEMS:-300}" --gpu-sample --sweep \
  ${OFFLINE:+--offline-ceiling} ${SERVER_ARGS:+$SERVER_ARGS} --out "$out" \
  --label "$(head -1 "$out/gpu.txt" | cut -d, -f1), vLLM $(python3 -c 'import vllm; print(vllm.__version__)'), random Qwen3-0.6B shape"
