#!/usr/bin/env bash
# train_gpt2 on the host backend: 20 steps in one run and 10 + save + resume
# + 10 give bitwise the same losses and the same saved weights, in every
# offload mode, with the delayed update, and in f16 storage with a loss
# scale that starts far too high, so the run skips steps and backs off
# before the save, and with compact moments (bf16, 8bit: the resume takes
# the checkpoint's form) (the engine state, the loss scale and its counts, the
# data position and the schedule all resume exactly). A checkpoint whose
# config.json was edited, or model flags that differ from it, are refused.
# A resumed run takes its settings from the checkpoint: changes that keep it
# continuable are taken and said, the others refused. A checkpoint's files
# belong to one run and one step: mixed ones are refused naming both, and
# one run owns its checkpoint folder.
# Usage: test_resume.sh TRAIN_GPT2
set -u
train=$1
work=$(mktemp -d /tmp/ferry-resume-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"

make_shard "$work/train.bin"
common=(--data "$work/train.bin" --layers 2 --heads 2 --width 32 --vocab 500 --context 64 --batch 2 --seq 32
        --grad-accum 2 --steps 20 --warmup 3 --lr 3e-3 --backend host --threads 2 --quiet)

for mode in none optimizer params delayed f16 bf16 8bit; do
  d=$work/$mode
  mkdir -p "$d"
  flags=(--offload $mode)
  [ $mode = delayed ] && flags=(--offload optimizer --delayed-update)
  [ $mode = f16 ] && flags=(--offload optimizer --dtype f16 --loss-scale 1e9)
  [ $mode = bf16 ] && flags=(--offload params --moments bf16)
  [ $mode = 8bit ] && flags=(--offload optimizer --moments 8bit)
  resume_flags=("${flags[@]}")
  [ $mode = bf16 ] || [ $mode = 8bit ] && resume_flags=(--offload "${flags[1]}") # the form is the checkpoint's
  "$train" "${common[@]}" "${flags[@]}" --checkpoint-dir "$d/full" --log "$d/full.jsonl" >/dev/null 2>"$d/err" \
    || { ok 1 "$mode: 20-step run ($(cat "$d/err"))"; continue; }
  # The same run checkpointed at step 10; then everything after that
  # checkpoint is thrown away, as if the run had died there.
  "$train" "${common[@]}" "${flags[@]}" --checkpoint-dir "$d/split" --checkpoint-every 10 --log "$d/split.jsonl" \
    >/dev/null 2>"$d/err"
  rm -rf "$d/split/step_00000020"; ln -sfn step_00000010 "$d/split/latest"
  head -n 10 "$d/split.jsonl" > "$d/resumed.jsonl"
  "$train" "${common[@]}" "${resume_flags[@]}" --checkpoint-dir "$d/split" --resume "$d/split" \
    --log "$d/resumed.jsonl" >/dev/null 2>"$d/err"
  ok $? "$mode: resumed from step 10 $(cat "$d/err")"
  a=$(losses "$d/full.jsonl"); b=$(losses "$d/resumed.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ]; ok $? "$mode: 20 losses identical (last: ${a##* })"
  same_weights "$d/full/step_00000020/model.safetensors" "$d/split/step_00000020/model.safetensors"
  ok $? "$mode: final weights identical (every tensor of model.safetensors, bit for bit)"
  if [ $mode = f16 ]; then
    a=$(scales "$d/full.jsonl"); b=$(scales "$d/resumed.jsonl")
    first=${a%% *}; last=${a##* }
    [ -n "$a" ] && [ "$a" = "$b" ] && [ "${first%/*}" = 1e+09 ] && [ "${last#*/}" -gt 0 ] && [ "${last#*/}" -lt 20 ]
    ok $? "f16: the loss scale and the skipped steps of every step identical after resume (from ${first%/*}: $last)"
  fi
done
# A compact run resumed with another --moments converts its state, says so,
# and trains on.
"$train" "${common[@]}" --offload optimizer --moments f32 --steps 21 --resume "$work/8bit/full" \
  --checkpoint-dir "$work/8bit/conv" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 0 ] && grep -q "holds 8bit Adam moments and this engine keeps f32 ones: converted" "$work/err"
ok $? "8bit checkpoint resumed with --moments f32: converted, with a warning (rc $rc)"
# A config.json edited after the save is refused before anything else, with
# both values; a changed vocabulary is config.json's fault, not the data's.
ck=$work/none/full/step_00000020
cp "$ck/config.json" "$work/config.json"
sed -i 's/"n_head":[[:space:]]*2/"n_head": 4/' "$ck/config.json"
"$train" "${common[@]}" --resume "$ck" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "n_head 4" "$work/err" && grep -q "n_head 2" "$work/err"
ok $? "an edited n_head is refused naming both values (exit $rc): $(cat "$work/err")"
cp "$work/config.json" "$ck/config.json"
sed -i 's/"vocab_size":[[:space:]]*500/"vocab_size": 400/' "$ck/config.json"
"$train" "${common[@]}" --resume "$ck" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "config.json' says vocab_size 400" "$work/err" && ! grep -q "train.bin" "$work/err"
ok $? "an edited vocab_size blames config.json, not the data (exit $rc): $(cat "$work/err")"
cp "$work/config.json" "$ck/config.json"
# A torch_dtype that is not the weights' type, and a token id that is no
# whole number, are refused naming the key.
sed -i 's/"torch_dtype":[[:space:]]*"float32"/"torch_dtype": "bfloat16"/' "$ck/config.json"
"$train" "${common[@]}" --resume "$ck" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q 'says torch_dtype "bfloat16", but .*model.safetensors'"'"' stores .* as F32' "$work/err"
ok $? "a config.json saying bfloat16 beside the f32 weights is refused (exit $rc): $(cat "$work/err")"
cp "$work/config.json" "$ck/config.json"
$python - "$ck/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["bos_token_id"] = 50256.5
json.dump(c, open(sys.argv[1], "w"))
PY
"$train" "${common[@]}" --resume "$ck" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q '"bos_token_id" is 50256.5, not a token id' "$work/err"
ok $? "a bos_token_id of 50256.5 is refused (exit $rc): $(cat "$work/err")"
cp "$work/config.json" "$ck/config.json"
# Model flags with --resume are checked against the checkpoint (the runs
# above resumed with the same ones).
"$train" "${common[@]}" --heads 4 --resume "$ck" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q -- "--heads 4 differs from the checkpoint's model (2)" "$work/err"
ok $? "--heads 4 with --resume of a 2-head model is refused (exit $rc): $(cat "$work/err")"
"$train" --data "$work/train.bin" --batch 2 --seq 32 --grad-accum 2 --backend host --model d2 --resume "$ck" \
  >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q -- "--model d2 is not the checkpoint's model (2 layers, 2 heads, 32 wide)" "$work/err"
ok $? "--model d2 with --resume of another shape is refused (exit $rc): $(cat "$work/err")"
# ---- a resumed run takes its settings from the checkpoint ----
# With nothing but --data and --resume: batch, sequence, accumulation, model,
# learning rate, schedule, offload and the delayed update are the
# checkpoint's, and the losses are the uninterrupted run's.
for mode in optimizer delayed; do
  d=$work/$mode
  rm -rf "$d/bare"; cp -r "$d/split" "$d/bare"
  rm -rf "$d/bare/step_00000020"; ln -sfn step_00000010 "$d/bare/latest"
  head -n 10 "$d/split.jsonl" >"$d/bare.jsonl"
  "$train" --data "$work/train.bin" --resume "$d/bare" --checkpoint-dir "$d/bare" --log "$d/bare.jsonl" \
    --backend host --threads 2 --quiet >"$d/out" 2>"$d/err"
  rc=$?; a=$(losses "$d/full.jsonl"); b=$(losses "$d/bare.jsonl")
  [ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && ! grep -q changed "$d/out"
  ok $? "$mode: --resume alone takes every setting from the checkpoint, and the 20 losses are the same (exit $rc): $(cat "$d/err")"
done
# Changes that keep the checkpoint continuable are taken, and said in one
# line; offload modes are bitwise equal on the host backend, so the losses
# are the uninterrupted run's too.
d=$work/optimizer
rm -rf "$d/moved"; cp -r "$d/split" "$d/moved"; rm -rf "$d/moved/step_00000020"; ln -sfn step_00000010 "$d/moved/latest"
head -n 10 "$d/split.jsonl" >"$d/moved.jsonl"
"$train" --data "$work/train.bin" --resume "$d/moved" --checkpoint-dir "$d/moved" --log "$d/moved.jsonl" \
  --offload params --backend host --threads 2 --quiet >"$d/out" 2>"$d/err"
rc=$?; a=$(losses "$d/full.jsonl"); b=$(losses "$d/moved.jsonl")
[ $rc -eq 0 ] && [ "$a" = "$b" ] && grep -q "resuming with changed settings: --offload params (was optimizer)" "$d/out"
ok $? "--offload params on an optimizer checkpoint: taken, said, and the losses unchanged (exit $rc): $(cat "$d/out" "$d/err" | head -c 300)"
"$train" --data "$work/train.bin" --resume "$d/split/step_00000010" --steps 11 --lr 1e-3 --grad-accum 3 \
  --backend host --threads 2 --quiet >"$d/out" 2>"$d/err"
rc=$?; [ $rc -eq 0 ] && grep -q "resuming with changed settings: --grad-accum 3 (was 2), --steps 11 (was 20), --lr 0.001 (was 0.003)" "$d/out"
ok $? "another --lr, --grad-accum and --steps: taken and said in one line (exit $rc): $(cat "$d/out" "$d/err" | head -c 300)"
# Changes that would not continue the checkpoint as saved are refused.
refused_resume() { # PATTERN ARGS...
  local pattern=$1; shift
  "$train" --data "$work/train.bin" --backend host --threads 2 --quiet "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ $rc -eq 1 ] && grep -q -- "$pattern" "$work/err" && ! grep -q '^step' "$work/out"
  ok $? "${*: -2} -> refused before any step (exit $rc): $(head -c 300 "$work/err")"
}
refused_resume "--batch 4 differs from the checkpoint's 2" --resume "$d/split/step_00000010" --batch 4
refused_resume "--seq 16 differs from the checkpoint's 32" --resume "$d/split/step_00000010" --seq 16
refused_resume "--seed 7 differs from the checkpoint's 1337" --resume "$d/split/step_00000010" --seed 7
refused_resume "--dtype bf16 differs from the checkpoint's f32" --resume "$d/split/step_00000010" --dtype bf16
refused_resume "the checkpoint runs the delayed update, which needs --offload optimizer" \
  --resume "$work/delayed/split/step_00000010" --offload params

# ---- a checkpoint's files belong to one run and one step ----
# Two runs alike in all (model, data, seed), each with its own identity.
for r in A B; do
  "$train" "${common[@]}" --steps 10 --checkpoint-every 5 --keep-last 0 --checkpoint-dir "$work/run$r" >/dev/null 2>&1
done
ida=$($python -c 'import json,sys; print(json.load(open(sys.argv[1]))["ferry"]["run"])' "$work/runA/step_00000005/config.json")
idb=$($python -c 'import json,sys; print(json.load(open(sys.argv[1]))["ferry"]["run"])' "$work/runB/step_00000005/config.json")
[ ${#ida} -eq 32 ] && [ ${#idb} -eq 32 ] && [ "$ida" != "$idb" ]
ok $? "each run has its own identity in config.json: $ida, $idb"
rm -rf "$work/mixed"; cp -r "$work/runB/step_00000005" "$work/mixed"; cp "$work/runA/step_00000005/state.ferry" "$work/mixed/"
refused_resume "belongs to run $idb, but the state.ferry beside it.* to run $ida" --resume "$work/mixed"
rm -rf "$work/mixed"; cp -r "$work/runB/step_00000005" "$work/mixed"; cp "$work/runA/step_00000005/model.safetensors" "$work/mixed/"
refused_resume "model.safetensors' belongs to run $ida, but the state.ferry beside it.* to run $idb" --resume "$work/mixed"
rm -rf "$work/mixed"; mkdir -p "$work/mixed"; cp -r "$work/runA/step_00000005" "$work/mixed/"
cp "$work/runA/step_00000010/state.ferry" "$work/mixed/step_00000005/"
refused_resume "is of step 5, but the state.ferry beside it.* of step 10" --resume "$work/mixed/step_00000005"
rm -rf "$work/mixed"; mkdir -p "$work/mixed/step_00000005"; cp "$work/runA/step_00000010/"* "$work/mixed/step_00000005/"
refused_resume "holds the state of step 10, but the folder is named for step 5" --resume "$work/mixed/step_00000005"
# One run per checkpoint folder.
"$train" "${common[@]}" --steps 12 --checkpoint-dir "$work/runA" >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "runA' already holds checkpoints of run $ida (the newest: step_00000010); continue that run with --resume" "$work/err"
ok $? "a new run in a folder that holds another run's checkpoints is refused (exit $rc): $(cat "$work/err")"
refused_resume "runB/step_00000010' is a checkpoint of run $idb, but the run resumed is $ida" \
  --resume "$work/runA" --checkpoint-dir "$work/runB" --steps 12

# ---- every step folder's run is checked, latest or not ----
# A folder whose latest link was lost (rm, rsync without -l, a copy to a
# file system without links) still holds another run's checkpoints: a new
# run is refused before it writes or prunes anything there.
"$train" "${common[@]}" --steps 5 --checkpoint-every 2 --checkpoint-dir "$work/X" >/dev/null 2>&1
rm "$work/X/latest"
files_of() { (cd "$1" && find . -type f ! -name .lock | sort | xargs sha256sum | sha256sum); } # .lock: the pid of its last taker
before=$(files_of "$work/X")
"$train" "${common[@]}" --steps 6 --checkpoint-every 2 --checkpoint-dir "$work/X" >"$work/out" 2>"$work/err"
rc=$?; after=$(files_of "$work/X")
[ $rc -eq 1 ] && grep -q "X' already holds checkpoints of run [0-9a-f]\{32\} (the newest: step_00000005, and no latest link); continue that run with --resume $work/X/step_00000005" "$work/err" &&
  [ "$before" = "$after" ] && [ -d "$work/X/step_00000002" ] && [ ! -s "$work/out" ]
ok $? "a new run in a folder of another run's checkpoints without its latest link is refused, the folder untouched (exit $rc): $(cat "$work/err")"
# A step folder of another run copied in among this run's: the resumed run
# refuses the folder rather than overwrite or prune it.
rm -rf "$work/Y"; cp -r "$work/runA" "$work/Y"; rm -rf "$work/Y/step_00000005"; cp -r "$work/runB/step_00000005" "$work/Y/"
refused_resume "Y/step_00000005' is a checkpoint of run $idb, but the run resumed is $ida" --resume "$work/Y" --steps 12
[ -d "$work/Y/step_00000005" ] && same_weights "$work/Y/step_00000005/model.safetensors" "$work/runB/step_00000005/model.safetensors"
ok $? "... and that folder is left as it was"

# ---- a resumed run saves where its checkpoint came from ----
# No --checkpoint-dir: the checkpoint's run folder, with its --checkpoint-every;
# the first line says what is continued, from where, how many steps are
# left and where they are saved.
rm -rf "$work/home"; cp -r "$work/runA" "$work/home"; rm -rf "$work/home/step_00000010"; ln -sfn step_00000005 "$work/home/latest"
"$train" --data "$work/train.bin" --resume "$work/home" --steps 15 --backend host --threads 2 --quiet \
  >"$work/out" 2>"$work/err"
rc=$?; first=$(head -n 1 "$work/out")
[ $rc -eq 0 ] && [ "$first" = "resuming run $ida at step 5 from $work/home/step_00000005: 10 of 15 steps left, saving into $work/home every 5 steps and at the end (the checkpoint's run folder; --checkpoint-dir DIR saves elsewhere)" ] &&
  [ -f "$work/home/step_00000010/state.ferry" ] && [ -f "$work/home/step_00000015/state.ferry" ] &&
  [ "$(readlink "$work/home/latest")" = step_00000015 ]
ok $? "--resume alone saves into the checkpoint's run folder every 5 steps, as the run did, and says so first (exit $rc): $first $(cat "$work/err")"
# The same from a step folder named directly: its run folder is the one above.
rm -rf "$work/home2"; cp -r "$work/runA" "$work/home2"; rm -rf "$work/home2/step_00000010"; ln -sfn step_00000005 "$work/home2/latest"
"$train" --data "$work/train.bin" --resume "$work/home2/step_00000005/" --steps 7 --checkpoint-every 0 --backend host \
  --threads 2 --quiet >"$work/out" 2>"$work/err"
rc=$?; first=$(head -n 1 "$work/out")
[ $rc -eq 0 ] && [[ "$first" == *"2 of 7 steps left, saving into $work/home2 at the end (the checkpoint's run folder"* ]] &&
  [ -f "$work/home2/step_00000007/state.ferry" ] && [ "$(readlink "$work/home2/latest")" = step_00000007 ]
ok $? "--resume DIR/step_00000005/ saves into DIR (exit $rc): $first $(cat "$work/err")"
# A checkpoint outside any run folder: nothing to save into, said first.
rm -rf "$work/loose"; cp -r "$work/runA/step_00000005" "$work/loose"
"$train" --data "$work/train.bin" --resume "$work/loose" --steps 6 --backend host --threads 2 --quiet \
  >"$work/out" 2>"$work/err"
rc=$?; first=$(head -n 1 "$work/out")
[ $rc -eq 0 ] && [[ "$first" == *"1 of 6 steps left, saving nothing: the checkpoint is in no run folder, so give --checkpoint-dir DIR"* ]]
ok $? "a checkpoint outside a run folder: its first line says nothing is saved and what to give (exit $rc): $first"
# A finished run: no step left is an error naming the flag to raise, before any work.
"$train" --data "$work/train.bin" --resume "$work/runA" --backend host --threads 2 --quiet >"$work/out" 2>"$work/err"
rc=$?
[ $rc -eq 1 ] && grep -q "step_00000010' is at step 10 and --steps is 10 (the checkpoint's): no step is left to train; raise --steps (--steps 20 trains 10 more)" "$work/err" &&
  ! grep -q "done:" "$work/out" && [ "$(readlink "$work/runA/latest")" = step_00000010 ]
ok $? "resuming a finished run is refused, saying to raise --steps (exit $rc): $(cat "$work/err")"
refused_resume "is at step 10 and --steps is 8: no step is left to train; raise --steps" --resume "$work/runA" --steps 8

# ---- the log of a run resumed after a kill ----
# The run logged steps 11 to 15 and was killed with step 10 its last save:
# the resumed run logs a resume record, then steps 11 to 20 again; the last
# record of each step is the uninterrupted run's.
d=$work/optimizer
rm -rf "$d/killed"; cp -r "$d/split" "$d/killed"; rm -rf "$d/killed/step_00000020"; ln -sfn step_00000010 "$d/killed/latest"
head -n 15 "$d/split.jsonl" >"$d/killed.jsonl"
"$train" --data "$work/train.bin" --resume "$d/killed" --log "$d/killed.jsonl" --backend host --threads 2 --quiet \
  >/dev/null 2>"$work/err"
rc=$?
last_losses() { $python -c '
import json, sys
last = {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j["kind"] == "step":
        last[j["step"]] = j["loss"]
print(" ".join(repr(last[s]) for s in sorted(last)))' "$1"; }
a=$(losses "$d/full.jsonl"); b=$(last_losses "$d/killed.jsonl")
resume_line=$(sed -n 16p "$d/killed.jsonl")
[ $rc -eq 0 ] && [ "$(grep -c '"kind":"step"' "$d/killed.jsonl")" -eq 25 ] &&
  [[ "$resume_line" == '{"kind":"resume","step":10,"run":"'*'","checkpoint":"'*'step_00000010"}' ]] && [ "$a" = "$b" ]
ok $? "a resumed run logs a resume record before the steps it repeats, and each step's last record is the uninterrupted run's (exit $rc): $resume_line"
finish
