#!/usr/bin/env bash
# CPU training benchmark: for RMAT graphs of the given scales (planted labels, 64 features),
# builds a P x C plan and trains a few epochs of a 2-layer GCN (and a 2-layer GAT at the
# smallest scale) on the CPU backend with P logical devices; prints one Markdown table row per
# run: mean epoch time over the epochs after the first, the phase breakdown of the schedule
# (load / p2p / compute / flush / optimizer), rows moved per epoch and peak host memory.
#
# usage: scripts/bench/cpu_train.sh [scale ...]          (default scales: 18 19 20)
# environment: SLUICE_BIN (default build/bin), BENCH_DIR (default /tmp/sluice-bench-train),
#   PARTITIONS (2), CHUNKS (4), EPOCHS (4), HIDDEN (64), FEATURES (64), EDGE_FACTOR (16),
#   GAT_SCALES (the first scale), THREADS (0 = all cores).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bindir="${SLUICE_BIN:-$root/build/bin}"
dir="${BENCH_DIR:-/tmp/sluice-bench-train}"
partitions="${PARTITIONS:-2}"
chunks="${CHUNKS:-4}"
epochs="${EPOCHS:-4}"
hidden="${HIDDEN:-64}"
features="${FEATURES:-64}"
edge_factor="${EDGE_FACTOR:-16}"
threads="${THREADS:-0}"
scales=("$@")
[[ ${#scales[@]} -gt 0 ]] || scales=(18 19 20)
gat_scales="${GAT_SCALES:-${scales[0]}}"

for tool in sluice-preprocess sluice-train; do
  [[ -x "$bindir/$tool" ]] || { echo "cpu_train.sh: $bindir/$tool not found (build first or set SLUICE_BIN)" >&2; exit 1; }
done
command -v jq > /dev/null || { echo "cpu_train.sh: needs jq" >&2; exit 1; }
mkdir -p "$dir"

echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); threads ${threads/#0/all}; $(date -u +%Y-%m-%d)"
echo
echo "| RMAT scale | vertices | edges | model | P x C | s/epoch | load | p2p | compute | flush | optimizer | host-link rows/epoch | p2p rows/epoch | peak RSS |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
run() {  # scale model hidden extra-args...
  local scale=$1 model=$2 width=$3
  shift 3
  local data="$dir/rmat$scale.h5" plan="$dir/rmat$scale-p$partitions-c$chunks.h5"
  local metrics="$dir/rmat$scale-$model.jsonl" report="$dir/rmat$scale-$model.json"
  "$bindir/sluice-train" --dataset "$data" --plan "$plan" --model "$model" --layers 2 \
    --hidden "$width" --epochs "$epochs" --eval-every "$epochs" --dropout 0.5 --lr 0.01 \
    --threads "$threads" --metrics "$metrics" --report "$report" --no-progress -q "$@"
  local nodes edges
  nodes=$("$bindir/sluice-preprocess" info "$data" --json 2> /dev/null | jq -r '.nodes' 2> /dev/null || echo "2^$scale")
  edges=$("$bindir/sluice-preprocess" info "$data" --json 2> /dev/null | jq -r '.edges' 2> /dev/null || echo "?")
  # Mean over the epochs after the first (the first one warms caches and page tables).
  jq -s -r --arg scale "$scale" --arg nodes "$nodes" --arg edges "$edges" --arg model "$model" \
    --arg pc "$partitions x $chunks" '
    (if length > 1 then .[1:] else . end) as $e | ($e | length) as $k |
    def avg(f): ($e | map(f) | add) / $k;
    def r2: . * 100 | round / 100;
    "| \($scale) | \($nodes) | \($edges) | \($model) | \($pc) | \(avg(.seconds) | r2) | " +
    "\(avg(.phases.load) | r2) | \(avg(.phases.p2p) | r2) | \(avg(.phases.compute) | r2) | " +
    "\(avg(.phases.flush) | r2) | \(avg(.phases.optimizer) | r2) | " +
    "\(avg(.transfers.h2d_gather_rows) | round) | \(avg(.transfers.p2p_rows) | round) | " +
    "\(map(.peak_host_bytes) | max / 1073741824 * 100 | round / 100) GiB |"' "$metrics"
}
for scale in "${scales[@]}"; do
  data="$dir/rmat$scale.h5"
  plan="$dir/rmat$scale-p$partitions-c$chunks.h5"
  [[ -f "$data" ]] || "$bindir/sluice-preprocess" generate --scale "$scale" \
    --edge-factor "$edge_factor" --features "$features" --classes 8 --seed 1 --output "$data" \
    -q > "$dir/rmat$scale.generate.log"
  [[ -f "$plan" ]] || "$bindir/sluice-preprocess" partition --dataset "$data" \
    --partitions "$partitions" --chunks "$chunks" --output "$plan" -q > "$plan.log"
  run "$scale" gcn "$hidden"
  for g in $gat_scales; do
    if [[ "$g" == "$scale" ]]; then run "$scale" gat 16 --heads 4; fi
  done
done
