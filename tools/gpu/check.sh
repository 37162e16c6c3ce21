#!/usr/bin/env bash
# tools/gpu/check.sh: the GPU check. Runs ON the GPU machine (NVIDIA driver,
# a CUDA toolkit and/or Python's nvidia-* wheels, none of our Debian
# packages), in the repository root, on the archive tools/gpu/pack.sh made
# here; tools/gpu/README.md has the exact call. It unpacks the archive under
# /tmp, finds cuBLAS(Lt) on the machine, and runs, each on the cuda backend
# (FERRY_BACKEND=cuda: a missing GPU is an error, never a host run):
# ferry-info, the gpu test suite (the ops, GPT-2 and the engine in fp16 too;
# data parallelism's collectives through real NCCL at world size 1, with
# the NCCL it finds on the machine),
# bench_transfer (pinned H2D/D2H GB/s), the kernel lab (each kernel against
# the matmul and copy ceilings; then again in fp16, quick, for the attention
# tiles Volta and Turing run and the fp16 matmuls), bench_engine
# on GPT-2 124M in every offload mode, and GPT-2 XL at seq 1024 on a 24 GiB
# card emulated here (24 GiB less the CUDA context's and cuBLASLt's share,
# measured on this card) at the largest batch the planner gives for that
# budget (confirmed by one step there and a clean out-of-memory one batch
# above), with tokens/s, MFU and step / max(compute, update). With
# FERRY_CHECK_PEERS=1, then PyTorch beside ferry on GPT-2 XL (the peers'
# block near the end: tools/gpu/peer_*.py) and one table of both.
#
#   tools/gpu/check.sh PACK.tar.xz OUT_DIR        (on the GPU machine, in the tree's root)
#
# Time: every step runs under its own `timeout` (the limits below). They sum
# to 510 s; with 1 s of grace after each of the 24 steps the check ends
# within 534 s — under 9 minutes — even when every step hits its limit. The
# script refuses to start if that bound (the limits of the pack's steps plus
# a second each) is above 540 s.
#
# OUT_DIR gets two files:
#   results.txt  the key lines and one verdict per step, each printed here
#                the moment it is known
#   steps.log    every step's whole output, under a header naming the step
# Exit status: 0 when every step passed, 1 otherwise.
#
# FERRY_CHECK_EXPECT=no-gpu is for the pack test (tests/tools/test_gpu_pack.sh)
# on a machine without a GPU: there every step that needs a GPU must end with
# exit 77, the clean "no GPU" answer — not 0 (a silent run on the host), not
# a crash — and the others must pass. FERRY_CHECK_DIR: where to unpack
# (default /tmp/ferry-gpu-check).
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: tools/gpu/check.sh PACK.tar.xz OUT_DIR" >&2
  exit 2
fi
archive=$(realpath "$1")
out=$(realpath -m "$2")
expect=${FERRY_CHECK_EXPECT:-gpu}
unpack_dir=${FERRY_CHECK_DIR:-/tmp/ferry-gpu-check}
pack=$unpack_dir/ferry-gpu
mkdir -p "$out"
results=$out/results.txt
log=$out/steps.log
: >"$results"
: >"$log"
work=$(mktemp -d)
failed=0
export FERRY_BACKEND=cuda

# Each test's limit, seconds (a test the table does not name gets 30).
declare -A test_limit=([backend-cuda]=15 [ops-gpu]=25 [ops-gpu-f16]=20 [ops-gpu-xl]=15 [cuda-card]=10
                       [engine-gpu]=35 [engine-gpu-f16]=25 [hf-gpu]=45 [gpt2-cuda]=20 [gpt2-cuda-f16]=15
                       [cuda-mlp]=5 [dp-gpu]=15)
# The other steps' limits. GPT-2 XL gets the most: its setup draws 1.56B
# values, copies 6.2 GB and pins 23 GiB before its first step.
declare -A limit=([unpack]=10 [cublas]=10 [nccl]=5 [libraries]=5 [gpu-info]=5 [ferry-info]=5 [transfer]=10
                  [kernel-lab]=30 [kernel-lab-f16]=10 [memprof-plan]=5 [engine-gpt2]=30 [engine-xl]=140)
# The peers' block (PyTorch beside ferry, near the end), run when
# FERRY_CHECK_PEERS=1: ferry's GPT-2 XL rows the peers are set beside, the
# two peers, torch.compile's row, and the table. The two Python peers import
# torch and transformers and build GPT-2 XL; torch.compile gives up by itself
# ten seconds before its limit, the FSDP2 ladder starts no batch in its last
# minute.
peers=${FERRY_CHECK_PEERS:-0}
if [ "$peers" = 1 ]; then
  limit+=([engine-xl-none]=45 [engine-xl-params]=90 [peer-torch]=60 [peer-torch-compile]=150 [peer-fsdp]=180
          [peer-table]=5)
fi
# The bound the limits must stay under: 9 minutes, 18 with the peers.
max_bound=$([ "$peers" = 1 ] && echo 1080 || echo 540)

say() { printf '%s\n' "$*" | tee -a "$results"; }

# judge NAME RC NEEDS_GPU SECONDS LIMIT: one verdict line.
judge() {
  local name=$1 rc=$2 gpu=$3 secs=$4 lim=$5 want=0 verdict
  [ "$expect" = no-gpu ] && [ "$gpu" = 1 ] && want=77
  if [ "$rc" -eq "$want" ]; then
    verdict=PASS
    [ "$want" = 77 ] && verdict="PASS (exit 77: no GPU, as expected here)"
  else
    failed=$((failed + 1))
    case $rc in
      124|137) verdict="FAIL: hit its ${lim}s limit" ;;
      77) verdict="FAIL: exit 77, the program did not reach a GPU" ;;
      127) verdict="FAIL: exit 127, a program or library was not found (see steps.log)" ;;
      0) verdict="FAIL: exit 0 where exit 77 (no GPU) was expected: it ran without one" ;;
      *) verdict="FAIL: exit $rc" ;;
    esac
  fi
  say "$(printf '%-28s %5ss  %s' "[$name]" "$secs" "$verdict")"
}

# step NAME LIMIT NEEDS_GPU SHOW CMD...: runs CMD in the unpacked pack under
# its limit; all output to steps.log and $work/NAME.out, the lines matching
# the regex SHOW also to the screen and results.txt, as they come.
step() {
  local name=$1 lim=$2 gpu=$3 show=$4 t0=$SECONDS rc
  shift 4
  printf '\n==== %s (limit %ss): %s\n' "$name" "$lim" "$*" >>"$log"
  (cd "$pack" && timeout -k 1 "$lim" "$@" </dev/null) 2>&1 | tee "$work/$name.out" | tee -a "$log" |
    grep --line-buffered -E "$show" | sed -u "s/^/  $name | /" | tee -a "$results"
  rc=${PIPESTATUS[0]}
  judge "$name" "$rc" "$gpu" $((SECONDS - t0)) "$lim"
  return "$rc"
}

# Folders that may hold libcublasLt.so.13: Python's nvidia wheels first (the
# copy torch loads), then the loader's cache and the toolkit.
cublas_candidates() {
  timeout 5 python3 -c '
import glob, os, site
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
for s in site.getsitepackages() + [site.getusersitepackages()]:
    roots.append(os.path.join(s, "nvidia"))
for r in roots:
    for p in glob.glob(os.path.join(r, "**", "libcublasLt.so.13*"), recursive=True):
        print(os.path.dirname(p))
' 2>/dev/null
  ldconfig -p 2>/dev/null | awk '/libcublasLt\.so\.13 / {print $NF}' | xargs -r -n1 dirname
  printf '%s\n' ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib
}

# The first folder holding both libcublasLt.so.13 and libcublas.so.13; a
# 4-second search of the disk only when no candidate has them.
find_cublas() {
  local d
  for d in $(cublas_candidates) -; do
    [ "$d" = - ] && d=$(timeout 4 find / -xdev -name 'libcublasLt.so.13*' -printf '%h\n' 2>/dev/null | head -1)
    if [ -n "$d" ] && [ -e "$d/libcublasLt.so.13" ] && [ -e "$d/libcublas.so.13" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

# Folders that may hold libnccl.so.2: FERRY_CHECK_NCCL alone when it is set
# (the file or its folder); else Python's nvidia packages (nvidia.nccl, pip's
# nvidia-nccl-cu*, the copy torch loads; then any libnccl.so.2 under them),
# the loader's cache, $CUDA_HOME and the toolkit.
nccl_candidates() {
  if [ -n "${FERRY_CHECK_NCCL:-}" ]; then
    if [ -d "$FERRY_CHECK_NCCL" ]; then echo "$FERRY_CHECK_NCCL"; else dirname "$FERRY_CHECK_NCCL"; fi
    return
  fi
  timeout 3 python3 -c '
import glob, os
try:
    import nvidia.nccl
    for p in nvidia.nccl.__path__:
        print(os.path.join(p, "lib"))
except Exception:
    pass
try:
    import nvidia
    for r in nvidia.__path__:
        for p in glob.glob(os.path.join(r, "**", "libnccl.so.2*"), recursive=True):
            print(os.path.dirname(p))
except Exception:
    pass
' 2>/dev/null
  ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / {print $NF}' | xargs -r -n1 dirname
  printf '%s\n' ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 /usr/local/cuda/lib
}

find_nccl() {
  local d
  for d in $(nccl_candidates); do
    if [ -e "$d/libnccl.so.2" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

tests_total() {
  local t=0 name rest
  while IFS=$'\t' read -r name rest; do t=$((t + ${test_limit[$name]:-30})); done <"$pack/tests.txt"
  echo "$t"
}

# ---- the steps ----

say "ferry GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), expecting: $expect; archive $archive"
t0=$SECONDS
printf '\n==== unpack (limit %ss)\n' "${limit[unpack]}" >>"$log"
# tar and xz where the machine has them; else Python's own tarfile and lzma.
rm -rf "$unpack_dir" && mkdir -p "$unpack_dir" &&
  timeout -k 1 "${limit[unpack]}" bash -c '
    if command -v xz >/dev/null; then tar -xJf "$1" -C "$2"; exit; fi
    python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$1" "$2"' \
    unpack "$archive" "$unpack_dir" >>"$log" 2>&1
rc=$?
judge unpack "$rc" 0 $((SECONDS - t0)) "${limit[unpack]}"
if [ "$rc" -ne 0 ] || [ ! -f "$pack/tests.txt" ]; then
  say "cannot go on without the pack"
  exit 1
fi
sed 's/^/  /' "$pack/MANIFEST" | tee -a "$log" | head -3 | tee -a "$results"
sum=$(( $(tests_total) ))
for k in "${!limit[@]}"; do sum=$((sum + limit[$k])); done
bound=$((sum + ${#limit[@]} + $(wc -l <"$pack/tests.txt")))
say "step limits sum to ${sum}s (+1 s of grace per step); the check ends within ${bound}s"
if [ "$bound" -gt "$max_bound" ]; then
  say "FAIL: the limits and their grace sum above $max_bound s; lower them so the check stays under" \
    "$((max_bound / 60)) minutes"
  exit 1
fi

t0=$SECONDS
cublas=$(find_cublas)
if [ -n "$cublas" ]; then
  export LD_LIBRARY_PATH="$cublas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "  cublas | libcublasLt.so.13 in $cublas"
  judge cublas 0 0 $((SECONDS - t0)) "${limit[cublas]}"
else
  say "  cublas | libcublasLt.so.13 is nowhere on this machine (toolkit, Python's nvidia packages, disk)"
  judge cublas 1 0 $((SECONDS - t0)) "${limit[cublas]}"
fi

# NCCL, for the programs that load it (dp-gpu: data parallelism's
# collectives at world size 1): never carried in the pack (208 MiB). Not
# found is a failure that says what to install, never a skip.
if grep -q libnccl <(cd "$pack" && for p in bin/*; do ldd "$p" 2>/dev/null; done); then
  t0=$SECONDS
  nccl=$(find_nccl)
  if [ -n "$nccl" ]; then
    export LD_LIBRARY_PATH="$nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "  nccl | libnccl.so.2 in $nccl"
    judge nccl 0 0 $((SECONDS - t0)) "${limit[nccl]}"
  else
    where="in Python's nvidia packages, the loader's cache, \$CUDA_HOME nor /usr/local/cuda"
    [ -n "${FERRY_CHECK_NCCL:-}" ] && where="where FERRY_CHECK_NCCL=$FERRY_CHECK_NCCL says"
    say "  nccl | libnccl.so.2 is not $where: the NCCL tests (dp-gpu) cannot run. Install NCCL for this" \
      "machine's CUDA (pip install nvidia-nccl-cu13, or NVIDIA's libnccl2 package), or point FERRY_CHECK_NCCL" \
      "at libnccl.so.2 or its folder"
    judge nccl 1 0 $((SECONDS - t0)) "${limit[nccl]}"
  fi
fi

step libraries "${limit[libraries]}" 0 'not found' bash -c '
  bad=0
  for p in bin/*; do
    if ldd "$p" | grep -q "not found"; then echo "$p: $(ldd "$p" | grep "not found" | tr -s " \t" " ")"; bad=1; fi
  done
  exit $bad'
step gpu-info "${limit[gpu-info]}" 0 '.' bash -c \
  'nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>&1 || echo "nvidia-smi: not here"; echo "$(ldd --version | head -1); python3: $(command -v python3 || echo none); $(nproc) cores"; exit 0'
step ferry-info "${limit[ferry-info]}" 1 '.' bin/ferry-info

while IFS=$'\t' read -r name _timeout gpu cmd; do
  # shellcheck disable=SC2086 # the command's words are plain (pack.sh wrote them)
  step "$name" "${test_limit[$name]:-30}" "$gpu" '^(not ok|Bail out|1\.\.0 # SKIP|# .*(loss|device peak))' env $cmd
done <"$pack/tests.txt"

step transfer "${limit[transfer]}" 1 '.' bin/bench_transfer
step kernel-lab "${limit[kernel-lab]}" 1 '^(kernel|ceilings|check .*FAIL|time |PASS|FAIL)' bin/kernel_lab
peak=$(sed -n 's/^ceilings: cuBLASLt bf16 matmul 8192^3 \([0-9.]*\) TFLOP.*/\1/p' "$work/kernel-lab.out")
# fp16, the type of Volta and Turing: the attention tiles (both sizes, the
# 32-query one being Turing's) and the fp16 matmuls, at the quick sizes.
step kernel-lab-f16 "${limit[kernel-lab-f16]}" 1 '^(kernel|ceilings|check .*FAIL|time |skip |PASS|FAIL)' \
  bin/kernel_lab --quick --dtype f16 --op attention --op matmul
peak_flag=()
[ -n "$peak" ] && peak_flag=(--peak-tflops "$peak")

# GPT-2 XL on a 24 GiB card (an RTX 4090 or 3090, sold as "24 GB"): the
# plan with the documented 0.5 GiB for the CUDA context and libraries, then
# bench_engine --card 24GiB, which measures that share on this card, plans
# the largest batch for what is left and confirms it (one step there runs,
# one at batch + 1 runs out of memory cleanly), then says what a 24 GiB
# card would have held.
step memprof-plan "${limit[memprof-plan]}" 0 'largest batch' \
  bin/memprof plan --model gpt2-xl --seq 1024 --offload optimizer --recompute --card 24GiB
xl_batch=$(sed -n 's/.*largest batch that fits: \([0-9][0-9]*\).*/\1/p' "$work/memprof-plan.out")

# bench_engine exits 1 when a mode's loss does not fall, is not finite, or a
# step was skipped (its "loss" lines say which): a speed of a run that learns
# nothing fails the step.
show='^(bench_engine|offload .*(ready|first step)|round|result|confirm|loss|card|the planner|RESULT)'
step engine-gpt2 "${limit[engine-gpt2]}" 1 "$show" \
  bin/bench_engine --backend cuda --model gpt2 --batch 8 --seq 1024 --steps 3 --warmup 0 "${peak_flag[@]}"
if [ -n "$xl_batch" ]; then
  step engine-xl "${limit[engine-xl]}" 1 "$show" \
    bin/bench_engine --backend cuda --model gpt2-xl --seq 1024 --modes optimizer --recompute --card 24GiB \
    --confirm-max-batch --steps 2 --warmup 0 "${peak_flag[@]}"
else
  judge engine-xl 1 1 0 "${limit[engine-xl]}"
  say "  engine-xl | no batch: memprof plan gave none"
fi

# ---- the peers: PyTorch beside ferry, GPT-2 XL at seq 1024, the same tokens
# per step (tools/gpu/peer_*.py; python3 with torch and transformers, no
# network). Ferry's rows first: no offload on the whole card at batch 16, and
# params mode (its best at 24 GiB: recompute, the planner's largest batch,
# confirmed) on the emulated 24 GiB card beside engine-xl's optimizer mode;
# then PyTorch without offload at batch 16 (eager, then torch.compile), and
# FSDP2 with CPU offload capped at 24 GiB with its batch ladder; then one
# table of tokens/s, MFU and batch, with ferry's ratio to each.
if [ "$peers" = 1 ]; then
  tree=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  step engine-xl-none "${limit[engine-xl-none]}" 1 "$show" \
    bin/bench_engine --backend cuda --model gpt2-xl --seq 1024 --batch 16 --modes none --steps 3 --warmup 1 \
    "${peak_flag[@]}"
  step engine-xl-params "${limit[engine-xl-params]}" 1 "$show" \
    bin/bench_engine --backend cuda --model gpt2-xl --seq 1024 --modes params --recompute --card 24GiB \
    --confirm-max-batch --steps 2 --warmup 0 "${peak_flag[@]}"
  pshow='^(PEER|peer_)'
  step peer-torch "${limit[peer-torch]}" 1 "$pshow" \
    python3 "$tree/tools/gpu/peer_torch.py" --model gpt2-xl --batch 16 --seq 1024 --steps 3 --warmup 2 \
    "${peak_flag[@]}"
  step peer-torch-compile "${limit[peer-torch-compile]}" 1 "$pshow" \
    python3 "$tree/tools/gpu/peer_torch.py" --model gpt2-xl --batch 16 --seq 1024 --steps 3 --warmup 1 --compile \
    --time-limit $((limit[peer-torch-compile] - 10)) "${peak_flag[@]}"
  step peer-fsdp "${limit[peer-fsdp]}" 1 "$pshow" \
    python3 "$tree/tools/gpu/peer_fsdp.py" --model gpt2-xl --seq 1024 --card 24GiB --batches 8,16,24,32,48 \
    --steps 2 --warmup 1 --time-limit $((limit[peer-fsdp] - 60)) "${peak_flag[@]}"
  step peer-table "${limit[peer-table]}" 0 '.' \
    python3 "$tree/tools/gpu/peer_table.py" --ferry "no offload, full card=$work/engine-xl-none.out" \
    --ferry "optimizer, 24GiB card=$work/engine-xl.out" --ferry "params, 24GiB card=$work/engine-xl-params.out" \
    --peer "$work/peer-torch.out" --peer "$work/peer-torch-compile.out" --peer "$work/peer-fsdp.out"
fi

say "done in $SECONDS s: $failed step(s) failed; whole outputs in $log"
rm -rf "$work"
[ "$failed" -eq 0 ]
