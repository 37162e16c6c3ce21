#!/usr/bin/env python3
"""The GPU check's one table: each figure that decides ferry's speed, the
peer's figure beside it where there is one, the ratio, the goal and the
verdict, read from the outputs the check kept (named by what they hold):

  goals.py [--kernel-lab FILE] [--xl-24 FILE] [--xl-none FILE] [--fsdp FILE]
           [--torch FILE] [--torch-compile FILE] [--llama-1b FILE]
           [--llama-big FILE] [--bench FILE ...]

  --kernel-lab     kernel_lab's output: attention forward >= 45% and
                   backward >= 30% of the cuBLASLt matmul ceiling
  --xl-24          bench_engine, GPT-2 XL on a 24 GiB card (optimizer, params)
  --fsdp           peer_fsdp.py on the same card: ferry's best >= 2.5x its best
  --xl-none        bench_engine, GPT-2 XL without offload: MFU >= 0.55, and
  --torch          peer_torch.py (eager) at the same batch: ferry >= 1.0x it
  --torch-compile  peer_torch.py --compile: the same ratio, reported
  --llama-1b       bench_engine, Llama 3.2 1B without offload: MFU >= 0.5
  --llama-big      bench_engine, the largest Llama on a 24 GiB card in params
                   mode with recompute: >= 0.8 of its compute bound, the
                   tokens/s that Llama 3.2 1B's MFU gives at 8 N + 16 L d T
                   flops a token (the forward twice), i.e. 4/3 x its MFU / the
                   1B's MFU
  --bench          any bench_engine output: each mode's step <= 1.10x its
                   overlap floor, max(compute, update)

A figure not measured (its step did not run, or printed no line) is said as
such, and its verdict is "not measured", never a pass. Exit status: 0 (the
steps that measure say what failed); 2 on a bad command line."""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_table as pt  # noqa: E402

TIME = re.compile(r'^time\s+(?P<op>\S+)\s+(?P<variant>\S+)\s+(?P<ms>[\d.]+) ms\s+[\d.]+ \S+\s+(?P<pct>[\d.]+)% of')
FLOOR = re.compile(r'^result offload (?P<mode>[^,]+), batch (?P<batch>\d+) x \d+: .*?; step [\d.]+ ms = '
                   r'(?P<x>[\d.]+) x max\(')
BANNER = re.compile(r'^bench_engine: (?P<model>\S+) ')

rows = []


def lines(path):
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding='utf-8', errors='replace') as f:
        return f.read().splitlines()


def row(what, ferry, peer, ratio, goal, verdict):
    rows.append((what, ferry, peer, ratio, goal, verdict))


def judged(value, goal, at_least=True):
    if value is None:
        return 'not measured'
    return 'PASS' if (value >= goal if at_least else value <= goal) else 'FAIL'


def kernel_lab(path):
    pct = {}
    for ln in lines(path):
        m = TIME.match(ln.strip())
        if m and m.group('variant') == 'production':
            pct[m.group('op')] = float(m.group('pct'))
    for op, goal in (('attention_forward', 45.0), ('attention_backward', 30.0)):
        v = pct.get(op)
        row('%s, %% of the cuBLASLt matmul ceiling' % op, 'n/a' if v is None else '%.1f%%' % v, '', '',
            '>= %.0f%%' % goal, judged(v, goal))


def results(path, label):
    return pt.ferry_rows(label, lines(path))


def best(rs):
    return max(rs, key=lambda r: r['tokens_per_s']) if rs else None


def peer_best(path, offload):
    rs, _ = pt.peer_rows(lines(path))
    rs = [r for r in rs if r['offload'] == offload and (r.get('best') or not offload)]
    return best(rs)


def ratio_row(what, mine, peer, goal):
    if mine and peer:
        x = mine['tokens_per_s'] / peer['tokens_per_s']
        row(what, '%.0f tok/s (%s, batch %d)' % (mine['tokens_per_s'], mine['mode'], mine['batch']),
            '%.0f tok/s (%s, batch %d)' % (peer['tokens_per_s'], peer.get('system', 'peer'), peer['batch']),
            '%.2fx' % x, '>= %.2fx' % goal if goal else 'reported', judged(x, goal) if goal else 'reported')
    else:
        row(what, 'n/a' if not mine else '%.0f tok/s' % mine['tokens_per_s'],
            'n/a' if not peer else '%.0f tok/s' % peer['tokens_per_s'], '', '>= %.2fx' % goal if goal else '',
            'not measured')


def mfu_row(what, r, goal):
    v = r['mfu'] if r else None
    row(what, 'n/a' if v is None else 'MFU %.3f (batch %d)' % (v, r['batch']), '', '', 'MFU >= %.2f' % goal,
        judged(v, goal))
    return v


def floors(paths):
    for path in paths:
        model = next((m.group('model') for m in map(BANNER.match, lines(path)) if m), os.path.basename(path))
        seen = {}
        for ln in lines(path):
            m = FLOOR.match(ln.strip())
            if m:
                seen[m.group('mode')] = (float(m.group('x')), int(m.group('batch')))
        for mode, (x, b) in seen.items():
            row('%s, %s (batch %d): step / overlap floor' % (model, mode, b), '%.2fx' % x, '', '', '<= 1.10x',
                judged(x, 1.10, at_least=False))


def main(argv):
    p = argparse.ArgumentParser(prog='goals.py', description=__doc__.split('\n\n')[0])
    for flag in ('kernel-lab', 'xl-24', 'xl-none', 'fsdp', 'torch', 'torch-compile', 'llama-1b', 'llama-big'):
        p.add_argument('--' + flag)
    p.add_argument('--bench', action='append', default=[])
    a = p.parse_args(argv)
    kernel_lab(a.kernel_lab)
    ratio_row('GPT-2 XL, 24 GiB card: ferry best / FSDP2-offload best', best(results(a.xl_24, '24GiB card')),
              peer_best(a.fsdp, True), 2.5)
    none = best(results(a.xl_none, 'no offload'))
    mfu_row('GPT-2 XL without offload', none, 0.55)
    for path, label, goal in ((a.torch, 'PyTorch eager', 1.0), (a.torch_compile, 'torch.compile', None)):
        peer = peer_best(path, False)
        mine = none if none and (peer is None or none['batch'] == peer['batch']) else None
        ratio_row('GPT-2 XL without offload: ferry / %s, same batch' % label, mine, peer, goal)
    small = mfu_row('Llama 3.2 1B without offload', best(results(a.llama_1b, 'no offload')), 0.5)
    big = best(results(a.llama_big, '24GiB card'))
    model = next((m.group('model') for m in map(BANNER.match, lines(a.llama_big)) if m), 'the largest Llama')
    x = 4.0 / 3.0 * big['mfu'] / small if big and big['mfu'] is not None and small else None
    row('%s, 24 GiB card, params + recompute: of its compute bound' % model,
        'n/a' if not big else '%.0f tok/s (batch %d)' % (big['tokens_per_s'], big['batch']), '',
        'n/a' if x is None else '%.2f' % x, '>= 0.80', judged(x, 0.8))
    floors([f for f in a.bench if f])
    out = sys.stdout
    out.write('| figure | ferry | peer | ratio | goal | verdict |\n| --- | --- | --- | --- | --- | --- |\n')
    for r in rows:
        out.write('| %s |\n' % ' | '.join(r))
    goals = [r for r in rows if r[4] not in ('', 'reported')]
    out.write('goals: %d of %d met, %d not measured\n' % (sum(r[5] == 'PASS' for r in goals), len(goals),
                                                        sum(r[5] == 'not measured' for r in goals)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
