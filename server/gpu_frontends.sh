#!/usr/bin/env bash
# vLLM's two HTTP frontends side by side on a GPU host where vLLM imports (e.g.
# PYTHONPATH=/tmp/site:$PWD, see server/gpu_scale.sh):
#   TOK=DIR bash server/gpu_frontends.sh [benchmarks.scale flags...]
# runs `python3 -m benchmarks.scale` through server/gpu_scale.sh once per frontend in FRONTENDS
# (default: python, then rust), each with the same flags, one after the other on the same
# machine, e.g.
#   TOK=DIR bash server/gpu_frontends.sh --gpus 0 --servers-per-gpu 4 --mps --subsets 1,4 --items 65536
# Results: ${OUT:-out}/gpu-scale-frontend-<name>${TAG:-}/scale.json.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for frontend in ${FRONTENDS:-python rust}; do
  TAG="-frontend-$frontend${TAG:-}" bash "$here/gpu_scale.sh" --frontend "$frontend" "$@"
done
