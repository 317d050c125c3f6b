#!/usr/bin/env bash
# Training at scale (issue 20): generate -> partition -> train for RMAT graphs of up to 2 B edges
# on one GPU under --gpu-memory, recording per step the wall time and peak host RSS, and per
# training run the time from start to the first epoch (with sluice-train's per-stage times),
# the epoch time, the peak GPU memory and the host-link bytes of an epoch. Runs ON the 16-core
# GPU machine, from the repository root of the copy, with .device-bundle/ built here by
# `scripts/device-build.sh sluice-preprocess sluice-train` and carried:
#   run(command="bash scripts/bench/scale.sh all:24", carry=[".device-bundle"], timeout_s=600)
# The machine is handed back when idle, so one call should hold every step of one graph: `all`
# runs the three in a row. Steps (each argument one; steps that would start after BUDGET_S are
# skipped and listed):
#   gen:S[:EF]              sluice-preprocess generate, RMAT scale S, edge factor EF (16), D (128)
#                           features, into $BENCH_DIR/rmatS-EF.h5 (kept when it exists)
#   part:S[:EF[:L[:H]]]     sluice-preprocess partition --partitions 1 --gpu-memory $GPU_MEMORY for
#                           a GCN of L layers (2) and hidden H (128): the smallest chunk count
#   train:S[:EF[:L[:H]]]    sluice-train on that plan, --device cuda --gpu-memory $GPU_MEMORY,
#                           $EPOCHS epochs, evaluating every $EVAL_EVERY (each epoch's training
#                           and evaluation seconds, and each evaluation's host-link bytes, go to
#                           scale.log)
#   all:S[:EF[:L[:H]]]      the three in a row
#   clean                   delete $BENCH_DIR
# The issue's runs: all:24, all:25, all:26 (2 B edges; generation and partitioning may take one
# call each: gen:26, then part:26 and train:26 while the machine stays warm), and the wide case
# all:25:5:3:256 (edge factor 5, 3-layer GCN of hidden 256).
# Results: $OUT/scale.md (one row per step) and $OUT/scale.log (each run's log lines: per-stage
# times and peaks); without OUT, ./out/scale.
# Environment: BENCH_DIR (/tmp/sluice-scale), BUDGET_S (560), GPU_MEMORY (24G), EPOCHS (3),
# EVAL_EVERY ($EPOCHS: one evaluation, after the last epoch),
# FEATURES (128), TRAIN_ARGS ("": more sluice-train options), DEVICE (cuda; cpu for a smoke run
# here with SLUICE_BIN=build/bin), OMP_NUM_THREADS (all cores).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# shellcheck source=scripts/bench/lib.sh
source scripts/bench/lib.sh
dir=${BENCH_DIR:-/tmp/sluice-scale}
out=${OUT:-$root/out/scale}
budget=${BUDGET_S:-560}
gpu_memory=${GPU_MEMORY:-24G}
epochs=${EPOCHS:-3}
features=${FEATURES:-128}
mkdir -p "$dir" "$out"
table=$out/scale.md
log=$out/scale.log
bench_setup scale sluice-preprocess sluice-train
bench_table "$table" "machine: $(bench_machine), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); threads ${OMP_NUM_THREADS:-$(nproc)}; --gpu-memory $gpu_memory; $(date -u +%F)" \
  step graph model rc "wall s" "peak RSS" "RSS / file" C "to first epoch s" "epoch s" "peak GPU" \
  "host-link bytes per epoch" "setup stages"

# One step's row: step, graph, model, rc, wall, run log, dataset, plan (or ""), metrics (or "").
row() {
  python3 - "$@" "$(bench_peak_rss "$6")" <<'PY' | tee -a "$table"
import json, os, re, sys
step, graph, model, rc, wall, log_path, data, plan, metrics, peak = sys.argv[1:]
text = open(log_path, errors="replace").read() if os.path.exists(log_path) else ""
def gib(b): return f"{b / 2**30:.1f} GiB"
peak = int(peak) if peak else None
size = os.path.getsize(data) if os.path.exists(data) else 0
chunks = "-"
m = re.search(r"\b1 x (\d+) chunks", text) or re.search(r"C = (\d+)", text)
if m: chunks = m.group(1)
first = epoch = gpu = link = "-"
m = re.search(r"^\[sluice \+([0-9.]+)s\] model ", text, re.M)
if m: first = m.group(1)
if metrics and os.path.exists(metrics):
    records = [json.loads(l) for l in open(metrics) if l.strip()]
    if records:
        last = records[-1]
        epoch = f"{last['seconds']:.2f}"
        gpu = gib(max(r["peak_device_bytes"] for r in records))
        t = last["transfers"]
        moved = (t["h2d_gather_bytes"] + t["h2d_block_bytes"] + t["d2h_bytes"] +
                 t.get("d2h_index_bytes", 0))
        link = f"{moved / 1e9:.1f} GB"
stages = "; ".join(f"{name} {float(s):.1f}"
                   for name, s in re.findall(r"stage ([^:]+?)(?: /\S+)?: ([0-9.e+-]+) s", text)
                   if step.startswith("train"))
print(f"| {step} | {graph} | {model} | {rc} | {wall} | {gib(peak) if peak else '-'} | "
      f"{f'{peak / size:.2f}' if peak and size else '-'} | {chunks} | {first} | {epoch} | {gpu} | "
      f"{link} | {stages or '-'} |")
PY
}

generate() {  # scale edge_factor
  local scale=$1 ef=$2 data=$dir/rmat$1-$2.h5 run_log=$dir/gen-$1-$2.log rc wall
  [[ -f "$data" ]] && { echo "scale: $data exists"; return 0; }
  bench_make_room $(((1 << scale) * (4 * features + 16 + 8 * ef))) "rmat$scale-$ef"
  bench_run "gen:$scale:$ef" "$run_log" "$bin/sluice-preprocess" generate --scale "$scale" \
    --edge-factor "$ef" --features "$features" --seed 1 --output "$data"
  row "gen:$scale:$ef" "rmat$scale ef$ef" "-" "$rc" "$wall" "$run_log" "$data" "" ""
  ((rc == 0)) || rm -f "$data"
  return "$rc"
}

partition() {  # scale edge_factor layers hidden
  local scale=$1 ef=$2 layers=$3 hidden=$4 data=$dir/rmat$1-$2.h5 rc wall
  local name=rmat$1-$2-l$3-h$4
  local plan=$dir/plan-$name.h5 run_log=$dir/part-$name.log
  [[ -f "$data" ]] || { echo "scale: $data missing (gen:$scale:$ef first)"; return 1; }
  [[ -f "$plan" ]] && { echo "scale: $plan exists"; return 0; }
  bench_run "part:$name" "$run_log" "$bin/sluice-preprocess" partition --dataset "$data" \
    --partitions 1 --gpu-memory "$gpu_memory" --model gcn --layers "$layers" --hidden "$hidden" \
    --output "$plan"
  row "part" "rmat$scale ef$ef" "gcn l$layers h$hidden" "$rc" "$wall" "$run_log" "$data" "$plan" ""
  ((rc == 0)) || rm -f "$plan"
  return "$rc"
}

train() {  # scale edge_factor layers hidden
  local scale=$1 ef=$2 layers=$3 hidden=$4 data=$dir/rmat$1-$2.h5 rc wall
  local name=rmat$1-$2-l$3-h$4
  local plan=$dir/plan-$name.h5 run_log=$dir/train-$name.log metrics=$dir/train-$name.jsonl
  [[ -f "$plan" ]] || { echo "scale: $plan missing (part:$scale:$ef:$layers:$hidden first)"; return 1; }
  rm -f "$metrics"
  # shellcheck disable=SC2086
  bench_run "train:$name" "$run_log" "$bin/sluice-train" --dataset "$data" --plan "$plan" \
    --device "${DEVICE:-cuda}" --gpu-memory "$gpu_memory" --model gcn --layers "$layers" \
    --hidden "$hidden" --epochs "$epochs" --eval-every "${EVAL_EVERY:-$epochs}" --metrics "$metrics" --no-progress \
    ${TRAIN_ARGS:-}
  row "train" "rmat$scale ef$ef" "gcn l$layers h$hidden" "$rc" "$wall" "$run_log" "$data" "$plan" "$metrics"
  [[ -f "$metrics" ]] && python3 - "$metrics" "train:$name" <<'PY' | tee -a "$log"
import json, statistics, sys
records = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
def link_gb(t):
    return (t["h2d_gather_bytes"] + t["h2d_block_bytes"] + t["d2h_bytes"] +
            t.get("d2h_index_bytes", 0)) / 1e9
train = " ".join(f"{r['seconds']:.2f}" for r in records)
# Each evaluation against the median epoch after the first (the first holds warm-up).
median = statistics.median([r["seconds"] for r in records[1:]] or [records[0]["seconds"]])
evals = " ".join(f"{r['eval_seconds']:.2f} ({r['eval_seconds'] / median:.2f}x, "
                 f"{link_gb(r['eval_transfers']):.1f} GB)"
                 for r in records if r.get("eval_transfers"))
print(f"{sys.argv[2]}: training s {train} | evaluation s (x the median epoch after the first, "
      f"host-link bytes) {evals or '-'}")
PY
  return "$rc"
}

step() {
  local verb s ef layers hidden
  IFS=: read -r verb s ef layers hidden <<<"$1"
  ef=${ef:-16} layers=${layers:-2} hidden=${hidden:-128}
  case $verb in
    gen) generate "$s" "$ef" ;;
    part) partition "$s" "$ef" "$layers" "$hidden" ;;
    train) train "$s" "$ef" "$layers" "$hidden" ;;
    all)
      generate "$s" "$ef" && partition "$s" "$ef" "$layers" "$hidden" &&
        train "$s" "$ef" "$layers" "$hidden"
      ;;
    clean) rm -rf "$dir" && mkdir -p "$dir" ;;
    *) echo "scale: unknown step '$1' (gen:S[:EF], part|train|all:S[:EF[:L[:H]]], clean)" ;;
  esac
}

bench_steps step "$@"
cat "$table"
