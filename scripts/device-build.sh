#!/usr/bin/env bash
# Runs HERE (the GPU-less dev machine): builds Sluice with the CUDA backend (sm_90, static
# Boost.Program_options) into build-device/ and assembles the git-ignored folder .device-bundle/
# for the GPU machine: stripped test executables (gpu_test_* and the CPU test_*), bin/ tools when
# built, libmetis.so.5 and libzip.so.4 (the GPU machine lacks them; found through LD_LIBRARY_PATH
# there) and a
# copy of the Cora dataset (for tests reading SLUICE_SHARED_DATASETS).
#
# Usage: scripts/device-build.sh [TARGET...]   (default: every target)
#   e.g. scripts/device-build.sh gpu_test_cuda_ops   (bundles only the named targets)
# Then, from the device tool:
#   run(command="bash scripts/device-test.sh", carry=[".device-bundle"], kind="nvidia-h200")
#   run(command="bash scripts/bench/gpu_train.sh", carry=[".device-bundle"], kind="nvidia-h200-x2")
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SLUICE_DEVICE_BUILD_DIR:-$root/build-device}
bundle=$root/.device-bundle
if [[ -z "${CUDACXX:-}" ]] && ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=ON -DSLUICE_STATIC_BOOST=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
if (($# > 0)); then
  cmake --build "$build" -j "$(nproc)" --target "$@"
else
  cmake --build "$build" -j "$(nproc)"
fi

rm -rf "$bundle"
mkdir -p "$bundle/datasets"
shopt -s nullglob
copied=0
for exe in "$build"/tests/gpu_test_* "$build"/tests/test_* "$build"/bin/sluice-preprocess \
  "$build"/bin/sluice-train; do
  [[ -f "$exe" && -x "$exe" ]] || continue
  # With targets named, bundle only those (each test executable carries the CUDA kernels, and
  # all of them together exceed what the device tool carries).
  if (($# > 0)) && [[ " $* " != *" $(basename "$exe") "* ]]; then continue; fi
  cp "$exe" "$bundle/"
  strip --strip-unneeded "$bundle/$(basename "$exe")"
  copied=$((copied + 1))
done
((copied > 0)) || { echo "device-build: nothing was built to bundle" >&2; exit 1; }
metis=/usr/lib/x86_64-linux-gnu/libmetis.so.5
[[ -f "$metis" ]] && cp -L "$metis" "$bundle/"
# libzip (the .npz reader) is absent there too.
libzip=/usr/lib/x86_64-linux-gnu/libzip.so.4
[[ -f "$libzip" ]] && cp -L "$libzip" "$bundle/"
# The benchmark scripts travel with the working tree anyway; a copy in the bundle keeps it
# self-contained (scripts/bench/gpu_train.sh, pyg_full_graph.py, summarize_gpu.py).
mkdir -p "$bundle/scripts"
cp "$root"/scripts/bench/*.py "$root"/scripts/bench/gpu_train.sh "$root"/scripts/bench/datasets.sh "$bundle/scripts/" 2>/dev/null || true
datasets=${SLUICE_SHARED_DATASETS:-$root/../shared/datasets}
if [[ -d "$datasets/cora" ]]; then
  cp -r "$datasets/cora" "$bundle/datasets/"
  chmod -R u+w "$bundle/datasets"
fi

size_kib=$(du -sk "$bundle" | cut -f1)
echo "device-build: bundle $bundle holds $copied executables, $((size_kib / 1024)) MiB"
ls -1 "$bundle"
if ((size_kib > 60 * 1024)); then
  echo "device-build: the bundle exceeds 60 MiB; build fewer targets" >&2
  exit 1
fi
