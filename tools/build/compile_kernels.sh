#!/usr/bin/env bash
# tools/build/compile_kernels.sh: every kernel of the library compiled for
# every card ferry builds for, and checked against what each card allows at
# the launches the product makes.
#
# 1. The library for Volta and Turing, built by CUDA 11.8
#    (tools/setup/cuda11_compiler.sh: CUDA 13 no longer compiles sm_70):
#    meson configures a release tree with -Dgpu_archs=70,75 and
#    -Dwerror=true (nvcc -Werror=all-warnings) with that nvcc, and builds
#    libferry.so and libferry.a: every backend/ops/*.cu as one fat binary of
#    sm_70 and sm_75 machine code plus compute_75 PTX, linked with cuBLASLt.
#    Its compiles print ptxas's account of each kernel (--ptxas-options=-v).
# 2. Each kernel source (backend/**.cu with a __global__) compiled to machine
#    code alone (nvcc -cubin, no host compile) with ptxas -v for sm_80, 86,
#    89 and 90 by the CUDA toolkit on PATH (13), the compiles run side by
#    side on every core.
# 3. tools/build/kernel_resources.py joins each kernel's registers, static
#    shared memory and spills on each card with the launches the test suite
#    made on the simulated device (its launch log: threads a block, dynamic
#    shared memory, __launch_bounds__): registers x block within 65,536,
#    static + dynamic shared memory within the card's opt-in limit,
#    __launch_bounds__ on every kernel launched with more than 256 threads,
#    and on the training step's path no spills and no stack frame (but the
#    one allowed, rope's sincosf). A kernel over a limit fails the script
#    with a sentence naming it, the card and the numbers.
#
#   tools/build/compile_kernels.sh [--launch-log FILE] [CUDA11_DIR] [BUILD_DIR]
#     defaults: build/meson-logs/cudasim-launches.txt (what `meson test
#     --suite cudasim` in build/ wrote), build-deps/cuda-11.8, build-cuda11/
#   tools/build/compile_kernels.sh --cards-only [--launch-log FILE] [--nvcc NVCC] [--archs LIST] OUT_DIR
#     steps 2 and 3 alone (no CUDA 11.8): the cards of LIST (default
#     80,86,89,90; 75 too is CUDA 13's) by NVCC (default the nvcc on
#     PATH), into OUT_DIR/ptxas; exit 77 (skipped) where there is no launch
#     log. The CUDA build's test kernel-cards runs it after the simulated
#     device's tests (tests/tools/meson.build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
launch_log=$root/build/meson-logs/cudasim-launches.txt
cards_only=0
nvcc13=""
new_archs=(80 86 89 90)
while [ $# -gt 0 ]; do
  case $1 in
    --launch-log) launch_log=$(realpath -m "$2"); shift 2 ;;
    --cards-only) cards_only=1; shift ;;
    --nvcc) nvcc13=$2; shift 2 ;;
    --archs) IFS=, read -r -a new_archs <<<"$2"; shift 2 ;;
    *) break ;;
  esac
done
if [ "$cards_only" = 1 ]; then
  [ $# -eq 1 ] || { echo "compile_kernels: --cards-only takes one argument, the output folder" >&2; exit 2; }
  out=$(realpath -m "$1")
else
  cuda=$(realpath -m "${1:-$root/build-deps/cuda-11.8}")
  out=$(realpath -m "${2:-$root/build-cuda11}")
fi
archs=(70 75)
if [ ! -s "$launch_log" ]; then
  echo "compile_kernels: no launch log at $launch_log: run the simulated device's suite first" \
    "(meson test -C build --suite cudasim), which writes it" >&2
  [ "$cards_only" = 0 ] || exit 77
  exit 1
fi
[ -n "$nvcc13" ] || nvcc13=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
nvcc13=$(command -v "$nvcc13" || true)
[ -n "$nvcc13" ] || { echo "compile_kernels: no nvcc (--nvcc, PATH or /usr/local/cuda) for sm_${new_archs[*]}" >&2; exit 1; }

# 1. The library for sm_70 and sm_75 by CUDA 11.8 (not with --cards-only).
cuda11() {
  if [ ! -x "$cuda/bin/nvcc" ] || [ ! -f "$cuda/native.ini" ]; then
    echo "compile_kernels: no CUDA 11.8 in $cuda: run tools/setup/cuda11_compiler.sh first" >&2
    exit 1
  fi
  host=$(cat "$cuda/host-compiler")
  # The host compiler sees cudafe's one translation unit, where the headers'
  # static inline helpers (ours and cuda_bf16.hpp's) no longer come from
  # headers: clang calls each one a .cu does not use an unused function (gcc,
  # which builds with CUDA 12 and 13, does not).
  # --ptxas-options=-v: ptxas's account of each kernel on sm_70 and sm_75, for step 3.
  cuda_args=("-Dcuda_args=['--ptxas-options=-v']")
  case $host in clang*) cuda_args=("-Dcuda_args=['-Xcompiler=-Wno-unused-function','--ptxas-options=-v']") ;; esac
  export CUDA_PATH=$cuda CUDA_HOME=$cuda PATH=$cuda/bin:$PATH
  # A fresh tree each time: ninja does not remake a .cu object when a header
  # it includes changes, and a stale object would hide what CUDA 11.8 refuses.
  rm -rf "$out"
  mkdir -p "$out"
  t_lib=$SECONDS
  meson setup "$out" "$root" --native-file "$cuda/native.ini" -Dcuda=enabled -Dgpu_archs=70,75 -Dnccl=disabled \
    -Dmpi=disabled -Dcudasim=disabled -Dbuildtype=release -Dwerror=true "${cuda_args[@]}" >"$out/setup.log" 2>&1 ||
    { tail -20 "$out/setup.log" >&2; echo "compile_kernels: meson setup with CUDA 11.8 failed (above)" >&2; exit 1; }
  if ! nice ninja -C "$out" libferry.so.0.1.0 libferry.a >"$out/compile.log" 2>&1; then
    grep -E -B2 -A8 'error|FAILED' "$out/compile.log" | head -60 >&2
    echo "compile_kernels: the library does not build with CUDA 11.8 for sm_70 and sm_75 (above; all of it in" \
      "$out/compile.log)" >&2
    exit 1
  fi
  lib=$out/libferry.so.0.1.0
  elves=$("$cuda/bin/cuobjdump" --list-elf "$lib")
  for a in "${archs[@]}"; do
    grep -q "\.sm_$a\.cubin" <<<"$elves" || { echo "compile_kernels: $lib holds no sm_$a machine code" >&2; exit 1; }
  done
  echo "compile_kernels: $(find "$out/backend" -name "*.cu.o" | wc -l) CUDA sources -> $lib ($(stat -c %s "$lib")" \
    "bytes; sm_70, sm_75, compute_75 PTX) in $((SECONDS - t_lib)) s, CUDA $(cat "$cuda/.complete"), host $host"
  mkdir -p "$out/ptxas"
  grep -E '^ptxas info|^    [0-9]+ bytes stack frame' "$out/compile.log" >"$out/ptxas/cuda11.sm_70-75.txt"
  grep -q "for 'sm_70'" "$out/ptxas/cuda11.sm_70-75.txt" ||
    { echo "compile_kernels: the CUDA 11.8 build printed no ptxas account for sm_70 (--ptxas-options=-v)" >&2; exit 1; }
}
if [ "$cards_only" = 0 ]; then
  cuda11
else
  rm -rf "$out/ptxas"
fi

# 2. Machine code alone, with ptxas's account of each kernel: one job per
# source and card, all cores busy. backend_cuda.cu's build header is meson's
# in a build; here one for these cards stands in (no kernel reads it).
sources=$(cd "$root" && grep -l '__global__' $(git ls-files 'backend/*.cu' 2>/dev/null || find backend -name '*.cu') | sort)
ptx=$out/ptxas
mkdir -p "$ptx"
printf '#pragma once\n#define FERRY_CUDA_ARCHS %s\n#define FERRY_CUDA_LIBDIR ""\n' "$(IFS=,; echo "${new_archs[*]}")" \
  >"$ptx/ferry_cuda_build.h"
# cubin ARCH SOURCE: its ptxas -v account in $ptx/NAME.sm_ARCH.txt.
cubin() {
  local a=$1 src=$2 name txt
  name=$(basename "$src" .cu)
  txt=$ptx/$name.sm_$a.txt
  (cd "$root" && "$nvcc13" -cubin -arch="sm_$a" -O3 --expt-relaxed-constexpr -std=c++17 -DFERRY_HAVE_CUDA=1 \
    -I"$ptx" -I. -Iinclude -Xptxas -v "$src" -o "$ptx/$name.sm_$a.cubin") >"$txt" 2>&1 ||
    { echo "compile_kernels: $src does not compile for sm_$a:" >&2; tail -20 "$txt" >&2; return 255; }
}
export -f cubin
export ptx root nvcc13
t0=$SECONDS
for src in $sources; do
  for a in "${new_archs[@]}"; do echo "$a $src"; done
done | xargs -P "$(nproc)" -n 2 bash -c 'cubin "$@"' _ ||
  { echo "compile_kernels: the per-card compiles failed (above)" >&2; exit 1; }
echo "compile_kernels: $(echo "$sources" | wc -w) kernel sources x ${#new_archs[@]} cards" \
  "($("$nvcc13" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'): sm_${new_archs[*]}) compiled in" \
  "$((SECONDS - t0)) s on $(nproc) cores"

# 3. Each kernel on each card at the launches the suite made.
/usr/bin/python3 "$root/tools/build/kernel_resources.py" --launch-log "$launch_log" "$ptx"/*.txt
