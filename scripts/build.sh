#!/usr/bin/env bash
# Configures and builds Sluice into ${SLUICE_BUILD_DIR:-build} (Release). `--target NAME`
# (repeatable) builds only those targets, e.g. --target sluice-train; every other argument goes
# to cmake's configure step, e.g. scripts/build.sh -DSLUICE_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SLUICE_BUILD_DIR:-$root/build}
configure_args=() targets=()
while (($#)); do
  if [[ "$1" == --target ]]; then
    targets+=("${2:?--target needs a name}")
    shift 2
  else
    configure_args+=("$1")
    shift
  fi
done
if [[ -z "${CUDACXX:-}" ]] && ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release ${configure_args[@]+"${configure_args[@]}"} >/dev/null
if ((${#targets[@]})); then
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
else
  cmake --build "$build" -j "$(nproc)"
fi
