#!/usr/bin/env bash
# Runs ON the GPU machine after scripts/bench/gpu_train.sh made the datasets and one-chunk plans
# (e.g. EPOCHS=1 PYG=0 MODELS=gcn CAPPED=0 NO_OVERLAP=0 CHUNKS2= CHUNKS=1 bash
# scripts/bench/gpu_train.sh): every epoch's training and evaluation times of the same
# sluice-train run, repeated, under each environment named, so that evaluations that take longer
# than their neighbours show up with how often they do. One line per run:
#   DATASET BINARY ENV train <ms per epoch ...> | eval <ms per evaluation ...>
# (the first epoch left out). Usage:
#   DATASETS="products reddit" BINARIES="sluice-train" ENVS="default OMP_NUM_THREADS=1" \
#     RUNS=3 EPOCHS=8 MODEL=gcn bash scripts/bench/eval_times.sh
# ENVS: space-separated; "default" runs with the environment as it is, anything else is one
# VARIABLE=value set for that run only. TRACE=1 also writes each run's --trace timeline to
# $OUT/eval-traces/ (`scripts/bench/trace_summary.py --evaluation` summarizes one). BIN_DIR
# (.device-bundle) holds the binaries, DEVICE (cuda) is sluice-train's --device.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${BIN_DIR:-$root/.device-bundle}
dir=${BENCH_DIR:-/tmp/sluice-gpu-bench}
out=${OUT:-$root/out}
export LD_LIBRARY_PATH="$bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
case ${MODEL:-gcn} in
  gat) model_args=(--model gat --layers 2 --hidden 64 --heads 4 --output-heads 1) ;;
  *) model_args=(--model "${MODEL:-gcn}" --layers 2 --hidden 256) ;;
esac
metrics=$(mktemp)
log=$(mktemp)
trap 'rm -f "$metrics" "$log"' EXIT
for ds in ${DATASETS:-products reddit}; do
  plan=$dir/$ds-p1-c1.plan.h5
  [[ -f "$dir/$ds.h5" && -f "$plan" ]] || { echo "eval_times: no $ds dataset or plan in $dir"; continue; }
  for run in $(seq "${RUNS:-3}"); do
    for b in ${BINARIES:-sluice-train}; do
      for env_setting in ${ENVS:-default}; do
        trace=()
        if ((${TRACE:-0})); then
          mkdir -p "$out/eval-traces"
          trace=(--trace "$out/eval-traces/$ds-$b-${env_setting//[^A-Za-z0-9._-]/_}-$run.json")
        fi
        env_args=()
        [[ $env_setting != default ]] && env_args=("$env_setting")
        env "${env_args[@]}" "$bundle/$b" --dataset "$dir/$ds.h5" --plan "$plan" "${model_args[@]}" \
          --epochs "${EPOCHS:-8}" --eval-every 1 --optimizer adam --lr 0.01 --dropout 0.5 \
          --device "${DEVICE:-cuda}" --no-progress --metrics "$metrics" "${trace[@]}" >"$log" 2>&1 ||
          { echo "$ds $b $env_setting: rc $? ($(tail -1 "$log"))"; continue; }
        python3 - "$metrics" "$ds $b $env_setting" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])][1:]
train = " ".join(f"{1e3 * r['seconds']:.1f}" for r in rows)
evals = " ".join(f"{1e3 * r['eval_seconds']:.1f}" for r in rows if r.get("eval_seconds"))
print(f"{sys.argv[2]} train {train} | eval {evals}")
PY
      done
    done
  done
done
