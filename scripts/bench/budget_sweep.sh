#!/usr/bin/env bash
# Epoch time and host-link bytes against --gpu-memory (issue 23, budgeted residency): one GCN on
# one GPU, trained uncapped (every vertex matrix that fits the GPU in its memory) and under a
# series of budgets, each with the plan `partition --gpu-memory B` chooses for it. Runs ON the GPU
# machine, from the repository root of the copy, with .device-bundle/ built here by
# `scripts/device-build.sh sluice-preprocess sluice-train` and carried:
#   run(command="bash scripts/bench/budget_sweep.sh products", carry=[".device-bundle"])
# Graphs: products (RMAT scale 21, edge factor 30, d = 100, 47 classes; GCN 2 layers, hidden
# 256) and rmat25 (RMAT scale 25, edge factor 16, d = 128; GCN 2 layers, hidden 128).
# Budgets: BUDGETS (sizes as --gpu-memory takes them, e.g. "12G 24G"), or else FRACTIONS
# ("0.125 0.25 0.375 0.5 0.625 0.75 0.875") of the budget that holds the uncapped run: its peak
# GPU memory with the eighth of headroom the device keeps (8/7 of the peak). The uncapped run
# uses a plan of CHUNKS chunks (products 4, rmat25 12).
# Each run's --metrics (per epoch: seconds, transfers) and log go to $OUT (default
# out/budget-sweep); one JSON line per run to $OUT/budget_sweep.jsonl, which
# scripts/bench/plot_budget.py turns into a PNG and a Markdown table. Datasets and plans stay in
# BENCH_DIR (/tmp/sluice-budget-sweep), so a second call on a warm machine continues with other
# BUDGETS. Environment: EPOCHS (4; the last is reported, the first warms up), BUDGET_S (540:
# runs that would start later are skipped and listed), UNCAPPED (1; 0 skips the uncapped run when
# BUDGETS are given), PARTITION_ARGS (more options of `partition --gpu-memory`, e.g.
# "--chunk-choice smallest") with TAG (appended to the capped runs' names and plans, e.g.
# "-smallest"). Link bytes count every host<->GPU byte of the epoch: gathered rows, blocks (the
# staged chunk CSRs among them), stores and flushes. The runs' logs and the partition logs are
# packed at the end into $OUT/budget_sweep_logs.tgz (the device tool brings back few files).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# shellcheck source=scripts/bench/lib.sh
source scripts/bench/lib.sh
graph=${1:-products}
dir=${BENCH_DIR:-/tmp/sluice-budget-sweep}
out=${OUT:-$root/out/budget-sweep}
budget=${BUDGET_S:-540}
epochs=${EPOCHS:-4}
mkdir -p "$dir" "$out"
log=$out/budget_sweep.log
table=$out/budget_sweep.jsonl
bench_setup budget_sweep sluice-preprocess sluice-train
case $graph in
  products) generate_args=(--scale 21 --edge-factor 30 --features 100 --classes 47) hidden=256 chunks=${CHUNKS:-4} ;;
  rmat25) generate_args=(--scale 25 --edge-factor 16 --features 128 --classes 47) hidden=128 chunks=${CHUNKS:-12} ;;
  *) echo "budget_sweep: unknown graph '$graph' (products or rmat25)"; exit 2 ;;
esac
data=$dir/$graph.h5
model=(--model gcn --layers 2 --hidden "$hidden")
machine="$(bench_machine), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
echo "budget_sweep: $graph on $machine; $(date -u +%F\ %T) UTC"

if [[ ! -f $data ]]; then
  bench_run "generate $graph" "$dir/generate.log" "$bin/sluice-preprocess" generate \
    "${generate_args[@]}" --seed 1 --output "$data" || exit 1
fi

# run_budget NAME PLAN GPU_MEMORY TAG: trains and appends the run's JSON line; prints its peak
# GPU bytes.
run_budget() {
  local name=$1 plan=$2 cap=$3 rc wall metrics=$dir/$1.jsonl
  rm -f "$metrics"
  bench_run "train $name" "$out/$name.log" "$bin/sluice-train" --dataset "$data" --plan "$plan" \
    "${model[@]}" --device cuda --gpu-memory "$cap" --epochs "$epochs" --eval-every 1000 \
    --metrics "$metrics" --no-progress -v >/dev/null
  python3 - "$table" "$graph" "$name" "$cap" "$rc" "$plan" "$metrics" "$out/$name.log" \
    "$machine" "$4" <<'PY'
import json, os, re, sys
table, graph, name, cap, rc, plan, metrics, run_log, machine, tag = sys.argv[1:]
row = {"graph": graph, "name": name, "gpu_memory": cap, "rc": int(rc), "machine": machine,
       "tag": tag}
text = open(run_log, errors="replace").read() if os.path.exists(run_log) else ""
m = re.search(r"\b1 x (\d+) chunks", text) or re.search(r"C = (\d+)", text)
if m: row["chunks"] = int(m.group(1))
m = re.search(r"vertex data: in the memory of (.*)", text)
if m: row["vertex_data"] = m.group(1).strip()
plan_log = os.path.join(os.path.dirname(plan), "partition-" + name + ".log")
if os.path.exists(plan_log):
    m = re.search(r"C=(\d+) +forecast epoch[a-z ]* ([0-9.]+) s: (.*) over the host link.*\(chosen\)",
                  open(plan_log, errors="replace").read())
    if m: row.update(forecast_s=float(m.group(2)), forecast_link=m.group(3))
if os.path.exists(metrics):
    records = [json.loads(l) for l in open(metrics) if l.strip()]
    if records:
        last = records[-1]
        t = last["transfers"]
        row.update(epoch_s=last["seconds"],
                   link_bytes=t["h2d_gather_bytes"] + t["h2d_block_bytes"] + t["d2h_bytes"] +
                   t.get("d2h_index_bytes", 0),
                   resident_bytes=t.get("resident_bytes", 0),
                   peak_gpu_bytes=max(r["peak_device_bytes"] for r in records))
open(table, "a").write(json.dumps(row) + "\n")
print(row.get("peak_gpu_bytes", 0))
PY
}

sizes=()
if ((${UNCAPPED:-1})) || [[ -z ${BUDGETS:-} ]]; then
  plan=$dir/$graph-c$chunks.plan.h5
  [[ -f $plan ]] || bench_run "partition $graph C=$chunks" "$dir/partition-c$chunks.log" \
    "$bin/sluice-preprocess" partition --dataset "$data" --partitions 1 --chunks "$chunks" \
    --output "$plan" || exit 1
  peak=$(run_budget "$graph-uncapped" "$plan" 0 "" | tail -1)
  if [[ -z ${BUDGETS:-} ]]; then
    full=$((peak + peak / 7))
    for f in ${FRACTIONS:-0.125 0.25 0.375 0.5 0.625 0.75 0.875}; do
      sizes+=("$(python3 -c "print(int($f * $full))")")
    done
  fi
fi
for b in ${BUDGETS:-}; do sizes+=("$b"); done

for cap in "${sizes[@]}"; do
  if ((SECONDS - start > budget)); then
    skipped+=("$cap")
    continue
  fi
  name=$graph-$cap${TAG:-}
  plan=$dir/$name.plan.h5
  # shellcheck disable=SC2086  # PARTITION_ARGS: options split at spaces
  [[ -f $plan ]] || bench_run "partition $graph --gpu-memory $cap ${PARTITION_ARGS:-}" \
    "$dir/partition-$name.log" "$bin/sluice-preprocess" partition --dataset "$data" \
    --partitions 1 --gpu-memory "$cap" "${model[@]}" ${PARTITION_ARGS:-} --output "$plan" ||
    continue
  run_budget "$name" "$plan" "$cap" "${TAG:-}" >/dev/null
done
((${#skipped[@]})) && echo "budget_sweep: SKIPPED (budget ${budget}s): BUDGETS=\"${skipped[*]}\""
echo "budget_sweep: done in $((SECONDS - start)) s"
# One archive for the runs' logs (removed from $OUT) and the partitions' (kept in BENCH_DIR).
run_logs=() partition_logs=()
for f in "$out"/*.log; do [[ -f $f && $f != "$log" ]] && run_logs+=("$f"); done
for f in "$dir"/partition-*.log; do [[ -f $f ]] && partition_logs+=("$f"); done
if ((${#run_logs[@]} + ${#partition_logs[@]})); then
  tar czPf "$out/budget_sweep_logs.tgz" --transform 's|.*/||' "${run_logs[@]}" \
    "${partition_logs[@]}" && rm -f "${run_logs[@]}"
fi
cat "$table"
