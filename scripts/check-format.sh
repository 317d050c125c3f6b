#!/usr/bin/env bash
# Fails when a C++/CUDA source differs from .clang-format; scripts/check-format.sh --fix rewrites.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.cc' '*.h' 2>/dev/null || true)
((${#files[@]})) || exit 0
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
clang-format --dry-run --Werror "${files[@]}"
