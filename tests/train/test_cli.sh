#!/usr/bin/env bash
# train_gpt2's command line: every bad flag or value is refused before any
# work starts, with exit status 2 and a message naming it; --help documents
# every flag with its default. Usage: test_cli.sh TRAIN_GPT2
set -u
train=$1
work=$(mktemp -d /tmp/ferry-cli-XXXXXX)
trap 'rm -rf "$work"' EXIT
n=0; failed=0
ok() { n=$((n + 1)); if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }

# expect STATUS PATTERN ARGS...: the run exits with STATUS and stderr matches PATTERN.
expect() {
  local want=$1 pattern=$2; shift 2
  "$train" "$@" >"$work/out" 2>"$work/err"
  local got=$?
  [ "$got" -eq "$want" ] && grep -qE -- "$pattern" "$work/err"
  ok $? "$* -> exit $got: $(head -c 200 "$work/err" | tr '\n' ' ')"
}

printf 'not a shard' > "$work/bad.bin"
expect 2 "unknown flag '--bogus'" --bogus
expect 2 "--batch 'zero' is not a whole number" --data x --batch zero
expect 2 "--batch '0' is not a whole number in 1" --data x --batch 0
expect 2 "--lr '-1' is not a number" --data x --lr -1
expect 2 "--lr 'nan' is not a number" --data x --lr nan
expect 2 "unknown offload mode 'zero3'" --data x --offload zero3
expect 2 "unknown backend 'tpu'" --data x --backend tpu
expect 2 "'lots' is not a byte count" --data x --gpu-mem lots
expect 2 "--steps needs a value" --data x --steps
expect 2 "--data is required" --steps 3
expect 2 "needs all of --layers, --heads and --width" --data x --layers 2
expect 2 "--seq 2048 is longer than the model's --context 1024" --data x --seq 2048
expect 2 "--eval-every needs --val-data" --data x --eval-every 5
expect 2 "--checkpoint-every needs --checkpoint-dir" --data x --checkpoint-every 5
expect 2 "--delayed-update needs --offload optimizer" --data x --offload params --delayed-update
expect 2 "--sample needs a model" --sample
expect 1 "unknown model preset|gpt2-xxl" --data x --model gpt2-xxl
expect 1 "C % NH|divisible|n_embd" --data x --layers 2 --heads 3 --width 64
expect 1 "training data.*nonexistent" --data "$work/nonexistent_*.bin"
expect 1 "training data.*bad.bin" --data "$work/bad.bin" --layers 1 --heads 1 --width 8 --vocab 10 --context 8 --seq 4
expect 1 "--resume.*no checkpoint" --data "$work/bad.bin" --resume "$work"

"$train" --help >"$work/help" 2>&1
ok $? "--help exits 0"
missing=0
for flag in --model --data --batch --seq --grad-accum --steps --lr --warmup --weight-decay --clip --offload \
            --gpu-mem --recompute --backend --eval-every --sample-every --checkpoint-every --resume --trace --log \
            --init-from --sample; do
  grep -qE -- "^  $flag .*\(default: " "$work/help" || { echo "# --help lacks $flag with its default"; missing=1; }
done
ok $missing "--help documents every flag with its default"
echo "1..$n"
[ "$failed" -eq 0 ]
