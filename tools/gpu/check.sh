#!/usr/bin/env bash
# Run on the GPU machine (CUDA toolkit and driver, none of our Debian
# packages), in the repository root, with build-gpu/ made by tools/gpu/pack.sh
# carried along. Runs the GPU suite and the GPU benchmarks and prints a short
# table. Writes full logs under ${OUT:-/tmp/ferry-gpu}. Budget: under 5 minutes.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
out=${OUT:-/tmp/ferry-gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$root/build-gpu/deps:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# NCCL may live only in a Python package on the GPU machine.
nccl=$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)
[ -n "$nccl" ] && export LD_LIBRARY_PATH="$(dirname "$nccl"):$LD_LIBRARY_PATH"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
build-gpu/tools/info/ferry-info | tee "$out/info.txt"

printf '\n%-28s %-6s %8s\n' test result seconds | tee "$out/table.txt"
pass=0; fail=0
while IFS=$'\t' read -r name cmd; do
  start=$(date +%s.%N)
  timeout 120 bash -c "$cmd" >"$out/$name.log" 2>&1
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  case $rc in 0) r=PASS; pass=$((pass+1));; 77) r=SKIP;; *) r="FAIL($rc)"; fail=$((fail+1));; esac
  printf '%-28s %-6s %8.1f\n' "$name" "$r" "$secs" | tee -a "$out/table.txt"
done < build-gpu/gpu-tests.txt

for bench in build-gpu/tools/bench/kernels/kernel_lab build-gpu/tools/bench/engine/bench_engine; do
  [ -x "$bench" ] || continue
  echo "== $bench" | tee -a "$out/table.txt"
  timeout 180 "$bench" 2>&1 | tee "$out/$(basename "$bench").log" | tail -25 | tee -a "$out/table.txt"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
