#!/usr/bin/env bash
# Run HERE (a CPU machine with the CUDA toolkit and our Debian packages):
# builds ferry with CUDA for the GPU machine into build-gpu/, and copies the
# shared libraries that machine lacks (hwloc, liburing, OpenBLAS, cJSON and
# what they pull in) into build-gpu/deps, plus the list of GPU tests. Then
# carry build-gpu to the GPU machine and run tools/gpu/check.sh there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
arch=${FERRY_GPU_ARCH:-sm_90}
if [ ! -f build-gpu/build.ninja ]; then
  meson setup build-gpu -Dcuda=enabled -Dgpu_arch="$arch" -Dbuildtype=release -Ddefault_library=static
fi
ninja -C build-gpu
mkdir -p build-gpu/deps
# Everything a test binary links that is not part of glibc or the CUDA toolkit.
for exe in $(find build-gpu/tests build-gpu/tools -type f -executable); do
  ldd "$exe" 2>/dev/null | awk '/=> \// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux|libcuda|libcudart|libcublas|libcublasLt|libnccl|libstdc\+\+|libgcc_s)[.-]' |
  while read -r lib; do cp -L "$lib" build-gpu/deps/; done
# The GPU suite as "name<TAB>command", so the GPU machine needs no meson.
meson introspect --tests build-gpu | /usr/bin/python3 -c '
import json, sys, shlex
for t in json.load(sys.stdin):
    if "gpu" in t["suite"] or any(s.endswith(":gpu") for s in t["suite"]):
        print(t["name"] + "\t" + " ".join(shlex.quote(c) for c in t["cmd"]))
' > build-gpu/gpu-tests.txt
sed -i "s|$root/||g" build-gpu/gpu-tests.txt
du -sh build-gpu/deps build-gpu | cat
echo "pack: $(wc -l < build-gpu/gpu-tests.txt) GPU tests listed; carry build-gpu and run tools/gpu/check.sh"
