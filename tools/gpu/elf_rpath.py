#!/usr/bin/env python3
# tools/gpu/elf_rpath.py: points an ELF program's library search path at the
# GPU pack's own lib/ folder, in place, so that the pack runs with no
# LD_LIBRARY_PATH of ours (a python that the program starts must not load our
# OpenBLAS or CUDA runtime). pack.sh calls it; it owns nothing else.
#
# The program's DT_RUNPATH string (meson's build path, e.g.
# "/usr/lib/x86_64-linux-gnu/openblas-pthread:/usr/local/cuda/lib64") is
# overwritten with the new one, padded with NULs (so the new one may not be
# longer), and the entry becomes DT_RPATH: the loader searches DT_RPATH
# before LD_LIBRARY_PATH, and also for the dependencies of the program's
# libraries (libopenblas -> libgfortran), which DT_RUNPATH does not do.
#
# Usage: elf_rpath.py SEARCH_PATH FILE...   (SEARCH_PATH such as '$ORIGIN/../lib')
# Exit 1, naming the file, for anything but a little-endian ELF64 with
# exactly one DT_RUNPATH or DT_RPATH entry long enough to hold SEARCH_PATH.
import struct
import sys

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 5, 15, 29


def segments(data):
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        yield p_type, p_offset, p_vaddr, p_filesz


def file_offset(data, vaddr):
    for p_type, off, va, size in segments(data):
        if p_type == PT_LOAD and va <= vaddr < va + size:
            return off + (vaddr - va)
    raise ValueError("address 0x%x is in no loaded segment" % vaddr)


def dynamic_entries(data):
    dyn = [(off, size) for t, off, _va, size in segments(data) if t == PT_DYNAMIC]
    if len(dyn) != 1:
        raise ValueError("no (single) dynamic section: a static program?")
    off, size = dyn[0]
    for at in range(off, off + size, 16):
        tag, val = struct.unpack_from("<qQ", data, at)
        if tag == DT_NULL:
            return
        yield at, tag, val


def set_search_path(path, new):
    data = bytearray(open(path, "rb").read())
    entries = list(dynamic_entries(data))
    strtab = [val for _at, tag, val in entries if tag == DT_STRTAB]
    paths = [(at, val) for at, tag, val in entries if tag in (DT_RPATH, DT_RUNPATH)]
    if len(strtab) != 1 or len(paths) != 1:
        raise ValueError("%d string tables and %d search-path entries; want one of each" % (len(strtab), len(paths)))
    at, name = paths[0]
    start = file_offset(data, strtab[0]) + name
    end = data.index(b"\0", start)
    old = bytes(data[start:end])
    encoded = new.encode()
    if len(encoded) > len(old):
        raise ValueError("the new search path (%d bytes) is longer than the old '%s'" % (len(encoded), old.decode()))
    data[start:end] = encoded + b"\0" * (len(old) - len(encoded))
    struct.pack_into("<q", data, at, DT_RPATH)
    open(path, "wb").write(data)
    return old.decode()


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: elf_rpath.py SEARCH_PATH FILE...")
    for path in sys.argv[2:]:
        try:
            old = set_search_path(path, sys.argv[1])
        except (OSError, ValueError) as e:
            sys.exit("elf_rpath.py: %s: %s" % (path, e))
        print("%s: search path '%s' -> '%s' (DT_RPATH)" % (path, old, sys.argv[1]))


if __name__ == "__main__":
    main()
