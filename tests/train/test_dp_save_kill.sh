#!/usr/bin/env bash
# kill -9 of one of two ranks while a checkpoint is being written, the
# launcher leaving the other alive (Open MPI's recovery on, as Slurm with
# --kill-on-bad-exit=0): every write is slowed (FERRY_FAULT_WRITE_DELAY_MS,
# a -Dfault_injection=true build) so that step 4's save lasts seconds, and
# the kill lands while rank 0 writes state.ferry from the ranks' gathered
# parts. Rank 1 killed: rank 0 stops; rank 0 (the writer) killed: rank 1
# stops; each within FERRY_COMM_TIMEOUT + 10 s, exiting non-zero with a
# message naming the dead rank, and no step 4 appears: latest still names
# step 2, which resumes and trains to step 6 bit for bit as the run that
# was never interrupted (losses, weights and engine state).
# Usage: test_dp_save_kill.sh TRAIN_GPT2 MPIRUN
set -u
train=$1
mpirun=$2
work=$(mktemp -d /tmp/ferry-dp-kill-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"
need pgrep procps # finds the ranks below mpirun
export OMPI_MCA_btl_vader_single_copy_mechanism=none # no cross-process reads: containers forbid them
T=5
mp() { "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS=1 "$@"; }

make_shard "$work/train.bin"
common=(--data "$work/train.bin" --layers 2 --heads 2 --width 32 --vocab 500 --context 64 --batch 2 --seq 32
        --warmup 2 --lr 3e-3 --backend host --threads 1 --eval-every 0 --offload optimizer --grad-accum 1 --quiet
        --checkpoint-every 2)
mp -np 2 "$train" "${common[@]}" --steps 6 --checkpoint-dir "$work/ref" --log "$work/ref.jsonl" >/dev/null 2>"$work/err"
ok $? "2 ranks, 6 steps uninterrupted, saved at 2, 4, 6 $(cat "$work/err")"

# The processes below $1, at any depth.
below() { local c; for c in $(pgrep -P "$1"); do echo "$c"; below "$c"; done; }
# Waits for $3 to exist, then prints the pid of rank $2's train_gpt2 among
# the processes below $1.
pid_when() {
  local i k
  for i in $(seq 600); do
    if [ -e "$3" ]; then
      for k in $(below "$1"); do
        [ "$(cat "/proc/$k/comm" 2>/dev/null)" = train_gpt2 ] &&
          tr '\0' '\n' <"/proc/$k/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$k"; return; }
      done
    fi
    sleep 0.05
  done
}

for victim in 1 0; do
  other=$((1 - victim))
  d=$work/k$victim
  mkdir -p "$d"
  cp -a "$work/ref/step_00000002" "$d/"
  ln -s step_00000002 "$d/latest"
  head -n 2 "$work/ref.jsonl" >"$d.jsonl"
  # From step 2 on, every write 60 ms late: step 4's save takes seconds.
  # With recovery on, mpirun's own status does not say how the survivor
  # ended: each rank's is written to $d.exit.
  FERRY_COMM_TIMEOUT=$T FERRY_FAULT_WRITE_DELAY_MS=60 timeout 60 "$mpirun" --allow-run-as-root --oversubscribe \
    --bind-to none --mca orte_enable_recovery 1 -x FERRY_COMM_TIMEOUT -x FERRY_FAULT_WRITE_DELAY_MS \
    -x OPENBLAS_NUM_THREADS=1 -np 2 bash -c '"$@"; echo "rank $OMPI_COMM_WORLD_RANK exit $?" >>"'"$d.exit"'"' rank \
    "$train" "${common[@]}" --steps 6 --resume "$d" >"$d.out" 2>&1 &
  m=$!
  pid=$(pid_when $m $victim "$d/.step_00000004.tmp/.state.ferry.tmp")
  sleep 0.3
  start=$SECONDS
  [ -n "$pid" ] && kill -9 "$pid"
  wait $m
  rc=$?; took=$((SECONDS - start))
  msg=$(grep -m1 "train_gpt2: rank $other" "$d.out" | cut -c1-300)
  exit=$(sed -n "s/^rank $other exit //p" "$d.exit" 2>/dev/null)
  [ -n "$pid" ] && [ $rc -ne 124 ] && [ -n "$exit" ] && [ "$exit" -ne 0 ] && [ $took -le $((T + 10)) ] &&
    grep -Eq "train_gpt2: rank $other: .*(waited [0-9]+ s for rank $victim|rank $victim sent no heartbeat for [0-9]+ s)" "$d.out"
  ok $? "rank $victim killed while step 4's state.ferry was written: rank $other stops within $T + 10 s naming it (its exit ${exit:-?} in ${took} s): $msg"
  [ "$(readlink "$d/latest")" = step_00000002 ] && [ ! -e "$d/step_00000004" ]
  ok $? "... no step 4 appears; latest names step 2 (folders: $(ls -A "$d" | tr '\n' ' '))"
  mp -np 2 "$train" "${common[@]}" --steps 6 --resume "$d" --log "$d.jsonl" >/dev/null 2>"$work/err"
  ok $? "... step 2 resumes $(cat "$work/err")"
  a=$(losses "$d.jsonl" 2); b=$(losses "$work/ref.jsonl" 2)
  [ -n "$a" ] && [ "$a" = "$b" ] &&
    same_weights "$d/step_00000006/model.safetensors" "$work/ref/step_00000006/model.safetensors" &&
    same_state "$d/step_00000006/state.ferry" "$work/ref/step_00000006/state.ferry"
  ok $? "... and trains to step 6 as the uninterrupted run: losses of steps 3-6 ($a), weights and engine state bit for bit"
done
finish
