#!/usr/bin/env bash
# The main job's training run (tools/setup/run_demo.sh calls it), kept apart
# so that the test of the README's progress line
# (tests/tools/test_demo_line.sh) runs the demo's very flags, fewer steps.
#   usage: demo_train.sh TRAIN_GPT2 DATA_DIR TOKENIZER_DIR OUT_DIR [FLAG...]
# DATA_DIR holds train_*.bin and val_*.bin; FLAG... come last and so
# override the demo's (--steps 3). Environment: FERRY_DEMO_STEPS (200).
set -euo pipefail
[ $# -ge 4 ] || { sed -n 's/^#   //p' "${BASH_SOURCE[0]}" >&2; exit 2; }
train=$1 data=$2 tok=$3 out=$4
shift 4
exec "$train" --data "$data/train_*.bin" --val-data "$data/val_*.bin" --tokenizer "$tok" \
  --layers 2 --heads 2 --width 128 --batch 8 --seq 64 --steps "${FERRY_DEMO_STEPS:-200}" \
  --lr 2e-3 --warmup 20 --offload optimizer --eval-every 50 --eval-batches 4 \
  --checkpoint-dir "$out/checkpoints" --trace "$out/memory.trace" --log "$out/steps.jsonl" \
  --prompt "And God said" --sample-tokens 48 --temperature 0.8 "$@"
