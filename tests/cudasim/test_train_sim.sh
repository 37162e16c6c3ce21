#!/usr/bin/env bash
# train_gpt2 --backend cuda on the simulated device: in every offload mode
# and with the delayed update, 6 steps in one run, and 3 + save + resume + 3,
# give the same losses and the same saved weights byte for byte (the cuda
# ops are deterministic, so a resume is exact there too), the loss falls,
# and the saved checkpoint is the cuda backend's (its log names the card).
# Usage: test_train_sim.sh TRAIN_GPT2 [MODE...]   (modes: none optimizer
# params delayed; all four when none is named)
set -u
train=$1
shift
modes=${*:-none optimizer params delayed}
work=$(mktemp -d /tmp/ferry-train-sim-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../train/tap.sh"

make_shard "$work/train.bin"
common=(--data "$work/train.bin" --layers 2 --heads 2 --width 64 --vocab 500 --context 64 --batch 2 --seq 40
        --grad-accum 2 --steps 6 --warmup 2 --lr 3e-3 --backend cuda --threads 2 --quiet)
losses() { $python -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"step\"" in l and "\"loss\"" in l))' "$1"; }

for mode in $modes; do
  d=$work/$mode
  mkdir -p "$d"
  flags=(--offload $mode)
  [ $mode = delayed ] && flags=(--offload optimizer --delayed-update)
  if ! "$train" "${common[@]}" "${flags[@]}" --checkpoint-dir "$d/full" --log "$d/full.jsonl" >"$d/out" 2>"$d/err"; then
    ok 1 "$mode: 6-step run on cuda ($(tail -3 "$d/err"))"
    continue
  fi
  ok 0 "$mode: 6 steps of train_gpt2 --backend cuda"
  a=$(losses "$d/full.jsonl")
  first=${a%% *}; last=${a##* }
  $python -c "import sys; sys.exit(0 if float('$last') < float('$first') else 1)"
  ok $? "$mode: the loss falls ($first -> $last)"
  "$train" "${common[@]}" "${flags[@]}" --checkpoint-dir "$d/split" --checkpoint-every 3 --log "$d/split.jsonl" \
    >/dev/null 2>"$d/err"
  rm -rf "$d/split/step_00000006"; ln -sfn step_00000003 "$d/split/latest"
  head -n 3 "$d/split.jsonl" > "$d/resumed.jsonl"
  "$train" "${common[@]}" "${flags[@]}" --checkpoint-dir "$d/split" --resume "$d/split" --log "$d/resumed.jsonl" \
    >/dev/null 2>"$d/err"
  ok $? "$mode: resumed from step 3 on cuda $(tail -3 "$d/err")"
  b=$(losses "$d/resumed.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ]; ok $? "$mode: 6 losses identical after the resume (last: $last)"
  cmp -s "$d/full/step_00000006/model.safetensors" "$d/split/step_00000006/model.safetensors"
  ok $? "$mode: final weights identical (model.safetensors byte for byte)"
done
finish
