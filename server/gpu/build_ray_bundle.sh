#!/usr/bin/env bash
# Builds, on this (CPU) machine, a SECOND bundle for the lent H200: Ray Data (ray[data]==2.60.0)
# and the dependencies that ray.init() + ray.data (read_parquet, map_batches with actors,
# write_parquet, checkpointing) need and that neither the device image (Python 3.12, torch,
# transformers, numpy, tqdm, matplotlib) nor the main vLLM bundle (../shared/gpu/wheels.txt)
# brings. numpy, torch and transformers are never packed (they would shadow the image's).
# Output, in the repo you run it from (ignored by git through .git/info/exclude):
#   .gpu/r00/part .gpu/r01/part ...   one part each (<= 58,000,000 bytes), carry ONE per device call
#   .gpu/ray.sha256                   checksum of the whole archive
# Unpack on the device AFTER the main bundle, into /tmp/raysite, and use
#   PYTHONPATH=/tmp/site:/tmp/raysite:$PWD
# Usage: bash server/gpu/build_ray_bundle.sh   (from the project root; a few minutes, mostly xz)
# Env: PYVER (default 3.12; 3.11 builds a tree for a local smoke test), RAY_TREE_ONLY=DIR
# (only build the stripped tree into DIR, no archive, no parts).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
pyver=${PYVER:-3.12}
tree_only=${RAY_TREE_ONLY:-}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Pinned to what `pip download "ray[data]==2.60.0" aiohttp grpcio` resolves for cp312
# (the versions installed in the project's .venv), minus numpy. The few that wheels.txt (main
# bundle, earlier on PYTHONPATH) also has, at the same versions (jsonschema,
# jsonschema-specifications, referencing, rpds-py, certifi, typing-extensions), are kept so
# this tree also works on its own; they cost about 1 MB.
cat > "$work/req.txt" <<'REQ'
ray==2.60.0
pyarrow==26.0.1
pandas==3.1.1
python-dateutil==4.0.0
tzdata==2026.6
fsspec==2026.9.0
msgpack==1.2.4
protobuf==7.36.2
grpcio==1.85.3
pyyaml==6.0.4
click==8.5.1
filelock==4.3.2
packaging==26.4
requests==2.34.2
urllib3==2.8.0
idna==3.20
charset-normalizer==3.5.3
aiohttp==3.14.5
aiohappyeyeballs==2.7.1
aiosignal==1.4.0
attrs==26.1.0
frozenlist==1.8.0
multidict==7.2.1
propcache==0.5.4
yarl==1.25.1
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
referencing==0.37.0
rpds-py==2026.9.1
certifi==2026.10.19.post1
typing-extensions==4.16.0
REQ
python3 -m venv "$work/pip" && "$work/pip/bin/pip" install -q -U pip
plat=""
for t in manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_31 manylinux_2_27 manylinux_2_24 manylinux_2_26 manylinux_2_5 manylinux1 manylinux_2_12 manylinux_2_34 manylinux_2_35; do
  plat="$plat --platform ${t}_x86_64"
done
"$work/pip/bin/pip" download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp $plat \
  -d "$work/whl" -r "$work/req.txt"
"$work/pip/bin/pip" install -q --no-index --no-deps --no-compile --only-binary=:all: --python-version "$pyver" \
  --implementation cp $plat --target "$work/site" "$work"/whl/*.whl
s="$work/site"
# Never ship anything that would shadow the image's numpy/torch/transformers.
for bad in numpy torch transformers; do
  if [ -e "$s/$bad" ]; then echo "refusing: $bad got into the tree" >&2; exit 1; fi
done
# Strip what Ray Data + ray.init(include_dashboard=False) never load. Kept on purpose:
# ray/train and ray/tune (Dataset.iter_torch_batches imports ray.train.torch), ray/air
# (Ray Data's tensor extensions and batch conversion), ray/dashboard (the dashboard agent runs
# in --minimal mode), ray/_private/runtime_env (the runtime-env agent, which needs aiohttp),
# ray/core (raylet, gcs_server), ray/thirdparty_files (psutil), ray/llm (lazy, small).
rm -rf "$s/bin"                          # console scripts (`ray` CLI): not needed for ray.init()
rm -rf "$s/ray/rllib" "$s/ray/serve"     # RLlib, Serve
rm -rf "$s/ray/jars"                     # Java workers; services.py copes with its absence
rm -rf "$s/ray/dashboard/client/build"   # dashboard web frontend (static files)
rm -rf "$s/pyarrow/include" "$s/pyarrow/src"   # C++ headers/sources for building extensions
find "$s" -type d -name tests -prune -exec rm -rf {} +
find "$s" -type f \( -name '*.pyi' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' \) -delete
if [ -n "$tree_only" ]; then
  rm -rf "$tree_only" && mkdir -p "$(dirname "$tree_only")" && mv "$s" "$tree_only"
  du -sh "$tree_only"; exit 0
fi
rm -rf .gpu/r[0-9][0-9] .gpu/ray.sha256
mkdir -p .gpu
tar -cf - -C "$s" . | nice -n 19 xz -T2 -6 > "$work/ray.tar.xz"
(cd "$work" && sha256sum ray.tar.xz) | cut -d' ' -f1 > .gpu/ray.sha256
split -b 58000000 -d -a 2 "$work/ray.tar.xz" "$work/part."
for p in "$work"/part.*; do n=${p##*.}; mkdir -p ".gpu/r$n" && mv "$p" ".gpu/r$n/part"; done
ls -l .gpu/r*/part; echo "sha256 $(cat .gpu/ray.sha256)"
