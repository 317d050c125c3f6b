#!/usr/bin/env bash
# Fails when a C++/CUDA source differs from .clang-format (scripts/check-format.sh --fix
# rewrites), or when an OpenMP parallel region has no `if (...)` clause: common/parallel.hpp says
# why every region states the work it is worth a team for.
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
# A pragma continued with backslashes counts as one line.
unguarded=$(awk '
  /^[ \t]*#pragma omp parallel/ {
    text = $0; line = FNR
    while (text ~ /\\$/ && (getline next_line) > 0) text = text next_line
    if (text !~ / if *\(/) printf "%s:%d: OpenMP region without an if clause (common/parallel.hpp)\n", FILENAME, line
  }' "${files[@]}")
if [[ -n "$unguarded" ]]; then
  echo "$unguarded" >&2
  exit 1
fi
