#!/usr/bin/env bash
# train_gpt2 with --offload nvme on the host backend: 20 steps give bitwise
# the losses and saved weights of --offload optimizer, with the moments and
# with the master weights on disk, and in params mode with the state on
# disk; a run checkpointed at step 10 in nvme mode resumes in optimizer mode
# (and the other way round) as the unbroken run; the flags are checked
# before any work, and the state file is gone when the run ends.
# The memory trace has the disk as a pool of its own and the window in the
# host pool, as memprof plan predicts them.
# Usage: test_nvme_run.sh TRAIN_GPT2 MEMPROF
set -u
train=$1
memprof=$2
work=$(mktemp -d /tmp/ferry-nvme-run-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"

make_shard "$work/train.bin"
mkdir -p "$work/disk"
common=(--data "$work/train.bin" --layers 2 --heads 2 --width 32 --vocab 500 --context 64 --batch 2 --seq 32
        --steps 20 --warmup 3 --lr 3e-3 --backend host --threads 2 --quiet)
disk=(--nvme-path "$work/disk" --nvme-window 96KiB --nvme-block 4KiB --nvme-queue-depth 4)

"$train" "${common[@]}" --offload optimizer --checkpoint-dir "$work/opt" --log "$work/opt.jsonl" >/dev/null 2>"$work/err"
ok $? "optimizer mode: 20 steps $(cat "$work/err")"
ref=$(losses "$work/opt.jsonl")
for run in "nvme:--offload nvme" "nvme-master:--offload nvme --nvme-master" "params-disk:--offload params --nvme-master"; do
  name=${run%%:*}; read -r -a flags <<< "${run#*:}"
  "$train" "${common[@]}" "${flags[@]}" "${disk[@]}" --checkpoint-dir "$work/$name" --log "$work/$name.jsonl" \
    >/dev/null 2>"$work/err"
  ok $? "$name: 20 steps $(cat "$work/err")"
  got=$(losses "$work/$name.jsonl")
  [ -n "$got" ] && [ "$got" = "$ref" ]; ok $? "$name: 20 losses bitwise those of optimizer mode (last ${got##* })"
  same_weights "$work/opt/step_00000020/model.safetensors" "$work/$name/step_00000020/model.safetensors"
  ok $? "$name: the saved weights bit for bit (every tensor of model.safetensors)"
  same_engine_state "$work/opt/step_00000020/state.ferry" "$work/$name/step_00000020/state.ferry"
  ok $? "$name: state.ferry's engine state bit for bit: it holds the state itself"
done
[ -z "$(ls -A "$work/disk")" ]; ok $? "no state file is left in the folder: $(ls "$work/disk")"

# The state file removed under a running run: the run stops naming it, and
# says what is kept: the last checkpoint and the steps lost after it, or,
# with none saved, that nothing was saved and how many steps are lost;
# never a checkpoint that does not exist.
for every in 5 0; do
  mkdir -p "$work/gone$every"
  "$train" "${common[@]}" --offload nvme "${disk[@]/$work\/disk/$work/gone$every}" --steps 100000 \
    --checkpoint-dir "$work/gone$every-ck" --checkpoint-every $every --log "$work/gone$every.jsonl" \
    >"$work/out" 2>"$work/err" &
  pid=$!
  for _ in $(seq 600); do [ "$(grep -c '"kind":"step"' "$work/gone$every.jsonl" 2>/dev/null)" -ge 7 ] && break; sleep 0.1; done
  rm -f "$work/gone$every"/*
  for _ in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  kill -9 $pid 2>/dev/null; wait $pid; rc=$?
  steps=$(grep -c '"kind":"step"' "$work/gone$every.jsonl")
  if [ $every -gt 0 ]; then
    # The removal may be found while the last step's checkpoint is written:
    # the last checkpoint is the last folder that was saved whole.
    last=$(ls -d "$work/gone$every-ck"/step_* 2>/dev/null | tail -1 | sed 's/.*step_0*//'); last=${last:-0}
    lost=$(( steps - last ))
    grep -q "the last checkpoint is step $last, $work/gone$every-ck/step_$(printf %08d $last); the $lost step" "$work/err"
  else
    grep -q "nothing was saved (no checkpoint had been written yet): the $steps steps trained are lost" "$work/err"
  fi
  found=$?
  [ $rc -eq 1 ] && [ $found -eq 0 ] && grep -q "was removed while the run used it" "$work/err" &&
    ! grep -q "the last checkpoint is whole" "$work/err"
  ok $? "--checkpoint-every $every: the state file removed after $steps steps: stopped, and what is kept said (exit $rc): $(cat "$work/err")"
done

# Checkpointed at 10 in one mode, resumed in the other.
for pair in "nvme:optimizer" "optimizer:nvme"; do
  from=${pair%%:*}; to=${pair#*:}
  d=$work/$from-$to; mkdir -p "$d"
  f1=(--offload "$from"); [ "$from" = nvme ] && f1+=("${disk[@]}")
  f2=(--offload "$to"); [ "$to" = nvme ] && f2+=("${disk[@]}" --nvme-master)
  "$train" "${common[@]}" "${f1[@]}" --checkpoint-dir "$d/ck" --checkpoint-every 10 --log "$d/a.jsonl" >/dev/null 2>"$d/err"
  rm -rf "$d/ck/step_00000020"; ln -sfn step_00000010 "$d/ck/latest"
  head -n 10 "$d/a.jsonl" > "$d/b.jsonl"
  "$train" "${common[@]}" "${f2[@]}" --checkpoint-dir "$d/ck" --resume "$d/ck" --log "$d/b.jsonl" >/dev/null 2>"$d/err"
  ok $? "saved in $from at step 10, resumed in $to $(cat "$d/err")"
  got=$(losses "$d/b.jsonl")
  [ -n "$got" ] && [ "$got" = "$ref" ]; ok $? "$from -> $to: the 20 losses of the unbroken run"
done

# memprof: the trace's disk pool and window against memprof plan.
"$train" "${common[@]}" --steps 3 --offload nvme --nvme-master "${disk[@]}" --trace "$work/run.trace" >/dev/null 2>"$work/err"
ok $? "a traced nvme run $(cat "$work/err")"
"$memprof" --json "$work/run.trace" > "$work/trace.json" 2>"$work/err"; ok $? "memprof reads its trace $(cat "$work/err")"
"$memprof" plan --json --layers 2 --heads 2 --width 32 --vocab 500 --context 64 --batch 2 --seq 32 --backend host \
  --offload nvme --nvme-master --nvme-window 96KiB --nvme-block 4KiB > "$work/plan.json" 2>"$work/err"
ok $? "memprof plan of the same run $(cat "$work/err")"
$python - "$work/trace.json" "$work/plan.json" > "$work/cmp" 2>&1 <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); p = json.load(open(sys.argv[2]))
got = (t["disk"]["peak_bytes"], t["host"]["category_peaks"]["nvme window"], t["host"]["peak_bytes"])
want = (p["disk"]["total_bytes"], p["disk"]["window_bytes"], p["host"]["total_bytes"])
print("trace disk %d, window %d, host %d; plan %d, %d, %d" % (got + want))
sys.exit(0 if got == want and got[0] > 0 else 1)
PY
ok $? "the trace's disk, window and host pool are what memprof plan predicts: $(cat "$work/cmp")"
"$memprof" "$work/run.trace" > "$work/trace.txt" 2>&1
grep -q "^disk: peak" "$work/trace.txt" && grep -q "nvme window" "$work/trace.txt"
ok $? "memprof's report has a disk pool and the window: $(grep -E '^disk|nvme window' "$work/trace.txt" | tr '\n' ' ')"

# Flags checked before any work.
"$train" "${common[@]}" --offload nvme >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 2 ] && grep -q -- "--nvme-path" "$work/err"
ok $? "--offload nvme without --nvme-path is refused (exit $rc): $(cat "$work/err")"
"$train" "${common[@]}" --offload optimizer --nvme-path "$work/disk" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 2 ] && grep -q -- "--offload nvme" "$work/err"
ok $? "--nvme-path with --offload optimizer is refused (exit $rc): $(cat "$work/err")"
"$train" "${common[@]}" --offload nvme --nvme-path "$work/nowhere" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 2 ] && grep -q "nowhere" "$work/err" && grep -q "not created" "$work/err" && ! grep -q "created if missing" "$work/err"
ok $? "a --nvme-path that does not exist is refused, saying the folder is not created (exit $rc): $(cat "$work/err")"
: >"$work/a-file"
"$train" "${common[@]}" --offload nvme --nvme-path "$work/a-file" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 2 ] && grep -q "a-file" "$work/err" && grep -q "existing folder" "$work/err" && ! grep -q "created if missing" "$work/err"
ok $? "a --nvme-path naming a file is refused: an existing folder, the state file made in it (exit $rc): $(cat "$work/err")"
"$train" "${common[@]}" --offload nvme --nvme-path "$work/disk" --nvme-block 5000 >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 2 ] && grep -q "5000" "$work/err"
ok $? "--nvme-block 5000 is refused (exit $rc): $(cat "$work/err")"
finish
