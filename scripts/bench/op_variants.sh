#!/usr/bin/env bash
# Runs ON the GPU machine after scripts/bench/gpu_train.sh made the dataset and plan: the same
# sluice-train run (--op-times) with each binary named, printing each one's epoch time and the
# named operations' times. Usage: BINARIES="a b" OPS="gat_backward.sources" bash op_variants.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=$root/.device-bundle
dir=${BENCH_DIR:-/tmp/sluice-gpu-bench}
export LD_LIBRARY_PATH="$bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
read -r -a model_args <<<"${MODEL_ARGS:---model gat --layers 2 --hidden 64 --heads 4 --output-heads 1}"
for round in ${ROUNDS:-1 2}; do
  for b in ${BINARIES:-sluice-train}; do
    log=$(mktemp)
    "$bundle/$b" --dataset "$dir/${DATASET:-products}.h5" --plan "$dir/${PLAN:-products-p1-c1}.plan.h5" \
      "${model_args[@]}" --epochs "${EPOCHS:-5}" --optimizer adam --lr 0.01 --dropout 0.5 \
      --device cuda --no-progress --op-times >"$log" 2>&1
    echo "== $b (round $round): $(grep -o 'epoch time median [0-9.]* s' "$log") $(grep -o 'final loss [0-9.]*' "$log")"
    grep -E "${OPS:-gat_backward.sources}" "$log" | sed 's/.*compute *//'
    rm -f "$log"
  done
done
