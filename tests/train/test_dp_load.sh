#!/usr/bin/env bash
# A data-parallel resume reads the checkpoint once in all, not once per rank
# (twice): one process with --grad-accum 3 saves step 3 and trains on to 6;
# three ranks resume step 3 and end with its step-6 weights, engine state
# and losses, bit for bit. Before the engine exists, each rank checks the
# CRC-32C of its third of model.safetensors' tensors and the thirds make the
# file's (dp_inspect counts every byte each rank reads, the kernel's rchar):
# one process reads the tensors whole, each of 2 or 3 ranks 1/N of them and
# what one process reads besides; a byte changed in the last rank's third
# is refused by every rank, naming the CRC-32C, and train_gpt2 --resume at
# 3 ranks refuses it before any step. (engine-dp-N counts the engine
# state's bytes per rank.)
# Usage: test_dp_load.sh TRAIN_GPT2 MPIRUN DP_INSPECT
set -u
train=$1
mpirun=$2
inspect=$3
work=$(mktemp -d /tmp/ferry-dp-load-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"
export OMPI_MCA_btl_vader_single_copy_mechanism=none # no cross-process reads: containers forbid them
export FERRY_COMM_TIMEOUT=${FERRY_COMM_TIMEOUT:-120}
run() { "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x FERRY_COMM_TIMEOUT -x OPENBLAS_NUM_THREADS=1 -np "$@"; }

make_shard "$work/train.bin"
common=(--data "$work/train.bin" --layers 2 --heads 2 --width 32 --vocab 500 --context 64 --batch 2 --seq 32
        --steps 6 --warmup 2 --lr 3e-3 --backend host --threads 1 --eval-every 0 --offload optimizer)

OPENBLAS_NUM_THREADS=2 "$train" "${common[@]}" --grad-accum 3 --checkpoint-dir "$work/one" --checkpoint-every 3 \
  --log "$work/one.jsonl" >/dev/null 2>"$work/err"
ok $? "one process, --grad-accum 3: saved step 3, trained to 6 $(cat "$work/err")"
ckpt=$work/one/step_00000003

# ---- 3 ranks resume it and continue exactly ----
mkdir -p "$work/three"
cp -a "$ckpt" "$work/three/"
ln -s step_00000003 "$work/three/latest"
run 3 "$train" "${common[@]}" --grad-accum 1 --resume "$work/three" --log "$work/three.jsonl" >/dev/null 2>"$work/err"
ok $? "3 ranks resumed step 3 $(cat "$work/err")"
a=$(losses "$work/three.jsonl" 3); b=$(losses "$work/one.jsonl" 3)
[ -n "$a" ] && [ "$a" = "$b" ] && same_weights "$work/three/step_00000006/model.safetensors" \
  "$work/one/step_00000006/model.safetensors" &&
  same_state "$work/three/step_00000006/state.ferry" "$work/one/step_00000006/state.ferry"
ok $? "... and continued exactly: losses of steps 4-6 ($a), the step-6 weights and engine state bit for bit"

# ---- the bytes each rank reads checking the weights ----
data=$($python -c 'import os, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; print(os.path.getsize(sys.argv[1]) - 8 - n)' "$ckpt/model.safetensors")
run 1 "$inspect" "$ckpt" >"$work/i1" 2>&1
rc=$?
[ $rc -eq 77 ] && { echo "ok 1 # SKIP this kernel has no /proc/self/io"; echo "1..1"; exit 0; }
alone=$(sed -n 's/^rank 0 of 1: read \([0-9]*\) bytes: ok$/\1/p' "$work/i1")
[ $rc -eq 0 ] && [ -n "$alone" ] && [ "$alone" -ge "$data" ]
ok $? "one process reads the $data bytes of tensors whole, and $((${alone:-0} - data)) bytes besides: $(cat "$work/i1")"
other=$((${alone:-0} - data)) # config.json, state.ferry's header and run state: every rank reads them
for np in 2 3; do
  run $np "$inspect" "$ckpt" >"$work/i$np" 2>&1
  rc=$?
  bad=0
  for r in $(seq 0 $((np - 1))); do
    got=$(sed -n "s/^rank $r of $np: read \([0-9]*\) bytes: ok\$/\1/p" "$work/i$np")
    want=$(((data * (r + 1) / np) - (data * r / np) + other)) # its part, as the format cuts the bytes
    [ -n "$got" ] && [ "$got" -ge $((want - 4096)) ] && [ "$got" -le $((want + 4096)) ] || bad=1
  done
  [ $rc -eq 0 ] && [ $bad -eq 0 ]
  ok $? "$np ranks: each reads its 1/$np of the tensors (about $((data / np)) bytes) and the $other bytes besides, within 4 KiB: $(tr '\n' ' ' <"$work/i$np")"
done

# ---- a byte changed in the last rank's third: every rank refuses ----
mkdir -p "$work/bad"
cp -a "$ckpt" "$work/bad/"
ln -s step_00000003 "$work/bad/latest"
$python - "$work/bad/step_00000003/model.safetensors" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) - 10] ^= 0x40 # the tensors' last bytes: the last part
open(sys.argv[1], "wb").write(b)
PY
run 3 "$inspect" "$work/bad/step_00000003" >"$work/ib" 2>&1
rc=$?
[ $rc -ne 0 ] && [ "$(grep -c "^rank [0-2] of 3: read [0-9]* bytes: failed: .*its tensor data (.*CRC-32C [0-9a-f]*) is not what was saved" "$work/ib")" -eq 3 ]
ok $? "a byte changed in the last third of the tensors: all 3 ranks refuse it, naming the CRC-32C (exit $rc): $(grep -m1 'rank 0' "$work/ib" | cut -c1-300)"
timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x FERRY_COMM_TIMEOUT -np 3 "$train" \
  "${common[@]}" --grad-accum 1 --resume "$work/bad" --log "$work/bad.jsonl" >"$work/out" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "its tensor data .* is not what was saved with the state.ferry beside it" "$work/out" &&
  [ ! -e "$work/bad/step_00000004" ] && [ ! -s "$work/bad.jsonl" ]
ok $? "train_gpt2 --resume at 3 ranks refuses it before any step (exit $rc): $(grep -m1 'tensor data' "$work/out" | cut -c1-300)"
finish
