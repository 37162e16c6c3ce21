#!/usr/bin/env bash
# bench_dp.sh: the cost of data parallelism on the host backend. Trains the
# same GPT-2 with one micro-batch per process, alone and as 2 ranks under
# mpirun (each rank doing the work the single process does, plus the
# collectives), alternating the two REPEATS times, and prints each run's
# tokens/s per rank, the medians, and the ratio of 2 ranks to 1 (1.00 = no
# overhead). Each process gets one core (one optimizer thread, one BLAS
# thread), so 2 ranks need 2 free cores to be compared fairly; on a shared
# machine the CPU time per token (user + system, of every process, mpirun
# included) says what data parallelism costs whatever the others run.
#
#   tools/bench/dp/bench_dp.sh [BUILD_DIR] [REPEATS] [OFFLOAD]
#     defaults: build, 3, optimizer
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
offload=${3:-optimizer}
train=$build/tools/train_gpt2/train_gpt2
[ -x "$train" ] || { echo "bench_dp: no $train; build first (ninja -C $build)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench_dp: no mpirun (apt install openmpi-bin)" >&2; exit 2; }
work=$(mktemp -d /tmp/ferry-bench-dp-XXXXXX)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work/train.bin" <<'PY'
import struct, sys
n = 400000
tokens = [(i * 7919 + (i // 31) * 13) % 2000 for i in range(n)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *tokens))
PY
export OPENBLAS_NUM_THREADS=1
args=(--data "$work/train.bin" --layers 4 --heads 4 --width 256 --vocab 2000 --context 128 --batch 4 --seq 128
      --grad-accum 1 --steps 30 --warmup 2 --backend host --threads 1 --offload "$offload" --quiet)
rate() { sed -n 's/.*(\([0-9.]*\) tok\/s.*/\1/p' "$1" | head -1; }
per_rank() { sed -n 's/.*, \([0-9.]*\) per rank of .*/\1/p' "$1" | head -1; }
tokens() { sed -n 's/^done: [0-9]* steps, \([0-9]*\) tokens.*/\1/p' "$1" | head -1; }
cpu_ms_per_ktok() { awk -v t="$2" '{printf "%.1f", ($1 + $2) * 1e6 / t}' "$1"; }
ones=(); twos=(); cpu1=(); cpu2=()
for r in $(seq "$repeats"); do
  /usr/bin/time -f '%U %S' -o "$work/t1" "$train" "${args[@]}" >"$work/o1"
  /usr/bin/time -f '%U %S' -o "$work/t2" mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    "$train" "${args[@]}" >"$work/o2"
  one=$(rate "$work/o1"); two=$(per_rank "$work/o2")
  c1=$(cpu_ms_per_ktok "$work/t1" "$(tokens "$work/o1")"); c2=$(cpu_ms_per_ktok "$work/t2" "$(tokens "$work/o2")")
  echo "run $r: 1 process $one tok/s, $c1 CPU ms per 1000 tokens; 2 ranks $two tok/s per rank, $c2 CPU ms per 1000 tokens"
  ones+=("$one"); twos+=("$two"); cpu1+=("$c1"); cpu2+=("$c2")
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
m1=$(median "${ones[@]}"); m2=$(median "${twos[@]}"); c1=$(median "${cpu1[@]}"); c2=$(median "${cpu2[@]}")
echo "offload $offload, GPT-2 4 layers x 256 wide, micro-batch 4 x 128, 30 steps, median of $repeats; load $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v a="$c1" -v b="$c2" 'BEGIN {printf "CPU time per token: 2 ranks %.1f ms per 1000 tokens vs 1 process %.1f: ratio %.2f\n", b, a, b / a}'
awk -v a="$m1" -v b="$m2" 'BEGIN {printf "2 ranks: %.0f tok/s per rank vs 1 process %.0f tok/s: ratio %.2f\n", b, a, b / a}'
