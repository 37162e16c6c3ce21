#!/usr/bin/env bash
# The README's example progress line is what the demo prints: the demo's
# training run (tools/setup/demo_train.sh, the very flags run_demo.sh
# passes), on a synthetic shard for 4 steps on the host backend, prints a
# progress line with the README's fields in the README's order, and device
# and host memory, in use and at peak, within 1% of the README's figures.
# Those depend on the model, the batch, the mode and the split update's
# choice (made after its 2 warm-up steps, hence 4 steps), not on the data or
# the step; loss, speed and time are the run's own. The README's sentences
# that quote the figures quote the same ones. So the next change that moves
# the demo's memory fails here, not in a newcomer's first run.
# Usage: test_demo_line.sh SOURCE_ROOT TRAIN_GPT2
set -u
src=$1
train=$2
work=$(mktemp -d /tmp/ferry-demo-line-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$src/tests/train/tap.sh"

readme_line=$(grep -m1 -E '^step +[0-9]+/[0-9]+ \| loss ' "$src/README.md")
[ -n "$readme_line" ]; ok $? "the README shows an example progress line: $readme_line"

# Tokens of GPT-2's vocabulary (the demo's model has all 50257 rows), as
# llm.c shards: a train and a validation shard.
mkdir -p "$work/data"
make_shard "$work/data/train_000000.bin"
cp "$work/data/train_000000.bin" "$work/data/val_000000.bin"
bash "$src/tools/setup/demo_train.sh" "$train" "$work/data" "$work/no-tokenizer" "$work/out" \
  --steps 4 --backend host >"$work/run" 2>&1
rc=$?
run_line=$(grep -E '^step +4/4 \| loss ' "$work/run")
[ $rc -eq 0 ] && [ -n "$run_line" ]; ok $? "the demo's training, 4 steps, ran (exit $rc): ${run_line:-$(tail -3 "$work/run")}"

# The same fields in the same order: every number (with its unit) and the
# ETA's duration made '#'.
shape() { sed -E 's/[0-9]+h[0-9]+m|[0-9]+m[0-9]+s|[0-9]+s$/#/; s/-?[0-9]+(\.[0-9]+)?( (B|KiB|MiB|GiB|TiB))?/#/g; s/ +/ /g' <<<"$1"; }
[ -n "$run_line" ] && [ "$(shape "$readme_line")" = "$(shape "$run_line")" ]
ok $? "same fields, same order: README '$(shape "$readme_line")', run '$(shape "$run_line")'"

# Device and host memory, in use and at peak, within 1%.
memory() { grep -oE '(gpu|device|host) [0-9.]+ [KMGT]?i?B \(peak [0-9.]+ [KMGT]?i?B\)' <<<"$1"; }
$python - "$(memory "$readme_line")" "$(memory "$run_line")" <<'PY'
import re, sys
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
def figures(text):
    return [(w, float(v) * units[u]) for w, v, u in re.findall(r"(\w+)? ?([0-9.]+) ([KMGT]?i?B)", text)]
readme, run = figures(sys.argv[1]), figures(sys.argv[2])
ok = len(readme) == 4 and len(run) == 4
for (_, a), (_, b) in zip(readme, run):
    ok &= abs(a - b) <= 0.01 * max(a, b)
print("# README %s | run %s" % (sys.argv[1].replace("\n", " | "), sys.argv[2].replace("\n", " | ")))
sys.exit(0 if ok else 1)
PY
ok $? "device and host memory, in use and at peak, within 1% of the README's: $(memory "$run_line" | tr '\n' ' ')"

# The prose quotes the line's figures: the device figure and what the split
# update adds (the device's optimizer share, as memprof reads the trace).
device=$(grep -oE '(gpu|device) [0-9.]+ MiB' <<<"$readme_line" | head -1 | cut -d' ' -f2)
grep -q "$device MiB" <(sed -n '/^\*\*The main job\*\*/,/^\*\*The tests\*\*/p' "$src/README.md" | grep -v '^step ')
ok $? "the README's description of the demo quotes the line's device figure ($device MiB)"
finish
