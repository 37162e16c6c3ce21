#!/usr/bin/env bash
# memprof --check-plan on the traces of real runs: train_gpt2 on the host
# backend (a d2 GPT-2 in offload optimizer and in params mode, and a 4-layer
# one in params mode at the budget of its plan, where fewer weight slots than
# blocks make groups take turns) writes a trace that keeps its plan (exit 0);
# the same traces with a fault planted by plan_trace.py, which reads and
# rewrites the records from their documented layout with checksums of its
# own (a planned buffer moved by 256 bytes, its size changed, a group's stay
# moved into a slot another group holds), are refused (exit 3) naming the
# buffer or the slot with the planned and the traced values; and the
# address-space panel of each real trace draws every planned buffer and
# every stay of a group (plan_trace.py svg). About 5 s.
# Usage: test_plan_check.sh TRAIN_GPT2 MEMPROF
set -u
train=$1
memprof=$2
work=$(mktemp -d /tmp/ferry-plan-check-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../train/tap.sh"
helper="$(dirname "$0")/plan_trace.py"

make_shard "$work/train.bin"
small=(--data "$work/train.bin" --model d2 --vocab 500 --context 64 --batch 2 --seq 32 --steps 2 --backend host
       --threads 2 --quiet --gpu-mem 64MiB)
four=(--data "$work/train.bin" --layers 4 --heads 2 --width 64 --vocab 500 --context 64 --batch 2 --seq 32 --steps 2
      --backend host --threads 2 --quiet --offload params --prefetch 0)

# check NAME EXIT WORDS...: memprof --check-plan on $work/NAME.fmt exits EXIT
# and its report says every line of WORDS.
check() {
  local name=$1 want=$2
  shift 2
  "$memprof" --check-plan "$work/$name.fmt" >"$work/out" 2>"$work/err"
  local rc=$? missing=0
  for words in "$@"; do
    grep -qF -- "$words" "$work/out" || { echo "# not said: $words"; missing=1; }
  done
  ok $([ "$rc" -eq "$want" ] && [ "$missing" -eq 0 ] && echo 0 || echo 1) \
    "$name: memprof --check-plan exits $want (got $rc) saying what it must"
  [ "$rc" -eq "$want" ] && [ "$missing" -eq 0 ] || sed -n '/^plan/,$s/^/#   /p' "$work/out"
}

"$train" "${small[@]}" --offload optimizer --trace "$work/optimizer.fmt" >"$work/out" 2>&1
ok $? "d2, offload optimizer: trained with a trace"
"$train" "${small[@]}" --offload params --prefetch 0 --trace "$work/params.fmt" >"$work/out" 2>&1
ok $? "d2, params mode: trained with a trace"
# The budget of the plan without weights kept beyond the window: 2 weight
# slots for 4 blocks, so blocks take turns in them.
total='import json, sys; print(json.load(sys.stdin)["device"]["total_bytes"])'
budget=$("$memprof" plan --backend host --layers 4 --heads 2 --width 64 --vocab 500 --context 64 --batch 2 --seq 32 \
         --offload params --prefetch 0 --json | $python -c "$total")
"$train" "${four[@]}" --gpu-mem "$budget" --trace "$work/turns.fmt" >"$work/out" 2>&1
ok $? "4 layers, params mode in the plan's $budget bytes: trained with a trace"

for name in optimizer params turns; do
  check "$name" 0 "the run kept its plan" "= the region"
done
turns=$("$memprof" dump "$work/turns.fmt" | grep -c '"kind":"occupy",.*"category":"params"')
ok $([ "$turns" -gt 6 ] && echo 0 || echo 1) \
  "4 layers: $turns stays in the weight slots, more than its 6 groups: blocks took turns"

for fault in moved resized; do
  if $python "$helper" plant "$fault" "$work/optimizer.fmt" "$work/optimizer-$fault.fmt" >"$work/words"; then
    mapfile -t words <"$work/words"
    check "optimizer-$fault" 3 "${words[@]}"
  else
    ok 1 "optimizer: a $fault buffer planted"
  fi
done
for trace in params turns; do
  if $python "$helper" plant shared "$work/$trace.fmt" "$work/$trace-shared.fmt" >"$work/words"; then
    mapfile -t words <"$work/words"
    check "$trace-shared" 3 "${words[@]}"
  else
    ok 1 "$trace: two groups in one slot planted"
  fi
done

for name in optimizer params turns; do
  "$memprof" "$work/$name.fmt" --svg "$work/$name.svg" >/dev/null 2>&1 &&
    $python "$helper" svg "$work/$name.fmt" "$work/$name.svg"
  ok $? "$name: the address-space panel draws every planned buffer and every stay"
done
finish
