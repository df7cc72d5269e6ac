#!/usr/bin/env bash
# What users run on top of the engine, side by side with the engine's ceiling in one run, on a
# GPU host where vLLM imports (and Ray, for the Ray row), from the repository's root (e.g.
# PYTHONPATH=/tmp/site:/tmp/raysite:$PWD; no console scripts, so qwen-fast runs as
# `python3 -m langchain_qwen_fast.cli`):
#   TOK=DIR bash server/gpu_speed.sh
# builds the random-weight Qwen3-0.6B-shaped model (TOK=DIR: copy its tokenizer), then:
# 1. benchmarks.prompt_layouts (LAYOUTS=0 skips it): SERVERS (default 6) fp8 servers on GPU 0
#    under MPS, started without their tokenizers (--server-arg=--skip-tokenizer-init); each
#    text set and layout with `abatch` at
#    the client's defaults and over PROCESSES (default 4) client processes, LAYOUT_ROUNDS
#    (default 3) times; then vLLM's own ceiling, one engine in process per server;
# 2. as many fp8 servers under MPS with their tokenizers (`qwen-fast serve --urls-file`), and
#    over them, one after the other: the job beside `abatch` (benchmarks.classify_job),
#    clients sending lists to `qwen-fast api` with WORKERS (default 1,4) worker processes
#    beside `abatch` (benchmarks.service_lists; SERVICE=0 skips it), and the job on Ray beside
#    the job without it (benchmarks.ray_classify; RAY=0 skips it).
# ROWS (default 32768) texts a round. Results: ${OUT:-out}/gpu-speed/{prompt-layouts,
# classify-job,service-lists,ray}/.
set -euo pipefail
out=${OUT:-out}/gpu-speed
mkdir -p "$out"
model=/tmp/qwen3-0.6b-random
rows=${ROWS:-32768}
qwen_fast=(python3 -m langchain_qwen_fast.cli)
[ -f "$model/config.json" ] || "${qwen_fast[@]}" build-test-model --size 0.6b --out "$model" \
  ${TOK:+--tokenizer-from "$TOK"}
if [ "${LAYOUTS:-1}" != 0 ]; then
  python3 -m benchmarks.prompt_layouts --model "$model" --tokenizer "$model" --gpus 0 \
    --servers-per-gpu "${SERVERS:-6}" --mps --server-arg=--quantization --server-arg=fp8 \
    --server-arg=--skip-tokenizer-init --items "$rows" --client-processes "${PROCESSES:-4}" \
    --rounds "${LAYOUT_ROUNDS:-3}" --out "$out/prompt-layouts" 2>&1 | tee "$out/prompt-layouts.log"
fi
rm -f "$out/urls.txt"
"${qwen_fast[@]}" serve --model "$model" --profile gpu --quantization fp8 --gpus 0 \
  --servers-per-gpu "${SERVERS:-6}" --mps --port 0 --urls-file "$out/urls.txt" > "$out/serve.log" 2>&1 &
serve=$!
trap 'kill -INT "$serve" 2>/dev/null; wait "$serve" || true' EXIT
for _ in $(seq 600); do [ -s "$out/urls.txt" ] && break; kill -0 "$serve" || exit 1; sleep 1; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt"
python3 -m benchmarks.classify_job --base-url "$out/urls.txt" --rows "$rows" --rounds "${JOB_ROUNDS:-3}" \
  --out "$out/classify-job" 2>&1 | tee "$out/classify-job.log"
if [ "${SERVICE:-1}" != 0 ]; then
  python3 -m benchmarks.service_lists --base-url "$out/urls.txt" --model qwen3 --texts "$rows" \
    --workers "${WORKERS:-1,4}" --rounds "${SERVICE_ROUNDS:-3}" --out "$out/service-lists" ${SERVICE_ARGS:-} \
    2>&1 | tee "$out/service-lists.log"
fi
if [ "${RAY:-1}" != 0 ]; then
  python3 -m benchmarks.ray_classify --base-url "$out/urls.txt" --actors "${ACTORS:-4}" --rows "$((rows * 2))" \
    --rounds "${RAY_ROUNDS:-3}" --out "$out/ray" 2>&1 | tee "$out/ray.log"
fi
