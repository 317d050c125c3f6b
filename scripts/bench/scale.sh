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
#                           $EPOCHS epochs
#   all:S[:EF[:L[:H]]]      the three in a row
#   clean                   delete $BENCH_DIR
# The issue's runs: all:24, all:25, all:26 (2 B edges; generation and partitioning may take one
# call each: gen:26, then part:26 and train:26 while the machine stays warm), and the wide case
# all:25:5:3:256 (edge factor 5, 3-layer GCN of hidden 256).
# Results: $OUT/scale.md (one row per step) and $OUT/scale.log (each run's log lines: per-stage
# times and peaks); without OUT, ./out/scale.
# Environment: BENCH_DIR (/tmp/sluice-scale), BUDGET_S (560), GPU_MEMORY (24G), EPOCHS (3),
# FEATURES (128), TRAIN_ARGS ("": more sluice-train options), DEVICE (cuda; cpu for a smoke run
# here with SLUICE_BIN=build/bin), OMP_NUM_THREADS (all cores).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bundle=$root/.device-bundle
bin=${SLUICE_BIN:-$bundle}
dir=${BENCH_DIR:-/tmp/sluice-scale}
out=${OUT:-$root/out/scale}
budget=${BUDGET_S:-560}
gpu_memory=${GPU_MEMORY:-24G}
epochs=${EPOCHS:-3}
features=${FEATURES:-128}
mkdir -p "$dir" "$out"
table=$out/scale.md
log=$out/scale.log
export LD_LIBRARY_PATH="$bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for tool in sluice-preprocess sluice-train; do
  [[ -x "$bin/$tool" ]] || { echo "scale: $bin/$tool missing (scripts/device-build.sh sluice-preprocess sluice-train)"; exit 2; }
done
command -v python3 >/dev/null || { echo "scale: needs python3"; exit 2; }
timer=()
[[ -x /usr/bin/time ]] && timer=(/usr/bin/time -v)
start=$SECONDS
skipped=()

if [[ ! -s "$table" ]]; then
  {
    echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) RAM, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); threads ${OMP_NUM_THREADS:-$(nproc)}; --gpu-memory $gpu_memory; $(date -u +%F)"
    echo
    echo "| step | graph | model | rc | wall s | peak RSS | RSS / file | C | to first epoch s | epoch s | peak GPU | host-link bytes per epoch | setup stages |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  } >"$table"
fi

left() { local l=$((budget - (SECONDS - start))); echo $((l > 30 ? l : 30)); }

# One step's row: step, graph, model, rc, wall, run log, dataset, plan (or ""), metrics (or "").
row() {
  python3 - "$@" <<'PY' | tee -a "$table"
import json, os, re, sys
step, graph, model, rc, wall, log_path, data, plan, metrics = sys.argv[1:]
text = open(log_path, errors="replace").read() if os.path.exists(log_path) else ""
def gib(b): return f"{b / 2**30:.1f} GiB"
rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
peak = int(rss.group(1)) * 1024 if rss else None
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
        link = f"{(t['h2d_gather_bytes'] + t['h2d_block_bytes'] + t['d2h_bytes']) / 1e9:.1f} GB"
stages = "; ".join(f"{name} {float(s):.1f}"
                   for name, s in re.findall(r"stage ([^:]+?)(?: /\S+)?: ([0-9.e+-]+) s", text)
                   if step.startswith("train"))
print(f"| {step} | {graph} | {model} | {rc} | {wall} | {gib(peak) if peak else '-'} | "
      f"{f'{peak / size:.2f}' if peak and size else '-'} | {chunks} | {first} | {epoch} | {gpu} | "
      f"{link} | {stages or '-'} |")
PY
}

record() {  # name rc wall run_log
  { echo "==== $1: rc $2, $3 s"; grep -E '^\[sluice|Maximum resident|Elapsed|error|Error' "$4"; } >>"$log"
  if (($2 != 0)); then
    echo "scale: $1 failed (rc $2 after $3 s):"
    tail -5 "$4"
  fi
}

generate() {  # scale edge_factor
  local scale=$1 ef=$2 data=$dir/rmat$1-$2.h5 run_log=$dir/gen-$1-$2.log
  [[ -f "$data" ]] && { echo "scale: $data exists"; return 0; }
  local free need=$(((1 << scale) * (4 * features + 16 + 8 * ef)))
  free=$(($(df -B1 --output=avail "$dir" | tail -1)))
  if ((free < need + (4 << 30))); then
    echo "scale: $((free >> 30)) GiB free, rmat$scale-$ef needs about $((need >> 30)) GiB: deleting other graphs"
    rm -f "$dir"/rmat*.h5 "$dir"/plan-*.h5
  fi
  local t0=$SECONDS
  timeout "$(left)" "${timer[@]}" "$bin/sluice-preprocess" generate --scale "$scale" \
    --edge-factor "$ef" --features "$features" --seed 1 --output "$data" >"$run_log" 2>&1
  local rc=$? wall=$((SECONDS - t0))
  record "gen:$scale:$ef" $rc $wall "$run_log"
  row "gen:$scale:$ef" "rmat$scale ef$ef" "-" $rc $wall "$run_log" "$data" "" ""
  ((rc == 0)) || rm -f "$data"
  return $rc
}

partition() {  # scale edge_factor layers hidden
  local scale=$1 ef=$2 layers=$3 hidden=$4 data=$dir/rmat$1-$2.h5
  local name=rmat$1-$2-l$3-h$4
  local plan=$dir/plan-$name.h5 run_log=$dir/part-$name.log
  [[ -f "$data" ]] || { echo "scale: $data missing (gen:$scale:$ef first)"; return 1; }
  [[ -f "$plan" ]] && { echo "scale: $plan exists"; return 0; }
  local t0=$SECONDS
  timeout "$(left)" "${timer[@]}" "$bin/sluice-preprocess" partition --dataset "$data" \
    --partitions 1 --gpu-memory "$gpu_memory" --model gcn --layers "$layers" --hidden "$hidden" \
    --output "$plan" >"$run_log" 2>&1
  local rc=$? wall=$((SECONDS - t0))
  record "part:$name" $rc $wall "$run_log"
  row "part" "rmat$scale ef$ef" "gcn l$layers h$hidden" $rc $wall "$run_log" "$data" "$plan" ""
  ((rc == 0)) || rm -f "$plan"
  return $rc
}

train() {  # scale edge_factor layers hidden
  local scale=$1 ef=$2 layers=$3 hidden=$4 data=$dir/rmat$1-$2.h5
  local name=rmat$1-$2-l$3-h$4
  local plan=$dir/plan-$name.h5 run_log=$dir/train-$name.log metrics=$dir/train-$name.jsonl
  [[ -f "$plan" ]] || { echo "scale: $plan missing (part:$scale:$ef:$layers:$hidden first)"; return 1; }
  rm -f "$metrics"
  local t0=$SECONDS
  # shellcheck disable=SC2086
  timeout "$(left)" "${timer[@]}" "$bin/sluice-train" --dataset "$data" --plan "$plan" \
    --device "${DEVICE:-cuda}" --gpu-memory "$gpu_memory" --model gcn --layers "$layers" \
    --hidden "$hidden" --epochs "$epochs" --eval-every "$epochs" --metrics "$metrics" --no-progress \
    ${TRAIN_ARGS:-} >"$run_log" 2>&1
  local rc=$? wall=$((SECONDS - t0))
  record "train:$name" $rc $wall "$run_log"
  row "train" "rmat$scale ef$ef" "gcn l$layers h$hidden" $rc $wall "$run_log" "$data" "$plan" "$metrics"
  return $rc
}

for step in "$@"; do
  IFS=: read -r verb s ef layers hidden <<<"$step"
  ef=${ef:-16} layers=${layers:-2} hidden=${hidden:-128}
  if ((SECONDS - start > budget)); then
    skipped+=("$step")
    continue
  fi
  echo "---- $step (elapsed $((SECONDS - start)) s)"
  case $verb in
    gen) generate "$s" "$ef" ;;
    part) partition "$s" "$ef" "$layers" "$hidden" ;;
    train) train "$s" "$ef" "$layers" "$hidden" ;;
    all)
      generate "$s" "$ef" && partition "$s" "$ef" "$layers" "$hidden" &&
        train "$s" "$ef" "$layers" "$hidden"
      ;;
    clean) rm -rf "$dir" && mkdir -p "$dir" ;;
    *) echo "scale: unknown step '$step' (gen:S[:EF], part|train|all:S[:EF[:L[:H]]], clean)" ;;
  esac
done
((${#skipped[@]})) && echo "scale: SKIPPED (budget ${budget}s): ${skipped[*]}"
echo "scale: done in $((SECONDS - start)) s; rows in $table"
cat "$table"
