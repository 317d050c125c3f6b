#!/usr/bin/env bash
# Hardware counters of chosen kernels in one short training run. Runs ON the GPU machine (from
# the repository root of the copy, with .device-bundle/ carried), after the dataset and plan
# exist there (scripts/bench/gpu_train.sh makes them in $BENCH_DIR):
#   run(command="EPOCHS=1 PYG=0 DATASETS=products MODELS=gat CAPPED=0 NO_OVERLAP=0 CHUNKS2= \
#     COMMS=p2p+reuse CHUNKS=1 bash scripts/bench/gpu_train.sh && bash scripts/bench/ncu_kernels.sh",
#     carry=[".device-bundle"])
# Environment: DATASET (products), PLAN (products-p1-c1), MODEL_ARGS (GAT 2 layers, 4 x 64, one
# output head), KERNELS (a regular expression of kernel names, "gat_by_source|gat_aggregate"),
# COUNT (10 launches: one epoch's GAT kernels, short and long rows), SECTIONS (Nsight Compute
# sections), OUT (where ncu.txt goes), TRAIN (the sluice-train to run; .device-bundle's). Clocks stay as they are (--clock-control none).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=$root/.device-bundle
dir=${BENCH_DIR:-/tmp/sluice-gpu-bench}
out=${OUT:-$root/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[[ -x "$ncu" ]] || { echo "ncu_kernels: no ncu on this machine"; exit 2; }
read -r -a model_args <<<"${MODEL_ARGS:---model gat --layers 2 --hidden 64 --heads 4 --output-heads 1}"
sections=()
for s in ${SECTIONS:-SpeedOfLight Occupancy LaunchStats WarpStateStats MemoryWorkloadAnalysis}; do
  sections+=(--section "$s")
done
"$ncu" --clock-control none --kernel-name "regex:${KERNELS:-gat_by_source|gat_aggregate}" \
  --launch-count "${COUNT:-10}" "${sections[@]}" \
  "${TRAIN:-$bundle/sluice-train}" --dataset "$dir/${DATASET:-products}.h5" \
  --plan "$dir/${PLAN:-products-p1-c1}.plan.h5" "${model_args[@]}" --epochs 1 --optimizer adam \
  --lr 0.01 --dropout 0.5 --device cuda --no-progress >"$out/ncu.txt" 2>&1
grep -E '^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|L2 Hit|L1/TEX Hit|Achieved Occupancy|Theoretical Occupancy|Registers Per|Warp Cycles Per Issued|Stall|Compute \(SM\) Throughput' "$out/ncu.txt" | head -200
