#!/usr/bin/env bash
# The accuracy loop's GPU figures, on a GPU host with vLLM, transformers and peft importable
# (e.g. PYTHONPATH=/tmp/extra:/tmp/site:$PWD with them there, run from the repository's root;
# the qwen-fast command runs as `python3 -m langchain_qwen_fast.cli` there, the flag comparison
# as `python3 -m benchmarks.flags`). Builds the random Qwen3-0.6B-shaped model, then:
#   TRAIN=1      qwen-fast train at the 0.6B shape (bf16 autocast): a head (pooling runner), a
#                head for the generate runner (--export generate) and SFT (LoRA); samples/s
#                over TRAIN_STEPS optimiser steps of BATCH texts of about 100 tokens each;
#   GENERATE=1   the zero-shot generate path on the base model (gpu profile): p50, throughput;
#   HEAD=FILE    the trained head (pooling runner) under each flag set in FILE (benchmarks.flags
#                --flags format; HEAD=1: the gpu profile): p50, throughput, stage times;
#   HEAD_GENERATE=1  the head trained for the generate runner, gpu profile, measured alike.
# Usage: TRAIN=1 GENERATE=1 bash server/gpu_accuracy_loop.sh [TOKENIZER_DIR]
#        HEAD=server/gpu_head_flags.json bash server/gpu_accuracy_loop.sh [TOKENIZER_DIR]
# Results go to ${OUT:-out}/gpu-accuracy.
set -euo pipefail
out=${OUT:-out}/gpu-accuracy
mkdir -p "$out"
tok=${1:-}
model=/tmp/qwen3-0.6b-random
qwen_fast=(python3 -m langchain_qwen_fast.cli)
[ -f "$model/config.json" ] || "${qwen_fast[@]}" build-test-model --size 0.6b --out "$model" ${tok:+--tokenizer-from "$tok"}
label="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), vLLM $(python3 -c 'import vllm; print(vllm.__version__)')"
bench=(--profile gpu --items "${ITEMS:-8192}" --invoke-items "${INVOKE_ITEMS:-200}" --label "$label" --gpu-sample)
if [ -n "${TRAIN:-}" ]; then
  # AG News-length texts: a generated headline (the label's words) and a ~60-token body.
  python3 -c "
from langchain_qwen_fast.training.data import write_labelled
from langchain_qwen_fast.testing.samples import labelled_news, news_items
items = labelled_news(4096, 0)
write_labelled('$out/train.csv', [(f'{h}. {b}', y) for (h, y), b in zip(items, news_items(len(items)))])"
  for run in "head merged" "head-generate generate" "sft merged"; do
    set -- $run
    method=${1%-generate}
    "${qwen_fast[@]}" train "$out/train.csv" --base-model "$model" --method "$method" --export "$2" \
      --out "/tmp/trained-$1" --labels World Sports Business Sci/Tech --val-fraction 0 --epochs 1 \
      --max-steps "${TRAIN_STEPS:-150}" --batch-size "${BATCH:-16}" --no-progress 2>&1 | tail -2 | tee "$out/train-$1.log"
    cp "/tmp/trained-$1/training.json" "$out/training-$1.json"
  done
fi
gpu_flags="$out/gpu-profile-flags.json"
echo '{"gpu profile, stats on": {"profile": "gpu", "drop": ["--disable-log-stats"]}}' > "$gpu_flags"
if [ -n "${GENERATE:-}" ]; then
  python3 -m benchmarks.flags --start-server "$model" --tokenizer "$model" "${bench[@]}" \
    --flags "$gpu_flags" --out "$out/generate"
fi
if [ -n "${HEAD:-}" ]; then
  [ "$HEAD" = 1 ] && HEAD=$gpu_flags
  python3 -m benchmarks.flags --start-server /tmp/trained-head --mode head --tokenizer /tmp/trained-head \
    "${bench[@]}" --flags "$HEAD" --out "$out/head"
fi
if [ -n "${HEAD_GENERATE:-}" ]; then
  python3 -m benchmarks.flags --start-server /tmp/trained-head-generate --tokenizer /tmp/trained-head-generate \
    "${bench[@]}" --flags "$gpu_flags" --out "$out/head-generate"
fi
