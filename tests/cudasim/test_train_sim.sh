#!/usr/bin/env bash
# train_gpt2 --backend cuda on the simulated device: in each offload mode
# named, 6 steps in one run, and 3 + save + resume + 3, give the same losses
# (and loss scales and skipped steps) and the same saved tensors bit for bit
# (the cuda ops are deterministic, so a resume is exact there too), and the
# loss falls. With --dtype f16 the first loss scale is too high, so the
# first steps overflow and are skipped before the save; each mode's losses
# are those of the host backend's f16 storage (which rounds where the cuda
# ops store fp16) within 5e-3 relative a step, with the same steps skipped
# and the same scales; and on a card without bf16 (FERRY_CUDASIM_ARCH 70 or
# 75) --dtype bf16 is refused naming the card and f16, and --dtype auto
# picks f16. SIGTERM stops a cuda run at a step with its checkpoint, and
# the run resumes from it.
# Usage: test_train_sim.sh TRAIN_GPT2 [--dtype bf16|f16] [MODE...]
#   modes: none optimizer params delayed nvme (default: none optimizer params
#   delayed)
set -u
train=$1
shift
dtype=
if [ "${1:-}" = --dtype ]; then dtype=$2; shift 2; fi
modes=${*:-none optimizer params delayed}
work=$(mktemp -d /tmp/ferry-train-sim-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../train/tap.sh"

make_shard "$work/train.bin"
mkdir -p "$work/disk"
base=(--data "$work/train.bin" --layers 2 --heads 2 --width 64 --vocab 500 --context 64 --batch 2 --seq 40
      --grad-accum 2 --warmup 2 --lr 3e-3 --threads 2)
common=("${base[@]}" --steps 6 --quiet)
[ -n "$dtype" ] && common+=(--dtype "$dtype")
# f16: a first loss scale too high for fp16, so that steps 1 and 2 overflow,
# are skipped and back the scale off before the save at step 3.
[ "$dtype" = f16 ] && common+=(--loss-scale 1e6)

case "${FERRY_CUDASIM_ARCH:-90}" in
  70|75|sm_70|sm_75)
    "$train" "${base[@]}" --steps 1 --backend cuda --dtype bf16 >/dev/null 2>"$work/err"
    rc=$?
    [ $rc -ne 0 ] && grep -q "no bf16" "$work/err" && grep -q "f16" "$work/err"
    ok $? "bf16 on this card is refused, naming f16 (exit $rc: $(cat "$work/err"))"
    "$train" "${base[@]}" --steps 1 --backend cuda --dtype auto 2>&1 | head -1 | grep -q "f16 storage"
    ok $? "--dtype auto picks f16 on this card"
    ;;
esac

for mode in $modes; do
  d=$work/$mode
  mkdir -p "$d"
  flags=(--offload $mode)
  [ $mode = delayed ] && flags=(--offload optimizer --delayed-update)
  [ $mode = nvme ] && flags=(--offload nvme --nvme-path "$work/disk" --nvme-window 96KiB --nvme-block 4KiB)
  if ! "$train" "${common[@]}" --backend cuda "${flags[@]}" --checkpoint-dir "$d/full" --log "$d/full.jsonl" \
      >"$d/out" 2>"$d/err"; then
    ok 1 "$mode: 6-step run on cuda ($(tail -3 "$d/err"))"
    continue
  fi
  ok 0 "$mode: 6 steps of train_gpt2 --backend cuda${dtype:+ --dtype $dtype}"
  a=$(losses "$d/full.jsonl")
  first=${a%% *}; last=${a##* }
  $python -c "import sys; sys.exit(0 if float('$last') < float('$first') else 1)"
  ok $? "$mode: the loss falls ($first -> $last)"
  "$train" "${common[@]}" --backend cuda "${flags[@]}" --checkpoint-dir "$d/split" --checkpoint-every 3 \
    --log "$d/split.jsonl" >/dev/null 2>"$d/err"
  rm -rf "$d/split/step_00000006"; ln -sfn step_00000003 "$d/split/latest"
  head -n 3 "$d/split.jsonl" > "$d/resumed.jsonl"
  "$train" "${common[@]}" --backend cuda "${flags[@]}" --checkpoint-dir "$d/split" --resume "$d/split" \
    --log "$d/resumed.jsonl" >/dev/null 2>"$d/err"
  ok $? "$mode: resumed from step 3 on cuda $(tail -3 "$d/err")"
  b=$(losses "$d/resumed.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ]; ok $? "$mode: 6 losses identical after the resume (last: $last)"
  sa=$(scales "$d/full.jsonl"); sb=$(scales "$d/resumed.jsonl")
  [ -n "$sa" ] && [ "$sa" = "$sb" ]; ok $? "$mode: loss scales and skipped steps identical after the resume ($sa)"
  same_weights "$d/full/step_00000006/model.safetensors" "$d/split/step_00000006/model.safetensors"
  ok $? "$mode: final weights identical (every tensor of model.safetensors, bit for bit)"
  if [ "$dtype" = f16 ]; then
    "$train" "${common[@]}" --backend host "${flags[@]}" --log "$d/host.jsonl" >/dev/null 2>"$d/err"
    h=$(losses "$d/host.jsonl")
    sh=$(scales "$d/host.jsonl")
    lastscale=${sa##* }
    [ "$sa" = "$sh" ] && [ "${lastscale#*/}" -gt 0 ]
    ok $? "$mode: the same steps skipped for overflow, and the same scales, as on the host ($sa)"
    $python - "$a" "$h" <<'PY'
import sys
a, h = [list(map(float, s.split())) for s in sys.argv[1:3]]
worst = max((abs(x - y) / abs(y) for x, y in zip(a, h)), default=1)
print("# worst relative loss difference cuda vs host f16: %.2e" % worst)
sys.exit(0 if len(a) == len(h) == 6 and worst <= 5e-3 else 1)
PY
    ok $? "$mode: every loss within 5e-3 relative of the host backend's f16 run (cuda $last, host ${h##* })"
  fi
done
[ -z "$(ls -A "$work/disk")" ]; ok $? "no optimizer state is left on disk: $(ls "$work/disk")"

# SIGTERM mid-run on cuda: the run stops cleanly at a step with its
# checkpoint (streams drained, nothing half written) and resumes from it.
d=$work/sigterm
mkdir -p "$d"
"$train" "${common[@]}" --backend cuda --steps 100000 --checkpoint-dir "$d/ck" --log "$d/log.jsonl" \
  >/dev/null 2>"$d/err" &
pid=$!
for _ in $(seq 1200); do
  [ -f "$d/log.jsonl" ] && [ "$(wc -l <"$d/log.jsonl")" -ge 2 ] && break
  sleep 0.1
done
kill -TERM $pid
wait $pid; rc=$?
logged=$(grep -c '"kind":"step"' "$d/log.jsonl")
[ $rc -eq 143 ] && grep -q "stopped by SIGTERM at step $logged; the checkpoint of this step is in" "$d/err" &&
  [ "$(readlink "$d/ck/latest")" = "$(printf 'step_%08d' "$logged")" ] && [ -f "$d/ck/latest/state.ferry" ]
ok $? "SIGTERM on cuda: stops at step $logged with exit 143 (got $rc) and its checkpoint: $(tail -c 300 "$d/err" | tr '\n' ' ')"
"$train" "${common[@]}" --backend cuda --steps $((logged + 1)) --resume "$d/ck" --checkpoint-dir "$d/ck" \
  >/dev/null 2>"$d/err"
ok $? "SIGTERM on cuda: the run resumes from that checkpoint $(cat "$d/err")"
finish
