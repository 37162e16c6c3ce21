#!/usr/bin/env python3
"""The kernels a compute-sanitizer report names, most often named first:
`kernel (count), ...` on one line, from the frames of its findings
("at KERNEL(args)+0xOFFSET in FILE:LINE", "Race reported between Write
access at KERNEL+0x..."); the arguments, return type and namespaces are
dropped, the template arguments kept. Used by tools/gpu/check.sh to name the
kernels of a sanitizer step's findings. Prints nothing for a report without
a frame.

usage: sanitizer_kernels.py REPORT
"""
import collections
import re
import sys


def kernel_of(frame):
    """'void ns::k<T, 2>(T *, int)' -> 'k<T, 2>'."""
    frame = frame.replace("(anonymous namespace)::", "")
    depth, name_end = 0, len(frame)
    for i, ch in enumerate(frame):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            name_end = i
            break
    name = frame[:name_end].strip()
    # the last word outside template brackets: drop a return type and namespaces
    depth, start = 0, 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0 and (ch == " " or (ch == ":" and name[i - 1:i] == ":")):
            start = i + 1
    return name[start:]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    counts = collections.Counter()
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.startswith("="):
                continue
            for m in re.finditer(r"\bat (?:0x[0-9a-f]+ in )?(.+?)\+0x[0-9a-f]+", line):
                k = kernel_of(m.group(1))
                if k:
                    counts[k] += 1
    print(", ".join("%s (%d)" % (k, n) for k, n in counts.most_common(8)))


if __name__ == "__main__":
    main()
