#!/usr/bin/env bash
# A/B of two sluice-train builds on the same data, plans and GPUs, runs interleaved (A B A B) so
# that drift on the machine hits both. Runs ON the GPU machine from the repository root:
#   run(command="OLD=.device-old/sluice-train bash scripts/bench/ab_binaries.sh",
#       carry=[".device-bundle", ".device-old"], kind="nvidia-h200")
# A = $OLD, B = .device-bundle/sluice-train. A_ARGS / B_ARGS: extra sluice-train options for one
# side (e.g. B_ARGS=--no-overlap with no OLD: one build, an option off and on). A_PLAN_ARGS /
# B_PLAN_ARGS: extra sluice-preprocess partition options for one side's plan (e.g.
# B_PLAN_ARGS=--imbalance=1.002), each such plan written under its own name.
# Datasets and plans as scripts/bench/gpu_train.sh (same BENCH_DIR, generated when missing).
# Environment: OLD (default: the B build), DATASETS ("products reddit"), MODELS ("gat"; gcn,
# gcn3, sage, gat as in gpu_train.sh), PARTS
# ("1": partitions; 2 needs 2 GPUs for GPU counts of 2), CHUNKS (4), EPOCHS (3), REPEAT (2).
# Prints per run the median epoch time after the first epoch, the losses, the peak memory and
# the last epoch's host-link bytes (writes $OUT/ab.jsonl), then whether the repeats trained to
# the same losses bit for bit: OLD=.device-bundle/sluice-train compares a build with itself, its
# run-to-run reproducibility.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bundle=$root/.device-bundle
out=${OUT:-$root/out/ab}
dir=${BENCH_DIR:-/tmp/sluice-gpu-bench}
new=$bundle/sluice-train
old=${OLD:-$new}
[[ -n ${OLD:-} || -n ${A_ARGS:-}${B_ARGS:-}${A_PLAN_ARGS:-}${B_PLAN_ARGS:-} ]] ||
  { echo "set OLD, A_ARGS/B_ARGS or A_PLAN_ARGS/B_PLAN_ARGS" >&2; exit 2; }
chunks=${CHUNKS:-4}
epochs=${EPOCHS:-3}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
mkdir -p "$out" "$dir/runs"
export LD_LIBRARY_PATH="$bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0
source "$root/scripts/bench/datasets.sh"
: >"$out/ab.jsonl"
for ds in ${DATASETS:-products reddit}; do
  data=$dir/$ds.h5
  [[ -f $data ]] || "$bundle/sluice-preprocess" generate --scale "${scale[$ds]}" \
    --edge-factor "${factor[$ds]}" --features "${dim[$ds]}" --classes "${classes[$ds]}" --seed 1 \
    --name "$ds-like" --output "$data" >/dev/null || exit 1
  for parts in ${PARTS:-1}; do
    declare -A plan=()
    for side in A B; do
      plan_args=${A_PLAN_ARGS:-}
      [[ $side == B ]] && plan_args=${B_PLAN_ARGS:-}
      tag=$(printf '%s' "$plan_args" | tr -c 'A-Za-z0-9.=' '_')
      plan[$side]=$dir/$ds-p$parts-c$chunks${tag:+-$tag}.plan.h5
      # shellcheck disable=SC2086  # plan_args: option words
      [[ -f ${plan[$side]} ]] || "$bundle/sluice-preprocess" partition --dataset "$data" \
        --partitions "$parts" --chunks "$chunks" $plan_args --output "${plan[$side]}" \
        >/dev/null || exit 1
    done
    ngpu=$((parts < gpus ? parts : gpus))
    for model in ${MODELS:-gat}; do
      # MODELS names as scripts/bench/gpu_train.sh: gcn, gcn3 (3 layers), sage, gat.
      width=(--model "$model" --layers 2 --hidden 256)
      [[ $model == gcn3 ]] && width=(--model gcn --layers 3 --hidden 256)
      [[ $model == gat ]] && width=(--model gat --layers 2 --hidden 64 --heads 4 --output-heads 1)
      for rep in $(seq "${REPEAT:-2}"); do
        for side in A B; do
          exe=$old
          settings=${A_ARGS:-}
          [[ $side == B ]] && exe=$new && settings=${B_ARGS:-}
          metrics=$dir/runs/ab-$ds-$model-P$parts-$side.jsonl
          rm -f "$metrics"
          # shellcheck disable=SC2086  # settings: option words
          "$exe" $settings --dataset "$data" --plan "${plan[$side]}" "${width[@]}" \
            --epochs "$epochs" --eval-every 1000 --optimizer adam --lr 0.01 --dropout 0.5 \
            --device cuda --gpus "$ngpu" --no-progress --metrics "$metrics" >/dev/null 2>&1
          rc=$?
          python3 - "$metrics" "$ds" "$model" "$parts" "$ngpu" "$side" "$rep" "$rc" \
            >>"$out/ab.jsonl" <<'PY'
import json, os, statistics, sys
metrics, ds, model, parts, ngpu, side, rep, rc = sys.argv[1:]
row = {"dataset": ds, "model": model, "partitions": int(parts), "gpus": int(ngpu),
       "side": side, "repeat": int(rep), "rc": int(rc)}
if os.path.exists(metrics):
    epochs = [json.loads(l) for l in open(metrics) if l.strip()]
    secs = [e["seconds"] for e in epochs]
    if len(secs) > 1:
        row["s_per_epoch"] = statistics.median(secs[1:])
    row["losses"] = [e["loss"] for e in epochs]
    row["peak_device_bytes"] = max(e["peak_device_bytes"] for e in epochs)
    if epochs:
        t = epochs[-1]["transfers"]
        row["h2d_gb"] = (t["h2d_gather_bytes"] + t["h2d_block_bytes"]) / 1e9
        row["d2h_gb"] = (t["d2h_bytes"] + t.get("d2h_index_bytes", 0)) / 1e9
print(json.dumps(row))
PY
          tail -n 1 "$out/ab.jsonl"
        done
      done
    done
  done
done
# Run to run: whether the repeats of a side (and, with one build and no side options, both
# sides) trained to the same losses bit for bit.
same_build=""
[[ $(realpath "$old") == "$(realpath "$new")" && -z ${A_ARGS:-}${B_ARGS:-}${A_PLAN_ARGS:-}${B_PLAN_ARGS:-} ]] &&
  same_build=same
python3 - "$out/ab.jsonl" "$same_build" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
same_build = sys.argv[2] == "same"
groups = {}
for r in rows:
    if "losses" not in r:
        continue
    side = "A+B" if same_build else r["side"]
    groups.setdefault((r["dataset"], r["model"], r["partitions"], side), []).append(r["losses"])
for (ds, model, parts, side), runs in sorted(groups.items()):
    if len(runs) < 2:
        continue
    # The reported loss is a double sum added atomically per block on the GPU: its last bits
    # may differ where training itself is reproducible.
    spread = max(abs(a - b) / max(abs(b), 1e-30) for run in runs for a, b in zip(run, runs[0]))
    verdict = ("identical losses" if spread == 0 else
               "same training (losses within the loss sum's rounding)" if spread < 1e-13 else
               "training differs")
    print(f"run to run: {ds} {model} P={parts} side {side}: {len(runs)} runs, {verdict} "
          f"(largest loss difference {spread:.1e} relative)")
PY
