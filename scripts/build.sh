#!/usr/bin/env bash
# Configures and builds Sluice into ${SLUICE_BUILD_DIR:-build} (Release). Extra arguments go to
# cmake's configure step, e.g. scripts/build.sh -DSLUICE_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SLUICE_BUILD_DIR:-$root/build}
if [[ -z "${CUDACXX:-}" ]] && ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
