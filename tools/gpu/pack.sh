#!/usr/bin/env bash
# tools/gpu/pack.sh: builds, HERE (a CPU machine with the CUDA toolkit and our
# Debian packages), the one archive the GPU check needs, and nothing else:
#   bin/    the gpu suite's test programs (meson introspect: suite gpu), the
#           kernel lab, bench_engine, bench_transfer, ferry-info and memprof,
#           release builds for sm_90 (H100/H200) only, stripped, with their
#           library search path set to ../lib (tools/gpu/elf_rpath.py); then
#           the gpu suite's NCCL tests (dp-gpu: data parallelism's
#           collectives at world size 1), built by the same tree reconfigured
#           with -Dnccl=enabled (still no MPI: one rank needs none), so that
#           only they load NCCL and only kernels' C files compile again;
#   lib/    every shared library they load that a bare GPU machine lacks
#           (OpenBLAS, libgfortran, hwloc, udev, the CUDA runtime, ...): all
#           but glibc, libstdc++/libgcc_s, cuBLAS/cuBLASLt and NCCL, which
#           are too big to carry (NCCL alone is 208 MiB) and which
#           tools/gpu/check.sh finds on that machine;
#   share/  the files the tests read (hf_transformers.py);
#   tests.txt  "name<TAB>seconds<TAB>needs-gpu<TAB>command", one test a line,
#              with no path of this machine (the pack fails on one);
#   MANIFEST   the commit, the date and what was built.
# The archive is xz-compressed and must stay under 40 MiB, small enough to
# copy to a GPU machine beside the source tree over any link; the script
# fails above that and always prints the true size. tools/gpu/README.md says
# how to use it there.
#
#   tools/gpu/pack.sh [--build-dir DIR] [--out FILE]
#     defaults: build-gpu/ and build-pack/ferry-gpu.tar.xz in the repository
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$root/build-gpu
out=$root/build-pack/ferry-gpu.tar.xz
limit=$((40 * 1024 * 1024))
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$(realpath -m "$2"); shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    *) echo "usage: tools/gpu/pack.sh [--build-dir DIR] [--out FILE]" >&2; exit 2 ;;
  esac
done
options=(-Dcuda=enabled -Dnccl=disabled -Dmpi=disabled -Dcudasim=disabled -Dgpu_archs=90 -Dbuildtype=release -Dwerror=true
         -Ddefault_library=static)
if [ -f "$build/build.ninja" ]; then
  meson configure "$build" "${options[@]}" >/dev/null
else
  meson setup "$build" "$root" "${options[@]}" >/dev/null
fi
# meson configure leaves the regeneration to the next ninja: regenerate now,
# so that the introspection below sees these options and the tree's tests.
ninja -C "$build" build.ninja >/dev/null

# list [SKIP-NAMES]: what goes in, one JSON object a line: the gpu suite's
# tests (needs_gpu: in no other suite) and the tools check.sh runs, but
# those named in SKIP-NAMES (a comma list).
list() {
  meson introspect --tests --targets "$build" | /usr/bin/python3 -c '
import json, sys
info, skip = json.load(sys.stdin), sys.argv[1].split(",")
for t in info["tests"]:
    suites = [s.split(":")[-1] for s in t["suite"]]
    if "gpu" in suites and t["name"] not in skip:
        # Not the source tree, nor the library search path meson adds for
        # programs linked with shared libraries of the build (the programs
        # in the pack find lib/ through their own search path): no path of
        # this machine travels.
        env = [k + "=" + v for k, v in sorted(t["env"].items()) if k not in ("FERRY_SOURCE_ROOT", "LD_LIBRARY_PATH")]
        print(json.dumps({"name": t["name"], "needs_gpu": int(set(suites) == {"gpu"}),
                          "timeout": t["timeout"], "env": env, "cmd": t["cmd"]}))
tools = ("kernel_lab", "bench_engine", "bench_transfer", "ferry-info", "memprof")
for t in info["targets"]:
    if t["type"] == "executable" and t["name"] in tools and t["name"] not in skip:
        print(json.dumps({"name": t["name"], "tool": 1, "cmd": [t["filename"][0]]}))
' "${1:-}"
}
# programs LIST: the build's files that LIST runs, relative to the build.
programs() {
  printf '%s\n' "$1" | /usr/bin/python3 -c '
import json, os, sys
for line in sys.stdin:
    if line.strip():
        print(os.path.relpath(json.loads(line)["cmd"][0], sys.argv[1]))
' "$build" | sort -u
}

stage=$build/pack-stage
rm -rf "$stage"
mkdir -p "$stage/ferry-gpu/bin" "$stage/ferry-gpu/lib" "$stage/ferry-gpu/share"
pack=$stage/ferry-gpu
# install LIST: builds LIST's programs, copies them into bin/, stripped, with
# ../lib as their library search path.
install_programs() {
  local p progs
  progs=$(programs "$1")
  # shellcheck disable=SC2086
  ninja -C "$build" $progs
  for p in $progs; do
    install -m 755 "$build/$p" "$pack/bin/"
    strip --strip-unneeded "$pack/bin/$(basename "$p")"
    /usr/bin/python3 "$root/tools/gpu/elf_rpath.py" '$ORIGIN/../lib' "$pack/bin/$(basename "$p")" >/dev/null
  done
}
list=$(list)
install_programs "$list"
# The NCCL tests: the same tree with NCCL (the toolkit's; no MPI), which
# recompiles kernels' C files and relinks, never a .cu (backend/meson.build
# keeps NCCL's define out of them). The next run turns it off again first.
meson configure "$build" -Dnccl=enabled >/dev/null
ninja -C "$build" build.ninja >/dev/null
nccl_list=$(list "$(printf '%s\n' "$list" | /usr/bin/python3 -c '
import json, sys
print(",".join(json.loads(l)["name"] for l in sys.stdin if l.strip()))')")
if [ -z "$nccl_list" ]; then
  echo "pack: FAILED: the build with -Dnccl=enabled registers no test in suite gpu beyond the others (dp-gpu)" >&2
  exit 1
fi
install_programs "$nccl_list"
list=$(printf '%s\n%s\n' "$list" "$nccl_list")

# The libraries the programs load, resolved here (the CUDA toolkit's from
# the folder meson linked them from), minus what every GPU machine has:
# glibc, the C++ runtime, the driver, cuBLAS(Lt) and NCCL. One that does not
# resolve here would be missing there: that fails the pack.
base='/(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libnccl)\.so'
cuda_libdir=$(bash "$root/tools/gpu/cuda_libdir.sh" "$build")
for p in "$pack"/bin/*; do
  # The build folder too: the embedding example loads libferry.so itself.
  LD_LIBRARY_PATH=$cuda_libdir:$build ldd "$p" >"$stage/ldd.txt"
  if grep -q 'not found' "$stage/ldd.txt"; then
    echo "pack: FAILED: $(basename "$p") loads a library that is not found here:" >&2
    grep 'not found' "$stage/ldd.txt" >&2
    exit 1
  fi
  awk '/=> \// {print $3}' "$stage/ldd.txt"
done | sort -u | grep -vE "$base" | while read -r lib; do
  install -m 644 "$(readlink -f "$lib")" "$pack/lib/$(basename "$lib")"
done
# libferry.so (the embedding example's) searches its own folder for what it
# loads, not the build machine's paths its RUNPATH names.
if [ -e "$pack/lib/libferry.so.0" ]; then
  /usr/bin/python3 "$root/tools/gpu/elf_rpath.py" '$ORIGIN' "$pack/lib/libferry.so.0" >/dev/null
fi

# tests.txt: commands relative to the pack root, the program from bin/ and
# any file the test reads copied to share/.
printf '%s\n' "$list" | /usr/bin/python3 -c '
import json, os, shutil, sys
pack = sys.argv[1]
with open(os.path.join(pack, "tests.txt"), "w") as out:
    for line in sys.stdin:
        t = json.loads(line)
        if t.get("tool"):
            continue
        words = list(t["env"]) + ["bin/" + os.path.basename(t["cmd"][0])]
        for w in t["cmd"][1:]:
            if os.path.isabs(w) and os.path.isfile(w):
                shutil.copy(w, os.path.join(pack, "share", os.path.basename(w)))
                w = "share/" + os.path.basename(w)
            words.append(w)
        here = [w for w in words if any(d in w for d in sys.argv[2:])]
        if here:
            sys.exit("pack: FAILED: test %s names paths of this machine (%s): a GPU machine has none of them"
                     % (t["name"], " ".join(here)))
        out.write("%s\t%d\t%d\t%s\n" % (t["name"], t["timeout"], t["needs_gpu"], " ".join(words)))
' "$pack" "$root" "$build"

{
  echo "ferry GPU pack"
  echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version | head -1)"
  echo "needs at least: $(objdump -T "$pack"/bin/* "$pack"/lib/* | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)," \
    "$(objdump -T "$pack"/bin/* "$pack"/lib/* | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1), an NVIDIA driver for CUDA 13"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "options: ${options[*]}; then -Dnccl=enabled for $(printf '%s\n' "$nccl_list" | /usr/bin/python3 -c '
import json, sys
print(" ".join(json.loads(l)["name"] for l in sys.stdin if l.strip()))')"
  echo "programs: $(cd "$pack/bin" && echo *)"
  echo "libraries: $(cd "$pack/lib" && echo *)"
} >"$pack/MANIFEST"

mkdir -p "$(dirname "$out")"
# Each test program carries libferry and its sm_90 code (9 MiB) statically:
# the archive is small only where the dictionary reaches the previous
# program. xz -9 (64 MiB, one block of 192 MiB, so one thread) took 68 s
# for 161 MiB and gave 9.6 MB; level 1 with a dictionary of 192 MiB gives
# 10.7 MB in 9 s (1.3 GB of memory to pack, 192 MiB to unpack).
tar -C "$stage" -cf - ferry-gpu | xz -T2 --lzma2=preset=1,dict=192MiB >"$out.tmp"
mv "$out.tmp" "$out"
size=$(stat -c %s "$out")
printf 'pack: %s: %d bytes (%.1f MiB); %d programs, %d libraries, %d tests; limit 40 MiB\n' "$out" "$size" \
  "$(awk -v s="$size" 'BEGIN { print s / 1048576 }')" "$(ls "$pack/bin" | wc -l)" "$(ls "$pack/lib" | wc -l)" \
  "$(wc -l <"$pack/tests.txt")"
if [ "$size" -gt "$limit" ]; then
  echo "pack: FAILED: the archive is over 40 MiB; it must travel with the source tree in 64 MiB" >&2
  exit 1
fi
