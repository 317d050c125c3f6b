#!/usr/bin/env bash
# Installs dependencies, builds, checks formatting and runs every test (ctest). GPU tests print
# that they skipped when no GPU is present. Non-zero exit on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
"$root/scripts/check-format.sh"
"$root/scripts/build.sh" "$@"
build=${SLUICE_BUILD_DIR:-$root/build}
# Tests read the shared datasets from ../shared/datasets beside the checkout. A clone made
# elsewhere (e.g. /tmp) finds them beside the repository it was cloned from.
if [[ -z "${SLUICE_SHARED_DATASETS:-}" && ! -d "$root/../shared/datasets" ]]; then
  origin=$(git -C "$root" remote get-url origin 2>/dev/null || true)
  if [[ -n "$origin" && -d "$origin/../shared/datasets" ]]; then
    export SLUICE_SHARED_DATASETS=$(cd "$origin/../shared/datasets" && pwd)
    echo "test.sh: shared datasets from $SLUICE_SHARED_DATASETS" >&2
  fi
fi
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 900
