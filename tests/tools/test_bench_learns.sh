#!/usr/bin/env bash
# bench_engine reports a speed only for a run that learns: with its learning
# rate the loss of the same tokens falls (exit 0, "falls"); with one that
# makes it rise, the run fails (exit 1) saying so, whatever its speed. The
# GPU check's GPT-2 XL step is this program, so it fails the same way. It
# measures the Llama family too (the GPU check's Llama steps).
# Usage: test_bench_learns.sh BENCH_ENGINE
set -u
bench=$1
source "$(dirname "$0")/../train/tap.sh"
args=(--backend host --model d1 --batch 2 --seq 32 --steps 1 --warmup 0 --modes optimizer --threads 1)
out=$(OPENBLAS_NUM_THREADS=1 timeout 300 "$bench" "${args[@]}" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "loss optimizer: .* -> .*: falls" <<<"$out"
ok $? "at lr 1e-4 the loss falls and the run passes (exit $rc): $(grep '^loss' <<<"$out")"
out=$(OPENBLAS_NUM_THREADS=1 timeout 300 "$bench" "${args[@]}" --lr 50 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "FAILED: the loss did not fall; the speed above is of a run that learns nothing" <<<"$out"
ok $? "at lr 50 the loss rises and the run fails (exit $rc): $(grep '^loss' <<<"$out")"
out=$(OPENBLAS_NUM_THREADS=1 timeout 300 "$bench" --backend host --model llama-d2 --batch 1 --seq 32 --steps 1 --warmup 0 \
  --modes params --threads 1 --lr 1e-3 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "loss params: .* -> .*: falls" <<<"$out" && grep -q "^bench_engine: llama-d2" <<<"$out" &&
  grep -q "^result offload params, batch 1 x 32: " <<<"$out"
ok $? "a model of the Llama family (llama-d2, params mode) runs, learns and is measured (exit $rc): $(grep -E '^(bench_engine|loss|result)' <<<"$out" | head -c 600)"
finish
