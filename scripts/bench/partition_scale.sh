#!/usr/bin/env bash
# Level-1 partitioning at scale (issue 21): RMAT graphs of 1-2 billion edges partitioned for 2-8
# GPUs, with time, peak host memory, edge cut, deduplicated host-link volume (stats
# volume_reuse_rows) and balance per run. Runs ON the 16-core GPU machine, from the repository
# root of the copy, with .device-bundle/ built here by `scripts/device-build.sh
# sluice-preprocess` and carried:
#   run(command="bash scripts/bench/partition_scale.sh gen:25 part:25:2 part:25:4",
#       carry=[".device-bundle"], timeout_s=600)
# Each argument is one step; give as many as fit the 10-minute command limit (steps that would
# start after BUDGET_S are skipped and listed, so the next call can take them):
#   gen:S[:D]           generate RMAT scale S, edge factor 16, D features (default 128) into
#                       $BENCH_DIR/rmatS.h5 (kept between calls while the machine stays warm;
#                       other rmat*.h5 files are deleted first when the disk lacks room)
#   part:S:P[:NAME]     sluice-preprocess partition --partitions P --chunks 8 --partitioner NAME
#                       (default metis; metis-direct for the serial whole-graph reference) under
#                       /usr/bin/time -v, then `stats --json`; one Markdown row per run
#   fit:S:P[:BUDGET]    partition --gpu-memory BUDGET (default 24G; MODEL, default gcn, 2 layers,
#                       hidden 256) with the chunk search, then --chunks C with the C it chose,
#                       both with the metis partitioner: one row in $OUT/partition_fit.md with
#                       the chosen C, the sketch and search seconds and both wall times
#   clean               delete $BENCH_DIR
# Results: $OUT/partition_scale.md (rows) and $OUT/partition_scale.log (every run's log lines:
# per-stage times and peaks); without OUT, ./out/partition-scale.
# Environment: BENCH_DIR (/tmp/sluice-partition-scale), BUDGET_S (540), CHUNKS (8),
# EDGE_FACTOR (16), OMP_NUM_THREADS (all cores).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# shellcheck source=scripts/bench/lib.sh
source scripts/bench/lib.sh
dir=${BENCH_DIR:-/tmp/sluice-partition-scale}
out=${OUT:-$root/out/partition-scale}
budget=${BUDGET_S:-540}
chunks=${CHUNKS:-8}
edge_factor=${EDGE_FACTOR:-16}
mkdir -p "$dir" "$out"
table=$out/partition_scale.md
log=$out/partition_scale.log
bench_setup partition_scale sluice-preprocess
preprocess=$bin/sluice-preprocess
bench_table "$table" "machine: $(bench_machine), threads ${OMP_NUM_THREADS:-$(nproc)}; $(date -u +%F)" \
  graph vertices edges file P partitioner "level-1 s" "level-1 peak" "total s" "peak RSS" \
  "peak / file" "edge cut" volume_reuse_rows "balance vertices" "balance CSR entries"

# Bytes a dataset of scale S with D features takes on disk (CSR about 34 * 2^S * 4 bytes).
dataset_bytes() { echo $(((1 << $1) * (4 * $2 + 8 + 4 * 2 * edge_factor + 64))); }

generate() {  # scale [features]
  local scale=$1 features=${2:-128} data=$dir/rmat$1.h5
  [[ -f "$data" ]] && { echo "partition_scale: $data exists"; return 0; }
  bench_make_room "$(dataset_bytes "$scale" "$features")" "rmat$scale"
  local t0=$SECONDS
  "$preprocess" generate --scale "$scale" --edge-factor "$edge_factor" --features "$features" \
    --seed 1 --output "$data" 2>&1 | tail -3
  echo "partition_scale: generated rmat$scale in $((SECONDS - t0)) s, $(du -h "$data" | cut -f1)"
}

partition() {  # scale parts [partitioner]
  local scale=$1 parts=$2 partitioner=${3:-metis} rc wall
  local data=$dir/rmat$scale.h5 name=rmat$scale-p$2-$partitioner
  local plan=$dir/plan-$name.h5 run_log=$dir/$name.log
  [[ -f "$data" ]] || { echo "partition_scale: $data missing (run gen:$scale first)"; return 1; }
  if ! bench_run "$name" "$run_log" "$preprocess" partition --dataset "$data" \
    --partitions "$parts" --chunks "$chunks" --partitioner "$partitioner" --output "$plan" \
    --verbose; then
    echo "| rmat$scale | | | | $parts | $partitioner | failed: rc $rc after $wall s | | | | | | | | |" >>"$table"
    rm -f "$plan"
    return 1
  fi
  "$preprocess" stats "$plan" --json --quiet >"$dir/$name.json"
  rm -f "$plan"
  python3 - "$dir/$name.json" "$run_log" "$data" "$scale" "$partitioner" "$wall" \
    "$(bench_peak_rss "$run_log")" <<'PY' | tee -a "$table"
import json, os, re, sys
stats_path, log_path, data, scale, partitioner, wall, peak = sys.argv[1:]
s = json.load(open(stats_path))
text = open(log_path).read()
def gib(b): return f"{b / 2**30:.1f} GiB"
def parse_bytes(t):
    value, unit = t.split()
    return float(value) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[unit]
m = re.search(r"level-1 partition \([^)]*\): ([0-9.e+-]+) s, balance .*?(?:, edge cut (\d+))?$",
              text, re.M)
cut = m.group(2) if m and m.group(2) else "-"
stage = re.search(r"stage level-1 partition \([^)]*\): [0-9.e+-]+ s, memory [^,]+, peak (.+)$",
                  text, re.M)
level1_peak = gib(parse_bytes(stage.group(1))) if stage else "-"
peak = int(peak) if peak else None
size = os.path.getsize(data)
def balance(values): return max(values) * len(values) / sum(values)
print(f"| rmat{scale} | {s['num_nodes']} | {s['num_dataset_edges']} | {gib(size)} | "
      f"{s['partitions']} | {s['partitioner']} | {s['partition_seconds']:.1f} | {level1_peak} | "
      f"{wall} | {gib(peak) if peak else '-'} | {f'{peak / size:.2f}' if peak else '-'} | "
      f"{cut} | {s['volume_reuse_rows']} | {balance(s['partition_vertices']):.4f} | "
      f"{balance(s['partition_entries']):.4f} |")
PY
}

fit() {  # scale parts [budget]
  local scale=$1 parts=$2 cap=${3:-24G} model=${MODEL:-gcn} rc wall
  local data=$dir/rmat$scale.h5 name=rmat$scale-p$2-fit-$cap-$model
  [[ -f "$data" ]] || { echo "partition_scale: $data missing (run gen:$scale first)"; return 1; }
  local fit_table=$out/partition_fit.md
  bench_table "$fit_table" "" graph P budget model "chosen C" "sketch s" "search s" candidates \
    "--gpu-memory wall s" "--chunks C wall s"
  local searched fixed chosen sketch search candidates
  bench_run "$name" "$dir/$name.log" "$preprocess" partition --dataset "$data" \
    --partitions "$parts" --gpu-memory "$cap" --model "$model" --output "$dir/plan-$name.h5"
  rm -f "$dir/plan-$name.h5"
  ((rc == 0)) || return 1
  searched=$wall
  chosen=$(sed -n 's/.*chose C=\([0-9]*\).*/\1/p' "$dir/$name.log")
  sketch=$(sed -n 's/.*stage chunk sketch: \([0-9.e+-]*\) s.*/\1/p' "$dir/$name.log")
  search=$(sed -n 's/.*--gpu-memory: \([0-9]*\) chunk counts estimated in \([0-9.e+-]*\) s.*/\2/p' "$dir/$name.log")
  candidates=$(sed -n 's/.*--gpu-memory: \([0-9]*\) chunk counts estimated in.*/\1/p' "$dir/$name.log")
  bench_run "$name --chunks $chosen" "$dir/$name-fixed.log" "$preprocess" partition \
    --dataset "$data" --partitions "$parts" --chunks "$chosen" --output "$dir/plan-$name-fixed.h5"
  ((rc == 0)) && fixed=$wall || fixed=failed
  rm -f "$dir/plan-$name-fixed.h5"
  echo "| rmat$scale | $parts | $cap | $model | $chosen | $sketch | $search | $candidates | $searched | $fixed |" |
    tee -a "$fit_table"
}

step() {
  local verb a b c
  IFS=: read -r verb a b c <<<"$1"
  case $verb in
    gen) generate "$a" "$b" ;;
    part) partition "$a" "$b" "$c" ;;
    fit) fit "$a" "$b" "$c" ;;
    clean) rm -rf "$dir" && mkdir -p "$dir" ;;
    *) echo "partition_scale: unknown step '$1' (gen:S[:D], part:S:P[:NAME], fit:S:P[:BUDGET], clean)" ;;
  esac
}

bench_steps step "$@"
cat "$table"
[[ -s "$out/partition_fit.md" ]] && cat "$out/partition_fit.md"
