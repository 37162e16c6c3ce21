#!/usr/bin/env bash
# The aarch64 forms of CRC-32C (common/crc32c.c: the CRC32C instructions,
# alone and folded with PMULL) on an emulated aarch64: tests/common/
# test_crc32c.c cross-compiled with Debian's gcc-aarch64-linux-gnu and run
# under qemu-aarch64, once as a CPU with every extension and once as a
# Cortex-A53. Skipped (77) where the cross compiler or qemu is missing.
#   usage: test_crc32c_aarch64.sh SOURCE_ROOT
set -u
root=$1
cc=$(command -v aarch64-linux-gnu-gcc) || { echo "1..0 # SKIP no aarch64-linux-gnu-gcc (Debian's gcc-aarch64-linux-gnu)"; exit 77; }
qemu=$(command -v qemu-aarch64) || { echo "1..0 # SKIP no qemu-aarch64 (Debian's qemu-user)"; exit 77; }
work=$(mktemp -d /tmp/ferry-test-crc-arm-XXXXXX)
trap 'rm -rf "$work"' EXIT
if ! "$cc" -std=gnu11 -O2 -Wall -Wextra -Werror -static -I"$root" -I"$root/include" -I"$root/tests" \
     "$root/common/crc32c.c" "$root/tests/common/test_crc32c.c" -o "$work/t" -lpthread 2>"$work/err"; then
  # One line: a TAP reader takes every further line as noise.
  echo "Bail out! the cross build failed (is Debian's libc6-dev-arm64-cross installed? tools/setup/setup.sh installs it): $(head -c 600 "$work/err" | tr '\n' ' ')"
  exit 1
fi
# Each run is a TAP stream of its own: renumber them into one.
n=0; bad=0
for cpu in max cortex-a53; do
  out=$("$qemu" -cpu "$cpu" "$work/t"); rc=$?
  while IFS= read -r line; do
    case $line in
      "ok "*|"not ok "*)
        n=$((n + 1))
        status=${line%% [0-9]*}; rest=${line#* [0-9]* }
        [ "$status" = "not ok" ] && bad=$((bad + 1))
        echo "$status $n - aarch64 ($cpu): ${rest#- }";;
      "#"*) echo "$line";;
    esac
  done <<<"$out"
  n=$((n + 1))
  if [ $rc -eq 0 ] && grep -q "form: armv8 crc+pmull" <<<"$out"; then
    echo "ok $n - aarch64 ($cpu): the run passed and chose the CRC32C instructions folded with PMULL"
  else
    echo "not ok $n - aarch64 ($cpu): exit $rc, form line: $(grep 'form:' <<<"$out")"; bad=$((bad + 1))
  fi
done
echo "1..$n"
[ $bad -eq 0 ]
