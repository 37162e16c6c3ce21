#!/usr/bin/env python3
"""Builds the installed libferry.a: every layer library linked into one
relocatable object whose symbols, ferry.h's API aside, are made local.

Why one object: an archive of the layers' objects would hand an embedder's
link every internal global symbol (err_set, pool_create, arena_alloc, ...),
and a program with a function of the same name would fail to link, or
worse, call ours. Prefixing every internal symbol by hand would not stop the
next one. Linked with `ld -r` into one object, the internal calls are
resolved inside it; `objcopy --localize-hidden` then turns every hidden
symbol (the layers build with -fvisibility=hidden; only FERRY_API is
default) into a local one, invisible to the embedder's linker, exactly as
the shared library hides them. The tests and tools keep linking the layer
libraries themselves.

usage: one_object_archive.py OUT.a OBJCOPY AR --cc CC... -- LIB.a...
"""
import os
import subprocess
import sys


def main(argv):
    if len(argv) < 6 or "--cc" not in argv or "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    out, objcopy, ar = argv[1:4]
    cc = argv[argv.index("--cc") + 1:argv.index("--")]
    libs = argv[argv.index("--") + 1:]
    obj = out + ".o"
    for path in (obj, out):
        if os.path.exists(path):
            os.unlink(path)
    subprocess.run(cc + ["-r", "-nostdlib", "-o", obj, "-Wl,--whole-archive"] + libs + ["-Wl,--no-whole-archive"],
                   check=True)
    subprocess.run([objcopy, "--localize-hidden", obj], check=True)
    subprocess.run([ar, "rcsD", out, obj], check=True)
    os.unlink(obj)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
