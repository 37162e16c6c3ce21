#!/usr/bin/env python3
"""The GPU check's one table of ferry beside its PyTorch peers: tokens/s,
MFU and batch per system and mode, and ferry's ratio to each peer, from the
outputs the check kept: bench_engine's "result" lines (each file named with
what it measured) and the peers' PEER lines (peer_torch.py, peer_fsdp.py).

  peer_table.py --ferry 'LABEL=FILE' ... --peer FILE ...

LABEL says what a bench_engine run was ("no offload, full card"; "params,
24GiB card"); a label beginning "no offload" is set beside the peers run
without offload, any other beside the offloading peer's best. Every figure
read is printed; a missing one is said ("not measured: ..."), never made up.
An output that does not exist (its step did not run) is said and left
out. Exit status: 0 (the table, however empty: the steps that measure say
what failed); 2 on a bad command line or an output that cannot be read."""
import argparse
import json
import re
import sys

RESULT = re.compile(r'^result offload (?P<mode>[^,]+), batch (?P<batch>\d+) x (?P<seq>\d+): (?P<tok>[\d.]+) tokens/s'
                    r', [\d.]+ model TFLOP/s \((?:MFU (?P<mfu>[\d.]+) of [\d.]+ TFLOP/s|MFU n/a[^)]*)\)')


MISSING = []  # the outputs that do not exist: their steps did not run


def read(path):
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            return f.read().splitlines()
    except FileNotFoundError:
        MISSING.append(path)
        return []
    except OSError as e:
        sys.stderr.write('peer_table: cannot read %s: %s\n' % (path, e.strerror))
        raise SystemExit(2)


def ferry_rows(label, lines):
    """bench_engine's result lines: one row each (the last of a mode wins:
    --confirm-max-batch prints the confirmed batch last)."""
    rows = {}
    for ln in lines:
        m = RESULT.match(ln.strip())
        if m:
            rows[m.group('mode')] = {'system': 'ferry', 'mode': '%s (%s)' % (label, m.group('mode')),
                                     'batch': int(m.group('batch')), 'tokens_per_s': float(m.group('tok')),
                                     'mfu': float(m.group('mfu')) if m.group('mfu') else None,
                                     'offload': not label.startswith('no offload')}
    return list(rows.values())


def peer_rows(lines):
    rows, skips = [], []
    for ln in lines:
        if ln.startswith('PEER '):
            r = json.loads(ln[5:])
            r['offload'] = 'offload' in r.get('mode', '') and 'no offload' not in r.get('mode', '')
            rows.append(r)
        elif ln.startswith('PEER_SKIP '):
            skips.append(ln[10:])
    return rows, skips


def fmt(x, spec):
    return 'n/a' if x is None else format(x, spec)


def table(ferry, peers, skips, out):
    out.write('| system | mode | batch | tokens/s | MFU | ferry / this |\n')
    out.write('| --- | --- | --- | --- | --- | --- |\n')
    # the peers' bests: the offloading ladder's best line, each no-offload row
    best_off = [r for r in peers if r['offload'] and r.get('best')]
    for r in ferry:
        out.write('| ferry | %s | %d | %s | %s | |\n' % (r['mode'], r['batch'], fmt(r['tokens_per_s'], '.0f'),
                                                       fmt(r['mfu'], '.3f')))
    for r in peers:
        if r['offload'] and not r.get('best'):
            continue  # the ladder's rungs: in the peer's own output
        mine = [f for f in ferry if f['offload'] == r['offload']]
        if r['offload']:
            ratio = max(mine, key=lambda f: f['tokens_per_s']) if mine else None
        else:  # the same tokens per step
            same = [f for f in mine if f['batch'] == r['batch']]
            ratio = same[0] if same else None
        extra = ', largest batch %s (%s)' % (r.get('largest_batch'), r.get('ladder')) if r.get('best') else ''
        out.write('| %s | %s%s | %d | %s | %s | %s |\n' % (
            r['system'], r['mode'], extra, r['batch'], fmt(r['tokens_per_s'], '.0f'), fmt(r.get('mfu'), '.3f'),
            '%.2fx (ferry %s)' % (ratio['tokens_per_s'] / r['tokens_per_s'], ratio['mode']) if ratio else
            'n/a: no ferry row to set beside it'))
    if not best_off and any(f['offload'] for f in ferry):
        out.write('not measured: the offloading peer (no PEER best line)\n')
    if not any(not r['offload'] for r in peers) and any(not f['offload'] for f in ferry):
        out.write('not measured: the no-offload peer (no PEER line)\n')
    if not ferry:
        out.write('not measured: ferry (no bench_engine result line)\n')
    for s in skips:
        out.write('skipped: %s\n' % s)
    for path in MISSING:
        out.write('not measured: %s does not exist (its step did not run)\n' % path)


def main(argv):
    p = argparse.ArgumentParser(prog='peer_table.py', description=__doc__.split('\n\n')[0])
    p.add_argument('--ferry', action='append', default=[], help="'LABEL=FILE': a bench_engine run's output")
    p.add_argument('--peer', action='append', default=[], help="a peer's output (PEER lines)")
    a = p.parse_args(argv)
    ferry, peers, skips = [], [], []
    for item in a.ferry:
        if '=' not in item:
            p.error("--ferry %r: 'LABEL=FILE'" % item)
        label, path = item.split('=', 1)
        ferry += ferry_rows(label, read(path))
    for path in a.peer:
        rows, s = peer_rows(read(path))
        peers += rows
        skips += s
    table(ferry, peers, skips, sys.stdout)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
