#!/usr/bin/env bash
# Builds the CPU test suite with AddressSanitizer and UndefinedBehaviorSanitizer into its own
# build directory and runs the CPU tests (ctest -L cpu). Sanitizer reports go to files under
# build-sanitize/sanitizer-reports/, so that a report of a program a test runs (whose output the
# test captures, and whose non-zero exit some tests expect) is seen too. Exit status: non-zero
# when the build fails, any test fails or any process wrote a sanitizer report.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/sanitize.sh [--help] [--compiler gcc|clang] [--filter REGEX] [--jobs N]
                           [--build-only]

Builds the CPU test suite (CUDA off, RelWithDebInfo) with
  -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
into build-sanitize/ (or $SLUICE_SANITIZE_BUILD_DIR) and runs `ctest -L cpu`.

  --compiler gcc|clang  compiler (default gcc)
  --filter REGEX        run only the tests whose ctest name matches (ctest -R); the suite is
                        several times slower under ASan
  --jobs N              build and test parallelism (default: nproc)
  --build-only          build, run nothing

Sanitizer settings (exported unless already set):
  ASAN_OPTIONS   detect_leaks=1:abort_on_error=1:strict_string_checks=1:
                 detect_stack_use_after_return=1:check_initialization_order=1
  UBSAN_OPTIONS  print_stacktrace=1:halt_on_error=1
  OMP_NUM_THREADS=2, OMP_WAIT_POLICY=passive: OpenMP's worker threads live until exit and
                 spin-wait by default, which under ASan only burns time.
  LSAN_OPTIONS   suppressions=tests/sanitize/lsan.supp (allocations that system libraries,
                 e.g. the OpenMP runtime, keep until exit)
  log_path       appended to ASAN_OPTIONS and UBSAN_OPTIONS unless they name one: every
                 process writes its reports to <build>/sanitizer-reports/{asan,ubsan}.<pid>,
                 the tests' own and those of the programs they run (sluice-train, ...), whose
                 output a test captures and whose failing exit it may expect
Exit status: non-zero when the build or any test fails, or when any process wrote a report
(the script prints them).
EOF
}

compiler=gcc
filter=""
jobs=$(nproc)
build_only=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    --compiler)
      compiler=$2
      shift 2
      ;;
    --filter)
      filter=$2
      shift 2
      ;;
    --jobs)
      jobs=$2
      shift 2
      ;;
    --build-only)
      build_only=1
      shift
      ;;
    *)
      echo "sanitize.sh: unknown argument '$1' (see --help)" >&2
      exit 2
      ;;
  esac
done

case "$compiler" in
  gcc) cc=gcc cxx=g++ ;;
  clang) cc=clang cxx=clang++ ;;
  *)
    echo "sanitize.sh: --compiler must be gcc or clang, not '$compiler'" >&2
    exit 2
    ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
build=${SLUICE_SANITIZE_BUILD_DIR:-$root/build-sanitize}
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_CUDA=OFF \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$build" -j "$jobs"
[[ $build_only -eq 1 ]] && exit 0

reports=$build/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
[[ $ASAN_OPTIONS == *log_path=* ]] || ASAN_OPTIONS+=":log_path=$reports/asan"
[[ $UBSAN_OPTIONS == *log_path=* ]] || UBSAN_OPTIONS+=":log_path=$reports/ubsan"
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/sanitize/lsan.supp:print_suppressions=0}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if [[ -z "${SLUICE_SHARED_DATASETS:-}" && -d "$root/../shared/datasets" ]]; then
  export SLUICE_SHARED_DATASETS=$(cd "$root/../shared/datasets" && pwd)
fi

cd "$build"
ctest_args=(-L cpu --output-on-failure -j "$jobs" --timeout 3600)
[[ -n "$filter" ]] && ctest_args+=(-R "$filter")
status=0
ctest "${ctest_args[@]}" || status=$?

mapfile -t written < <(find "$reports" -type f | sort)
if ((${#written[@]})); then
  for report in "${written[@]}"; do
    echo "==== $report"
    cat "$report"
  done
  echo "sanitize.sh: ${#written[@]} sanitizer report(s) in $reports" >&2
  exit 1
fi
exit "$status"
