#!/usr/bin/env bash
# Scale measurements on a GPU host where vLLM imports, from the repository's root (e.g.
# PYTHONPATH=/tmp/site:$PWD, no console scripts, so qwen-fast runs as
# `python3 -m langchain_qwen_fast.cli`).
#   bash server/gpu_scale.sh [benchmarks.scale flags...]
# builds the random-weight Qwen3-0.6B-shaped model (TOK=DIR: copy its tokenizer) and runs
# `python3 -m benchmarks.scale` on it with the gpu profile (the layouts, then vLLM's own ceiling
# for each: see benchmarks/README.md), e.g.
#   bash server/gpu_scale.sh --gpus 0,1 --servers-per-gpu 4 --mps --subsets 1,2,4,8 --sweep-subsets 1,4,8
# HEAD=1: a Qwen3ForSequenceClassification head (4 classes) instead, with --mode head.
# Results: ${OUT:-out}/gpu-scale${TAG:-}/scale.json.
set -euo pipefail
out=${OUT:-out}/gpu-scale${TAG:-}
mkdir -p "$out"
model=/tmp/qwen3-0.6b-random${HEAD:+-head}
qwen_fast=(python3 -m langchain_qwen_fast.cli)
[ -f "$model/config.json" ] || "${qwen_fast[@]}" build-test-model --size 0.6b --out "$model" \
  ${TOK:+--tokenizer-from "$TOK"} ${HEAD:+--num-labels 4}
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
python3 -m benchmarks.scale --model "$model" --profile gpu --out "$out" ${HEAD:+--mode head} \
  --label "$(nvidia-smi -L | wc -l) x $gpu, vLLM $(python3 -c 'import vllm; print(vllm.__version__)')" "$@"
