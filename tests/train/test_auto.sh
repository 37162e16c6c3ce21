#!/usr/bin/env bash
# train_gpt2's default, --offload auto, on the host backend: the run says
# in one line what it chose, and it is what `memprof plan --offload auto`
# predicts for the same model, batch and budget (budgets set between the
# planner's own figures for none and optimizer, and below optimizer's);
# --find-max-batch trains with the planner's largest batch; a resumed run
# keeps its checkpoint's mode; under mpirun (when given) two ranks agree on
# the mode and the batch, and the planner with --ranks 2 predicts them.
# Usage: test_auto.sh TRAIN_GPT2 MEMPROF [MPIRUN]
set -u
train=$1
memprof=$2
mpirun=${3:-}
work=$(mktemp -d /tmp/ferry-auto-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"

make_shard "$work/train.bin"
model=(--layers 4 --heads 2 --width 64 --vocab 500 --context 64 --seq 32)
common=(--data "$work/train.bin" "${model[@]}" --warmup 1 --lr 3e-3 --backend host --threads 2 --prefetch 0)
plan() { "$memprof" plan "${model[@]}" --backend host --prefetch 0 --json "$@"; }
field() { $python -c "import json,sys; d=json.load(sys.stdin); v=d$1; print(v if not isinstance(v, bool) else str(v).lower())"; }

# The default is auto, and it says what it chose.
"$train" "${common[@]}" --batch 2 --steps 2 >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 0 ] && grep -q "^offload auto chose none: it needs" "$work/out" && grep -q "offload none" "$work/out"
ok $? "the default is --offload auto, which chose none with no budget and said so (exit $rc): $(grep -m1 'offload auto' "$work/out") $(cat "$work/err")"

none=$(plan --batch 2 --offload none | field '["device"]["total_bytes"]')
opt=$(plan --batch 2 --offload optimizer | field '["device"]["total_bytes"]')
between=$(( (none + opt) / 2 ))
below=$(( opt * 9 / 10 ))
for budget in $between $below; do
  want=$(plan --batch 2 --offload auto --gpu-mem "$budget" | field '["auto"]["chose"]')
  "$train" "${common[@]}" --batch 2 --steps 2 --gpu-mem "$budget" >"$work/out" 2>"$work/err"
  rc=$?
  got=$(sed -n 's/^offload auto chose \([a-z]*\).*/\1/p' "$work/out")
  [ $rc -eq 0 ] && [ -n "$want" ] && [ "$got" = "$want" ]
  ok $? "--gpu-mem $budget (none plans $none, optimizer $opt): the run chose '$got', memprof plan predicts '$want' (exit $rc) $(cat "$work/err")"
done
[ "$(plan --batch 2 --offload auto --gpu-mem "$between" | field '["auto"]["chose"]')" = optimizer ] \
  && [ "$(plan --batch 2 --offload auto --gpu-mem "$below" | field '["auto"]["chose"]')" = params ]
ok $? "between none and optimizer the plan says optimizer, below optimizer params"

# --find-max-batch: the planner's largest batch, and training with it.
budget=$(( opt * 2 ))
want=$(plan --batch 1 --offload auto --gpu-mem "$budget" | field '["max_batch"]')
"$train" "${common[@]}" --steps 1 --gpu-mem "$budget" --find-max-batch >"$work/out" 2>"$work/err"
rc=$?
got=$(sed -n 's/^find-max-batch: batch \([0-9]*\) x 32 fits.*/\1/p' "$work/out")
[ $rc -eq 0 ] && [ -n "$want" ] && [ "$want" -gt 2 ] && [ "$got" = "$want" ] && grep -qE "batch $want x 32 x 1 accum" "$work/out"
ok $? "--find-max-batch trains with batch '$got', the planner's largest '$want' (exit $rc) $(cat "$work/err")"

# Recompute only when no mode fits without it: a budget between params
# mode's need at batch 16 with recompute and without.
with=$(plan --batch 16 --offload params --recompute | field '["device"]["total_bytes"]')
without=$(plan --batch 16 --offload params | field '["device"]["total_bytes"]')
mid=$(( (with + without) / 2 ))
plan --batch 16 --offload auto --gpu-mem "$mid" >"$work/plan.json"
want=$(field '["auto"]["chose"]' <"$work/plan.json")
"$train" "${common[@]}" --batch 16 --steps 1 --gpu-mem "$mid" >"$work/out" 2>"$work/err"
rc=$?
got=$(sed -n 's/^offload auto chose \([a-z]*\).*/\1/p' "$work/out")
[ $rc -eq 0 ] && [ "$(field '["auto"]["recompute"]' <"$work/plan.json")" = true ] && [ "$got" = "$want" ] \
  && grep -q "no mode fits without recompute" "$work/out" && grep -q "| recompute" "$work/out"
ok $? "--gpu-mem $mid (params plans $with with recompute, $without without): the run recomputes and chose '$got' as planned ('$want') (exit $rc) $(cat "$work/err")"
"$memprof" plan "${model[@]}" --backend host --batch 16 --offload auto --gpu-mem 1MiB >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "no mode fits a device budget of 1.0 MiB" "$work/err"
ok $? "memprof plan --offload auto with a budget nothing fits: exit $rc, $(head -c 300 "$work/err")"
"$memprof" plan "${model[@]}" --backend host --offload auto >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 2 ] && grep -q "give --gpu-mem or --card" "$work/err"
ok $? "memprof plan --offload auto without a budget: usage error (exit $rc) $(cat "$work/err")"

# A resumed run keeps its checkpoint's mode (optimizer, chosen under a
# budget) rather than choosing again without one.
"$train" "${common[@]}" --batch 2 --steps 2 --gpu-mem "$between" --checkpoint-dir "$work/ck" >"$work/out" 2>"$work/err"
rc1=$?
"$train" "${common[@]}" --batch 2 --steps 4 --resume "$work/ck" >"$work/out" 2>"$work/err"
rc=$?
[ $rc1 -eq 0 ] && [ $rc -eq 0 ] && grep -q "offload optimizer" "$work/out" && ! grep -q "offload auto chose" "$work/out"
ok $? "a resumed run keeps the checkpoint's optimizer mode (exits $rc1, $rc): $(grep -m1 'offload' "$work/out") $(cat "$work/err")"
"$train" "${common[@]}" --batch 2 --steps 5 --resume "$work/ck" --offload auto >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 0 ] && grep -q "^offload auto chose none" "$work/out"
ok $? "--offload auto given with --resume chooses again (exit $rc) $(cat "$work/err")"

# ---- two ranks ----
if [ -n "$mpirun" ]; then
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  export FERRY_COMM_TIMEOUT=${FERRY_COMM_TIMEOUT:-120}
  run2() { "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x FERRY_COMM_TIMEOUT -np 2 "$@"; }
  dp=(--data "$work/train.bin" "${model[@]}" --warmup 1 --lr 3e-3 --backend host --threads 1 --prefetch 0)
  want=$(plan --batch 2 --offload auto --ranks 2 --gpu-mem "$between" | field '["auto"]["chose"]')
  run2 "$train" "${dp[@]}" --batch 2 --steps 2 --gpu-mem "$between" >"$work/out" 2>"$work/err"
  rc=$?
  got=$(sed -n 's/^offload auto chose \([a-z]*\).*/\1/p' "$work/out")
  [ $rc -eq 0 ] && [ "$got" = "$want" ] && grep -q "every rank takes the same" "$work/out"
  ok $? "2 ranks: the run chose '$got' on every rank, memprof plan --ranks 2 predicts '$want' (exit $rc) $(head -c 300 "$work/err")"
  want=$(plan --batch 1 --offload auto --ranks 2 --gpu-mem "$budget" | field '["max_batch"]')
  run2 "$train" "${dp[@]}" --steps 1 --gpu-mem "$budget" --find-max-batch >"$work/out" 2>"$work/err"
  rc=$?
  got=$(sed -n 's/^find-max-batch: batch \([0-9]*\) x 32 fits.*/\1/p' "$work/out")
  [ $rc -eq 0 ] && [ -n "$want" ] && [ "$got" = "$want" ]
  ok $? "2 ranks: --find-max-batch trains with batch '$got', the planner's '$want' (exit $rc) $(head -c 300 "$work/err")"
else
  echo "# no mpirun: the two-rank checks are left out"
fi
finish
