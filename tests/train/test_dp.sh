#!/usr/bin/env bash
# train_gpt2 under mpirun on the host backend. Two ranks with one
# micro-batch each train exactly as one process with --grad-accum 2: the
# same losses, the same validation loss, the same saved weights byte for
# byte, in every offload mode. A checkpoint saved by 2 ranks resumes in one
# process and one saved by one process resumes in 2 ranks, continuing
# exactly. Rank 0 alone prints and logs; each rank writes its own memory
# trace. A rank whose setup fails stops the other with its message; a rank
# that hangs (SIGSTOP) makes the other fail with the timeout's message; a
# rank killed outright ends the run: each within a bounded time, never a
# hang.
# Usage: test_dp.sh TRAIN_GPT2 MPIRUN MEMPROF
set -u
train=$1
mpirun=$2
memprof=$3
work=$(mktemp -d /tmp/ferry-dp-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"
export OMPI_MCA_btl_vader_single_copy_mechanism=none # no cross-process reads: containers forbid them
run() { "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x FERRY_COMM_TIMEOUT -np "$@"; }
export FERRY_COMM_TIMEOUT=${FERRY_COMM_TIMEOUT:-120}

make_shard "$work/train.bin"
common=(--data "$work/train.bin" --layers 2 --heads 2 --width 32 --vocab 500 --context 64 --batch 2 --seq 32
        --steps 6 --warmup 2 --lr 3e-3 --backend host --threads 1 --val-data "$work/train.bin" --eval-every 3
        --eval-batches 3)
losses() { $python -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"step\"" in l and "\"loss\"" in l))' "$1"; }
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
  "$train" "${common[@]}" "${flags[@]}" --grad-accum 2 --checkpoint-dir "$d/one" --log "$d/one.jsonl" \
    >"$d/one.out" 2>"$d/err"
  ok $? "$mode: 1 process with --grad-accum 2 trained $(cat "$d/err")"
  a=$(losses "$d/two.jsonl"); b=$(losses "$d/one.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ]; ok $? "$mode: 6 losses identical (last: ${a##* })"
  a=$(evals "$d/two.out"); b=$(evals "$d/one.out")
  [ -n "$a" ] && [ "$a" = "$b" ]; ok $? "$mode: validation losses identical ($a)"
  cmp -s "$d/two/step_00000006/model.safetensors" "$d/one/step_00000006/model.safetensors"
  ok $? "$mode: saved weights identical (model.safetensors byte for byte)"
  cmp -s "$d/two/step_00000006/state.ferry" "$d/one/step_00000006/state.ferry"
  ok $? "$mode: saved engine state identical (state.ferry byte for byte: one whole file at any world size)"
done

# ---- what rank 0 alone writes, and what every rank writes ----
d=$work/optimizer
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
  cmp -s "$d/a/step_00000006/model.safetensors" "$d/one/step_00000006/model.safetensors"
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
  cmp -s "$d/b/step_00000006/model.safetensors" "$d/one/step_00000006/model.safetensors"
  ok $? "$mode: ... final weights identical"
done
# A resume with other micro-batches per step would see other data: refused.
run 2 "$train" "${common[@]}" --offload optimizer --grad-accum 2 --resume "$work/optimizer/b" >/dev/null \
  2>"$work/err"
rc=$?; [ $rc -ne 0 ] && grep -q "2 micro-batches per step (ranks x --grad-accum); this run has .* 2 ranks x 2" "$work/err"
ok $? "2 ranks x --grad-accum 2 resuming a 2-micro-batch checkpoint is refused (exit $rc): $(grep -m1 resume "$work/err")"

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

# Waits for $2 steps in the log $3, then prints the pid of rank 1 among the
# processes below $1 (timeout, then mpirun, then the ranks).
rank1_pid() {
  local i k c
  for i in $(seq 600); do
    if [ -f "$3" ] && [ "$(wc -l <"$3")" -ge "$2" ]; then
      for c in $(pgrep -P "$1"); do
        for k in $(pgrep -P "$c"); do
          tr '\0' '\n' <"/proc/$k/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && { echo "$k"; return; }
        done
      done
    fi
    sleep 0.1
  done
}
# Rank 1 hangs (stopped): rank 0's collective times out and says so; the launcher ends rank 1.
FERRY_COMM_TIMEOUT=10 timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x FERRY_COMM_TIMEOUT \
  -np 2 "$train" "${common[@]}" --steps 100000 --eval-every 0 --log "$work/hang.jsonl" --quiet >"$work/out" 2>&1 &
mp=$!
pid=$(rank1_pid $mp 3 "$work/hang.jsonl")
start=$SECONDS
[ -n "$pid" ] && kill -STOP "$pid"
wait $mp
rc=$?; took=$((SECONDS - start))
[ -n "$pid" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 60 ] &&
  grep -Eq "rank 0: training: .* waited [0-9]+ s for rank 1 without an answer" "$work/out"
ok $? "a rank that hangs fails the other at the timeout with a message naming it (exit $rc in ${took} s): $(grep -m1 'rank 0' "$work/out")"

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

# Rank 1 is killed: the run ends, the launcher naming the rank.
timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2 "$train" "${common[@]}" --steps 100000 \
  --eval-every 0 --log "$work/kill.jsonl" --quiet >"$work/out" 2>&1 &
mp=$!
pid=$(rank1_pid $mp 3 "$work/kill.jsonl")
start=$SECONDS
[ -n "$pid" ] && kill -KILL "$pid"
wait $mp
rc=$?; took=$((SECONDS - start))
[ -n "$pid" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 60 ] && grep -q "rank 1 .*exited on signal 9" "$work/out"
ok $? "a killed rank ends the run (exit $rc in ${took} s): $(grep -m1 'signal 9' "$work/out")"
finish
