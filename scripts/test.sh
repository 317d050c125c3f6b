#!/usr/bin/env bash
# Installs dependencies, checks formatting, builds and runs every test (ctest), then ends with one
# summary line: how many tests ran, passed, failed and skipped, and why they skipped (GPU tests
# skip with a printed reason when no GPU is present). Non-zero exit on any failure.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/test.sh [--help] [CMAKE_ARGS...]

Installs missing dependencies, checks formatting, builds (scripts/build.sh CMAKE_ARGS, e.g.
-DSLUICE_CUDA=OFF) and runs every test with ctest. The last line summarizes the run:
  tests: N ran, P passed, F failed, S skipped (K: reason; ...)
Exit status: non-zero when anything fails (formatting, build or a test).

Environment (tests/README.md):
  SLUICE_BUILD_DIR        build directory (default: build/ in the checkout)
  SLUICE_SHARED_DATASETS  shared test datasets (default: ../shared/datasets beside the checkout)
  TMPDIR                  where tests make their scratch directories (default: /tmp)
A subset: cd build && ctest -R <regex>, or run one test executable with --gtest_filter.
EOF
}
for argument in "$@"; do
  if [[ "$argument" == "--help" || "$argument" == "-h" ]]; then
    usage
    exit 0
  fi
done

root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
"$root/scripts/check-format.sh"
"$root/scripts/build.sh" "$@"
build=${SLUICE_BUILD_DIR:-$root/build}
# Tests read the shared datasets from ../shared/datasets beside the checkout. A clone made
# elsewhere (e.g. /tmp) finds them beside the repository it was cloned from.
if [[ -z "${SLUICE_SHARED_DATASETS:-}" && ! -d "$root/../shared/datasets" ]]; then
  origin=$(git -C "$root" remote get-url origin 2>/dev/null || true)
  if [[ -n "$origin" && -d "$origin/../shared/datasets" ]]; then
    export SLUICE_SHARED_DATASETS=$(cd "$origin/../shared/datasets" && pwd)
    echo "test.sh: shared datasets from $SLUICE_SHARED_DATASETS" >&2
  fi
fi

# One line from ctest's JUnit report: counts by status (ran = passed + failed + skipped: a
# skipping GoogleTest test runs) and the skip reasons, grouped by their text up to the first colon
# (a GoogleTest skip prints "file:line: Skipped", then its message; a test ctest could not start
# carries ctest's own message).
summarize() {
  awk '
    function decode(text) {
      gsub(/&lt;/, "<", text); gsub(/&gt;/, ">", text); gsub(/&quot;/, "\"", text)
      gsub(/&apos;/, "\047", text); gsub(/&amp;/, "\\&", text)
      return text
    }
    /<testcase / {
      status = $0; sub(/.* status="/, "", status); sub(/".*/, "", status)
      reason = ""; ctest_message = ""; next_line_is_reason = 0
      next
    }
    /<skipped message="/ {
      ctest_message = $0; sub(/.*<skipped message="/, "", ctest_message)
      sub(/".*/, "", ctest_message)
    }
    next_line_is_reason { reason = $0; next_line_is_reason = 0; next }
    status == "notrun" && reason == "" && /: Skipped$/ { next_line_is_reason = 1; next }
    /<\/testcase>/ {
      ++total
      if (status == "run") ++passed
      else if (status == "fail") ++failed
      else if (status == "disabled") ++disabled
      else {
        ++skipped
        why = reason != "" ? reason : ctest_message
        sub(/<\/system-out>.*/, "", why)
        why = decode(why)
        sub(/:.*/, "", why); gsub(/^[ \t]+|[ \t]+$/, "", why)
        if (why == "") why = "no reason given"
        if (!(why in count)) order[++groups] = why
        ++count[why]
      }
    }
    END {
      line = sprintf("tests: %d ran, %d passed, %d failed, %d skipped", total - disabled, passed,
                     failed, skipped)
      if (skipped > 0) {
        # Largest group first.
        for (i = 1; i <= groups; ++i)
          for (j = i + 1; j <= groups; ++j)
            if (count[order[j]] > count[order[i]]) { t = order[i]; order[i] = order[j]; order[j] = t }
        line = line " ("
        for (i = 1; i <= groups; ++i) line = line (i > 1 ? "; " : "") count[order[i]] ": " order[i]
        line = line ")"
      }
      if (disabled > 0) line = line sprintf(", %d disabled", disabled)
      print line
    }
  ' "$1"
}

cd "$build"
report="$build/Testing/test-report.xml"
rm -f "$report"
status=0
ctest --output-on-failure -j "$(nproc)" --timeout 900 --output-junit "$report" || status=$?
if [[ -s "$report" ]]; then
  summary=$(summarize "$report")
else
  summary="tests: no results (ctest wrote no report)"
  if ((status == 0)); then status=1; fi
fi
echo "$summary"
exit "$status"
