#!/usr/bin/env bash
# Partition benchmark: for RMAT graphs of the given scales, builds plans at P=4 with C=8 and
# C=32 and prints one Markdown table row per plan: METIS time (level 1, including the
# symmetrization it needs) vs everything else in plan building, the three host-link volumes
# and their reduction, and the cost model before/after reorganization.
#
# usage: scripts/bench/partition.sh [scale ...]          (default scales: 20 21 22)
# environment: SLUICE_BIN (default build/bin), BENCH_DIR (datasets and plans,
#   default /tmp/sluice-bench-partition), PARTITIONS (4), CHUNKS ("8 32"), EDGE_FACTOR (16),
#   FEATURES (64), OMP_NUM_THREADS.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${SLUICE_BIN:-$root/build/bin}/sluice-preprocess"
dir="${BENCH_DIR:-/tmp/sluice-bench-partition}"
partitions="${PARTITIONS:-4}"
chunk_counts="${CHUNKS:-8 32}"
edge_factor="${EDGE_FACTOR:-16}"
features="${FEATURES:-64}"
scales=("$@")
[[ ${#scales[@]} -gt 0 ]] || scales=(20 21 22)

[[ -x "$bin" ]] || { echo "partition.sh: $bin not found (build first or set SLUICE_BIN)" >&2; exit 1; }
command -v jq > /dev/null || { echo "partition.sh: needs jq" >&2; exit 1; }
mkdir -p "$dir"

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), threads ${OMP_NUM_THREADS:-$(nproc)}; $(date -u +%Y-%m-%d)"
echo
echo "| RMAT scale | vertices | edges | P | C | METIS s | rest s | total s | peak RSS | replication | baseline rows | +P2P rows | +reuse rows | +P2P vs baseline | +reuse vs baseline | P2P pulls | cost before / after (ms, d=$features) | reorganized |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for scale in "${scales[@]}"; do
  data="$dir/rmat$scale.h5"
  if [[ ! -f "$data" ]]; then
    "$bin" generate --scale "$scale" --edge-factor "$edge_factor" --features "$features" \
      --seed 1 --output "$data" > /dev/null 2>&1
  fi
  for chunks in $chunk_counts; do
    plan="$dir/rmat$scale-p$partitions-c$chunks.h5"
    log="$dir/rmat$scale-p$partitions-c$chunks.log"
    start=$(date +%s.%N)
    /usr/bin/time -v "$bin" partition --dataset "$data" --partitions "$partitions" \
      --chunks "$chunks" --output "$plan" > "$log" 2>&1
    end=$(date +%s.%N)
    peak=$(awk '/Maximum resident set size/ {printf "%.2f GiB", $6 / 1048576}' "$log")
    json=$("$bin" stats "$plan" --json --quiet)
    jq -r --arg scale "$scale" --arg total "$(echo "$end - $start" | bc)" --arg peak "$peak" '
      "| \($scale) | \(.num_nodes) | \(.num_dataset_edges) | \(.partitions) | \(.chunks) | " +
      "\(.partition_seconds * 100 | round / 100) | \(.build_seconds * 100 | round / 100) | " +
      "\($total | tonumber * 10 | round / 10) | \($peak) | " +
      "\(.replication_factor * 1000 | round / 1000) | \(.volume_baseline_rows) | " +
      "\(.volume_p2p_rows) | \(.volume_reuse_rows) | " +
      "-\(.reduction_p2p * 1000 | round / 10)% | -\(.reduction_reuse * 1000 | round / 10)% | " +
      "\(.p2p_rows) | \(.cost_before * 1e5 | round / 100) / \(.cost_after * 1e5 | round / 100) | " +
      "\(if .reorganized then "yes" else "no" end) |"' <<< "$json"
  done
done
