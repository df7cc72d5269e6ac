#!/usr/bin/env bash
# `qwen-fast classify --ray` measured on a GPU host where vLLM and Ray import, from the
# repository's root (e.g. PYTHONPATH=/tmp/site:/tmp/raysite:$PWD; no console scripts).
#   WAY=http  bash server/gpu_ray.sh [benchmarks.ray_classify flags...]
#     SERVERS (default 4) fp8 servers on each GPU under MPS (`qwen-fast serve --urls-file`),
#     then the job on Ray over them beside the job without Ray, on the same rows and servers;
#   WAY=vllm ENGINES=N bash server/gpu_ray.sh [flags...]
#     N fp8 vLLM engines inside N Ray actors, each 1/N of the GPU (N > 1 under MPS).
# Builds the random-weight Qwen3-0.6B-shaped model first (TOK=DIR: copy its tokenizer).
# Results: ${OUT:-out}/gpu-ray-$WAY${ENGINES:+-$ENGINES}/results.json.
set -euo pipefail
way=${WAY:-http}
out=${OUT:-out}/gpu-ray-$way${ENGINES:+-$ENGINES}
mkdir -p "$out"
model=/tmp/qwen3-0.6b-random
qwen_fast=(python3 -m langchain_qwen_fast.cli)
[ -f "$model/config.json" ] || "${qwen_fast[@]}" build-test-model --size 0.6b --out "$model" \
  ${TOK:+--tokenizer-from "$TOK"}
mps_up() {
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  trap 'echo quit | nvidia-cuda-mps-control || true' EXIT
}
case "$way" in
http)
  rm -f "$out/urls.txt"
  "${qwen_fast[@]}" serve --model "$model" --profile gpu --quantization fp8 --gpus all \
    --servers-per-gpu "${SERVERS:-4}" --mps --port 0 --urls-file "$out/urls.txt" > "$out/serve.log" 2>&1 &
  serve=$!
  for _ in $(seq 600); do [ -s "$out/urls.txt" ] && break; kill -0 "$serve" || exit 1; sleep 1; done
  python3 -m benchmarks.ray_classify --base-url "$out/urls.txt" --actors "${ACTORS:-4}" --out "$out" "$@"
  kill -INT "$serve"; wait "$serve" || true
  ;;
vllm)
  engines=${ENGINES:-1}
  [ "$engines" -gt 1 ] && mps_up
  python3 -m benchmarks.ray_classify --vllm-model "$model" --engines-per-gpu "$engines" --actors "$engines" \
    --vllm-arg=--quantization=fp8 --vllm-arg=--gpu-memory-utilization=$(python3 -c "print(round(0.85 / $engines, 3))") \
    --out "$out" "$@"
  ;;
esac
