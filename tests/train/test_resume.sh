#!/usr/bin/env bash
# train_gpt2 on the host backend: 20 steps in one run and 10 + save + resume
# + 10 give bitwise the same losses and the same saved weights, in every
# offload mode and with the delayed update (the engine state, the data
# position and the schedule all resume exactly). A checkpoint whose
# config.json was edited is refused. Usage: test_resume.sh TRAIN_GPT2
set -u
train=$1
work=$(mktemp -d /tmp/ferry-resume-XXXXXX)
trap 'rm -rf "$work"' EXIT
python=/usr/bin/python3
n=0; failed=0
ok() { n=$((n + 1)); if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }

# A token shard made here: llm.c's header (magic 20240520, version 1, count), then uint16 tokens.
$python - "$work/train.bin" <<'PY'
import struct, sys
n = 40000
tokens = [(i * 7 + (i // 13) * 3) % 500 for i in range(n)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *tokens))
PY
common=(--data "$work/train.bin" --layers 2 --heads 2 --width 32 --vocab 500 --context 64 --batch 2 --seq 32
        --grad-accum 2 --steps 20 --warmup 3 --lr 3e-3 --backend host --threads 2 --quiet)
losses() { $python -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"step\"" in l and "\"loss\"" in l))' "$1"; }

for mode in none optimizer params delayed; do
  d=$work/$mode
  mkdir -p "$d"
  flags=(--offload $mode)
  [ $mode = delayed ] && flags=(--offload optimizer --delayed-update)
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
echo "1..$n"
[ "$failed" -eq 0 ]
