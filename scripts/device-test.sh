#!/usr/bin/env bash
# Runs THERE (the GPU machine), from the repository root of the copy, after
# scripts/device-build.sh built .device-bundle/ here and the device tool carried it:
#   run(command="bash scripts/device-test.sh", carry=[".device-bundle"], kind="nvidia-h200")
# Runs every gpu_test_* executable of the bundle (GoogleTest, brief output) and prints a summary.
# Options:
#   --cpu               also run the CPU test_* executables of the bundle
#   --sanitize FILTER   also run compute-sanitizer memcheck and racecheck on every gpu_test_*
#                       executable that has tests matching the gtest filter FILTER (keep it
#                       small, e.g. 'CudaOps.Gemm*:*gat_P4xC3_1gpu_p2p_reuse')
#   --sanitize-timeout S  stop each compute-sanitizer run after S seconds (default 200; the tools
#                       slow training tests 50x and more, and a device call that outlasts its
#                       limit brings nothing back); a stopped run counts as failed (rc 124)
#   --filter FILTER     gtest filter for the gpu_test_* runs (default: all)
#   --bench             also run the transfer bandwidth and operator timing reports
#                       (SLUICE_GPU_BENCH=1)
#   --train             also train GCN and GAT on Cora (2 partitions x 3 chunks, 20 epochs) with
#                       the CPU and the CUDA backend and compare the per-epoch losses
# Logs go to $OUT/device-test-logs.tgz when OUT is set (the device tool brings it back).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bundle=$root/.device-bundle
[[ -d "$bundle" ]] || { echo "device-test: no .device-bundle (run scripts/device-build.sh and carry it)" >&2; exit 2; }

run_cpu=0
run_train=0
sanitize_filter=""
sanitize_timeout=200
filter="*"
while (($# > 0)); do
  case "$1" in
    --cpu) run_cpu=1 ;;
    --sanitize) sanitize_filter=$2; shift ;;
    --sanitize-timeout) sanitize_timeout=$2; shift ;;
    --filter) filter=$2; shift ;;
    --bench) export SLUICE_GPU_BENCH=1 ;;
    --train) run_train=1 ;;
    *) echo "device-test: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

export LD_LIBRARY_PATH="$bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SLUICE_SHARED_DATASETS="$bundle/datasets"
export SLUICE_BIN_DIR="$bundle"  # tests that run sluice-preprocess/sluice-train find them here
export NCCL_NVLS_ENABLE=0  # NVLink multicast must stay off on these machines
logs=$(mktemp -d)

nvidia-smi -L || echo "device-test: nvidia-smi failed"

# Libraries the executables need but the machine lacks (e.g. NCCL outside the default path):
# look for them in the CUDA and Python package folders.
for exe in "$bundle"/gpu_test_* "$bundle"/test_*; do
  [[ -x "$exe" ]] || continue
  for lib in $(ldd "$exe" 2>/dev/null | awk '/not found/ {print $1}'); do
    found=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
    if [[ -n "$found" ]]; then
      export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
      echo "device-test: $lib from $(dirname "$found")"
    else
      echo "device-test: $lib needed by $(basename "$exe") not found on this machine"
    fi
  done
done

summary=()
failed=0
run_one() {  # name, command...
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  local tally
  tally=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$logs/$name.log" | tr '\n' ' ')
  summary+=("$(printf '%-34s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" "$tally")")
  if ((rc != 0)); then
    failed=$((failed + 1))
    echo "---- $name failed (rc $rc); last lines of its log:"
    tail -n 40 "$logs/$name.log"
  fi
}

shopt -s nullglob
for exe in "$bundle"/gpu_test_*; do
  run_one "$(basename "$exe")" "$exe" --gtest_brief=1 --gtest_filter="$filter"
done
if ((run_cpu)); then
  for exe in "$bundle"/test_*; do
    run_one "$(basename "$exe")" "$exe" --gtest_brief=1
  done
fi
if [[ -n "$sanitize_filter" ]]; then
  for exe in "$bundle"/gpu_test_*; do
    name=$(basename "$exe")
    # Only executables with matching tests (gtest prints test names indented).
    "$exe" --gtest_list_tests --gtest_filter="$sanitize_filter" 2>/dev/null | grep -q '^  ' || continue
    for tool in memcheck racecheck; do
      # API errors are not memory errors: NCCL probes kernels built for other GPUs and peer
      # access may already be enabled; both are expected and handled.
      api=()
      [[ $tool == memcheck ]] && api=(--report-api-errors no)
      run_one "sanitize-$tool-$name" timeout "$sanitize_timeout" compute-sanitizer --tool "$tool" \
        "${api[@]}" --error-exitcode 99 "$exe" --gtest_brief=1 --gtest_filter="$sanitize_filter"
      grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' "$logs/sanitize-$tool-$name.log" | sed "s/^/[sanitize] $tool $name: /"
    done
  done
fi

if ((run_train)); then
  if [[ -x "$bundle/sluice-preprocess" && -x "$bundle/sluice-train" ]]; then
    work=$(mktemp -d)
    run_one "train-import" "$bundle/sluice-preprocess" import --format ogb \
      --input "$SLUICE_SHARED_DATASETS/cora" --symmetrize --output "$work/data.h5"
    run_one "train-partition" "$bundle/sluice-preprocess" partition --dataset "$work/data.h5" \
      --partitions 2 --chunks 3 --output "$work/plan.h5"
    for model in gcn gat; do
      for device in cpu cuda; do
        run_one "train-$model-$device" "$bundle/sluice-train" --dataset "$work/data.h5" \
          --plan "$work/plan.h5" --model "$model" --layers 2 --hidden 16 --heads 4 --epochs 20 \
          --dropout 0.5 --lr 0.01 --weight-decay 5e-4 --seed 0 --device "$device" --no-progress \
          --metrics "$logs/train-$model-$device.jsonl" --report "$logs/train-$model-$device.json"
      done
      python3 - "$logs/train-$model-cpu.jsonl" "$logs/train-$model-cuda.jsonl" "$model" <<'PY' || true
import json, sys
def rows(p):
    return [json.loads(l) for l in open(p) if l.strip()]
cpu, gpu = rows(sys.argv[1]), rows(sys.argv[2])
key = next((k for k in ("loss", "train_loss") if k in cpu[0]), None)
worst = max(abs(a[key] - b[key]) / max(abs(a[key]), 1e-12) for a, b in zip(cpu, gpu))
print(f"[train] {sys.argv[3]}: {len(cpu)}/{len(gpu)} epochs, final loss cpu {cpu[-1][key]:.6f} "
      f"cuda {gpu[-1][key]:.6f}, worst relative loss difference {worst:.2e}")
for k in ("seconds", "epoch_seconds", "time"):
    if k in gpu[-1]:
        print(f"[train] {sys.argv[3]}: last epoch {k}: cpu {cpu[-1][k]} cuda {gpu[-1][k]}")
PY
    done
  else
    echo "device-test: --train needs sluice-preprocess and sluice-train in the bundle"
  fi
fi
grep -h '^\[\(bench\|agree\|cora-gpu\)\]' "$logs"/*.log 2>/dev/null
if [[ -n "${OUT:-}" ]]; then  # at most a few files come back: one archive of every log
  tar czf "$OUT/device-test-logs.tgz" -C "$logs" . && logs="$OUT/device-test-logs.tgz"
fi
echo "==== device-test summary ($(hostname), logs in $logs)"
for line in "${summary[@]}"; do echo "$line"; done
echo "failed runs: $failed"
((failed == 0))
