#!/usr/bin/env bash
# Per-operation device times (SLUICE_OP_TIMES=1) of one model on ONE GPU, for a one-partition
# plan and a two-partition plan mapped onto the same GPU (the two logical devices share it, so
# the per-device sums show which operations shrink with a partition's share of the graph and
# which do not). Runs ON the GPU machine from the repository root, with .device-bundle/ carried:
#   run(command="bash scripts/bench/op_breakdown.sh", carry=[".device-bundle"], kind="nvidia-h200")
# Environment: DATASETS ("reddit products"), MODEL (gat), CHUNKS (4), EPOCHS (3),
# BENCH_DIR (/tmp/sluice-gpu-bench). Output: $OUT/op_breakdown.log and one table per dataset
# (scripts/bench/op_times.py) in $OUT/op_breakdown.md.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bundle=$root/.device-bundle
out=${OUT:-$root/out/op-breakdown}
dir=${BENCH_DIR:-/tmp/sluice-gpu-bench}
model=${MODEL:-gat}
chunks=${CHUNKS:-4}
epochs=${EPOCHS:-3}
mkdir -p "$out" "$dir"
log=$out/op_breakdown.log
: >"$log"
export LD_LIBRARY_PATH="$bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SLUICE_OP_TIMES=1
declare -A scale=([products]=21 [reddit]=18) factor=([products]=30 [reddit]=218)
declare -A dim=([products]=100 [reddit]=602) classes=([products]=47 [reddit]=41)
width=(--hidden 256)
[[ $model == gat ]] && width=(--hidden 64 --heads 4 --output-heads 1)
: >"$out/op_breakdown.md"
for ds in ${DATASETS:-reddit products}; do
  data=$dir/$ds.h5
  [[ -f $data ]] || "$bundle/sluice-preprocess" generate --scale "${scale[$ds]}" \
    --edge-factor "${factor[$ds]}" --features "${dim[$ds]}" --classes "${classes[$ds]}" --seed 1 \
    --name "$ds-like" --output "$data" >>"$log" 2>&1
  runs=()
  for parts in 1 2; do
    plan=$dir/$ds-p$parts-c$chunks.plan.h5
    [[ -f $plan ]] || "$bundle/sluice-preprocess" partition --dataset "$data" --partitions "$parts" \
      --chunks "$chunks" --output "$plan" >>"$log" 2>&1
    name=$ds-$model-P$parts-1gpu
    echo "---- $name" >>"$log"
    "$bundle/sluice-train" --dataset "$data" --plan "$plan" --model "$model" --layers 2 \
      "${width[@]}" --epochs "$epochs" --eval-every 1000 --optimizer adam --lr 0.01 --dropout 0.5 \
      --device cuda --gpus 1 --no-progress -v >>"$log" 2>&1
    echo "---- $name: rc $?" >>"$log"
    runs+=("$name")
  done
  {
    echo "## $ds $model, one GPU: P = 1 against P = 2 (busiest logical device)"
    python3 scripts/bench/op_times.py "$log" --runs "${runs[@]}"
    echo
  } >>"$out/op_breakdown.md"
done
grep -h 'epoch\b.*loss\|s/epoch\|merged' "$log" | tail -n 20
cat "$out/op_breakdown.md"
