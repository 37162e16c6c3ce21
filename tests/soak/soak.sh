#!/usr/bin/env bash
# The soak: STEPS (default 2000) small steps of a tiny GPT-2 (2 layers, 64
# wide, a 512-token vocabulary, batch 4 x 32 tokens) through train_gpt2 on
# the host backend with --offload optimizer, saving every 100 steps (keeping
# the last 2) and evaluating every 100. While it runs, the process's resident
# memory (VmRSS) and its open file descriptors (/proc/PID/fd) are sampled
# with the step the JSON Lines log has reached. Requires, as TAP:
# - the run ends with exit 0 and its last step logged;
# - host memory flat: the lowest VmRSS over the last 100 steps is at most
#   RSS_BOUND_KIB (default 512) above the lowest over steps 200..299 (a
#   leak raises the floor; a save's buffers are a spike above it, of up to
#   4 MiB under meson's MALLOC_PERTURB_, which writes every allocation);
# - no descriptor leaked: the fewest open over the last 100 steps (between
#   saves; a save holds one or two files open for an instant) equals the
#   fewest over steps 200..299, and no sample ever holds more than 4 above it.
# The figures go to stdout as "# " lines: RSS at step ~200 and at the end,
# the descriptors, the wall time, the command.
#
#   usage: soak.sh TRAIN_GPT2 [STEPS]
# Data: llm.c shards written here (256 x int32 header: 20240520, 1, count;
# then uint16 tokens), a seeded random walk over the vocabulary.
set -u
exe=${1:?usage: soak.sh TRAIN_GPT2 [STEPS]}
steps=${2:-2000}
rss_bound=${RSS_BOUND_KIB:-512}
work=$(mktemp -d /tmp/ferry-soak-XXXXXX)
trap 'kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
pid=

python3 - "$work" <<'EOF'
import random, struct, sys
# 3 train shards of 40,000 tokens and 1 val shard of 8,000, seed 2026.
rng = random.Random(2026)
def shard(path, n):
    toks, t = [], 0
    for _ in range(n):
        t = (t + rng.choice((1, 2, 3, 5, 8, 13))) % 512
        toks.append(t)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *toks))
for i in range(3):
    shard("%s/train_%06d.bin" % (sys.argv[1], i), 40000)
shard("%s/val_000000.bin" % sys.argv[1], 8000)
EOF

cmd=("$exe" --backend host --offload optimizer --threads 1 --layers 2 --heads 2 --width 64 --vocab 512
     --context 32 --batch 4 --seq 32 --steps "$steps" --warmup 20 --lr 1e-3
     --data "$work/train_*.bin" --val-data "$work/val_*.bin" --eval-every 100 --eval-batches 4
     --checkpoint-dir "$work/run" --checkpoint-every 100 --keep-last 2 --log "$work/log.jsonl" --quiet)
echo "# command: ${cmd[*]}" | sed "s|$work|WORK|g"
start=$(date +%s%N)
# No tokenizer (a folder without encoder.json: nothing here samples text), so
# that loading one leaves no megabytes of freed, resident heap behind; and a
# fixed malloc mmap threshold, so that the checkpoint's 8 MiB buffer is
# mapped and unmapped each save instead of staying in the heap: resident
# memory that later allocations reuse would hide a leak of that size.
FERRY_TOKENIZER_DIR=$work MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072 OPENBLAS_NUM_THREADS=1 \
  "${cmd[@]}" >"$work/stdout" 2>"$work/stderr" &
pid=$!
# One sample every 50 ms: the step the log has reached, VmRSS (KiB), fds.
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
  step=$(tail -n 1 "$work/log.jsonl" 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
  [ -n "$rss" ] && [ -n "$step" ] && [ "$fds" -gt 0 ] && echo "$step $rss $fds" >>"$work/samples"
  sleep 0.05
done
wait "$pid"
rc=$?
pid=
wall=$(( ($(date +%s%N) - start) / 1000000000 ))
last=$(grep -c '"kind":"step"' "$work/log.jsonl" 2>/dev/null)

n=0
failed=0
ok() {
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi
}

ok $(( rc == 0 && last == steps ? 0 : 1 )) "train_gpt2 ran $steps steps and exited 0 (exit $rc, $last steps logged)"
[ "$rc" -eq 0 ] || sed 's/^/# stderr: /' "$work/stderr" | tail -20

# Windows: steps 200..299 and the last 100 steps before the end (a sample
# that reads the last step is the final save and the teardown).
window() {
  awk -v from="$1" -v to="$2" '$1 >= from && $1 < to {
      if (r == "" || $2 < r) r = $2; if (m == "" || $3 < m) m = $3 } END {print r + 0, m + 0}' "$work/samples"
}
read -r rss_early fds_early <<<"$(window 200 300)"
read -r rss_late fds_late <<<"$(window $((steps - 100)) "$steps")"
fds_max=$(awk -v to="$steps" '$1 >= 200 && $1 < to && $3 > x { x = $3 } END {print x + 0}' "$work/samples")
[ -n "${SOAK_SAMPLES:-}" ] && cp "$work/samples" "$SOAK_SAMPLES"
samples=$(wc -l <"$work/samples")
growth=$((rss_late - rss_early))
echo "# $samples samples in $wall s; VmRSS (lowest) steps 200-299: $rss_early KiB, last 100 steps: $rss_late KiB," \
     "growth $growth KiB (bound $rss_bound KiB)"
echo "# open descriptors (fewest) steps 200-299: $fds_early, last 100 steps: $fds_late; most at any sample after" \
     "step 200: $fds_max"
ok $(( rss_early > 0 && rss_late > 0 && growth <= rss_bound ? 0 : 1 )) \
   "host memory flat: VmRSS grew $growth KiB from steps 200-299 to the last 100 steps (at most $rss_bound)"
ok $(( fds_early > 0 && fds_late == fds_early && fds_max <= fds_early + 4 ? 0 : 1 )) \
   "no descriptor leaked: $fds_early open at steps 200-299 and $fds_late at the end, at most $fds_max at any sample"
echo "1..$n"
[ "$failed" -eq 0 ]
