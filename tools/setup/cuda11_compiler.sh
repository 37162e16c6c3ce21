#!/usr/bin/env bash
# tools/setup/cuda11_compiler.sh: CUDA 11.8's compiler and headers for Volta
# (sm_70), which CUDA 13 no longer compiles. Fetches Debian 12's non-free
# nvidia-cuda-toolkit, nvidia-cuda-dev (of which only the headers, the
# runtime's static parts and cuBLAS(Lt)'s link stubs are kept), libnvvm4
# and libcudart11.0 with `apt-get download`, through an apt state of its own
# (the non-free component of bookworm, Debian's archive key): nothing is
# installed and the system's sources are left as they are. Unpacks them with
# dpkg-deb into build-deps/cuda-11.8 as a toolkit folder (bin/ with our own
# relocatable nvcc.profile, include/, lib64/, nvvm/libdevice), then picks
# the host compiler CUDA 11.8 accepts: g++-12 is refused by its
# host_config.h (it takes gcc up to 11), clang-14 is accepted, with no
# -allow-unsupported-compiler. Writes the choice to host-compiler, a meson
# native file (native.ini: nvcc with -ccbin) and the package version to
# .complete; a second run with them present does nothing.
# tools/build/compile_kernels.sh builds the library with it. Under a minute
# and 860 MB of downloads the first time (nvidia-cuda-dev is 774 MB: what
# is kept of it is 17 MB); 190 MB stay on disk.
#
# lib64/ holds cuBLAS and cuBLASLt as NVIDIA's link stubs: enough to link
# libferry, not to run it. To run a Volta build, the machine needs CUDA
# 11.8's libcublas.so.11 and libcublasLt.so.11 (Debian 12's non-free
# libcublas11 and libcublaslt11, or NVIDIA's CUDA 11.8).
#
#   tools/setup/cuda11_compiler.sh [DEST]      (default build-deps/cuda-11.8)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest=$(realpath -m "${1:-$root/build-deps/cuda-11.8}")
packages=(nvidia-cuda-toolkit nvidia-cuda-dev libnvvm4 libcudart11.0)
if [ -f "$dest/.complete" ] && [ -f "$dest/host-compiler" ] && [ -f "$dest/native.ini" ]; then
  echo "cuda11: CUDA $(cat "$dest/.complete") in $dest, host compiler $(cat "$dest/host-compiler") (already here)"
  exit 0
fi
for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "cuda11: $tool is missing: this script needs Debian's apt and dpkg" >&2; exit 1; }
done
key=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$key" ] || { echo "cuda11: $key is missing: install debian-archive-keyring" >&2; exit 1; }

work=$dest.fetch
rm -rf "$work" "$dest"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/x"
trap 'rm -rf "$work"' EXIT
echo "deb [signed-by=$key] http://deb.debian.org/debian bookworm non-free" >"$work/sources.list"
apt=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
     -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o Debug::NoLocking=1
     -o APT::Sandbox::User=root)
apt-get "${apt[@]}" -q update >"$work/apt.log" 2>&1 ||
  { tail -5 "$work/apt.log" >&2; echo "cuda11: apt-get update of bookworm non-free failed (above)" >&2; exit 1; }
(cd "$work/debs" && apt-get "${apt[@]}" -q download "${packages[@]}" >>"$work/apt.log" 2>&1) ||
  { tail -5 "$work/apt.log" >&2; echo "cuda11: apt-get download ${packages[*]} failed (above)" >&2; exit 1; }
version=$(dpkg-deb -f "$work"/debs/nvidia-cuda-toolkit_*.deb Version)

x=$work/x
dpkg-deb -x "$work"/debs/nvidia-cuda-toolkit_*.deb "$x"
dpkg-deb -x "$work"/debs/libnvvm4_*.deb "$x"
dpkg-deb -x "$work"/debs/libcudart11.0_*.deb "$x"
# Of the 2.8 GB nvidia-cuda-dev: the headers, the runtime's link name and
# static parts (nvcc links them into a program), cuBLAS(Lt)'s link stubs.
lib=./usr/lib/x86_64-linux-gnu
dpkg-deb --fsys-tarfile "$work"/debs/nvidia-cuda-dev_*.deb |
  tar -x -C "$x" --wildcards './usr/include/*' "$lib/libcudart.so" "$lib/libcudart_static.a" "$lib/libcudadevrt.a" \
    "$lib/stubs/libcublas.so" "$lib/stubs/libcublasLt.so"

mkdir -p "$dest/bin" "$dest/lib64" "$dest/nvvm"
for b in bin2c cu++filt cudafe++ cuobjdump fatbinary nvdisasm nvlink nvprune ptxas; do
  cp -p "$x/usr/bin/$b" "$dest/bin/"
done
# usr/bin/nvcc is Debian's two-line wrapper; the driver itself, cicc and the
# link stubs are here.
cp -p "$x/usr/lib/nvidia-cuda-toolkit/bin/nvcc" "$x/usr/lib/nvidia-cuda-toolkit/bin/cicc" "$dest/bin/"
cp -a "$x/usr/lib/nvidia-cuda-toolkit/bin/crt" "$dest/bin/"
cp -a "$x/usr/lib/nvidia-cuda-toolkit/libdevice" "$dest/nvvm/"
cp -a "$x/usr/include" "$dest/include"
cp -a "$x"/usr/lib/x86_64-linux-gnu/libnvvm.so* "$x"/usr/lib/x86_64-linux-gnu/libcudart* \
  "$x"/usr/lib/x86_64-linux-gnu/libcudadevrt.a "$x"/usr/lib/x86_64-linux-gnu/stubs/libcublas*.so "$dest/lib64/"
# Debian's profile names /usr paths; this one names the folder it is in, as
# NVIDIA's own toolkit does.
cat >"$dest/bin/nvcc.profile" <<'EOF'
TOP                = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH   += $(TOP)/lib64:
PATH              += $(_HERE_):
INCLUDES          +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES          =+ $(_SPACE_) "-L$(TOP)/lib64"
CUDAFE_FLAGS      +=
PTXAS_FLAGS       +=
EOF

# The host compiler: the first CUDA 11.8 accepts, tried on a kernel for sm_70.
printf '__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n' >"$work/probe.cu"
host=""
for cxx in g++-12 clang-14; do
  command -v "$cxx" >/dev/null || continue
  if "$dest/bin/nvcc" -ccbin "$cxx" -gencode arch=compute_70,code=sm_70 -c "$work/probe.cu" -o "$work/probe.o" \
      >"$work/probe-$cxx.log" 2>&1; then
    host=$cxx
    break
  fi
  echo "cuda11: $cxx refused: $(grep -m1 -i 'error' "$work/probe-$cxx.log" || tail -1 "$work/probe-$cxx.log")"
done
if [ -z "$host" ]; then
  echo "cuda11: no host compiler CUDA 11.8 accepts (gcc up to 11, clang up to 14): install clang-14" >&2
  exit 1
fi
echo "$host" >"$dest/host-compiler"
printf "[binaries]\ncuda = ['%s', '-ccbin', '%s']\n" "$dest/bin/nvcc" "$host" >"$dest/native.ini"
echo "$version" >"$dest/.complete"
echo "cuda11: CUDA $version in $dest ($(du -sm "$dest" | cut -f1) MiB), host compiler $host"
