#!/usr/bin/env bash
# train_gpt2 on the host backend: 20 steps in one run and 10 + save + resume
# + 10 give bitwise the same losses and the same saved weights, in every
# offload mode, with the delayed update, and in f16 storage with a loss
# scale that starts far too high, so the run skips steps and backs off
# before the save (the engine state, the loss scale and its counts, the
# data position and the schedule all resume exactly). A checkpoint whose
# config.json was edited, or model flags that differ from it, are refused.
# Usage: test_resume.sh TRAIN_GPT2
set -u
train=$1
work=$(mktemp -d /tmp/ferry-resume-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"

make_shard "$work/train.bin"
common=(--data "$work/train.bin" --layers 2 --heads 2 --width 32 --vocab 500 --context 64 --batch 2 --seq 32
        --grad-accum 2 --steps 20 --warmup 3 --lr 3e-3 --backend host --threads 2 --quiet)
losses() { $python -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"step\"" in l and "\"loss\"" in l))' "$1"; }
scales() { $python -c 'import json,sys; print(" ".join("%g/%d" % (j.get("loss_scale", 0), j["skipped_steps"]) for j in map(json.loads, open(sys.argv[1])) if j["kind"] == "step"))' "$1"; }

for mode in none optimizer params delayed f16; do
  d=$work/$mode
  mkdir -p "$d"
  flags=(--offload $mode)
  [ $mode = delayed ] && flags=(--offload optimizer --delayed-update)
  [ $mode = f16 ] && flags=(--offload optimizer --dtype f16 --loss-scale 1e9)
  "$train" "${common[@]}" "${flags[@]}" --checkpoint-dir "$d/full" --log "$d/full.jsonl" >/dev/null 2>"$d/err" \
    || { ok 1 "$mode: 20-step run ($(cat "$d/err"))"; continue; }
  # The same run checkpointed at step 10; then everything after that
  # checkpoint is thrown away, as if the run had died there.
  "$train" "${common[@]}" "${flags[@]}" --checkpoint-dir "$d/split" --checkpoint-every 10 --log "$d/split.jsonl" \
    >/dev/null 2>"$d/err"
  rm -rf "$d/split/step_00000020"; ln -sfn step_00000010 "$d/split/latest"
  head -n 10 "$d/split.jsonl" > "$d/resumed.jsonl"
  "$train" "${common[@]}" "${flags[@]}" --checkpoint-dir "$d/split" --resume "$d/split" --log "$d/resumed.jsonl" \
    >/dev/null 2>"$d/err"
  ok $? "$mode: resumed from step 10 $(cat "$d/err")"
  a=$(losses "$d/full.jsonl"); b=$(losses "$d/resumed.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ]; ok $? "$mode: 20 losses identical (last: ${a##* })"
  cmp -s "$d/full/step_00000020/model.safetensors" "$d/split/step_00000020/model.safetensors"
  ok $? "$mode: final weights identical (model.safetensors byte for byte)"
  if [ $mode = f16 ]; then
    a=$(scales "$d/full.jsonl"); b=$(scales "$d/resumed.jsonl")
    first=${a%% *}; last=${a##* }
    [ -n "$a" ] && [ "$a" = "$b" ] && [ "${first%/*}" = 1e+09 ] && [ "${last#*/}" -gt 0 ] && [ "${last#*/}" -lt 20 ]
    ok $? "f16: the loss scale and the skipped steps of every step identical after resume (from ${first%/*}: $last)"
  fi
done
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
# Model flags with --resume are checked against the checkpoint (the runs
# above resumed with the same ones).
"$train" "${common[@]}" --heads 4 --resume "$ck" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q -- "--heads 4 differs from the checkpoint's model (2)" "$work/err"
ok $? "--heads 4 with --resume of a 2-head model is refused (exit $rc): $(cat "$work/err")"
"$train" --data "$work/train.bin" --batch 2 --seq 32 --grad-accum 2 --backend host --model d2 --resume "$ck" \
  >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q -- "--model d2 is not the checkpoint's model (2 layers, 2 heads, 32 wide)" "$work/err"
ok $? "--model d2 with --resume of another shape is refused (exit $rc): $(cat "$work/err")"
finish
