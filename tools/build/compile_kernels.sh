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
#    one allowed, rope's sincosf); the warps an SM holds at least the
#    occupancy floor its source states ("occupancy floor: N warps/SM:
#    `REGEX`" in a comment, REGEX over the instantiations' names). A kernel
#    over a limit or under its floor fails the script with a sentence
#    naming it, the card and the numbers; then the table of every kernel.
# 4. With --cards-only, tools/build/sass_report.py: the mma.sync attention
#    kernels' inner loop counted by instruction class (tensor-core MMA,
#    ldmatrix, cp.async, the rest) for sm_80 and sm_90, and the
#    tensor-core share.
#
#   tools/build/compile_kernels.sh [--launch-log FILE] [--cards-from DIR] [CUDA11_DIR] [BUILD_DIR]
#     defaults: build/meson-logs/cudasim-launches.txt (what `meson test
#     --suite cudasim` in build/ wrote), build-deps/cuda-11.8, build-cuda11/;
#     --cards-from DIR takes step 2's accounts that the kernel-cards test
#     made (its OUT_DIR/ptxas) instead of compiling them again
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
cards_from=""
nvcc13=""
new_archs=(80 86 89 90)
while [ $# -gt 0 ]; do
  case $1 in
    --launch-log) launch_log=$(realpath -m "$2"); shift 2 ;;
    --cards-only) cards_only=1; shift ;;
    --nvcc) nvcc13=$2; shift 2 ;;
    --archs) IFS=, read -r -a new_archs <<<"$2"; shift 2 ;;
    --cards-from) cards_from=$(realpath -m "$2"); shift 2 ;;
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
# --cards-from DIR: the accounts the kernel-cards test already made of this
# tree (its OUT_DIR/ptxas), taken where one exists for a source and card
# and is newer than the source; the rest compiled here.
reused=0 todo=""
for src in $sources; do
  name=$(basename "$src" .cu)
  for a in "${new_archs[@]}"; do
    if [ -n "$cards_from" ] && [ -s "$cards_from/$name.sm_$a.txt" ] && [ "$cards_from/$name.sm_$a.txt" -nt "$root/$src" ] &&
       grep -q "Compiling entry function" "$cards_from/$name.sm_$a.txt"; then
      cp "$cards_from/$name.sm_$a.txt" "$ptx/$name.sm_$a.txt"
      reused=$((reused + 1))
    else
      todo+="$a $src"$'\n'
    fi
  done
done
printf '%s' "$todo" | xargs -r -P "$(nproc)" -n 2 bash -c 'cubin "$@"' _ ||
  { echo "compile_kernels: the per-card compiles failed (above)" >&2; exit 1; }
echo "compile_kernels: $(echo "$sources" | wc -w) kernel sources x ${#new_archs[@]} cards" \
  "($("$nvcc13" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'): sm_${new_archs[*]}) compiled in" \
  "$((SECONDS - t0)) s on $(nproc) cores${cards_from:+; $reused of them the accounts in $cards_from}"

# 3. Each kernel on each card at the launches the suite made, held to the
# occupancy floors its source states; the table of every kernel's
# registers, frame, block and warps an SM on each card.
(cd "$root" && /usr/bin/python3 tools/build/kernel_resources.py --launch-log "$launch_log" --occupancy . \
  --floors $sources -- "$ptx"/*.txt)

# 4. (--cards-only: the kernel-cards test; the six-card run leaves it to
# that test) The attention kernels' inner loop by instruction class, from
# machine code: CUDA 13's own cubins where its toolkit has cuobjdump (a
# full install does; a minimal one has no disassembler), else CUDA 11.8's
# machine code of the same source for the same cards (CUDA 11.8's
# cuobjdump does not read CUDA 13's cubins). With neither, said and not
# counted.
[ "$cards_only" = 1 ] || exit 0
sass_kernels='attention_(fwd|dq|dkv)_kernel<__nv_bfloat16, [0-9, ]*80>'
sass_archs=(80 90)
dis13=$(dirname "$nvcc13")/cuobjdump
sass=$out/sass
rm -rf "$sass"
mkdir -p "$sass"
if [ -x "$dis13" ]; then
  for a in "${sass_archs[@]}"; do
    "$dis13" -sass "$ptx/attention.sm_$a.cubin" >"$sass/attention.sm_$a.sass"
  done
  sass_from="CUDA 13's machine code"
elif [ -x "${cuda:-$root/build-deps/cuda-11.8}/bin/cuobjdump" ] && [ -f "${cuda:-$root/build-deps/cuda-11.8}/host-compiler" ]; then
  c11=${cuda:-$root/build-deps/cuda-11.8}
  for a in "${sass_archs[@]}"; do
    printf '#pragma once\n#define FERRY_CUDA_ARCHS %s\n#define FERRY_CUDA_LIBDIR ""\n' "$a" >"$sass/ferry_cuda_build.h"
    (cd "$root" && "$c11/bin/nvcc" -ccbin "$(cat "$c11/host-compiler")" -cubin -arch="sm_$a" -O3 \
      --expt-relaxed-constexpr -std=c++17 -DFERRY_HAVE_CUDA=1 -I"$sass" -I. -Iinclude backend/ops/attention.cu \
      -o "$sass/attention.sm_$a.cubin") >"$sass/compile.sm_$a.log" 2>&1 ||
      { tail -20 "$sass/compile.sm_$a.log" >&2; echo "compile_kernels: CUDA 11.8 does not compile attention.cu for sm_$a" >&2; exit 1; }
    "$c11/bin/cuobjdump" -sass "$sass/attention.sm_$a.cubin" >"$sass/attention.sm_$a.sass"
  done
  sass_from="CUDA 11.8's machine code of the same source"
fi
if [ -n "${sass_from:-}" ]; then
  echo "compile_kernels: the attention kernels' inner loop by instruction class ($sass_from, sm_${sass_archs[*]}):"
  /usr/bin/python3 "$root/tools/build/sass_report.py" --kernel "$sass_kernels" "$sass"/attention.sm_*.sass
else
  echo "compile_kernels: no disassembler (CUDA 13's cuobjdump, or CUDA 11.8's from tools/setup/cuda11_compiler.sh):" \
    "the attention kernels' instruction classes are not counted"
fi
