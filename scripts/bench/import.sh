#!/usr/bin/env bash
# Import benchmark (not a test): for each RMAT scale, draws the raw edges with
# `sluice-preprocess generate --edges-output` (little-endian int32 pairs), imports them with
# `import --format binary --symmetrize --self-loops remove`, and prints one Markdown table row
# with input edges/s, stored edges/s, peak resident memory and its ratio to the output file.
# Also times `generate` of a full planted dataset and, for the first scale, a text edge-list
# import of the same edges. For every scale it imports the same edges as NumPy arrays with
# `--format npy`: an (E, 2) int32 .npy (the pair file behind a .npy header) and, when
# /usr/bin/python3 has numpy, a (2, E) int64 .npy (the layout of OGB's edge_index); each best of
# REPEAT imports like the binary row.
#
# usage: scripts/bench/import.sh [SCALE...]        (default: 20 21)
# env:   SLUICE_BUILD_DIR (default build), BENCH_DIR (scratch, default $TMPDIR/sluice-bench-import),
#        EDGE_FACTOR (16), REPEAT (2: the best wall time of REPEAT imports is reported),
#        THREADS (0 = all cores)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${SLUICE_BUILD_DIR:-$root/build}
tool=$build/bin/sluice-preprocess
work=${BENCH_DIR:-${TMPDIR:-/tmp}/sluice-bench-import}
edge_factor=${EDGE_FACTOR:-16}
repeat=${REPEAT:-2}
threads=${THREADS:-0}
scales=("$@")
((${#scales[@]})) || scales=(20 21)
[[ -x $tool ]] || { echo "no $tool: build first (scripts/build.sh)" >&2; exit 1; }
# GNU time, or an equivalent through python3 (wall, peak RSS, user and system time).
if [[ -x /usr/bin/time ]]; then
  timer=(/usr/bin/time -f 'WALL %e PEAK_KB %M CPU %U %S')
else
  timer=(python3 -c 'import resource, subprocess, sys, time
start = time.time()
code = subprocess.run(sys.argv[1:]).returncode
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print("WALL %.2f PEAK_KB %d CPU %.2f %.2f" % (time.time() - start, usage.ru_maxrss,
      usage.ru_utime, usage.ru_stime), file=sys.stderr)
sys.exit(code)')
fi
mkdir -p "$work"
trap 'rm -f "$work"/rmat-*' EXIT

# npy_header FILE DESCR SHAPE: writes a .npy (format 1.0) header for a C-ordered array.
npy_header() {
  local header="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
  while (((10 + ${#header} + 1) % 64)); do header+=" "; done
  header+=$'\n'
  local length=${#header}
  printf '\x93NUMPY\x01\x00'"\\x$(printf %02x $((length & 255)))\\x$(printf %02x $((length >> 8)))" >"$1"
  printf '%s' "$header" >>"$1"
}
# import_row LABEL INPUT_FILE EDGES N ARGS...: times REPEAT imports, prints a row of the second
# table (the best wall time with its CPU seconds, the largest peak).
import_row() {
  local label=$1 input=$2 edges=$3 n=$4 row_best="" row_cpu=0 row_peak=0 i
  shift 4
  for ((i = 0; i < repeat; ++i)); do
    run "$work/rmat-extra.log" "$tool" import --threads "$threads" --output "$work/rmat-extra.h5" \
      --symmetrize --self-loops remove --num-nodes "$n" "$@"
    if [[ -z $row_best ]] || awk -v a="$wall" -v b="$row_best" 'BEGIN {exit !(a < b)}'; then
      row_best=$wall
      row_cpu=$cpu
    fi
    ((peak > row_peak)) && row_peak=$peak
  done
  extra_rows+=("| $label | $(mib "$(size_of "$input")") | ${row_best} s | $(awk -v e="$edges" -v w="$row_best" 'BEGIN {printf "%.1f M/s", e / w / 1e6}') | $row_cpu | $(mib "$row_peak") | $(awk -v p="$row_peak" -v f="$(size_of "$work/rmat-extra.h5")" 'BEGIN {printf "%.2fx", p / f}') |")
  rm -f "$work/rmat-extra.h5"
}
extra_rows=()

# run LOG CMD...: runs CMD under GNU time; sets wall (s), cpu (user + system s), peak (bytes).
run() {
  local log=$1
  shift
  "${timer[@]}" "$@" >"$log.out" 2>"$log" || {
    cat "$log" >&2
    exit 1
  }
  wall=$(awk '/^WALL/ {print $2}' "$log")
  peak=$(($(awk '/^WALL/ {print $4}' "$log") * 1024))
  cpu=$(awk '/^WALL/ {print $6 + $7}' "$log")
}
load() { cut -d' ' -f1 /proc/loadavg; }
size_of() { stat -c %s "$1"; }
mib() { awk -v b="$1" 'BEGIN {printf "%.0f MiB", b / 1048576}'; }

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)," \
  "$(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}'); $(date -u +%Y-%m-%d)"
echo
echo "| scale | input edges | stored edges | binary input | import wall | input edges/s | stored edges/s | CPU s (user+sys) | load | peak RSS | output file | peak / file |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
generate_rows=()
for scale in "${scales[@]}"; do
  n=$((1 << scale))
  raw=$work/rmat-$scale.bin
  out=$work/rmat-$scale.h5
  "$tool" generate --quiet --threads "$threads" --scale "$scale" --edge-factor "$edge_factor" \
    --edges-output "$raw"
  best=""
  best_peak=0
  for ((i = 0; i < repeat; ++i)); do
    start_load=$(load)
    run "$work/rmat-import.log" "$tool" import --threads "$threads" --format binary --input "$raw" \
      --output "$out" --symmetrize --self-loops remove --num-nodes "$n"
    if [[ -z $best ]] || awk -v a="$wall" -v b="$best" 'BEGIN {exit !(a < b)}'; then
      best=$wall
      best_cpu=$cpu
      best_load=$start_load
    fi
    ((peak > best_peak)) && best_peak=$peak
  done
  input_edges=$((edge_factor << scale))
  npy=$work/rmat-$scale.npy
  npy_header "$npy" '<i4' "($input_edges, 2)"
  cat "$raw" >>"$npy"
  import_row "$scale, npy (E, 2) int32" "$npy" "$input_edges" "$n" --format npy --input "$npy"
  if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    /usr/bin/python3 -c 'import sys, numpy as np
pairs = np.fromfile(sys.argv[1], dtype=np.int32).reshape(-1, 2)
np.save(sys.argv[2], np.ascontiguousarray(pairs.T.astype(np.int64)))' "$raw" "$npy"
    import_row "$scale, npy (2, E) int64" "$npy" "$input_edges" "$n" --format npy --input "$npy"
  fi
  rm -f "$npy"
  stored=$("$tool" info --json "$out" 2>/dev/null | sed -E 's/.*"edges":([0-9]+).*/\1/')
  file=$(size_of "$out")
  awk -v s="$scale" -v in_e="$input_edges" -v st="$stored" -v raw="$(size_of "$raw")" \
    -v w="$best" -v c="$best_cpu" -v l="$best_load" -v p="$best_peak" -v f="$file" 'BEGIN {
      printf "| %d | %.1f M | %.1f M | %.0f MiB | %.2f s | %.1f M/s | %.1f M/s | %.2f | %s | %.0f MiB | %.0f MiB | %.2fx |\n",
        s, in_e / 1e6, st / 1e6, raw / 1048576, w, in_e / w / 1e6, st / w / 1e6, c, l,
        p / 1048576, f / 1048576, p / f }'
  if [[ $scale == "${scales[0]}" ]]; then
    text=$work/rmat-$scale.txt
    "$tool" generate --quiet --threads "$threads" --scale "$scale" --edge-factor "$edge_factor" \
      --edges-output "$text"
    run "$work/rmat-text.log" "$tool" import --threads "$threads" --format edgelist --input "$text" \
      --output "$out" --symmetrize --self-loops remove --num-nodes "$n"
    text_row="| $scale, edge list (text) | $(mib "$(size_of "$text")") | ${wall} s | $(awk -v e="$input_edges" -v w="$wall" 'BEGIN {printf "%.1f M/s", e / w / 1e6}') | $cpu | $(mib "$peak") | $(awk -v p="$peak" -v f="$(size_of "$out")" 'BEGIN {printf "%.2fx", p / f}') |"
    rm -f "$text"
  fi
  rm -f "$raw" "$out"
  run "$work/rmat-generate.log" "$tool" generate --threads "$threads" --scale "$scale" \
    --edge-factor "$edge_factor" --features 64 --classes 16 --output "$out"
  generate_rows+=("| $scale | 64 | ${wall} s | $(awk -v e="$input_edges" -v w="$wall" 'BEGIN {printf "%.1f M/s", e / w / 1e6}') | $(mib "$peak") | $(mib "$(size_of "$out")") |")
  rm -f "$out"
done
echo
echo "| scale, input | input file | import wall | input edges/s | CPU s (user+sys) | peak RSS | peak / file |"
echo "|---|---|---|---|---|---|---|"
echo "${text_row:-}"
printf '%s\n' "${extra_rows[@]}"
echo
echo "| scale | features | generate wall | drawn edges/s | peak RSS | output file |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${generate_rows[@]}"
