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
nccl=$(timeout 20 find / -xdev -name 'libnccl.so.2' 2>/dev/null | head -1)
[ -n "$nccl" ] && export LD_LIBRARY_PATH="$(dirname "$nccl"):$LD_LIBRARY_PATH"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
build-gpu/tools/info/ferry-info | tee "$out/info.txt"

printf '\n%-28s %-6s %8s\n' test result seconds | tee "$out/table.txt"
pass=0; fail=0
while IFS=$'\t' read -r name cmd; do
  start=$(date +%s%N)
  timeout 120 bash -c "$cmd" >"$out/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  case $rc in 0) r=PASS; pass=$((pass+1));; 77) r=SKIP;; *) r="FAIL($rc)"; fail=$((fail+1));; esac
  printf '%-28s %-6s %8s\n' "$name" "$r" "$secs" | tee -a "$out/table.txt"
done < build-gpu/gpu-tests.txt

# bench NAME SECONDS COMMAND...: runs a benchmark, keeps its log, shows its tail.
bench() {
  local name=$1 limit=$2; shift 2
  [ -x "$1" ] || return 0
  echo "== $name: $*" | tee -a "$out/table.txt"
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.log" | tail -25 | tee -a "$out/table.txt"
}
bench kernel_lab 60 build-gpu/tools/bench/kernels/kernel_lab
bench engine_gpt2 60 build-gpu/tools/bench/engine/bench_engine
# The flagship: GPT-2 XL, optimizer offload, a 24 GB budget, the largest batch at T=1024.
bench engine_xl 150 build-gpu/tools/bench/engine/bench_engine --model gpt2-xl --seq 1024 --modes optimizer \
  --gpu-mem 24GiB --recompute --find-max-batch
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
