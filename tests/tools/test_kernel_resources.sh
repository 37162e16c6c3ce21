#!/usr/bin/env bash
# The kernels' resource check (tools/build/kernel_resources.py) can fail:
# planted violations (tests/tools/planted_kernels.cu), compiled for sm_80 by
# the build's nvcc with ptxas -v, with a launch log saying how they would be
# launched, each fail it with the sentence that names them; the light
# kernel alone passes; a spill, and a stack frame, fail on the step's path
# (on every card, not only the one a training step ran on) and are only
# reported off it; an allowed kernel's frame passes within its bytes and
# fails beyond them; a kernel the log never launched fails.
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
# frame KERNEL: "FRAME SPILL_STORES SPILL_LOADS" of its ptxas account.
frame() { awk -v k="$1" '$0 ~ "Function properties for _Z[0-9]*" k "P" {getline; print $1, $5, $9; exit}' "$tmp/ptxas.txt"; }
read -r fbytes fst fld <<<"$(frame frame_kernel)"
[ "${fbytes:-0}" -gt 32 ] && [ "${fst:-1}" -eq 0 ] && [ "${fld:-1}" -eq 0 ]
ok $? "frame_kernel has a stack frame over 32 bytes and no spills (${fbytes:-none} bytes, spills ${fst:-?}/${fld:-?})"
read -r rbytes rst rld <<<"$(frame rope_forward_kernel)"
[ "${rbytes:-0}" -gt 0 ] && [ "${rbytes:-0}" -le 32 ] && [ "${rst:-1}" -eq 0 ] && [ "${rld:-1}" -eq 0 ]
ok $? "the planted rope_forward_kernel has a stack frame of 1 to 32 bytes and no spills (${rbytes:-none} bytes)"

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
grep -q "^kernel_resources: note: bounded_spill_kernel on sm_80 spills: .*not launched by a training step" "$tmp/out1b" &&
  ! grep "^kernel_resources: bounded_spill" "$tmp/out1b" | grep -q spills
ok $? "... off the step's path the same spill is reported, not failed"
! grep "^kernel_resources: " "$tmp/out1" | grep -q light_kernel
ok $? "... and nothing of light_kernel"
[ "$rc" -eq 1 ] || diag <"$tmp/out1"

# A stack frame on the step's path fails, named with its bytes, the card and
# the card a training step launched it on; off the path it is a note. The
# log's line for another card: the check holds every card's machine code.
# step_launch CARD KERNEL: a launch log line of a training program (an
# executable of STEP_PROGRAMS; nm finds no symbol in a missing file, so the
# line keys the kernel by its name alone).
step_launch() { printf '%s\t%s\t256\t0\t0\tplanted_kernels.cu:1\t%s/train_gpt2_sim\t0x0\n' "$1" "$2" "$tmp"; }
{ step_launch sm_86 frame_kernel; step_launch sm_86 rope_forward_kernel; launch light_kernel 256 0; } >"$tmp/log5"
/usr/bin/python3 "$check" --launch-log "$tmp/log5" "$tmp/ptxas.txt" >"$tmp/out5" 2>&1
rc=$?
[ "$rc" -eq 1 ] &&
  grep -q "^kernel_resources: frame_kernel on sm_80 has a $fbytes-byte stack frame (local memory, [0-9]* registers); it is on the training step's path (launched by a training step on sm_86)" "$tmp/out5"
ok $? "frame_kernel's $fbytes-byte frame on sm_80 fails, on the path by its launch on sm_86 (exit $rc)"
grep -q "^kernel_resources: note: rope_forward_kernel on sm_80 has a $rbytes-byte stack frame .*: allowed, up to 32 bytes: sincosf" "$tmp/out5" &&
  ! grep "^kernel_resources: rope_forward" "$tmp/out5" | grep -q .
ok $? "... the allowed rope_forward_kernel's $rbytes-byte frame is a note, not a failure"
grep -q "^sm_80: .* 1 spilling, 2 more with a stack frame" "$tmp/out5"
ok $? "... and the card's line counts the spilling kernel and the two frames besides"
[ "$rc" -eq 1 ] || diag <"$tmp/out5"
{ launch frame_kernel 256 0; launch rope_forward_kernel 256 0; launch light_kernel 256 0; } >"$tmp/log6"
/usr/bin/python3 "$check" --launch-log "$tmp/log6" "$tmp/ptxas.txt" >"$tmp/out6" 2>&1
grep -q "^kernel_resources: note: frame_kernel on sm_80 has a $fbytes-byte stack frame .*not launched by a training step" "$tmp/out6" &&
  ! grep "^kernel_resources: frame_kernel" "$tmp/out6" | grep -q .
ok $? "... off the step's path the same frame is reported, not failed"
# frame_kernel's account under the allowed name: over the 32 bytes allowed.
{ echo "ptxas info    : Compiling entry function '_Z19rope_forward_kernelPKfPfi' for 'sm_80'"
  sed -n '/Function properties for _Z12frame_kernelPKfPfi/,/Used/p' "$tmp/ptxas.txt" | sed 's/_Z12frame_kernel/_Z19rope_forward_kernel/'; } >"$tmp/rope64.txt"
/usr/bin/python3 "$check" --launch-log "$tmp/log5" "$tmp/rope64.txt" >"$tmp/out7" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "^kernel_resources: rope_forward_kernel on sm_80 has a $fbytes-byte stack frame.*(its allowance is 32 bytes: " "$tmp/out7"
ok $? "an allowed kernel's frame beyond its allowance fails ($fbytes bytes, 32 allowed; exit $rc)"
[ "$rc" -eq 1 ] || diag <"$tmp/out7"

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
