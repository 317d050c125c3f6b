#!/usr/bin/env bash
# The main job end to end: install dependencies, build the two programs, make a dataset,
# partition it, train, and write every output file.
#   scripts/example.sh               generated planted-label RMAT graph (the repository ships no data)
#   scripts/example.sh --ogb DIR     an OGB node-property raw directory, e.g. ../shared/datasets/cora
#   scripts/example.sh -v            also log every stage's time and memory (both programs' -v)
# Trains on the GPU when one is usable (nvidia-smi sees a device and the CUDA backend is built),
# else on the CPU. Outputs go to ${SLUICE_EXAMPLE_DIR:-out/example}/<dataset>-<cpu|cuda>/ (the
# two modes and the datasets keep their own directories); docs/formats.md describes each file.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

ogb_dir="" verbose=()
while (($#)); do
  case "$1" in
    --ogb) ogb_dir=${2:?--ogb needs a directory}; shift 2 ;;
    -v|--verbose) verbose=(--verbose); shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "example.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

"$root/scripts/setup-deps.sh"
"$root/scripts/build.sh" --target sluice-preprocess --target sluice-train
bin=${SLUICE_BUILD_DIR:-$root/build}/bin

device=cpu
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 &&
   "$bin/sluice-train" --help 2>/dev/null | grep -q -- "--gpus"; then
  if "$bin/sluice-train" --list-devices 2>/dev/null | grep -q "cuda"; then device=cuda; fi
fi

if [[ -n "$ogb_dir" ]]; then
  name=$(basename "$(cd "$ogb_dir" && pwd)")
else
  name=rmat
fi
work=${SLUICE_EXAMPLE_DIR:-$root/out/example}/$name-$device
mkdir -p "$work"

if [[ -n "$ogb_dir" ]]; then
  echo "== import $ogb_dir"
  "$bin/sluice-preprocess" import --format ogb --input "$ogb_dir" --symmetrize \
    --output "$work/data.h5" ${verbose[@]+"${verbose[@]}"}
  partitions=2 chunks=4 model_args=(--model gcn --layers 2 --hidden 16 --dropout 0.5 --lr 0.01 --weight-decay 5e-4 --epochs 200 --feature-norm row)
else
  echo "== generate a planted-label RMAT graph (scale 14, 16 classes)"
  "$bin/sluice-preprocess" generate --scale 14 --edge-factor 8 --features 64 --classes 16 \
    --seed 1 --output "$work/data.h5" ${verbose[@]+"${verbose[@]}"}
  partitions=2 chunks=4 model_args=(--model gcn --layers 2 --hidden 64 --dropout 0.5 --lr 0.01 --weight-decay 5e-4 --epochs 100)
fi

echo "== partition into $partitions partitions x $chunks chunks"
"$bin/sluice-preprocess" partition --dataset "$work/data.h5" --partitions "$partitions" \
  --chunks "$chunks" --output "$work/plan.h5" ${verbose[@]+"${verbose[@]}"}

echo "== train on $device"
device_args=(--device "$device")
if [[ "$device" == cuda ]]; then device_args+=(--gpus 1); fi
"$bin/sluice-train" --dataset "$work/data.h5" --plan "$work/plan.h5" "${model_args[@]}" \
  "${device_args[@]}" --seed 0 --metrics "$work/metrics.jsonl" --report "$work/report.json" \
  --predictions "$work/predictions.csv" --model-out "$work/model.h5" \
  --embeddings-out "$work/embeddings.h5" --checkpoint "$work/checkpoint.h5" \
  ${verbose[@]+"${verbose[@]}"}

echo "== outputs in $work (docs/formats.md reads each with Python)"
(cd "$work" && ls -l data.h5 plan.h5 report.json metrics.jsonl predictions.csv model.h5 \
  embeddings.h5 checkpoint.h5 | awk '{ printf "  %-16s %10s bytes\n", $NF, $5 }')
# The report's headline numbers, without needing python or jq.
grep -oE '"(test_accuracy|valid_accuracy|best_epoch|seconds_per_epoch|median_seconds_per_epoch)": *[-0-9.e]+' \
  "$work/report.json" | tr -d '"' | sed 's/^/  /'
classes=$("$bin/sluice-preprocess" info "$work/data.h5" --json | grep -oE '"classes": *[0-9]+' | grep -oE '[0-9]+$' | head -1)
echo "  (chance level with $classes classes: $(awk -v k="$classes" 'BEGIN { printf "%.1f%%", 100 / k }'))"
