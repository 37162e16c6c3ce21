#!/usr/bin/env bash
# The kernels' resource check (tools/build/kernel_resources.py) can fail:
# planted violations (tests/tools/planted_kernels.cu), compiled for sm_80 by
# the build's nvcc with ptxas -v, with a launch log saying how they would be
# launched, each fail it with the sentence that names them; the light
# kernel alone passes; a spill, and a stack frame, fail on the step's path
# (on every card, not only the one a training step ran on) and are only
# reported off it; an allowed kernel's frame passes within its bytes and
# fails beyond them; a kernel the log never launched fails; an occupancy
# floor stated in a source fails a kernel under it, passes one at it, and
# fails when stale; the SASS report counts a hand-written loop by class.
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
# Occupancy floors stated in a source: heavy_kernel's registers at 256
# threads give it a number of warps an SM worked out here; a floor one above
# it fails naming the kernel, its warps and the source line, a floor at it
# passes, and a floor naming no kernel compiled fails as stale.
launch heavy_kernel 256 0 >"$tmp/log8"
warps=$(( (65536 / (((regs * 32 + 255) / 256) * 256)) / 8 * 8 ))
[ "$warps" -gt 64 ] && warps=64
printf '/* occupancy floor: %d warps/SM: `heavy_kernel` (planted) */\n' $((warps + 1)) >"$tmp/floor_high.cu"
printf '/* occupancy floor: %d warps/SM: `heavy_kernel` (planted) */\n' "$warps" >"$tmp/floor_at.cu"
printf '/* occupancy floor: 8 warps/SM: `gone_kernel<.*>` (planted) */\n' >"$tmp/floor_stale.cu"
sed -n '/Compiling entry function .*heavy_kernel/,/Used/p' "$tmp/ptxas.txt" >"$tmp/heavy.txt"
/usr/bin/python3 "$check" --launch-log "$tmp/log8" --floors "$tmp/floor_high.cu" -- "$tmp/heavy.txt" >"$tmp/out8" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "^kernel_resources: heavy_kernel on sm_80 holds $warps warps an SM (limited by registers: $regs registers, 256 threads, 0.0 KiB of shared memory), under the floor of $((warps + 1)) its source states ($tmp/floor_high.cu:1)" "$tmp/out8"
ok $? "a floor of $((warps + 1)) warps an SM fails heavy_kernel, which holds $warps at 256 threads of $regs registers (exit $rc)"
[ "$rc" -eq 1 ] || diag <"$tmp/out8"
/usr/bin/python3 "$check" --launch-log "$tmp/log8" --floors "$tmp/floor_at.cu" -- "$tmp/heavy.txt" >"$tmp/out9" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q "occupancy floors: 1 stated, 1 kernel compiles held to them" "$tmp/out9"
ok $? "... a floor of $warps passes, and is counted (exit $rc)"
/usr/bin/python3 "$check" --launch-log "$tmp/log8" --floors "$tmp/floor_stale.cu" -- "$tmp/heavy.txt" >"$tmp/out10" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "the occupancy floor at $tmp/floor_stale.cu:1 names no kernel compiled (gone_kernel<.\*>): a stale floor" "$tmp/out10"
ok $? "... a floor naming no kernel compiled fails as stale (exit $rc)"

# The SASS report on a hand-written loop: 12 instructions from the branch
# target to the backward branch, 4 HMMA, 2 LDSM, 1 LDGSTS, 5 others: a
# tensor-core share of 4/12 = 33.3%; the kernel's other loop, with one HMMA,
# is not the inner loop. A kernel asked for whose code has no tensor-core
# loop fails.
sass() {
  local name=$1 body=$2
  printf '\t\tFunction : %s\n' "$name"
  for i in $(seq 0 31); do printf '        /*%04x*/                   NOP ;\n' $((i * 16)); done
  printf '%s\n' "$body"
}
mma_loop='        /*0200*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0210*/                   LDSM.16.M88.4 R8, [R2] ;
        /*0220*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0230*/                   LDGSTS.E.BYPASS.128 [R3], [R6.64] ;
        /*0240*/                   FMUL R1, R1, R2 ;
        /*0250*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0260*/                   LDSM.16.M88.4 R8, [R2] ;
        /*0270*/                   MUFU.EX2 R1, R1 ;
        /*0280*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0290*/                   IADD3 R1, R1, 0x1, RZ ;
        /*02a0*/                   ISETP.GE.AND P0, PT, R1, R2, PT ;
        /*02b0*/               @!P0 BRA 0x200 ;
        /*02c0*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*02d0*/                   BRA 0x0 ;'
{ sass _Z20attention_fwd_kernelILi64EEvPf "$mma_loop"; sass _Z20attention_dkv_kernelILi64EEvPf ''; } >"$tmp/k.sm_80.sass"
/usr/bin/python3 "$src/tools/build/sass_report.py" --kernel 'attention_(fwd|dkv)_kernel' "$tmp/k.sm_80.sass" >"$tmp/sass.out" 2>&1
rc=$?
grep -q '^| attention_fwd_kernel<64> | sm_80 | 12 | 4 | 2 | 1 | 5 | 33.3% |$' "$tmp/sass.out"
ok $? "the SASS report counts the hand-written inner loop: 12 instructions, 4 mma, 2 ldmatrix, 1 cp.async, 5 others, 33.3%"
[ "$rc" -eq 1 ] && grep -q "^sass_report: FAIL: attention_dkv_kernel<64> on sm_80: no loop with a tensor-core instruction" "$tmp/sass.out"
ok $? "... and fails a kernel asked for with no tensor-core loop (exit $rc)"
grep -q '^| attention_fwd' "$tmp/sass.out" || diag <"$tmp/sass.out"

launch other_kernel 32 0 >"$tmp/log4"
/usr/bin/python3 "$check" --launch-log "$tmp/log4" "$tmp/light.txt" >"$tmp/out4" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "light_kernel.* was never launched by the test suite" "$tmp/out4"
ok $? "a kernel the launch log never launched fails: its block size is unknown (exit $rc)"
finish
