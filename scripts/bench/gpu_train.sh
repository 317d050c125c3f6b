#!/usr/bin/env bash
# GPU training benchmark (issue #5). Runs ON the GPU machine, from the repository root of the
# copy, with .device-bundle/ built here by scripts/device-build.sh and carried:
#   run(command="bash scripts/bench/gpu_train.sh", carry=[".device-bundle"], kind="nvidia-h200-x2")
#
# Datasets (sluice-preprocess generate, all cores, planted labels):
#   products-like  RMAT scale 21, edge factor 30, d = 100, 47 classes
#   reddit-like    RMAT scale 18, edge factor 218, d = 602, 41 classes
# Models (MODELS): gcn (2 layers, hidden 256), gcn3 (3 layers, hidden 256), sage (GraphSAGE, 2
# layers, hidden 256), gat (2 layers, 4 heads x 64 = 256 wide, 1 output head).
# Runs per dataset and model: 1 GPU (P = 1), 2 GPUs (P = 2) with each --comm mode, and both
# again under --gpu-memory CAP = a quarter of the in-memory working set (features + every
# layer's output rows + the CSR, from `sluice-preprocess info --json`), the plan's chunk count
# then chosen by `partition --gpu-memory CAP`. The peer: scripts/bench/pyg_full_graph.py
# (PyTorch Geometric, full graph on one GPU) on the same data.h5.
# Each run's --report and --metrics are merged into one JSON line of $OUT/gpu_runs.jsonl;
# scripts/bench/summarize_gpu.py turns them into Markdown ($OUT/gpu_train.md).
#
# Environment: UNCAPPED (1; 0 runs only the capped runs), EPOCHS (3; the first is warm-up), CHUNKS (4, chunks per partition of the
# uncapped plans), BUDGET_S (470: steps that would start later are skipped and listed),
# BENCH_DIR (/tmp/sluice-gpu-bench), DATASETS ("products reddit"), PYG (1 = run the peer),
# PARTITIONER (metis) and BALANCE (both) for the plans, IMBALANCE ("": partition's default, 1.01
# per constraint; e.g. 1.03 = the plans of session 4's GPU runs; uncapped two-GPU plans only),
# CHUNKS2 ("2"; "" for none: further two-GPU plans with that many chunks per partition, run
# with p2p+reuse and tagged cN; C = 2 per partition on two GPUs keeps the chunk size, and so the
# memory per GPU, of the one-GPU plan with C = 4),
# PRODUCTS_SCALE (21) and REDDIT_SCALE (18) for a quick smoke run at small sizes, NO_OVERLAP (1:
# also run 1 and 2 GPUs with --no-overlap, the overlap ablation), SLUICE_RUNS (1; 0 runs only the
# peer on the uncapped side), CAPPED (1; 0 skips the capped runs), RECOMPUTE_AB (0; 1 also runs
# GCN with --intermediates=recompute), MODELS ("gcn gat"), COMMS ("p2p+reuse p2p baseline"),
# AB_ARGS (""; space-separated sluice-train options --name=value, each also run on 1 and 2 GPUs
# and on the CHUNKS2 plans as a variant), CAP_AB_ARGS (the same for the capped runs),
# CAPPED_PARTS ("1 2": GPU counts of the capped runs), TRACE (0; 1 writes each run's --trace
# timeline to $OUT/traces/NAME.json, NAME's characters other than letters, digits, '.', '_' and '-'
# as '_', e.g. products-gcn-2gpu-p2p_reuse.json: the device tool leaves other names behind), OP_TIMES (0; 1 runs sluice-train with --op-times, which logs
# per-operation device times into gpu_train.log; scripts/bench/op_times.py gpu_train.log --runs A B
# tabulates two runs side by side; with TRACE=1 the timelines hold every operation too, listed by
# scripts/bench/trace_summary.py --ops), VERBOSE (0; 1 runs sluice-train with --verbose: debug lines
# such as the constants' placement), EVAL_EVERY (1000: sluice-train --eval-every; the last epoch
# always evaluates).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bundle=$root/.device-bundle
bin=$bundle
out=${OUT:-$root/out/gpu-bench}
dir=${BENCH_DIR:-/tmp/sluice-gpu-bench}
epochs=${EPOCHS:-3}
chunks=${CHUNKS:-4}
budget=${BUDGET_S:-470}
datasets=${DATASETS:-products reddit}
run_pyg=${PYG:-1}
partitioner=${PARTITIONER:-metis}
balance=${BALANCE:-both}
mkdir -p "$out" "$dir/runs"
runs_file=$out/gpu_runs.jsonl
pyg_file=$out/pyg.jsonl
log=$out/gpu_train.log
: >"$runs_file"
: >"$pyg_file"
: >"$out/datasets.jsonl"
exec > >(tee -a "$log") 2>&1
start=$SECONDS

export LD_LIBRARY_PATH="$bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
for exe in "$bin/sluice-preprocess" "$bin/sluice-train"; do
  [[ -x "$exe" ]] || { echo "gpu_train: $exe missing (scripts/device-build.sh sluice-preprocess sluice-train)"; exit 2; }
  for lib in $(ldd "$exe" 2>/dev/null | awk '/not found/ {print $1}'); do
    found=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
    [[ -n "$found" ]] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
  done
done

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
machine="${gpus}x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM (at start), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
echo "gpu_train: $machine; $(date -u +%F\ %T) UTC; epochs $epochs; budget ${budget}s"
skipped=()
have_time() {  # what: true when the budget allows starting it
  if ((SECONDS - start > budget)); then
    skipped+=("$1")
    echo "gpu_train: SKIP $1 (budget ${budget}s used)"
    return 1
  fi
  return 0
}
step() {  # name, command...: runs it, logs wall time
  local name=$1
  shift
  local t0=$SECONDS
  echo "---- $name"
  "$@"
  local rc=$?
  echo "---- $name: rc $rc, $((SECONDS - t0)) s (elapsed $((SECONDS - start)) s)"
  return $rc
}

source "$root/scripts/bench/datasets.sh"
hidden=256
gat_heads=4
gat_hidden=64

# model_args MODEL: sets `width` to the sluice-train and partition options of a MODELS name.
model_args() {
  case $1 in
    gat) width=(--model gat --layers 2 --hidden "$gat_hidden" --heads "$gat_heads" --output-heads 1) ;;
    gcn3) width=(--model gcn --layers 3 --hidden "$hidden") ;;
    *) width=(--model "$1" --layers 2 --hidden "$hidden") ;;
  esac
}

# sluice-train for one configuration; the merged JSON line goes to gpu_runs.jsonl.
train() {  # name dataset model gpus plan comm cap [overlap: 1 (default) or 0 = --no-overlap]
  #         [variant: one --option=value for sluice-train, recorded with the run]
  local name=$1 ds=$2 model=$3 ngpu=$4 plan=$5 comm=$6 cap=$7 overlap=${8:-1} variant=${9:-}
  have_time "$name" || return 0
  ((ngpu <= gpus)) || { echo "gpu_train: $name needs $ngpu GPUs"; return 0; }
  local width
  model_args "$model"
  local extra=()
  ((overlap)) || extra=(--no-overlap)
  [[ -n $variant ]] && extra+=("$variant")
  ((${OP_TIMES:-0})) && extra+=(--op-times)
  ((${VERBOSE:-0})) && extra+=(--verbose)
  local report=$dir/runs/$name.json metrics=$dir/runs/$name.jsonl
  rm -f "$report" "$metrics"
  if ((${TRACE:-0})); then
    mkdir -p "$out/traces"
    extra+=(--trace "$out/traces/${name//[^A-Za-z0-9._-]/_}.json")
  fi
  step "$name" "$bin/sluice-train" --dataset "$dir/$ds.h5" --plan "$plan" "${width[@]}" --epochs "$epochs" --eval-every "${EVAL_EVERY:-1000}" --optimizer adam --lr 0.01 \
    --dropout 0.5 --device cuda --gpus "$ngpu" --comm "$comm" --gpu-memory "$cap" \
    --report "$report" --metrics "$metrics" --no-progress "${extra[@]}"
  local rc=$?
  python3 - "$runs_file" "$name" "$ds" "$model" "$ngpu" "$comm" "$cap" "$rc" "$report" "$metrics" \
    "$overlap" "$variant" <<'PY'
import json, os, sys
out, name, ds, model, ngpu, comm, cap, rc, report, metrics, overlap, variant = sys.argv[1:]
row = {"name": name, "dataset": ds, "model": model, "gpus": int(ngpu), "comm": comm,
       "gpu_memory": int(cap), "rc": int(rc), "overlap": int(overlap)}
if variant:
    row["variant"] = variant
if os.environ.get("PLAN_TAG"):
    row["plan_tag"] = os.environ["PLAN_TAG"]
if os.path.exists(report):
    row["report"] = json.load(open(report))
if os.path.exists(metrics):
    row["metrics"] = [json.loads(l) for l in open(metrics) if l.strip()]
open(out, "a").write(json.dumps(row) + "\n")
PY
}

partition() {  # dataset partitions output [extra...]
  local ds=$1 parts=$2 output=$3
  shift 3
  [[ -f "$output" ]] && return 0
  step "partition $ds P=$parts $*" "$bin/sluice-preprocess" partition --dataset "$dir/$ds.h5" \
    --partitions "$parts" --partitioner "$partitioner" --balance "$balance" --output "$output" "$@"
}

# Capped runs: the chunk count comes from `partition --gpu-memory CAP --model M` (a search that
# builds several plans, bounded by CAP_PARTITION_S seconds), one plan per model (the estimate is
# the model's: GCN and GAT reach a cap at different C and by different budget rules); a cap the
# design cannot meet is recorded with partition's own message. CAP_AB_ARGS: sluice-train
# options, each also run as a variant of every capped run.
capped_runs() {  # dataset cap
  local ds=$1 cap=$2 parts plan model width variant
  for parts in ${CAPPED_PARTS:-1 2}; do
    for model in ${MODELS:-gcn gat}; do
      plan=$dir/$ds-p$parts-cap-$model-$partitioner-$balance.plan.h5
      have_time "partition $ds P=$parts $model cap" || continue
      model_args "$model"
      [[ -f "$plan" ]] || step "partition $ds P=$parts $model --gpu-memory $cap" \
        timeout "${CAP_PARTITION_S:-180}" "$bin/sluice-preprocess" partition --dataset "$dir/$ds.h5" \
        --partitions "$parts" --partitioner "$partitioner" --balance "$balance" --output "$plan" \
        --gpu-memory "$cap" "${width[@]}" \
        >"$dir/$ds-p$parts-$model-cap.log" 2>&1
      grep -E 'gpu-memory|rror' "$dir/$ds-p$parts-$model-cap.log" | tail -n 6 | cut -c1-400
      if [[ ! -f "$plan" ]]; then
        python3 - "$runs_file" "$ds" "$parts" "$cap" "$dir/$ds-p$parts-$model-cap.log" "$model" <<'PY'
import json, sys
out, ds, parts, cap, log, model = sys.argv[1:]
text = open(log, errors="replace").read()
lines = [l for l in text.splitlines() if "gpu-memory" in l or "rror" in l]
row = {"name": f"{ds}-{model}-cap-P{parts}", "dataset": ds, "model": model, "gpus": int(parts),
       "gpu_memory": int(cap), "rc": 1, "infeasible": "\n".join(lines[-6:]) or "partition timed out"}
open(out, "a").write(json.dumps(row) + "\n")
PY
        continue
      fi
      train "$ds-$model-${parts}gpu-cap" "$ds" "$model" "$parts" "$plan" p2p+reuse "$cap"
      for variant in ${CAP_AB_ARGS:-}; do
        tag=$(echo "${variant#--}" | tr '=+_' '---')
        train "$ds-$model-${parts}gpu-cap-$tag" "$ds" "$model" "$parts" "$plan" \
          p2p+reuse "$cap" 1 "$variant"
      done
    done
  done
}

for ds in $datasets; do
  have_time "generate $ds" || continue
  if [[ ! -f "$dir/$ds.h5" ]]; then
    step "generate $ds" "$bin/sluice-preprocess" generate --scale "${scale[$ds]}" \
      --edge-factor "${factor[$ds]}" --features "${dim[$ds]}" --classes "${classes[$ds]}" \
      --seed 1 --name "$ds-like" --output "$dir/$ds.h5" || continue
  fi
  "$bin/sluice-preprocess" info "$dir/$ds.h5" --json >"$dir/$ds.info.json"
  cat "$dir/$ds.info.json"
  echo
  # In-memory working set: features + each layer's output rows (hidden 256, classes) + CSR.
  working_set=$(python3 - "$dir/$ds.info.json" "$hidden" <<'PY'
import json, sys
i = json.load(open(sys.argv[1])); hidden = int(sys.argv[2])
n, m, d, k = i["nodes"], i["edges"], i["feature_dim"], i["classes"]
print(4 * n * (d + hidden + k) + 4 * m + 8 * (n + 1))
PY
)
  cap=$((working_set / 4))
  echo "gpu_train: $ds working set $working_set bytes, cap $cap bytes"
  echo "{\"dataset\": \"$ds\", \"info\": $(cat "$dir/$ds.info.json"), \"working_set\": $working_set, \"cap\": $cap}" >>"$out/datasets.jsonl"

  ((${UNCAPPED:-1})) || continue  # UNCAPPED=0: only the capped runs below
  if ((${SLUICE_RUNS:-1})); then  # SLUICE_RUNS=0: only the peer (PyG) on this dataset
    p1=$dir/$ds-p1-c$chunks.plan.h5
    p2=$dir/$ds-p2-c$chunks-$partitioner-$balance${IMBALANCE:+-imbalance-$IMBALANCE}.plan.h5
    have_time "partition $ds" && partition "$ds" 1 "$p1" --chunks "$chunks"
    have_time "partition $ds" && partition "$ds" 2 "$p2" --chunks "$chunks" \
      ${IMBALANCE:+--imbalance "$IMBALANCE"}
    # CHUNKS2: more two-GPU plans (chunks per partition), p2p+reuse runs only, tagged "cN".
    for c2 in ${CHUNKS2-2}; do
      [[ $c2 == "$chunks" ]] && continue
      p2c=$dir/$ds-p2-c$c2-$partitioner-$balance${IMBALANCE:+-imbalance-$IMBALANCE}.plan.h5
      have_time "partition $ds" && partition "$ds" 2 "$p2c" --chunks "$c2" \
        ${IMBALANCE:+--imbalance "$IMBALANCE"}
    done
    for model in ${MODELS:-gcn gat}; do
      for c2 in ${CHUNKS2-2}; do
        [[ $c2 == "$chunks" ]] && continue
        p2c=$dir/$ds-p2-c$c2-$partitioner-$balance${IMBALANCE:+-imbalance-$IMBALANCE}.plan.h5
        [[ -f "$p2c" ]] && PLAN_TAG=c$c2 train "$ds-$model-2gpu-c$c2" "$ds" "$model" 2 "$p2c" p2p+reuse 0
      done
      [[ -f "$p1" ]] && train "$ds-$model-1gpu" "$ds" "$model" 1 "$p1" p2p+reuse 0
      if [[ -f "$p2" ]]; then
        for comm in ${COMMS:-p2p+reuse p2p baseline}; do
          train "$ds-$model-2gpu-$comm" "$ds" "$model" 2 "$p2" "$comm" 0
        done
      fi
      if ((${NO_OVERLAP:-1})); then  # the overlap ablation: same runs with --no-overlap
        [[ -f "$p1" ]] && train "$ds-$model-1gpu-nooverlap" "$ds" "$model" 1 "$p1" p2p+reuse 0 0
        [[ -f "$p2" ]] && train "$ds-$model-2gpu-nooverlap" "$ds" "$model" 2 "$p2" p2p+reuse 0 0
      fi
      for setting in ${AB_ARGS:-}; do  # the same runs with one sluice-train option added
        tag=$(echo "${setting#--}" | tr '=+_' '---')
        [[ -f "$p1" ]] && train "$ds-$model-1gpu-$tag" "$ds" "$model" 1 "$p1" p2p+reuse 0 1 "$setting"
        [[ -f "$p2" ]] && train "$ds-$model-2gpu-$tag" "$ds" "$model" 2 "$p2" p2p+reuse 0 1 "$setting"
        for c2 in ${CHUNKS2-2}; do
          [[ $c2 == "$chunks" ]] && continue
          p2c=$dir/$ds-p2-c$c2-$partitioner-$balance${IMBALANCE:+-imbalance-$IMBALANCE}.plan.h5
          [[ -f "$p2c" ]] && PLAN_TAG=c$c2 train "$ds-$model-2gpu-c$c2-$tag" "$ds" "$model" 2 "$p2c" \
            p2p+reuse 0 1 "$setting"
        done
      done
      if [[ $model != gat ]] && ((${RECOMPUTE_AB:-0})); then  # A^l recomputed, not cached
        [[ -f "$p1" ]] && train "$ds-$model-1gpu-recompute" "$ds" "$model" 1 "$p1" p2p+reuse 0 1 \
          --intermediates=recompute
        [[ -f "$p2" ]] && train "$ds-$model-2gpu-recompute" "$ds" "$model" 2 "$p2" p2p+reuse 0 1 \
          --intermediates=recompute
      fi
    done
  fi
  if ((run_pyg)) && have_time "pyg $ds"; then
    echo "---- pyg $ds gcn,gat"
    t0=$SECONDS
    timeout 180 python3 scripts/bench/pyg_full_graph.py --dataset "$dir/$ds.h5" --model gcn,gat \
      --hidden "$hidden" --heads "$gat_heads" --gat-hidden "$gat_hidden" --epochs "$epochs" \
      --warmup 1 --name "$ds" | tee -a "$pyg_file"
    for model in ${MODELS:-gcn gat}; do  # the models beyond gcn and gat, one process each
      case $model in
        sage) peer=(--model sage --layers 2) ;;
        gcn3) peer=(--model gcn --layers 3) ;;
        *) continue ;;
      esac
      timeout 180 python3 scripts/bench/pyg_full_graph.py --dataset "$dir/$ds.h5" "${peer[@]}" \
        --hidden "$hidden" --epochs "$epochs" --warmup 1 --name "$ds" | tee -a "$pyg_file"
    done
    echo "---- pyg $ds: rc $?, $((SECONDS - t0)) s (elapsed $((SECONDS - start)) s)"
  fi
done

# Capped runs last: the uncapped comparisons matter more and the chunk search is slow.
((${CAPPED:-1})) || datasets=""  # CAPPED=0: none
for ds in $datasets; do
  [[ -f "$dir/$ds.h5" ]] || continue
  cap=$(python3 -c "import json,sys; print([d for d in map(json.loads, open(sys.argv[1])) if d['dataset'] == sys.argv[2]][-1]['cap'])" "$out/datasets.jsonl" "$ds")
  capped_runs "$ds" "$cap"
done

echo "gpu_train: done in $((SECONDS - start)) s; skipped: ${skipped[*]:-none}"
printf '%s\n' "${skipped[@]}" >"$out/skipped.txt"
traces=()  # TRACE=1: the summary reads the timelines too
((${TRACE:-0})) && traces=(--traces "$out/traces")
python3 scripts/bench/summarize_gpu.py --runs "$runs_file" --pyg "$pyg_file" \
  --datasets "$out/datasets.jsonl" --machine "$machine" "${traces[@]}" >"$out/gpu_train.md"
cat "$out/gpu_train.md"
