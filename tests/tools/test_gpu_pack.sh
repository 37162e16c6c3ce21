#!/usr/bin/env bash
# The GPU pack, proven on a machine without a GPU (suite tools; registered
# where CUDA is built): tools/gpu/pack.sh builds the archive; it is under
# 40 MiB; unpacked into an empty folder, every program in it resolves every
# library it loads from the pack's lib/, from the C runtime, or (cuBLAS and
# cuBLASLt alone, and NCCL for the NCCL tests alone) from the CUDA toolkit,
# and none is missing; the data-parallel test (dp-gpu) is in it, built with
# NCCL, and no other program loads NCCL; tools/gpu/check.sh, run on the
# archive as on the GPU machine but expecting no GPU, must see every GPU
# program end with the clean "no GPU" exit 77 (not 0, a silent run on the
# host backend; not a crash) and the others pass, the engine in fp16 among
# them, the compute-sanitizer steps included (there with no sanitizer: their
# programs run bare and must end with 77); tests.txt names no path of this
# machine; where FERRY_CHECK_NCCL names a folder without NCCL, the check
# fails its nccl step with what to install; and a compute-sanitizer that
# reports a finding (a stand-in printing initcheck's report) fails each
# sanitizer step, naming the kernel.
#   test_gpu_pack.sh SOURCE_ROOT PACK_BUILD_DIR
set -uo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fails=$((fails + 1)); fi; }
diag() { sed 's/^/# /'; }

archive=$tmp/ferry-gpu.tar.xz
bash "$src/tools/gpu/pack.sh" --build-dir "$build" --out "$archive" >"$tmp/pack.log" 2>&1
rc=$?
tail -1 "$tmp/pack.log" | diag
ok "$rc" "tools/gpu/pack.sh builds the archive (exit $rc)"
[ "$rc" -eq 0 ] || { tail -30 "$tmp/pack.log" | diag; echo "1..$n"; exit 1; }
size=$(stat -c %s "$archive")
[ "$size" -le $((40 * 1024 * 1024)) ]
ok $? "the archive is $size bytes, at most 40 MiB"

mkdir "$tmp/unpacked"
tar -xJf "$archive" -C "$tmp/unpacked"
ok $? "it unpacks into an empty folder"
pack=$tmp/unpacked/ferry-gpu
for p in kernel_lab bench_engine bench_transfer ferry-info memprof $(cut -f4 "$pack/tests.txt" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^bin\//) print substr($i, 5)}'); do
  [ -x "$pack/bin/$p" ]
  ok $? "bin/$p is in the pack"
done

# Where each library may come from: the pack, the C runtime, or (cuBLAS
# and cuBLASLt only) the toolkit meson linked against (nvcc on PATH may be
# a wrapper in another folder).
toolkit=$(bash "$src/tools/gpu/cuda_libdir.sh" "$build")
ok $? "the pack's build names the CUDA toolkit's library folder ($toolkit)"
crt='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
for p in "$pack"/bin/*; do
  nccl=0; [ "$(basename "$p")" = test_dp_gpu ] && nccl=1
  bad=$(LD_LIBRARY_PATH=$toolkit ldd "$p" | awk -v pack="$pack/" -v tk="$toolkit/" -v crt="$crt" -v nccl=$nccl '
    /not found/ { print "missing: " $1; next }
    /=>/ { lib = $1; path = $3 }
    !/=>/ { lib = $1; path = $1; sub(/.*\//, "", lib) }
    { if (index(path, pack) == 1) next
      if ((lib == "libcublas.so.13" || lib == "libcublasLt.so.13") && index(path, tk) == 1) next
      if (lib == "libnccl.so.2" && nccl) { found = 1; next }
      if (lib ~ crt && path !~ pack) next
      print lib " from " path }
    END { if (nccl && !found) print "libnccl.so.2 not loaded" }')
  [ -z "$bad" ]
  ok $? "$(basename "$p") loads only the pack's libraries, the C runtime and the toolkit's cuBLAS(Lt)$(
    [ $nccl = 1 ] && echo ", and NCCL")"
  [ -z "$bad" ] || echo "$bad" | diag
done
grep -q $'^dp-gpu\t[0-9]*\t1\t.*bin/test_dp_gpu cuda$' "$pack/tests.txt"
ok $? "tests.txt runs dp-gpu (test_dp_gpu cuda, built with NCCL) as a GPU test"
grep -q $'^engine-gpu-f16\t[0-9]*\t1\t.*bin/test_engine_gpu cuda f16$' "$pack/tests.txt"
ok $? "tests.txt runs the engine in fp16 (engine-gpu-f16) as a GPU test"
! ls "$pack/lib" | grep -q nccl
ok $? "NCCL is not carried in lib/ (check.sh finds it on the GPU machine)"
! grep -qF -e "$src" -e "$(realpath "$build")" -e LD_LIBRARY_PATH "$pack/tests.txt"
ok $? "tests.txt names no path of this machine (no source tree, no build folder, no LD_LIBRARY_PATH)"
grep -F -e "$src" -e "$(realpath "$build")" -e LD_LIBRARY_PATH "$pack/tests.txt" | diag

FERRY_CHECK_EXPECT=no-gpu FERRY_CHECK_DIR=$tmp/check bash "$src/tools/gpu/check.sh" "$archive" "$tmp/out" >"$tmp/check.log" 2>&1
rc=$?
ok "$rc" "tools/gpu/check.sh runs the whole check on the archive and expects no GPU (exit $rc)"
[ "$rc" -eq 0 ] || diag <"$tmp/check.log"
for name in ferry-info transfer kernel-lab-attention kernel-lab kernel-lab-f16 engine-gpt2 engine-xl capacity \
            engine-xl-none llama-1b llama-big peer-fsdp peer-torch peer-torch-compile memprof-llama goals \
            sanitize-memcheck sanitize-racecheck \
            sanitize-synccheck sanitize-initcheck $(cut -f1 "$pack/tests.txt"); do
  gpu=$(awk -F'\t' -v n="$name" '$1 == n {print $3}' "$pack/tests.txt")
  case $name in memprof-llama|goals) gpu=0 ;; esac
  if [ "${gpu:-1}" = 1 ]; then
    grep -qF "[$name]" "$tmp/out/results.txt" && grep -F "[$name]" "$tmp/out/results.txt" | grep -q 'PASS (exit 77'
    ok $? "$name ends with the clean no-GPU exit 77"
  else
    grep -F "[$name]" "$tmp/out/results.txt" | grep -q 'PASS$'
    ok $? "$name, which needs no GPU, passes"
  fi
done
grep -F '[memprof-plan]' "$tmp/out/results.txt" | grep -q 'PASS$' && grep -q 'largest batch that fits: [0-9]' "$tmp/out/results.txt"
ok $? "memprof plan gives the GPT-2 XL batch the check measures"
grep -F '[nccl]' "$tmp/out/results.txt" | grep -q 'PASS$' && grep -q '^  nccl | libnccl.so.2 in /' "$tmp/out/results.txt"
ok $? "the check finds NCCL on this machine and names its folder"
bound=$(sed -n 's/.*the check ends within \([0-9]*\)s$/\1/p' "$tmp/out/results.txt")
[ -n "$bound" ] && [ "$bound" -le 540 ]
ok $? "the check's time bound, ${bound:-none} s, is at most 540 s"
grep -q '^  memprof-llama | the largest Llama this card and [0-9]* GiB of host memory hold: [a-z]' "$tmp/out/results.txt"
ok $? "memprof plan names the largest Llama the card and the host hold: $(grep -m1 'the largest Llama' "$tmp/out/results.txt")"
grep -q '^  goals | | figure | ferry | peer | ratio | goal | verdict |$' "$tmp/out/results.txt" &&
  grep -q '^  goals | goals: 0 of [0-9]* met, [0-9]* not measured$' "$tmp/out/results.txt" &&
  ! grep -E '^  goals \| \|' "$tmp/out/results.txt" | grep -q '| PASS |'
ok $? "the goals table ends the check, and with no GPU no goal is met: every figure is not measured"
grep -F '[memprof-capacity]' "$tmp/out/results.txt" | grep -q 'PASS$' &&
  grep -q '^  memprof-capacity | largest GPT-2-shaped model that fits: d[0-9]' "$tmp/out/results.txt"
ok $? "memprof plan gives the largest model the capacity step trains: $(grep -m1 'memprof-capacity |' "$tmp/out/results.txt")"
FERRY_CHECK_BOUND=900 FERRY_CHECK_EXPECT=no-gpu FERRY_CHECK_DIR=$tmp/check bash "$src/tools/gpu/check.sh" "$archive" \
  "$tmp/out-bound" >/dev/null 2>&1
rc=$?
[ "$rc" -ne 0 ] && grep -q "FERRY_CHECK_BOUND=900: give 60 to 540 s" "$tmp/out-bound/results.txt"
ok $? "a bound past 540 s is refused before any step runs (exit $rc)"

# A machine whose NCCL is not where FERRY_CHECK_NCCL says: the nccl step
# fails, naming what to install, and so does the check. And a
# compute-sanitizer whose report has findings (a stand-in printing
# initcheck's words for two kernels, with its error exit code): every
# sanitizer step fails, naming the kernels.
mkdir "$tmp/no-nccl"
cat >"$tmp/compute-sanitizer" <<'SAN'
#!/bin/sh
log=; while [ $# -gt 0 ]; do case $1 in --log-file) log=$2; shift 2 ;; --*) shift 2 ;; *) break ;; esac; done
{ echo "========= COMPUTE-SANITIZER"
  echo "========= Uninitialized __global__ memory read of size 2 bytes"
  echo "=========     at void (anonymous namespace)::softmax_xent_kernel<__nv_bfloat16>(T1 *, float *, const int *, float, int, int, bool)+0x1d0 in /src/backend/ops/classifier.cu:45"
  echo "========= Uninitialized __global__ memory read of size 2 bytes"
  echo "=========     at softmax_xent_kernel<__nv_bfloat16>(T1 *, float *, const int *, float, int, int, bool)+0x1e0 in /src/backend/ops/classifier.cu:45"
  echo "========= ERROR SUMMARY: 2 errors"; } >"${log:-/dev/stderr}"
exit 86
SAN
chmod +x "$tmp/compute-sanitizer"
FERRY_CHECK_SANITIZER=$tmp/compute-sanitizer FERRY_CHECK_NCCL=$tmp/no-nccl FERRY_CHECK_EXPECT=no-gpu \
  FERRY_CHECK_DIR=$tmp/check bash "$src/tools/gpu/check.sh" "$archive" "$tmp/out2" >"$tmp/check2.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] && grep -F '[nccl]' "$tmp/out2/results.txt" | grep -q 'FAIL' &&
  grep -q "nccl | libnccl.so.2 is not where FERRY_CHECK_NCCL=.*pip install nvidia-nccl-cu13" "$tmp/out2/results.txt"
ok $? "with FERRY_CHECK_NCCL at a folder without NCCL, the nccl step fails and says what to install (exit $rc)"
for tool in memcheck racecheck synccheck initcheck; do
  grep -F "[sanitize-$tool]" "$tmp/out2/results.txt" | grep -q 'FAIL: exit 1' &&
    grep -q "sanitize-$tool | finding: $tool: 2 error(s) in softmax_xent_kernel<__nv_bfloat16> (2) (bin/" \
      "$tmp/out2/results.txt"
  ok $? "a $tool report with findings fails sanitize-$tool, naming the kernel"
done
grep -E "sanitize-|^\[sanitize" "$tmp/out2/results.txt" | head -8 | diag
echo "1..$n"
[ "$fails" -eq 0 ]
