#!/usr/bin/env bash
# Builds the libFuzzer harnesses in build-fuzz/ (clang; the library itself
# instrumented, ASan + UBSan) and fuzzes each for SECONDS, starting from its
# seed corpus in tests/fuzz/corpus/<harness>/ (new inputs go to
# build-fuzz/corpus/<harness>/, never into the tree). Prints one line per
# harness: executions, and "ok" or the crash and the input that caused it
# (build-fuzz/artifacts/<harness>/). Exit status: 0 when no harness crashed,
# leaked or timed out, 1 otherwise, 2 on a usage or build error. SECONDS 0
# builds the harnesses and fuzzes nothing.
#   tests/fuzz/run.sh SECONDS [-j JOBS] [HARNESS...]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
usage() { echo "usage: tests/fuzz/run.sh SECONDS [-j JOBS] [HARNESS...]" >&2; exit 2; }
[ $# -ge 1 ] && [[ $1 =~ ^(0|[1-9][0-9]*)$ ]] || usage
seconds=$1; shift
jobs=1
if [ "${1:-}" = "-j" ]; then
  [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || usage
  jobs=$2; shift 2
fi
build=build-fuzz
all=$(ls tests/fuzz/fuzz_*.c | sed 's|.*/fuzz_||; s|\.c$||')
harnesses=${*:-$all}
for h in $harnesses; do
  [ -f "tests/fuzz/fuzz_$h.c" ] || { echo "run.sh: no harness '$h' (have: $(echo $all))" >&2; exit 2; }
done

command -v clang >/dev/null || { echo "run.sh: clang is needed (apt-get install -y clang)" >&2; exit 2; }
if [ ! -f "$build/build.ninja" ]; then
  log=$(mktemp /tmp/ferry-fuzz-setup-XXXXXX)
  CC=clang meson setup "$build" -Dfuzz=enabled -Dcuda=disabled -Dnccl=disabled -Dwerror=false \
    -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link \
    >"$log" 2>&1 || { tail -30 "$log"; echo "run.sh: meson setup failed" >&2; exit 2; }
  rm -f "$log"
fi
targets=$(for h in $harnesses; do echo "tests/fuzz/fuzz_$h"; done)
ninja -C "$build" $targets >"$build/fuzz-build.log" 2>&1 ||
  { tail -40 "$build/fuzz-build.log"; echo "run.sh: building the harnesses failed" >&2; exit 2; }
[ "$seconds" -gt 0 ] || { echo "run.sh: the harnesses are built in $build/ (SECONDS 0: nothing fuzzed)"; exit 0; }

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export OPENBLAS_NUM_THREADS=1

# fuzz HARNESS: one libFuzzer run; its log is build-fuzz/logs/HARNESS.log.
fuzz() {
  local h=$1 exe="$build/tests/fuzz/fuzz_$1"
  mkdir -p "$build/corpus/$h" "$build/artifacts/$h" "$build/logs"
  rm -f "$build/artifacts/$h"/*
  "$exe" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -close_fd_mask=3 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$h/" "$build/corpus/$h" "tests/fuzz/corpus/$h" \
    >"$build/logs/$h.log" 2>&1
  echo $? >"$build/logs/$h.rc"
}

running=0
for h in $harnesses; do
  fuzz "$h" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

failed=0
printf '%-14s %8s %12s  %s\n' harness seconds executions result
for h in $harnesses; do
  log="$build/logs/$h.log"
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  [ -n "$runs" ] || runs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  if [ "$(cat "$build/logs/$h.rc")" = 0 ]; then
    result=ok
  else
    failed=$((failed + 1))
    what=$(grep -m1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [a-z-]+|runtime error: .*|deadly signal|timeout' "$log")
    result="FAILED: ${what:-exit $(cat "$build/logs/$h.rc")} ($(ls "$build/artifacts/$h" | head -1)); see $log"
  fi
  printf '%-14s %8s %12s  %s\n' "$h" "$seconds" "${runs:-0}" "$result"
done
[ "$failed" -eq 0 ] || { echo "$failed harness(es) failed" >&2; exit 1; }
