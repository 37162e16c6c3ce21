#!/usr/bin/env bash
# tools/gpu/cuda_libdir.sh BUILD_DIR: prints the CUDA toolkit's library
# folder that the meson build in BUILD_DIR links against (FERRY_CUDA_LIBDIR
# in its ferry_cuda_build.h, which meson takes from nvcc's own dry run, as
# nvcc on PATH may be a wrapper elsewhere). Fails with a sentence where that
# build has no CUDA. The one reader of that line for the shell scripts.
set -euo pipefail
header=${1:?usage: tools/gpu/cuda_libdir.sh BUILD_DIR}/ferry_cuda_build.h
dir=$(sed -n 's/^#define FERRY_CUDA_LIBDIR "\(.*\)"$/\1/p' "$header" 2>/dev/null || true)
if [ -z "$dir" ]; then
  echo "cuda_libdir: $header names no FERRY_CUDA_LIBDIR: configure $1 with -Dcuda=enabled" >&2
  exit 1
fi
printf '%s\n' "$dir"
