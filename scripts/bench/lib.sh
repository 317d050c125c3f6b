# shellcheck shell=bash disable=SC2154
# Plumbing of the scale benchmarks (scale.sh, partition_scale.sh), sourced by them: the binaries
# of the device bundle, runs under timeout and /usr/bin/time with their log lines collected, peak
# RSS, Markdown tables, room on the disk, and the step loop. The sourcing script sets `root` (the
# repository root), `budget` (seconds within which steps may start), `dir` (datasets and plans),
# `log` (every run's log lines) and `table` (the results); messages start with "$bench: ".

# bench_setup NAME TOOL...: checks that $bin (SLUICE_BIN, else .device-bundle/) holds every
# TOOL and that python3 is there (exit 2 otherwise); starts the budget's clock.
bench_setup() {
  bench=$1
  shift
  bundle=$root/.device-bundle
  bin=${SLUICE_BIN:-$bundle}
  export LD_LIBRARY_PATH="$bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local tool
  for tool in "$@"; do
    [[ -x "$bin/$tool" ]] || { echo "$bench: $bin/$tool missing (scripts/device-build.sh $*)"; exit 2; }
  done
  command -v python3 >/dev/null || { echo "$bench: needs python3"; exit 2; }
  timer=()
  [[ -x /usr/bin/time ]] && timer=(/usr/bin/time -v)
  start=$SECONDS
  skipped=()
}

# "N cores, M GiB RAM" of this machine.
bench_machine() {
  echo "$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) RAM"
}

# bench_table FILE PREAMBLE COLUMN...: starts a Markdown table in FILE (a PREAMBLE line and a
# blank line first unless PREAMBLE is empty), unless FILE already holds one.
bench_table() {
  local file=$1 preamble=$2
  shift 2
  [[ -s "$file" ]] && return 0
  {
    [[ -n "$preamble" ]] && printf '%s\n\n' "$preamble"
    printf '|'
    printf ' %s |' "$@"
    printf '\n|'
    printf -- '---|%.0s' "$@"
    printf '\n'
  } >"$file"
}

# Seconds left of the budget, 30 at least (the time limit of the next run).
bench_left() {
  local left=$((budget - (SECONDS - start)))
  echo $((left > 30 ? left : 30))
}

# bench_run NAME RUN_LOG COMMAND...: runs COMMAND under timeout (bench_left) and /usr/bin/time -v,
# its output into RUN_LOG; appends its log lines (stages, peaks, errors, the chosen C) to $log
# under "==== NAME: rc RC, WALL s" and prints the end of RUN_LOG when it fails. Sets `rc` and
# `wall` (seconds), which callers declare local; returns rc.
bench_run() {
  local name=$1 run_log=$2
  shift 2
  local t0=$SECONDS
  timeout "$(bench_left)" "${timer[@]}" "$@" >"$run_log" 2>&1
  rc=$?
  wall=$((SECONDS - t0))
  {
    echo "==== $name: rc $rc, $wall s"
    grep -E '^\[sluice|Maximum resident|Elapsed|error|Error|chose C' "$run_log"
  } >>"$log"
  if ((rc != 0)); then
    echo "$bench: $name failed (rc $rc after $wall s):"
    tail -5 "$run_log"
  fi
  return $rc
}

# The peak resident set of a run in bytes, from /usr/bin/time -v's lines in RUN_LOG; empty when
# it was not measured.
bench_peak_rss() {  # run_log
  local kib
  kib=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\).*/\1/p' "$1" 2>/dev/null | tail -1)
  [[ -n "$kib" ]] && echo $((kib * 1024))
  return 0
}

# bench_make_room BYTES WHAT: deletes the datasets and plans of $dir when the disk lacks BYTES
# (and 4 GiB to spare) for WHAT.
bench_make_room() {
  local free
  free=$(($(df -B1 --output=avail "$dir" | tail -1)))
  if ((free < $1 + (4 << 30))); then
    echo "$bench: $((free >> 30)) GiB free, $2 needs about $(($1 >> 30)) GiB: deleting other datasets"
    rm -f "$dir"/rmat*.h5 "$dir"/plan-*.h5
  fi
}

# bench_steps HANDLER STEP...: HANDLER STEP for each step that starts within the budget; lists
# the others as skipped, so that the next call can take them.
bench_steps() {
  local handler=$1 step
  shift
  for step in "$@"; do
    if ((SECONDS - start > budget)); then
      skipped+=("$step")
      continue
    fi
    echo "---- $step (elapsed $((SECONDS - start)) s)"
    "$handler" "$step"
  done
  ((${#skipped[@]})) && echo "$bench: SKIPPED (budget ${budget}s): ${skipped[*]}"
  echo "$bench: done in $((SECONDS - start)) s; rows in $table"
}
