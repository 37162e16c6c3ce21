#!/usr/bin/env bash
# tools/build/compile_kernels.sh: the library for Volta and Turing, built by
# CUDA 11.8 (tools/setup/cuda11_compiler.sh: CUDA 13 no longer compiles
# sm_70): meson configures a release tree with -Dgpu_archs=70,75 and
# -Dwerror=true (nvcc -Werror=all-warnings) with that nvcc, and builds
# libferry.so and libferry.a: every backend/ops/*.cu as one fat binary of
# sm_70 and sm_75 machine code plus compute_75 PTX, linked with cuBLASLt.
# Then each kernel's resources are checked against both architectures'
# limits; a kernel over one fails the script with a sentence naming it.
#
# The check reads cuobjdump --dump-resource-usage of every CUDA object: per
# kernel and architecture, its registers (at most 255 a thread) and static
# shared memory (at most 48 KiB a block, the static limit on both; the
# opt-in maximum, static and dynamic together, is 96 KiB on sm_70 and 64 KiB
# on sm_75, and a kernel's dynamic share is chosen at run time from the
# device's properties, which the simulated device checks at those limits).
#
#   tools/build/compile_kernels.sh [CUDA11_DIR] [BUILD_DIR]
#     defaults: build-deps/cuda-11.8 and build-cuda11/
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cuda=$(realpath -m "${1:-$root/build-deps/cuda-11.8}")
out=$(realpath -m "${2:-$root/build-cuda11}")
archs=(70 75)
declare -A smem_max=([70]=$((96 * 1024)) [75]=$((64 * 1024)))
static_max=$((48 * 1024))
reg_max=255
if [ ! -x "$cuda/bin/nvcc" ] || [ ! -f "$cuda/native.ini" ]; then
  echo "compile_kernels: no CUDA 11.8 in $cuda: run tools/setup/cuda11_compiler.sh first" >&2
  exit 1
fi
host=$(cat "$cuda/host-compiler")
# The host compiler sees cudafe's one translation unit, where the headers'
# static inline helpers (ours and cuda_bf16.hpp's) no longer come from
# headers: clang calls each one a .cu does not use an unused function (gcc,
# which builds with CUDA 12 and 13, does not).
cuda_args=()
case $host in clang*) cuda_args=(-Dcuda_args=-Xcompiler=-Wno-unused-function) ;; esac
export CUDA_PATH=$cuda CUDA_HOME=$cuda PATH=$cuda/bin:$PATH
# A fresh tree each time: ninja does not remake a .cu object when a header
# it includes changes, and a stale object would hide what CUDA 11.8 refuses.
rm -rf "$out"
mkdir -p "$out"
meson setup "$out" "$root" --native-file "$cuda/native.ini" -Dcuda=enabled -Dgpu_archs=70,75 -Dnccl=disabled \
  -Dmpi=disabled -Dcudasim=disabled -Dbuildtype=release -Dwerror=true "${cuda_args[@]}" >"$out/setup.log" 2>&1 ||
  { tail -20 "$out/setup.log" >&2; echo "compile_kernels: meson setup with CUDA 11.8 failed (above)" >&2; exit 1; }
if ! nice ninja -C "$out" libferry.so.0.1.0 libferry.a >"$out/compile.log" 2>&1; then
  grep -E -B2 -A8 'error|FAILED' "$out/compile.log" | head -60 >&2
  echo "compile_kernels: the library does not build with CUDA 11.8 for sm_70 and sm_75 (above; all of it in" \
    "$out/compile.log)" >&2
  exit 1
fi
objects=$(find "$out/backend" -name "*.cu.o" | sort)

# Each kernel's resources, per architecture: "arch function reg shared".
for o in $objects; do
  "$cuda/bin/cuobjdump" --dump-resource-usage "$o" | awk -v obj="$(basename "$o" .cu.o)" '
    /^arch = sm_/ { arch = substr($3, 4) }
    /Function [^ ]*:$/ { fn = $2; sub(/:$/, "", fn) }
    /REG:[0-9]+/ && fn != "" {
      reg = shared = 0
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^REG:/) reg = substr($i, 5)
        if ($i ~ /^SHARED:/) shared = substr($i, 8)
      }
      print arch, obj, fn, reg, shared
      fn = ""
    }'
done >"$out/resources.txt"
kernels=$(wc -l <"$out/resources.txt")
if [ "$kernels" -eq 0 ]; then
  echo "compile_kernels: cuobjdump listed no kernel in $out/backend: the resource check cannot run" >&2
  exit 1
fi
bad=0
while read -r arch obj fn reg shared; do
  name=$("$cuda/bin/cu++filt" "$fn" 2>/dev/null | head -1)
  if [ "$reg" -gt "$reg_max" ]; then
    echo "compile_kernels: kernel $name ($obj.cu) uses $reg registers a thread on sm_$arch, over the $reg_max allowed" >&2
    bad=1
  fi
  if [ "$shared" -gt "$static_max" ] || [ "$shared" -gt "${smem_max[$arch]}" ]; then
    echo "compile_kernels: kernel $name ($obj.cu) has $shared bytes of static shared memory on sm_$arch," \
      "over the $static_max a block allows (sm_$arch's opt-in maximum: ${smem_max[$arch]} with dynamic)" >&2
    bad=1
  fi
done <"$out/resources.txt"
[ "$bad" -eq 0 ] || exit 1

for a in "${archs[@]}"; do
  n=$(awk -v a="$a" '$1 == a' "$out/resources.txt" | wc -l)
  top_reg=$(awk -v a="$a" '$1 == a && $4 > m { m = $4 } END { print m + 0 }' "$out/resources.txt")
  top_smem=$(awk -v a="$a" '$1 == a && $5 > m { m = $5 } END { print m + 0 }' "$out/resources.txt")
  echo "sm_$a: $n kernels fit: at most $top_reg registers a thread (limit $reg_max), $top_smem bytes of static shared memory (limit $static_max)"
done
lib=$out/libferry.so.0.1.0
elves=$("$cuda/bin/cuobjdump" --list-elf "$lib")
for a in "${archs[@]}"; do
  grep -q "\.sm_$a\.cubin" <<<"$elves" || { echo "compile_kernels: $lib holds no sm_$a machine code" >&2; exit 1; }
done
echo "compile_kernels: $(echo "$objects" | wc -w) CUDA sources -> $lib ($(stat -c %s "$lib") bytes; sm_70, sm_75," \
  "compute_75 PTX), CUDA $(cat "$cuda/.complete"), host $host"
