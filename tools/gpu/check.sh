#!/usr/bin/env bash
# tools/gpu/check.sh: the GPU check. Runs ON the GPU machine (NVIDIA driver,
# a CUDA toolkit and/or Python's nvidia-* wheels, none of our Debian
# packages), in the repository root, on the archive tools/gpu/pack.sh made
# here; tools/gpu/README.md has the exact call. It unpacks the archive under
# /tmp, finds cuBLAS(Lt) on the machine, and runs, each on the cuda backend
# (FERRY_BACKEND=cuda: a missing GPU is an error, never a host run):
# in this order, so that a check cut short still gives the verdicts that
# matter most:
#   1. correctness: ferry-info, the gpu test suite (the ops, both model
#      families and the engine in fp16 too; data parallelism's collectives
#      through real NCCL at world size 1, with the NCCL it finds on the
#      machine), then compute-sanitizer's four tools over the GPU suite's
#      programs (memcheck, racecheck, synccheck, initcheck: a finding fails
#      its step naming the kernels);
#   2. the attention's speed in the kernel lab (against the cuBLASLt matmul
#      ceiling it measures);
#   3. GPT-2 XL at seq 1024 on a 24 GiB card emulated here (24 GiB less the
#      CUDA context's and cuBLASLt's share, measured on this card) at the
#      largest batch the planner gives for that budget (confirmed by one
#      step there and a clean out-of-memory one batch above), beside PyTorch
#      FSDP2 with CPU offload on the same card;
#   4. GPT-2 XL without offload beside PyTorch (eager) at the same batch;
#   5. the Llama family: Llama 3.2 1B without offload, and the largest
#      named Llama the card and this machine's host memory hold (Llama 3.1
#      8B first) in params mode with recompute at seq 2048;
#   6. the rest: bench_transfer (pinned H2D/D2H GB/s), the whole kernel lab
#      (each kernel against the matmul and copy ceilings; then fp16, quick,
#      for Volta's and Turing's tiles), bench_engine on GPT-2 124M in every
#      offload mode, the largest GPT-2-shaped model the card and host hold,
#      and torch.compile beside GPT-2 XL without offload;
# then one table (tools/gpu/goals.py): each figure, its peer's, the ratio,
# the goal and the verdict.
#
#   tools/gpu/check.sh PACK.tar.xz OUT_DIR        (on the GPU machine, in the tree's root)
#
# Time: the whole check, the PyTorch peers included, ends within 540 s — 9
# minutes: every step runs under its own `timeout` (the limits below) and
# gets the least of its limit and what is left of the bound, less the few
# seconds the table is kept; a step reached with less than 5 s left fails
# unrun. The script refuses to start if the bound (FERRY_CHECK_BOUND,
# default 530) is above 540 s. The limits are for a step that hangs: on an
# H200 the first run's 24 steps took 45 s, GPT-2 XL's two modes about a
# minute, the capacity run about two. The peers' ladders are cut to what
# that run measured: FSDP2-offload's best batch was 24 (32 ran out of
# memory), so it runs 24 and 32 alone.
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
# a crash — and the others must pass; a sanitizer step with no
# compute-sanitizer on such a machine runs its programs bare, each of which
# must end with 77. FERRY_CHECK_DIR: where to unpack (default
# /tmp/ferry-gpu-check). FERRY_CHECK_SANITIZER: the compute-sanitizer to use
# (default: the toolkit's, then PATH's, then Python's nvidia packages').
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: tools/gpu/check.sh PACK.tar.xz OUT_DIR" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
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

# FERRY_CHECK_PEERS=0 leaves the PyTorch peers out (a machine without torch).
# Each test's limit, seconds (a test the table does not name gets 30).
declare -A test_limit=([backend-cuda]=15 [ops-gpu]=25 [ops-gpu-f16]=20 [ops-gpu-xl]=15 [cuda-card]=10
                       [engine-gpu]=35 [engine-gpu-f16]=25 [hf-gpu]=45 [gpt2-cuda]=20 [gpt2-cuda-f16]=15
                       [cuda-mlp]=5 [dp-gpu]=15)
# The other steps' limits. GPT-2 XL gets the most: its setup draws 1.56B
# values, copies 6.2 GB and pins 23 GiB before its first step. The
# sanitizers slow a program ten- to a hundredfold: each runs the few
# programs named below. The two Python peers import torch and transformers
# and build GPT-2 XL; torch.compile gives up by itself ten seconds before
# its limit, the FSDP2 ladder starts no batch in its last 30 s.
declare -A limit=([unpack]=8 [cublas]=6 [nccl]=5 [libraries]=5 [gpu-info]=5 [ferry-info]=5 [transfer]=10
                  [sanitize-memcheck]=75 [sanitize-racecheck]=40 [sanitize-synccheck]=25 [sanitize-initcheck]=60
                  [kernel-lab-attention]=20 [memprof-plan]=5 [engine-xl]=110 [peer-fsdp]=120
                  [engine-xl-none]=45 [peer-torch]=60 [llama-1b]=45 [memprof-llama]=10 [llama-big]=150
                  [kernel-lab]=30 [kernel-lab-f16]=10 [engine-gpt2]=20 [memprof-capacity]=5 [capacity]=150
                  [peer-torch-compile]=150 [goals]=5)
peers=${FERRY_CHECK_PEERS:-1}
max_bound=540
bound=${FERRY_CHECK_BOUND:-$((max_bound - 10))}
keep=${limit[goals]} # seconds kept for the table at the end

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
  local name=$1 lim=$2 gpu=$3 show=$4 t0=$SECONDS rc left=$((bound - SECONDS - 1)) # timeout -k 1: 1 s of grace
  [ "$name" = goals ] || left=$((left - keep))
  shift 4
  if [ "$left" -lt 5 ]; then # the check's bound is spent: said, and failed
    say "$(printf '%-28s %5ss  %s' "[$name]" 0 "FAIL: not run: the check's ${bound}s bound was spent before it")"
    failed=$((failed + 1))
    return 1
  fi
  [ "$left" -lt "$lim" ] && lim=$left
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

# compute-sanitizer: FERRY_CHECK_SANITIZER alone when set; else the
# toolkit's ($CUDA_HOME, /usr/local/cuda), PATH's, then Python's nvidia
# packages' (pip's nvidia-cuda-sanitizer-api).
find_sanitizer() {
  local c
  if [ -n "${FERRY_CHECK_SANITIZER:-}" ]; then
    [ -x "$FERRY_CHECK_SANITIZER" ] && echo "$FERRY_CHECK_SANITIZER"
    return
  fi
  for c in ${CUDA_HOME:+"$CUDA_HOME/bin/compute-sanitizer"} /usr/local/cuda/bin/compute-sanitizer \
           "$(command -v compute-sanitizer 2>/dev/null)" $(timeout 3 python3 -c '
import glob, os
try:
    import nvidia
    for r in nvidia.__path__:
        for p in glob.glob(os.path.join(r, "**", "compute-sanitizer"), recursive=True):
            if os.path.isfile(p):
                print(p)
except Exception:
    pass
' 2>/dev/null); do
    if [ -n "$c" ] && [ -x "$c" ] && [ -f "$c" ]; then
      echo "$c"
      return
    fi
  done
}

# The body of a sanitizer step, run in the pack's root: TOOL, then the
# compute-sanitizer (or "" to run the programs bare, no GPU expected), then
# one program command line an argument. Each program runs under the tool;
# a report of the tool (its error summary above 0, or its error exit code)
# is a finding: "finding:" names the tool, the program and the kernels the
# report's frames name. Exit 1 on any finding or failure, 77 when every
# program found no GPU, 0 when all ran clean.
sanitize_body='
  tool=$1 san=$2 SANITIZER_KERNELS=$3
  shift 3
  found=0 bad=0 nogpu=0 ran=0
  for cmd in "$@"; do
    ran=$((ran + 1))
    out=$(mktemp)
    if [ -n "$san" ]; then
      # shellcheck disable=SC2086
      "$san" --tool "$tool" --error-exitcode 86 --print-limit 200 --log-file "$out.log" env $cmd >"$out" 2>&1
    else
      # shellcheck disable=SC2086
      env $cmd >"$out" 2>&1
    fi
    rc=$?
    [ -f "$out.log" ] && cat "$out.log" >>"$out"
    errors=$(sed -n "s/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p" "$out" | tail -1)
    hazards=$(sed -n "s/.*RACECHECK SUMMARY: \([0-9][0-9]*\) hazard.*/\1/p" "$out" | tail -1)
    kernels=$(python3 "$SANITIZER_KERNELS" "$out" 2>/dev/null)
    if [ "$rc" -eq 77 ] && [ "${errors:-0}" = 0 ]; then
      nogpu=$((nogpu + 1))
      echo "no GPU: $cmd (exit 77)"
    elif [ "$rc" -eq 86 ] || [ "${errors:-0}" != 0 ] || [ "${hazards:-0}" != 0 ]; then
      found=$((found + 1))
      echo "finding: $tool: ${errors:-?} error(s)${hazards:+, $hazards hazard(s)} in ${kernels:-a kernel the report does not name} ($cmd)"
    elif [ "$rc" -ne 0 ]; then
      bad=$((bad + 1))
      echo "failed: $cmd exits $rc under $tool (see steps.log)"
    else
      echo "clean: $tool, ${errors:-0} errors: $cmd"
    fi
    cat "$out"
    rm -f "$out" "$out.log"
  done
  [ $((found + bad)) -gt 0 ] && exit 1
  [ "$nogpu" -eq "$ran" ] && exit 77
  exit 0'

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
say "step limits sum to ${sum}s; each step gets the least of its limit and what is left; the check ends within ${bound}s"
if ! [ "$bound" -ge 60 ] 2>/dev/null || [ "$bound" -gt "$max_bound" ]; then
  say "FAIL: FERRY_CHECK_BOUND=$bound: give 60 to $max_bound s, so the check stays under $((max_bound / 60)) minutes"
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

# compute-sanitizer over the GPU suite's programs: memcheck (out of bounds,
# misaligned, leaks) on the ops, GPT-2 and the engine; racecheck and
# synccheck (shared-memory hazards, barrier misuse) on the ops in both
# 16-bit types; initcheck (reads of device memory never written) on the ops
# and the engine. A finding fails the step and names the kernels.
sanitizer=$(find_sanitizer)
if [ -n "$sanitizer" ]; then
  say "  sanitizer | $sanitizer"
elif [ "$expect" = no-gpu ]; then
  say "  sanitizer | compute-sanitizer is not on this machine: the sanitizer steps run their programs bare (no GPU here)"
else
  say "  sanitizer | compute-sanitizer is nowhere on this machine (\$CUDA_HOME, /usr/local/cuda, PATH, Python's nvidia" \
    "packages): install the CUDA toolkit's, or pip install nvidia-cuda-sanitizer-api-cu13, or point" \
    "FERRY_CHECK_SANITIZER at it; the sanitizer steps fail"
fi
declare -A sanitize_runs=(
  [memcheck]="bin/test_ops_gpu bf16|bin/test_gpt2_backends|bin/test_engine_gpu cuda"
  [racecheck]="bin/test_ops_gpu bf16|bin/test_ops_gpu f16"
  [synccheck]="bin/test_ops_gpu bf16|bin/test_ops_gpu f16"
  [initcheck]="bin/test_ops_gpu bf16|bin/test_engine_gpu cuda")
for tool in memcheck racecheck synccheck initcheck; do
  IFS='|' read -r -a runs <<<"${sanitize_runs[$tool]}"
  if [ -z "$sanitizer" ] && [ "$expect" != no-gpu ]; then
    judge "sanitize-$tool" 1 1 0 "${limit[sanitize-$tool]}"
    continue
  fi
  step "sanitize-$tool" "${limit[sanitize-$tool]}" 1 '^(finding|failed|clean|no GPU):' \
    bash -c "$sanitize_body" sanitize "$tool" "$sanitizer" "$here/sanitizer_kernels.py" "${runs[@]}"
done

# ---- 2. the attention's speed: the kernel lab's attention alone, with the
# ceilings it measures first (the cuBLASLt bf16 matmul rate MFU is a share of)
step kernel-lab-attention "${limit[kernel-lab-attention]}" 1 '^(kernel|ceilings|check .*FAIL|time |PASS|FAIL)' \
  bin/kernel_lab --op attention
peak=$(sed -n 's/^ceilings: cuBLASLt bf16 matmul 8192^3 \([0-9.]*\) TFLOP.*/\1/p' "$work/kernel-lab-attention.out")
peak_flag=()
[ -n "$peak" ] && peak_flag=(--peak-tflops "$peak")
tree=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pshow='^(PEER|peer_)'
show='^(bench_engine|offload .*(ready|first step)|round|result|confirm|loss|card|the planner|RESULT)'

# ---- 3. GPT-2 XL on a 24 GiB card (an RTX 4090 or 3090, sold as "24 GB"):
# the plan with the documented 0.5 GiB for the CUDA context and libraries,
# then bench_engine --card 24GiB, which measures that share on this card,
# plans the largest batch for what is left and confirms it (one step there
# runs, one at batch + 1 runs out of memory cleanly), in optimizer and
# params mode with recompute; bench_engine exits 1 when a mode's loss does
# not fall, is not finite, or a step was skipped (a speed of a run that
# learns nothing fails the step). Then FSDP2 with CPU offload capped at
# 24 GiB, at the batches where the first H200 run found its best and its
# end.
step memprof-plan "${limit[memprof-plan]}" 0 'largest batch' \
  bin/memprof plan --model gpt2-xl --seq 1024 --offload optimizer --recompute --card 24GiB
if grep -q 'largest batch that fits: [0-9]' "$work/memprof-plan.out"; then
  step engine-xl "${limit[engine-xl]}" 1 "$show" \
    bin/bench_engine --backend cuda --model gpt2-xl --seq 1024 --modes optimizer,params --recompute --card 24GiB \
    --confirm-max-batch --steps 2 --warmup 0 "${peak_flag[@]}"
else
  judge engine-xl 1 1 0 "${limit[engine-xl]}"
  say "  engine-xl | no batch: memprof plan gave none"
fi
if [ "$peers" = 1 ]; then
  step peer-fsdp "${limit[peer-fsdp]}" 1 "$pshow" \
    python3 "$tree/tools/gpu/peer_fsdp.py" --model gpt2-xl --seq 1024 --card 24GiB --batches 24,32 \
    --steps 2 --warmup 1 --time-limit $((limit[peer-fsdp] - 30)) "${peak_flag[@]}"
fi

# ---- 4. GPT-2 XL without offload on the whole card, beside PyTorch eager
# at the same batch (the same tokens per step)
step engine-xl-none "${limit[engine-xl-none]}" 1 "$show" \
  bin/bench_engine --backend cuda --model gpt2-xl --seq 1024 --batch 16 --modes none --steps 3 --warmup 1 \
  "${peak_flag[@]}"
if [ "$peers" = 1 ]; then
  step peer-torch "${limit[peer-torch]}" 1 "$pshow" \
    python3 "$tree/tools/gpu/peer_torch.py" --model gpt2-xl --batch 16 --seq 1024 --steps 3 --warmup 2 \
    "${peak_flag[@]}"
fi

# ---- 5. the Llama family at seq 2048: Llama 3.2 1B without offload on the
# whole card; then the largest named Llama that a 24 GiB card and nine
# tenths of this machine's available host memory hold in params mode with
# recompute (the planner's answer, Llama 3.1 8B first), at the planner's
# largest batch, confirmed.
step llama-1b "${limit[llama-1b]}" 1 "$show" \
  bin/bench_engine --backend cuda --model llama3.2-1b --seq 2048 --batch 8 --modes none --recompute --steps 3 \
  --warmup 1 --lr 1e-5 "${peak_flag[@]}"
host_gib=$(awk '/^MemAvailable:/ {print int($2 * 0.9 / 1048576)}' /proc/meminfo)
step memprof-llama "${limit[memprof-llama]}" 0 '^(largest|model:|host|the largest Llama)' bash -c '
  for m in llama3.1-8b qwen2.5-7b mistral-7b llama2-7b llama3.2-3b qwen2.5-1.5b llama3.2-1b qwen2.5-0.5b \
           smollm2-360m smollm2-135m; do
    if bin/memprof plan --model "$m" --seq 2048 --batch 1 --offload params --recompute --card 24GiB \
         --host-mem "$1GiB" >/tmp/ferry-check-llama.txt 2>&1; then
      cat /tmp/ferry-check-llama.txt
      echo "the largest Llama this card and $1 GiB of host memory hold: $m"
      exit 0
    fi
    echo "$m: does not fit ($(grep -m1 "does not fit" /tmp/ferry-check-llama.txt))"
  done
  exit 1' llama "${host_gib:-0}"
big=$(sed -n 's/^the largest Llama this card and .* hold: \(.*\)$/\1/p' "$work/memprof-llama.out")
if [ -n "$big" ]; then
  step llama-big "${limit[llama-big]}" 1 "$show" \
    bin/bench_engine --backend cuda --model "$big" --seq 2048 --modes params --recompute --card 24GiB \
    --confirm-max-batch --steps 2 --warmup 0 --lr 1e-5 "${peak_flag[@]}"
else
  judge llama-big 1 1 0 "${limit[llama-big]}"
  say "  llama-big | no Llama: memprof plan fits none in ${host_gib:-?} GiB of host memory"
fi

# ---- 6. the rest
step transfer "${limit[transfer]}" 1 '.' bin/bench_transfer
step kernel-lab "${limit[kernel-lab]}" 1 '^(kernel|ceilings|check .*FAIL|time |PASS|FAIL)' bin/kernel_lab
# fp16, the type of Volta and Turing: the attention tiles (both sizes, the
# 32-query one being Turing's) and the fp16 matmuls, at the quick sizes.
step kernel-lab-f16 "${limit[kernel-lab-f16]}" 1 '^(kernel|ceilings|check .*FAIL|time |skip |PASS|FAIL)' \
  bin/kernel_lab --quick --dtype f16 --op attention --op matmul
step engine-gpt2 "${limit[engine-gpt2]}" 1 "$show" \
  bin/bench_engine --backend cuda --model gpt2 --batch 8 --seq 1024 --steps 3 --warmup 0 "${peak_flag[@]}"
# Capacity: the largest GPT-2-shaped model (dN: N layers, 64N wide) the
# planner says a 24 GiB card and this machine's host memory hold, in params
# mode with recompute at batch 1 x 1024 (about 7B parameters with 128 GiB),
# set up and trained two steps: its size (the banner), its host peak (the
# result line) and its time to the first step.
step memprof-capacity "${limit[memprof-capacity]}" 0 'largest GPT-2-shaped' \
  bin/memprof plan --model gpt2 --seq 1024 --batch 1 --offload params --recompute --card 24GiB \
  --host-mem "${host_gib:-0}GiB"
cap_model=$(sed -n 's/^largest GPT-2-shaped model that fits: \(d[0-9][0-9]*\) .*/\1/p' "$work/memprof-capacity.out")
if [ -n "$cap_model" ]; then
  step capacity "${limit[capacity]}" 1 "$show" \
    bin/bench_engine --backend cuda --model "$cap_model" --seq 1024 --batch 1 --modes params --recompute \
    --card 24GiB --steps 2 --warmup 0 "${peak_flag[@]}"
else
  judge capacity 1 1 0 "${limit[capacity]}"
  say "  capacity | no model: memprof plan gave none for ${host_gib:-?} GiB of host memory"
fi
if [ "$peers" = 1 ]; then
  # torch.compile gives up 10 s before its limit or what is left, whichever comes first
  tl=$((bound - SECONDS - keep - 12))
  [ "$tl" -gt $((limit[peer-torch-compile] - 10)) ] && tl=$((limit[peer-torch-compile] - 10))
  [ "$tl" -ge 1 ] || tl=1
  step peer-torch-compile "${limit[peer-torch-compile]}" 1 "$pshow" \
    python3 "$tree/tools/gpu/peer_torch.py" --model gpt2-xl --batch 16 --seq 1024 --steps 3 --warmup 1 --compile \
    --time-limit "$tl" "${peak_flag[@]}"
fi

# ---- the table: every figure beside its peer and its goal
step goals "${limit[goals]}" 0 '.' \
  python3 "$here/goals.py" --kernel-lab "$work/kernel-lab-attention.out" --xl-24 "$work/engine-xl.out" \
  --fsdp "$work/peer-fsdp.out" --xl-none "$work/engine-xl-none.out" --torch "$work/peer-torch.out" \
  --torch-compile "$work/peer-torch-compile.out" --llama-1b "$work/llama-1b.out" --llama-big "$work/llama-big.out" \
  --bench "$work/engine-xl.out" --bench "$work/engine-xl-none.out" --bench "$work/llama-1b.out" \
  --bench "$work/llama-big.out" --bench "$work/engine-gpt2.out"

say "done in $SECONDS s: $failed step(s) failed; whole outputs in $log"
rm -rf "$work"
[ "$failed" -eq 0 ]
