#!/usr/bin/env bash
# The CUDA toolkit found through a wrapper (suite tools; registered where
# CUDA is built): some machines put a two-line script on PATH,
# /usr/local/bin/nvcc running the real nvcc in /usr/local/cuda-13.0/bin, so
# the folder nvcc is found in says nothing of where libcudart lives. meson
# must still link the toolkit's libraries: a fresh configure with such a
# wrapper first on PATH names a library folder that holds libcudart.so and
# libcublasLt.so, the runtime of the CUDA release nvcc reports.
#   test_cuda_wrapper.sh SOURCE_ROOT NVCC (the nvcc meson compiles with)
set -uo pipefail
src=$1
# meson names nvcc as found on PATH; the wrapper needs it as a full path
# (as "nvcc" it would run itself).
nvcc=$(command -v "$2") || { echo "Bail out! $2 is not a program on PATH"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi; }
diag() { sed 's/^/# /'; }

mkdir "$tmp/bin"
printf '#!/bin/sh\nexec %s "$@"\n' "$nvcc" >"$tmp/bin/nvcc"
chmod 755 "$tmp/bin/nvcc"
env -u CUDA_PATH -u CUDA_HOME PATH="$tmp/bin:$PATH" meson setup "$tmp/build" "$src" -Dcuda=enabled -Dnccl=auto \
  >"$tmp/setup.log" 2>&1
rc=$?
ok "$rc" "meson setup succeeds with a wrapper nvcc first on PATH (exit $rc)"
[ "$rc" -eq 0 ] || tail -20 "$tmp/setup.log" | diag
libdir=$(bash "$src/tools/gpu/cuda_libdir.sh" "$tmp/build" 2>&1)
echo "# FERRY_CUDA_LIBDIR: ${libdir:-(none)}"
[ -n "$libdir" ] && [ -e "$libdir/libcudart.so" ] && [ -e "$libdir/libcublasLt.so" ]
ok $? "the library folder it names holds libcudart.so and libcublasLt.so"
# The runtime's soname carries the toolkit's major version: the one nvcc
# reports, or a stray libcudart from another toolkit was found.
release=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
soname=$(basename "$(readlink -f "$libdir/libcudart.so" 2>/dev/null)")
echo "# nvcc release $release; libcudart.so is $soname"
case $release:$soname in
  :*) false ;;
  "$release:libcudart.so.$release" | "$release:libcudart.so.$release."*) true ;;
  *) false ;;
esac
ok $? "that libcudart is CUDA $release's, the toolkit nvcc belongs to"
echo "1..$n"
