#!/usr/bin/env bash
# Installs dependencies, builds, checks formatting and runs every test (ctest). GPU tests print
# that they skipped when no GPU is present. Non-zero exit on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
"$root/scripts/check-format.sh"
"$root/scripts/build.sh" "$@"
build=${SLUICE_BUILD_DIR:-$root/build}
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 900
