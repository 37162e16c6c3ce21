#!/usr/bin/env bash
# ferry-train on the host backend: a tiny Llama (llama-d2: 2 layers, 128
# wide, Llama 3's vocabulary) trains 4 steps and saves a Hugging Face folder
# (config.json of model_type llama, LlamaForCausalLM) beside its
# state.ferry; 2 steps + save + resume + 2 give bitwise the losses of the
# run never interrupted; --eval-only of the checkpoint logs one eval record
# and prints its loss; --init-from the folder starts from its weights. With
# a GPT-2 model ferry-train is train_gpt2 (the same losses and weights, bit
# for bit); train_gpt2 refuses the Llama family naming ferry-train, and
# ferry-train samples a Llama with its tokenizer.json (--tokenizer, then the
# checkpoint's own copy) and refuses, naming the places tried, without one.
# Usage: test_ferry_train.sh FERRY_TRAIN TRAIN_GPT2
set -u
ferry=$(realpath "$1")
train=$2
work=$(mktemp -d /tmp/ferry-llama-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"

# make_shard's tokens are below 500, far below Llama 3's 128256.
make_shard "$work/train.bin"
make_shard "$work/val.bin"
llama=(--model llama-d2 --seq 32 --batch 2 --steps 4 --data "$work/train.bin" --backend host --threads 2 --quiet)

# ---- train, save, resume ----
"$ferry" "${llama[@]}" --checkpoint-dir "$work/full" --log "$work/full.jsonl" >"$work/out" 2>"$work/err"
rc=$?; a=$(losses "$work/full.jsonl")
[ $rc -eq 0 ] && [ "$(echo $a | wc -w)" -eq 4 ] && [ -f "$work/full/step_00000004/model.safetensors" ] &&
  [ -f "$work/full/step_00000004/state.ferry" ]
ok $? "llama-d2 trains 4 steps and saves step 4 (exit $rc; losses $a): $(cat "$work/err")"
$python - "$work/full/latest/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
ok = c.get("model_type") == "llama" and c.get("architectures") == ["LlamaForCausalLM"] and \
     c.get("num_hidden_layers") == 2 and c.get("hidden_size") == 128 and c.get("vocab_size") == 128256 and \
     c.get("torch_dtype") == "float32" and c.get("ferry", {}).get("step") == 4
sys.exit(0 if ok else 1)
PY
ok $? "its config.json says model_type llama, architectures LlamaForCausalLM, the model's shape, float32, step 4"

"$ferry" "${llama[@]}" --checkpoint-dir "$work/split" --checkpoint-every 2 --log "$work/split.jsonl" \
  >/dev/null 2>"$work/err"
ok $? "the same run saving every 2 steps $(cat "$work/err")"
rm -rf "$work/split/step_00000004"; ln -sfn step_00000002 "$work/split/latest"
head -n 2 "$work/split.jsonl" >"$work/resumed.jsonl"
"$ferry" --data "$work/train.bin" --resume "$work/split" --log "$work/resumed.jsonl" --backend host --threads 2 \
  --quiet >"$work/out" 2>"$work/err"
rc=$?; b=$(losses "$work/resumed.jsonl")
[ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && [ -f "$work/split/step_00000004/state.ferry" ]
ok $? "resumed from step 2 with --resume alone: the 4 losses are the uninterrupted run's, bit for bit (exit $rc; $b): $(cat "$work/err")"
same_weights "$work/full/step_00000004/model.safetensors" "$work/split/step_00000004/model.safetensors"
ok $? "and so are the saved weights (every tensor of model.safetensors)"
"$ferry" --data "$work/train.bin" --resume "$work/split/step_00000002" --model llama-d4 --backend host --quiet \
  >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q -- "--model llama-d4 is not the checkpoint's model (2 layers, 2 heads, 128 wide)" "$work/err"
ok $? "--model llama-d4 with --resume of llama-d2 is refused (exit $rc): $(cat "$work/err")"

# ---- --eval-only ----
"$ferry" --resume "$work/full" --eval-only --val-data "$work/val.bin" --eval-batches 3 --log "$work/eval.jsonl" \
  --backend host --threads 2 --quiet >"$work/out" 2>"$work/err"
rc=$?
$python - "$work/eval.jsonl" "$work/out" <<'PY'
import json, re, sys
records = [json.loads(l) for l in open(sys.argv[1])]
said = re.findall(r"^step (\d+) \| val loss ([0-9.]+)$", open(sys.argv[2]).read(), re.M)
ok = len(records) == 1 and records[0]["kind"] == "eval" and records[0]["step"] == 4 and len(said) == 1 and \
     int(said[0][0]) == 4 and said[0][1] == "%.4f" % records[0]["val_loss"]
print("# %s | %s" % (records, said))
sys.exit(0 if ok else 1)
PY
ok $? "--eval-only of step 4 exits 0 with one eval record in the log and prints its loss (exit $rc): $(cat "$work/err")"
[ -z "$(ls "$work/full" | grep -v -E '^(step_00000004|latest)$')" ]
ok $? "and saves nothing: the run folder holds step 4 and latest alone ($(ls "$work/full" | tr '\n' ' '))"
"$ferry" --init-from "$work/full/step_00000004" --eval-only --val-data "$work/val.bin" --eval-batches 3 \
  --seq 32 --batch 2 --backend host --threads 2 --quiet >"$work/out2" 2>"$work/err"
rc=$?; [ $rc -eq 0 ] && [ "$(grep -o 'val loss .*' "$work/out2")" = "$(grep -o 'val loss .*' "$work/out")" ]
ok $? "--init-from the saved folder evaluates to the same loss (exit $rc): $(cat "$work/out2" "$work/err")"
"$ferry" "${llama[@]}" --init-from "$work/full/step_00000004" --steps 1 --log "$work/init.jsonl" \
  >/dev/null 2>"$work/err"
ok $? "--init-from the saved folder trains $(cat "$work/err")"
"$ferry" "${llama[@]}" --eval-only >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 2 ] && grep -q -- "--eval-only needs --val-data" "$work/err"
ok $? "--eval-only without --val-data is refused (exit $rc): $(cat "$work/err")"

# ---- GPT-2 through ferry-train is train_gpt2 ----
gpt2=(--data "$work/train.bin" --layers 2 --heads 2 --width 32 --vocab 500 --context 64 --batch 2 --seq 32
      --steps 6 --warmup 2 --lr 3e-3 --backend host --threads 2 --quiet)
"$train" "${gpt2[@]}" --checkpoint-dir "$work/g-train" --log "$work/g-train.jsonl" >/dev/null 2>"$work/err1"
rc1=$?
"$ferry" "${gpt2[@]}" --checkpoint-dir "$work/g-ferry" --log "$work/g-ferry.jsonl" >/dev/null 2>"$work/err2"
rc2=$?; a=$(losses "$work/g-train.jsonl"); b=$(losses "$work/g-ferry.jsonl")
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] &&
  same_weights "$work/g-train/step_00000006/model.safetensors" "$work/g-ferry/step_00000006/model.safetensors"
ok $? "a GPT-2 trains in ferry-train as in train_gpt2: the same losses and weights, bit for bit (exits $rc1, $rc2): $(cat "$work/err1" "$work/err2")"
"$ferry" "${gpt2[@]}" --steps 8 --resume "$work/g-train" --log "$work/g-train.jsonl" >/dev/null 2>"$work/err"
ok $? "ferry-train resumes train_gpt2's checkpoint $(cat "$work/err")"

# ---- refusals ----
"$train" "${llama[@]}" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 2 ] && grep -q "llama-d2 is a model of the Llama family, which train_gpt2 does not train: use ferry-train" "$work/err"
ok $? "train_gpt2 --model llama-d2 is refused, pointing at ferry-train (exit $rc): $(cat "$work/err")"
"$train" --data "$work/train.bin" --resume "$work/full" --backend host >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 2 ] && grep -q "holds a model of the Llama family, which train_gpt2 does not train: use ferry-train" "$work/err"
ok $? "train_gpt2 --resume of a Llama checkpoint is refused, pointing at ferry-train (exit $rc): $(cat "$work/err")"
# ---- sampling a Llama: its tokenizer.json, found as tok_find.h says ----
env -u FERRY_TOKENIZER_DIR "$ferry" "${llama[@]}" --sample-every 2 >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "no tokenizer found; tried " "$work/err" && grep -q '$FERRY_TOKENIZER_DIR (not set)' "$work/err" &&
  ! grep -q "source tree" "$work/err" && [ ! -s "$work/out" ]
ok $? "ferry-train --model llama-d2 --sample-every with no tokenizer.json anywhere is refused, naming every place tried and not GPT-2's (exit $rc): $(cat "$work/err")"
env -u FERRY_TOKENIZER_DIR "$ferry" --sample --resume "$work/full" --backend host >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "the model's folder '$work/full/step_00000004' (no tokenizer.json, nor encoder.json with vocab.bpe)" "$work/err"
ok $? "so is --sample of a Llama checkpoint saved without one (exit $rc): $(cat "$work/err")"
llama3_tok=$(bash "$(dirname "$0")/../../tools/setup/fetch_tokenizer.sh" llama3 2>"$work/err")
ok $? "fetch_tokenizer.sh llama3 gives Llama 3's tokenizer.json ($llama3_tok) $(cat "$work/err")"
"$ferry" "${llama[@]}" --steps 2 --tokenizer "$llama3_tok" --checkpoint-dir "$work/tok" --sample-every 2 \
  --sample-tokens 6 --prompt "In the beginning" >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 0 ] && grep -q "^In the beginning" "$work/out" && cmp -s "$work/tok/step_00000002/tokenizer.json" "$llama3_tok"
ok $? "with --tokenizer a Llama trains and samples, and its checkpoint keeps the tokenizer.json (exit $rc): $(grep -A1 '^----' "$work/out" | head -2 | tr '\n' ' ') $(cat "$work/err")"
(cd "$work" && mkdir -p elsewhere && cd elsewhere && env -u FERRY_TOKENIZER_DIR "$ferry" --sample --resume "$work/tok" \
  --backend host --sample-tokens 6 --prompt "And God said" >"$work/out" 2>"$work/err")
rc=$?; [ $rc -eq 0 ] && grep -q "^tokenizer: byte-level BPE (Llama 3 pattern), 128256 tokens, '$work/tok/step_00000002/tokenizer.json' (the model's folder)$" "$work/out" &&
  grep -q "^And God said" "$work/out"
ok $? "--sample --resume of that checkpoint from another folder samples with its own copy (exit $rc): $(grep -E '^(tokenizer|And)' "$work/out" | tr '\n' ' ') $(cat "$work/err")"
"$ferry" --help >"$work/help" 2>&1
rc=$?; [ $rc -eq 0 ] && grep -q "^usage: ferry-train " "$work/help" && grep -qE "^  --eval-only .*\(default: off\)" "$work/help" &&
  grep -qE "^  --model NAME .*llama-dN" "$work/help" && grep -q "^Example: ferry-train " "$work/help"
ok $? "ferry-train --help names the program, the Llama presets and --eval-only (exit $rc)"
finish
