#!/usr/bin/env bash
# Every refusal's advice against the situation it refuses: what a message
# tells the user to do is something the run has not done already (never the
# offload mode in use, never --recompute when it is on, never the NVMe tier
# in it or under a launcher, never a smaller batch than 1), every flag it
# names is one train_gpt2 takes, and where the advice names a value that
# fits, that value does fit. The library's messages offer every way out
# they know; train/flag_words.c leaves out the ones taken.
# Usage: test_advice.sh TRAIN_GPT2 MEMPROF [MPIRUN]
set -u
train=$1
memprof=$2
mpirun=${3:-}
work=$(mktemp -d /tmp/ferry-advice-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"

make_shard "$work/train.bin"
"$train" --help >"$work/help"
tiny=(--data "$work/train.bin" --layers 2 --heads 2 --width 64 --vocab 500 --context 256 --backend host --threads 1
      --steps 1 --quiet)

# advised_flags MESSAGE: every --flag it names, one per line.
advised_flags() { grep -oE -- '--[a-z][a-z0-9-]*' <<<"$1" | sort -u; }
# known: every flag named is one train_gpt2 --help lists.
known() {
  local f bad=""
  for f in $(advised_flags "$1"); do grep -qE -- "^  $f( |$)" "$work/help" || bad+=" $f"; done
  [ -z "$bad" ] || echo "# flags train_gpt2 does not take:$bad"
  [ -z "$bad" ]
}
# refused NAME WANT_PATTERN NOT_PATTERN ARGS...: exit 1, stderr matches
# WANT_PATTERN, does not match NOT_PATTERN, names only flags train_gpt2 takes.
refused() {
  local name=$1 want=$2 not=$3; shift 3
  "$train" "$@" >"$work/out" 2>"$work/err"
  local rc=$? msg
  msg=$(cat "$work/err")
  [ $rc -eq 1 ] && grep -qE -- "$want" "$work/err" && ! grep -qE -- "$not" "$work/err" && known "$msg"
  ok $? "$name (exit $rc): $msg"
}

# Offload auto's choice is the static memory plan's: the mode it settles on
# for a 400 MiB budget trains (it once chose params and ran out of memory at
# the first step, by fragmentation, and the advice then had to leave params
# out; the plan is now the peak, docs/memprof.md).
"$train" --data "$work/train.bin" --offload auto --gpu-mem 400MiB --backend host --steps 1 >"$work/out" 2>"$work/err"
rc=$?
[ $rc -eq 0 ] && grep -q "offload auto chose" "$work/out"
ok $? "auto's choice at 400 MiB trains its step (exit $rc): $(grep -m1 -o 'offload auto chose [a-z]*' "$work/out") $(head -c 300 "$work/err")"

# Params mode with recompute, activations past the budget: neither is advised.
refused "params with --recompute, activations past the budget: the batch or the budget" \
  "make the activations smaller \(a smaller --batch or --seq\), or raise --gpu-mem" "--recompute|--offload params" \
  "${tiny[@]}" --batch 16 --seq 256 --offload params --recompute --gpu-mem 2MiB
# ... and at batch 1, no smaller batch.
refused "the same at --batch 1: a shorter --seq, no smaller batch" \
  "\(a shorter --seq\), or raise --gpu-mem" "smaller --batch|--recompute|--offload params" \
  "${tiny[@]}" --batch 1 --seq 4096 --context 4096 --offload params --recompute --gpu-mem 3MiB
# A budget below the largest group: the groups are the model's, not the
# user's to split.
refused "a budget below the embeddings' group: raise it (the groups are GPT-2's)" \
  "cannot hold even the largest parameter group.*raise --gpu-mem \(the groups are GPT-2's" "split the group" \
  "${tiny[@]}" --batch 1 --seq 32 --context 4096 --offload params --gpu-mem 1MiB
# Optimizer mode, activations past the budget: all three ways out are open.
refused "optimizer mode, activations past the budget: batch, recompute, params, budget" \
  "a smaller --batch, or --recompute\), use --offload params, or raise --gpu-mem" "^$" \
  "${tiny[@]}" --batch 16 --seq 256 --offload optimizer --gpu-mem 3MiB

# The host pool's cap: in optimizer mode the disk tier is a way out, said as
# its flags; in the NVMe tier (master weights on disk or not) it is the mode
# in use, and the tier's own advice stands alone.
refused "optimizer mode past --host-mem: raise it, or the disk tier by its flags" \
  "raise --host-mem, or put the optimizer state on disk \(--offload nvme --nvme-path DIR\)" "offload optimizer state to NVMe" \
  "${tiny[@]}" --batch 2 --seq 32 --offload optimizer --host-mem 1MiB
mkdir -p "$work/nvme"
refused "the NVMe tier past --host-mem: no 'optimizer state to NVMe', --nvme-master offered" \
  "raise --host-mem, put the master weights on disk too \(--nvme-master\), or give --nvme-window less" \
  "optimizer state (to NVMe|on disk)|--offload nvme" \
  --data "$work/train.bin" --offload nvme --nvme-path "$work/nvme" --host-mem 64MiB --backend host --steps 1
refused "the NVMe tier with --nvme-master past --host-mem: --nvme-master is not offered again" \
  "raise --host-mem, or give --nvme-window less" "optimizer state (to NVMe|on disk)|--offload nvme|\(--nvme-master\)" \
  --data "$work/train.bin" --offload nvme --nvme-master --nvme-path "$work/nvme" --host-mem 64MiB --backend host \
  --steps 1
# Under a launcher the disk tier trains alone: not offered.
if [ -n "$mpirun" ]; then
  timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2 "$train" "${tiny[@]}" --batch 2 \
    --seq 32 --offload optimizer --host-mem 1MiB >"$work/out" 2>&1
  rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "raise --host-mem" "$work/out" && ! grep -qE "NVMe|--offload nvme" "$work/out"
  ok $? "2 ranks past --host-mem: raise it, and no disk tier, which trains alone (exit $rc): $(grep -m1 'host-mem' "$work/out")"
fi

# memprof plan --offload auto: no mode fits the batch asked (recompute
# tried): the advice leaves recompute out and names the batch that fits,
# which does fit.
plan=(--model gpt2-xl --seq 1024 --offload auto --gpu-mem 24GiB --host-mem 8GiB)
"$memprof" plan "${plan[@]}" --batch 4 >"$work/out" 2>"$work/err"
rc=$?; msg=$(cat "$work/err")
fits=$(grep -oE 'give --batch [0-9]+' "$work/err" | grep -oE '[0-9]+$')
[ $rc -eq 1 ] && grep -q "^memprof plan: batch 4 x 1024 does not fit in any mode: even with recompute" "$work/err" &&
  ! grep -qE "recompute\)|, recompute" "$work/err" && [ -n "$fits" ] && [ "$fits" -lt 4 ]
ok $? "memprof plan: batch 4 fits no mode; the advice leaves recompute out and names batch ${fits:-?} (exit $rc): $msg"
"$memprof" plan "${plan[@]}" --batch "${fits:-1}" >"$work/out" 2>"$work/err"
ok $? "... and batch ${fits:-?} does fit (exit $?): $(grep -m1 'auto:' "$work/out") $(cat "$work/err")"
"$memprof" plan --model gpt2-xl --seq 1024 --offload auto --gpu-mem 2GiB --host-mem 8GiB >"$work/out" 2>"$work/err"
rc=$?; msg=$(cat "$work/err")
[ $rc -eq 1 ] && grep -q "not even batch 1 x 1024 fits in any mode" "$work/err" && ! grep -qE "smaller batch|give --batch" "$work/err"
ok $? "memprof plan: not even batch 1 fits; no smaller batch is advised (exit $rc): $msg"
finish
