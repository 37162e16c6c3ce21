#!/usr/bin/env python3
"""The attention kernels' inner loop, instruction by instruction class, from
their machine code (SASS): how much of the loop the tensor cores do.

Reads the text `cuobjdump -sass` prints for a cubin (any number of files,
each named ...sm_ARCH...), and for each kernel whose name matches --kernel
finds its inner loop: of the backward branches (a BRA to a lower address,
the loop's body being the target up to the branch) whose body holds a
tensor-core instruction and no other such loop, the one with the most of
them, the shortest on a tie. It counts
the body's instructions by class:
  - mma:      tensor-core matrix multiply-accumulate (HMMA, HGMMA, IMMA, BMMA)
  - ldmatrix: shared-memory fragment loads (LDSM)
  - cp.async: global-to-shared asynchronous copies (LDGSTS, and Hopper's
              UBLKCP/UTMALDG bulk copies)
  - rest:     everything else (arithmetic, softmax's exponentials, plain
              shared and global loads and stores, address math, barriers)
and prints a markdown table: kernel, card, loop length, each class and the
tensor-core share (mma / all). A loop with no tensor-core instruction at
all in a kernel that asked for one is a failure (exit 1): the compiler, or
a guard, turned the tensor cores off. Exit 2 on a bad command line or a
file with no kernel matching.

usage: sass_report.py --kernel REGEX SASS_FILE...
"""
import argparse
import re
import subprocess
import sys

FUNC = re.compile(r'^\s*Function : (\S+)')
INSN = re.compile(r'^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?\s*([^;]*);')
BRA_TARGET = re.compile(r'0x([0-9a-f]+)')
MMA = ('HMMA', 'HGMMA', 'IMMA', 'BMMA', 'DMMA')
LDSM = ('LDSM',)
ASYNC = ('LDGSTS', 'UBLKCP', 'UTMALDG')


def demangle(names):
    try:
        out = subprocess.run(['c++filt'], input='\n'.join(names), capture_output=True, text=True, check=True).stdout
        return dict(zip(names, out.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def read_sass(path):
    """{mangled name: [(address, opcode, operands)]}"""
    funcs, cur = {}, None
    with open(path, encoding='utf-8', errors='replace') as f:
        for line in f:
            m = FUNC.match(line)
            if m:
                cur = funcs.setdefault(m.group(1), [])
                continue
            m = INSN.match(line)
            if m and cur is not None:
                cur.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs


def classify(op):
    if op in MMA:
        return 'mma'
    if op in LDSM:
        return 'ldmatrix'
    if op in ASYNC:
        return 'cp.async'
    return 'rest'


def inner_loop(insns):
    """(start, end, counts) of the inner loop: of the loops holding a
    tensor-core instruction and no such loop inside them, the one with the
    most; the shortest on a tie. None without one."""
    loops = []
    for addr, op, args in insns:
        t = BRA_TARGET.search(args) if op == 'BRA' else None
        if not t or int(t.group(1), 16) >= addr:
            continue
        lo = int(t.group(1), 16)
        counts = {'mma': 0, 'ldmatrix': 0, 'cp.async': 0, 'rest': 0}
        for a, o, _ in insns:
            if lo <= a <= addr:
                counts[classify(o)] += 1
        if counts['mma']:
            loops.append((lo, addr, counts))
    inner = [L for L in loops if not any(M is not L and L[0] <= M[0] and M[1] <= L[1] for M in loops)]
    return min(inner, key=lambda L: (-L[2]['mma'], L[1] - L[0]), default=None)


def arch_of(path):
    m = re.search(r'sm_(\d+)', path)
    return int(m.group(1)) if m else 0


def main(argv):
    p = argparse.ArgumentParser(prog='sass_report.py', description=__doc__.split('\n\n')[0])
    p.add_argument('--kernel', required=True, help='regex over the demangled kernel names')
    p.add_argument('files', nargs='+')
    a = p.parse_args(argv)
    rows, fails = [], []
    for path in a.files:
        funcs = read_sass(path)
        names = demangle(list(funcs))
        for mangled, insns in sorted(funcs.items(), key=lambda kv: names[kv[0]]):
            name = re.sub(r'^(void )?(\(anonymous namespace\)::)?', '', names[mangled]).split('(')[0]
            if not re.search(a.kernel, name) or len(insns) < 32:  # a trap stub compiled for another card
                continue
            loop = inner_loop(insns)
            if loop is None:
                fails.append('%s on sm_%d: no loop with a tensor-core instruction (%d instructions in all)' %
                             (name, arch_of(path), len(insns)))
                continue
            lo, hi, c = loop
            n = sum(c.values())
            rows.append((name, arch_of(path), n, c, c['mma'] / n))
    if not rows and not fails:
        sys.stderr.write('sass_report: no kernel matching %r in %s\n' % (a.kernel, ' '.join(a.files)))
        return 2
    print('| kernel | card | inner loop | mma | ldmatrix | cp.async | rest | tensor-core share |')
    print('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |')
    for name, arch, n, c, share in rows:
        print('| %s | sm_%d | %d | %d | %d | %d | %d | %.1f%% |' % (name, arch, n, c['mma'], c['ldmatrix'],
                                                                c['cp.async'], c['rest'], 100 * share))
    for f in fails:
        print('sass_report: FAIL: ' + f)
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
