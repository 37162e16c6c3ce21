#!/usr/bin/env bash
# train_gpt2's command line: every bad flag or value is refused before any
# work starts, with exit status 2 and a message naming it (a flag taken for a
# value, a negative seed, a size that rounds to nothing, an output path that
# cannot be written); --help documents every flag with its default.
# Usage: test_cli.sh TRAIN_GPT2
set -u
train=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
work=$(mktemp -d /tmp/ferry-cli-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"

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

# A value that is really the next flag is refused, and nothing is created.
(cd "$work" && "$train" --data x --checkpoint-dir --quiet >"$work/out" 2>"$work/err"); rc=$?
[ $rc -eq 2 ] && grep -q "checkpoint-dir needs a value, but the next argument is '--quiet'" "$work/err" && [ ! -e "$work/--quiet" ]
ok $? "--checkpoint-dir --quiet is refused and no folder '--quiet' is made (exit $rc): $(cat "$work/err")"
expect 2 "--log needs a value, but the next argument is '--steps'" --data x --log --steps 3
"$train" --data x --prompt --not-a-flag --help >/dev/null 2>"$work/err"
ok $? "--prompt takes text that starts with '--' $(cat "$work/err")"
expect 2 "--seed ' -1' is not a whole number in 0..18446744073709551615" --data x --seed " -1"
expect 2 "--seed '-1' is not a whole number" --data x --seed -1
expect 2 "--seed '\+5' is not a whole number" --data x --seed +5
expect 2 "--gpu-mem '0.5' is 0 bytes.*powers of 1024.*at least 1MiB" --data x --gpu-mem 0.5
expect 2 "--host-mem '1000' is 1000 bytes.*at least 1MiB" --data x --host-mem 1000
expect 1 "training data" --data "$work/nonexistent.bin" --gpu-mem 0 --host-mem 1MiB --seed 18446744073709551615

# Outputs are checked before any work: the data is good, the run is refused
# at once (nothing on stdout), with the flag and the reason.
$python - "$work/good.bin" <<'PY'
import struct, sys
n = 5000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[(i * 7) % 50 for i in range(n)]))
PY
good=(--data "$work/good.bin" --layers 1 --heads 1 --width 8 --vocab 50 --context 8 --seq 8 --steps 2 --backend host)
touch "$work/plain"
mkdir -p "$work/adir"
runner=()
before_work() { # PATTERN ARGS...: exit 2, stderr matches, stdout empty
  local pattern=$1; shift
  "${runner[@]}" "$train" "${good[@]}" "$@" >"$work/out" 2>"$work/err"; local rc=$?
  [ $rc -eq 2 ] && grep -qE -- "$pattern" "$work/err" && [ ! -s "$work/out" ]
  ok $? "$* -> refused before any work (exit $rc): $(head -c 200 "$work/err" | tr '\n' ' ')"
}
before_work "--checkpoint-dir '.*plain' is a regular file; give a folder" --checkpoint-dir "$work/plain"
before_work "--checkpoint-dir '.*plain/ck': '.*plain' is a regular file, not a folder" --checkpoint-dir "$work/plain/ck"
before_work "--log '.*adir' is a folder; give a file name" --log "$work/adir"
before_work "--trace '.*plain/t.trace': '.*plain' is a regular file, not a folder" --trace "$work/plain/t.trace"
# Missing folders above an output are made, as mkdir -p would.
"$train" "${good[@]}" --checkpoint-dir "$work/runs/deep/ck" --log "$work/logs/a/b/log.jsonl" \
  --trace "$work/traces/t.trace" >"$work/out" 2>"$work/err"; rc=$?
[ $rc -eq 0 ] && [ -f "$work/runs/deep/ck/latest/state.ferry" ] && [ -s "$work/logs/a/b/log.jsonl" ] \
  && [ -s "$work/traces/t.trace" ]
ok $? "outputs under missing folders: the folders are made (exit $rc): $(head -c 300 "$work/err")"
# A read-only file system: a tmpfs mounted read-only in a private mount
# namespace, where unshare may make one.
ro=$work/ro
mkdir -p "$ro"
if $private_mounts sh -c 'mount -t tmpfs -o ro none "$0"' "$ro" 2>/dev/null; then
  runner=($private_mounts sh -c 'mount -t tmpfs -o ro none "$0" && exec "$@"' "$ro")
  before_work "--checkpoint-dir '$ro' cannot be written: Read-only file system" --checkpoint-dir "$ro"
  before_work "--checkpoint-dir '$ro/ck' cannot be created: the folder '$ro' is not writable \(Read-only file system\)" \
    --checkpoint-dir "$ro/ck"
  before_work "--log '$ro/log.jsonl' cannot be created.*Read-only file system" --log "$ro/log.jsonl"
  before_work "--trace '$ro/t.trace' cannot be created.*Read-only file system" --trace "$ro/t.trace"
  runner=()
else
  no_private_mount "the read-only file system cases are not run"
fi
if [ "$(id -u)" -ne 0 ]; then
  mkdir -p "$work/locked" && chmod 555 "$work/locked"
  before_work "--checkpoint-dir '.*locked' cannot be written" --checkpoint-dir "$work/locked"
fi

# Sizes are products of user numbers, computed in 64 bits: 1024 x 64 x 65536
# is 2^32 tokens per step (once an int overflow: "0 tokens/step", and
# undefined behaviour); a micro-batch beyond 2^31 - 1 tokens is refused.
expect 2 "--batch 65536 x --seq 65536 is 4294967296 tokens per micro-batch" --data x --batch 65536 --seq 65536 \
  --context 65536
$python - "$work/big.bin" <<'PY'
import struct, sys
n = 70000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[(i * 7) % 50 for i in range(n)]))
PY
"$train" --data "$work/big.bin" --layers 1 --heads 1 --width 8 --vocab 50 --context 64 --batch 1024 --seq 64 \
  --grad-accum 65536 --steps 1 --backend host --threads 1 >"$work/out" 2>"$work/err" &
big=$!
for _ in $(seq 600); do grep -q "tokens/step" "$work/out" && break; sleep 0.1; done
kill -TERM $big 2>/dev/null; wait $big
grep -q "batch 1024 x 64 x 65536 accum = 4294967296 tokens/step" "$work/out"
ok $? "1024 x 64 x 65536 is said as 4294967296 tokens/step: $(grep -o 'batch.*tokens/step' "$work/out") $(head -c 200 "$work/err")"

# A glob that matches nothing, and text given where shards belong, are said
# as such (not "cannot open", not "magic 538976288").
expect 1 "no file matches the shard pattern '.*nothing_\*.bin'" --data "$work/nothing_*.bin"
printf 'In the beginning God created the heaven and the earth.\n' >"$work/genesis.txt"
expect 1 "genesis.txt' is text, not token shards: run tokenize on it first" --data "$work/genesis.txt"

"$train" --help >"$work/help" 2>&1
ok $? "--help exits 0"
[ "$(grep -E '^  --tokenizer ' "$work/help" | grep -o '(default:' | wc -l)" -eq 1 ] \
  && [ "$(grep -E '^  --prompt ' "$work/help" | grep -o '(default:' | wc -l)" -eq 1 ]
ok $? "--help gives --tokenizer and --prompt one default each: $(grep -E '^  --(tokenizer|prompt) ' "$work/help")"
grep -qE '^  --lr X ' "$work/help" && grep -qE '^  --offload MODE ' "$work/help" && grep -qE '^  --backend NAME ' "$work/help" \
  && grep -qE '^  --dtype TYPE ' "$work/help" && grep -qE '^  --data PATH ' "$work/help" && grep -qE '^  --model NAME ' "$work/help"
ok $? "--help names what each value is (N, X, SIZE, MODE, NAME, TYPE, PATH, TEXT), not N for words and decimals"
missing=0
for flag in --model --data --batch --seq --grad-accum --steps --lr --warmup --weight-decay --clip --offload \
            --gpu-mem --recompute --backend --eval-every --sample-every --checkpoint-every --resume --trace --log \
            --init-from --sample --keep-last; do
  grep -qE -- "^  $flag .*\(default: " "$work/help" || { echo "# --help lacks $flag with its default"; missing=1; }
done
ok $missing "--help documents every flag with its default"
finish
