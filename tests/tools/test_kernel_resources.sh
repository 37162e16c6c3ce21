#!/usr/bin/env bash
# The kernels' resource check (tools/build/kernel_resources.py) can fail:
# planted violations (tests/tools/planted_kernels.cu), compiled for sm_80 by
# the build's nvcc with ptxas -v, with a launch log saying how they would be
# launched, each fail it with the sentence that names them; the light
# kernel alone passes; a spill fails on the step's path and is only reported
# off it; a kernel the log never launched fails.
#   test_kernel_resources.sh SOURCE_ROOT NVCC
set -uo pipefail
src=$1
nvcc=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$src/tests/train/tap.sh"
diag() { sed 's/^/# /'; }
check=$src/tools/build/kernel_resources.py

"$nvcc" -cubin -arch=sm_80 -O3 -Xptxas -v "$src/tests/tools/planted_kernels.cu" -o "$tmp/planted.cubin" \
  >"$tmp/ptxas.txt" 2>&1
rc=$?
ok "$rc" "the planted kernels compile for sm_80 with ptxas -v (exit $rc)"
[ "$rc" -eq 0 ] || { diag <"$tmp/ptxas.txt"; finish; exit 1; }
regs=$(awk '/Compiling entry function .*heavy_kernel/ {h = 1} h && /Used [0-9]+ registers/ {print $5; exit}' "$tmp/ptxas.txt")
[ "${regs:-0}" -gt 64 ]
ok $? "heavy_kernel uses more than 64 registers a thread (${regs:-none}), so 1024 threads cannot have them"
spill=$(awk '/Function properties for .*bounded_spill_kernel/ {getline; print $5; exit}' "$tmp/ptxas.txt")
[ "${spill:-0}" -gt 0 ]
ok $? "bounded_spill_kernel spills under __launch_bounds__(1024) (${spill:-0} bytes of spill stores)"

# launch KERNEL THREADS BOUNDS: a launch log line for sm_80.
launch() { printf 'sm_80\t%s\t%s\t0\t%s\tplanted_kernels.cu:1\n' "$1" "$2" "$3"; }

{ launch heavy_kernel 1024 0; launch bounded_spill_kernel 256 1024; launch light_kernel 1024 1024; } >"$tmp/log1"
/usr/bin/python3 "$check" --launch-log "$tmp/log1" --step bounded_spill_kernel "$tmp/ptxas.txt" >"$tmp/out1" 2>&1
rc=$?
[ "$rc" -eq 1 ]
ok $? "the check fails on the planted kernels (exit $rc)"
grep -q "heavy_kernel on sm_80 uses $regs registers a thread; launched with 1024 threads a block it needs [0-9]* registers, above the 65536" "$tmp/out1"
ok $? "... naming heavy_kernel, sm_80, its registers and the 1024 threads it is launched with"
grep -q "heavy_kernel.* is launched with 1024 threads a block (at planted_kernels.cu:1) and declares no __launch_bounds__" "$tmp/out1"
ok $? "... and that it is launched with more than 256 threads without __launch_bounds__"
grep -q "^kernel_resources: bounded_spill_kernel on sm_80 spills: [0-9]* bytes of spill stores.*on the training step's path, which must not spill" "$tmp/out1"
ok $? "... and bounded_spill_kernel's spills, on the step's path"
/usr/bin/python3 "$check" --launch-log "$tmp/log1" "$tmp/ptxas.txt" >"$tmp/out1b" 2>&1
grep -q "^kernel_resources: note: bounded_spill_kernel on sm_80 spills: .*not launched on this card by a training step" "$tmp/out1b" &&
  ! grep "^kernel_resources: bounded_spill" "$tmp/out1b" | grep -q spills
ok $? "... off the step's path the same spill is reported, not failed"
! grep "^kernel_resources: " "$tmp/out1" | grep -q light_kernel
ok $? "... and nothing of light_kernel"
[ "$rc" -eq 1 ] || diag <"$tmp/out1"

# The light kernel alone passes; the same kernel at 2048 threads of dynamic
# shared memory over the card's limit fails.
{ echo "ptxas info    : Compiling entry function '_Z12light_kernelPKfPfi' for 'sm_80'"; sed -n '/Function properties for _Z12light_kernelPKfPfi/,/Used/p' "$tmp/ptxas.txt"; } >"$tmp/light.txt"
launch light_kernel 256 0 >"$tmp/log2"
/usr/bin/python3 "$check" --launch-log "$tmp/log2" "$tmp/light.txt" >"$tmp/out2" 2>&1
rc=$?
ok "$rc" "light_kernel at 256 threads passes (exit $rc)"
[ "$rc" -eq 0 ] || diag <"$tmp/out2"
printf 'sm_80\tlight_kernel<T>\t256\t%d\t0\tplanted_kernels.cu:1\n' $((164 * 1024)) >"$tmp/log3"
/usr/bin/python3 "$check" --launch-log "$tmp/log3" "$tmp/light.txt" >"$tmp/out3" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "light_kernel.* launched with 167936 dynamic on that card: 167936, above the card's 166912" "$tmp/out3"
ok $? "164 KiB of dynamic shared memory on sm_80 (163 KiB allowed) fails, the template arguments of the log's name dropped (exit $rc)"
[ "$rc" -eq 1 ] || diag <"$tmp/out3"
launch other_kernel 32 0 >"$tmp/log4"
/usr/bin/python3 "$check" --launch-log "$tmp/log4" "$tmp/light.txt" >"$tmp/out4" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "light_kernel.* was never launched by the test suite" "$tmp/out4"
ok $? "a kernel the launch log never launched fails: its block size is unknown (exit $rc)"
finish
