#!/usr/bin/env bash
# One command on a GPU host, from the repository's root (vLLM importable, e.g.
# PYTHONPATH=/tmp/site:$PWD with vLLM in /tmp/site; no console scripts there, so the qwen-fast
# command runs as `python3 -m langchain_qwen_fast.cli` and the lab's tools as
# `python3 -m benchmarks.TOOL`, see benchmarks/README.md).
# Builds the random-weight Qwen3-0.6B-shaped model, then either
#   bash server/gpu_benchmark.sh [TOKENIZER_DIR]
#     the side-by-side comparison (benchmarks.compare: qwen-fast bench's paths and the lab's
#     parts): the server with the GPU profile, every path (token-id paths included) with GPU
#     sampling, then REPLICAS (default 2) servers sharing the GPU and the batch-size sweep over
#     them; OFFLINE=1 adds vLLM's offline engine, CAPABILITIES=1 the multi-label / few-shot /
#     selector / 40-label rows, SERVICE=1 the HTTP service rows, QUANT=fp8 a quantised server
#     beside the bf16 one, TRANSFORMERS=1 the transformers baseline, SWEEP=0 skips the sweep;
#   FLAGS=server/gpu_flags.json bash server/gpu_benchmark.sh [TOKENIZER_DIR]
#     one server per configuration in FLAGS (benchmarks.flags), each measured briefly (latency,
#     throughput, GPU memory, vLLM's own stage times when it keeps stats); OFFLINE=1 adds
#     vLLM's offline engine.
# Results go to ${OUT:-out}/gpu-bench.
set -euo pipefail
out=${OUT:-out}/gpu-bench
mkdir -p "$out"
tok=${1:-}
model=/tmp/qwen3-0.6b-random
qwen_fast=(python3 -m langchain_qwen_fast.cli)
[ -f "$model/config.json" ] || "${qwen_fast[@]}" build-test-model --size 0.6b --out "$model" ${tok:+--tokenizer-from "$tok"}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
label="$(head -1 "$out/gpu.txt" | cut -d, -f1), vLLM $(python3 -c 'import vllm; print(vllm.__version__)'), random Qwen3-0.6B shape"
common=(--start-server "$model" --profile gpu --tokenizer "$model" --gpu-sample --out "$out" --label "$label"
        --items "${ITEMS:-8192}" --invoke-items "${INVOKE_ITEMS:-200}" ${OFFLINE:+--offline-ceiling})
if [ -n "${FLAGS:-}" ]; then
  python3 -m benchmarks.flags "${common[@]}" --flags "$FLAGS"
else
  sweep=(--sweep)
  [ "${SWEEP:-1}" = 0 ] && sweep=()
  python3 -m benchmarks.compare "${common[@]}" --chat-items "${CHAT_ITEMS:-2048}" \
    --replicas "${REPLICAS:-2}" "${sweep[@]}" ${CAPABILITIES:+--capabilities} ${SERVICE:+--service} \
    ${QUANT:+--compare-quantization "$QUANT"} ${TRANSFORMERS:+--transformers-baseline} ${SERVER_ARGS:+$SERVER_ARGS}
fi
