#!/usr/bin/env bash
# The programs speak one language. Sizes: train_gpt2, memprof plan and
# bench_engine take --gpu-mem by one rule (common/units.h): GiB binary, GB
# decimal, a bare G refused as ambiguous, 0 for the flag's "none", nothing
# between 0 and 1 MiB; each --help says so. Library messages: train_gpt2
# says the engine's config words (device_budget_bytes, offload
# FERRY_OFFLOAD_PARAMS) in its own flags.
# Usage: test_words.sh TRAIN_GPT2 MEMPROF BENCH_ENGINE
set -u
train=$1 memprof=$2 bench=$3
work=$(mktemp -d /tmp/ferry-words-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../train/tap.sh"

# run NAME VALUE: the program with --gpu-mem VALUE, stopping as soon as the
# flags are taken where it can (bench_engine: --help after it; train_gpt2:
# data that is not there, exit 1, after every flag was checked).
run() {
  case $1 in
    train_gpt2) "$train" --data "$work/none.bin" --gpu-mem "$2" ;;
    memprof) "$memprof" plan --model gpt2-xl --seq 1024 --recompute --gpu-mem "$2" ;;
    bench_engine) "$bench" --gpu-mem "$2" --help ;;
  esac >"$work/out" 2>"$work/err"
}
# refused NAME VALUE PATTERN...: exit 2, stderr matching each pattern.
refused() {
  local name=$1 value=$2; shift 2
  run "$name" "$value"; local rc=$? good=0
  [ $rc -eq 2 ] || good=1
  local pat
  for pat in "$@"; do grep -qE -- "$pat" "$work/err" || good=1; done
  ok $good "$name --gpu-mem $value is refused (exit $rc): $(head -c 300 "$work/err" | tr '\n' ' ')"
}
# taken NAME VALUE: no usage error about the size.
taken() {
  run "$1" "$2"; local rc=$?
  [ $rc -ne 2 ] && ! grep -qE "is ambiguous|is not a byte count|bytes: a number without a unit" "$work/err"
  ok $? "$1 --gpu-mem $2 is taken (exit $rc) $(head -c 200 "$work/err" | tr '\n' ' ')"
}
for p in train_gpt2 memprof bench_engine; do
  refused $p 24G "'24G' is ambiguous" "24GiB" "24GB"
  refused $p 64k "'64k' is ambiguous" "64KiB" "64kB"
  refused $p 1000 "'1000' is 1000 bytes" "at least 1MiB"
  refused $p 0.5 "'0.5' is 0 bytes" "at least 1MiB"
  refused $p lots "'lots' is not a byte count"
  taken $p 24GiB
  taken $p 24GB
  taken $p 0.5GiB
  taken $p 0
done

# What the sizes mean, where memprof plan prints the budget it checks.
run memprof 24GB
grep -q -- "--gpu-mem 22.4 GiB:" "$work/out"
ok $? "24GB is 24 x 10^9 bytes, 22.4 GiB: $(grep -- --gpu-mem "$work/out")"
run memprof 24GiB
grep -q -- "--gpu-mem 24.0 GiB:" "$work/out"
ok $? "24GiB is 24.0 GiB: $(grep -- --gpu-mem "$work/out")"
run memprof 0
! grep -q -- "--gpu-mem" "$work/out" && ! grep -q "largest batch" "$work/out"
ok $? "0 is no budget to check: no fit line"

# Every --help says the rule in the same words.
"$train" --help >"$work/h1" 2>&1
"$memprof" plan --help >"$work/h2" 2>&1
"$bench" --help >"$work/h3" 2>&1
for h in h1 h2 h3; do
  grep -q "24GB = 24 x 10^9 bytes" "$work/$h" && grep -q "24GiB = 24 x 2^30 bytes" "$work/$h" &&
    grep -q "a bare K, M, G or T (24G) is refused as ambiguous" "$work/$h"
  ok $? "--help ($h) says what GiB and GB mean and that 24G is refused"
done

# A library refusal, said in train_gpt2's flags: a model that cannot fit
# 1 MiB in offload none names the modes and the budget as flags.
make_shard "$work/train.bin"
"$train" --data "$work/train.bin" --layers 2 --heads 2 --width 128 --vocab 500 --context 64 --seq 32 --batch 2 \
  --steps 1 --backend host --offload none --gpu-mem 1MiB >"$work/out" 2>"$work/err"
rc=$?
[ $rc -eq 1 ] && grep -q -- "use --offload optimizer" "$work/err" && grep -q -- "--offload params" "$work/err" &&
  grep -q -- "raise --gpu-mem" "$work/err" && ! grep -qE "FERRY_OFFLOAD|device_budget_bytes" "$work/err"
ok $? "train_gpt2 says the engine's refusal in its flags (exit $rc): $(tr '\n' ' ' <"$work/err")"
"$memprof" plan --model gpt2-xl --prefetch 2 --offload params --gpu-mem 1MiB >"$work/out" 2>"$work/err"
rc=$?
! grep -qE "FERRY_OFFLOAD|device_budget_bytes|prefetch_groups" "$work/out" "$work/err"
ok $? "memprof plan's verdict names no config field (exit $rc)"
finish
