#!/usr/bin/env bash
# A/B of two sluice-train builds on the CPU backend, on one generated RMAT graph and plan, runs
# interleaved (A B A B ...) so that drift on the machine hits both. Prints per run the median
# epoch time after the first epoch, the losses, and the last epoch's bytes by path (host-link
# gathers, blocks, device-to-host, peer), which do not depend on the backend.
#
# usage: OLD=DIR [NEW=DIR] scripts/bench/ab_cpu.sh [scale]      (default scale 18)
#   OLD, NEW: directories holding sluice-train (NEW default build/bin; sluice-preprocess from
#   NEW). Environment: MODELS ("sage"), HIDDEN (64), FEATURES (64), CLASSES (8), EDGE_FACTOR
#   (16), PARTITIONS (2), CHUNKS (4), EPOCHS (4), REPEAT (2), THREADS (0 = all cores),
#   BENCH_DIR (/tmp/sluice-bench-ab).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
old=${OLD:?set OLD to the directory of the A build\'s sluice-train}
new=${NEW:-$root/build/bin}
scale=${1:-18}
dir=${BENCH_DIR:-/tmp/sluice-bench-ab}
python=/usr/bin/python3
[[ -x $python ]] || python=python3
for tool in "$old/sluice-train" "$new/sluice-train" "$new/sluice-preprocess"; do
  [[ -x $tool ]] || { echo "ab_cpu.sh: $tool not found" >&2; exit 1; }
done
mkdir -p "$dir"
data=$dir/rmat$scale.h5 plan=$dir/rmat$scale-${PARTITIONS:-2}x${CHUNKS:-4}.h5
[[ -f $data ]] || "$new/sluice-preprocess" generate --scale "$scale" \
  --edge-factor "${EDGE_FACTOR:-16}" --features "${FEATURES:-64}" --classes "${CLASSES:-8}" \
  --seed 1 --output "$data" >/dev/null 2>&1
[[ -f $plan ]] || "$new/sluice-preprocess" partition --dataset "$data" \
  --partitions "${PARTITIONS:-2}" --chunks "${CHUNKS:-4}" --output "$plan" >/dev/null 2>&1

echo "machine: $(nproc) cores, $(date -u +%Y-%m-%d); RMAT $scale, P x C ${PARTITIONS:-2} x ${CHUNKS:-4}"
for model in ${MODELS:-sage}; do
  for ((r = 1; r <= ${REPEAT:-2}; ++r)); do
    for side in A B; do
      bin=$old
      [[ $side == B ]] && bin=$new
      metrics=$dir/$model-$side-$r.jsonl
      "$bin/sluice-train" --dataset "$data" --plan "$plan" --model "$model" \
        --hidden "${HIDDEN:-64}" --epochs "${EPOCHS:-4}" --eval-every 1000000 \
        --threads "${THREADS:-0}" --metrics "$metrics" >/dev/null 2>&1
      "$python" - "$metrics" "$model" "$side" <<'PY'
import json, statistics, sys
records = [json.loads(line) for line in open(sys.argv[1])]
seconds = statistics.median(r["seconds"] for r in records[1:] or records)
t = records[-1]["transfers"]
mb = lambda key: f"{t[key] / 1e6:.1f}"
print(f"{sys.argv[2]} {sys.argv[3]}: {seconds:.3f} s/epoch, losses "
      f"{[round(r['loss'], 5) for r in records]}, MB h2d gather {mb('h2d_gather_bytes')} "
      f"block {mb('h2d_block_bytes')} d2h {mb('d2h_bytes')} p2p {mb('p2p_bytes')}")
PY
    done
  done
done
