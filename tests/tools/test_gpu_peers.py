#!/usr/bin/env python3
"""The GPU check's PyTorch peers and their table (tools/gpu/peer_*.py), as
far as a machine without a GPU can take them (TAP):
  - peer_common: sizes as ferry's programs read them, the batch list, the
    flops a token costs (bench_engine's count, by hand for GPT-2 XL), the
    ladder stopping at the first out-of-memory, at its deadline, and passing
    any other error on;
  - peer_table: bench_engine's own "result" lines (a real run on the host
    backend) read back with their tokens/s and MFU, and set beside PEER
    lines with the ratio worked out by hand;
  - goals: the check's one table of figures, peers, ratios and goals, on
    outputs written here, each verdict worked out by hand;
  - the peers themselves with the Python that has torch (Debian's 1.13 here):
    a bad command line is exit 2, --device cuda without a GPU exit 77, and a
    dry run on the CPU at --model tiny trains (its first loss is ln V, what a
    freshly initialised GPT-2 gives) and prints figures that agree with
    themselves; the FSDP ladder runs each batch and reports the best; torch
    without torch.compile skips that row saying so.
What this cannot prove: speed, FSDP2's sharding and CPU offload (torch 1.13
has neither fully_shard nor a CPU-fused AdamW; on the CPU the FSDP peer runs
its ladder without FSDP), transformers' model (not installed here: the
peers' built-in GPT-2 runs), torch.compile, and out-of-memory on a card.
  usage: test_gpu_peers.py BENCH_ENGINE PYTHON_WITH_TORCH"""
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
GPU = os.path.join(ROOT, 'tools', 'gpu')
sys.path.insert(0, GPU)
import peer_common as pc  # noqa: E402
import peer_table as pt  # noqa: E402

n = 0
failed = 0


def ok(cond, what, diag=None):
    global n, failed
    n += 1
    failed += not cond
    print('%s %d - %s' % ('ok' if cond else 'not ok', n, what))
    if not cond and diag:
        for line in str(diag).splitlines()[-12:]:
            print('#   ' + line)
    sys.stdout.flush()


def skip(what, why):
    global n
    n += 1
    print('ok %d # SKIP %s: %s' % (n, what, why))


def run(cmd, timeout=600):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS='1', OMP_NUM_THREADS='1'))
    return p.returncode, p.stdout


def peers(out):
    return [json.loads(ln[5:]) for ln in out.splitlines() if ln.startswith('PEER ')]


def test_common():
    ok(pc.parse_size('24GiB') == 24 << 30 and pc.parse_size('24GB') == 24 * 10 ** 9,
       'sizes: 24GiB is 24 x 2^30 bytes, 24GB 24 x 10^9')
    for bad in ('24G', '24', '-1GiB', 'GiB'):
        try:
            pc.parse_size(bad)
            ok(False, 'size %r refused' % bad)
        except ValueError as e:
            ok('24GiB' in str(e), 'size %r refused, saying what is taken' % bad, e)
    ok(pc.parse_batches('8,16,24') == [8, 16, 24], 'the ladder 8,16,24 reads as three batches')
    for bad in ('16,8', '0,8', '8,x', ''):
        try:
            pc.parse_batches(bad)
            ok(False, 'ladder %r refused' % bad)
        except ValueError:
            ok(True, 'ladder %r refused' % bad)
    # GPT-2 XL (transformers' count, tied embedding): 6 N + 12 L C T by hand
    got = pc.flops_per_token(1557611200, 48, 1600, 1024)
    ok(got == 9345667200 + 943718400, 'flops a token: 6 N + 12 L C T = 10,289,385,600 for GPT-2 XL (%r)' % got)


class FakeOOM(Exception):
    pass


def test_ladder():
    ran = []

    def try_batch(b):
        if b >= 32:
            raise FakeOOM()
        ran.append(b)
        return {'batch': b}

    res, largest, stopped = pc.ladder([8, 16, 24, 32, 48], try_batch, lambda e: isinstance(e, FakeOOM))
    ok(ran == [8, 16, 24] and largest == 24 and stopped == 'oom at 32' and len(res) == 3,
       'the ladder stops at the first batch out of memory (32): largest 24, never tries 48',
       (ran, largest, stopped))
    clock = iter([0, 5, 11, 20]).__next__
    res, largest, stopped = pc.ladder([1, 2, 3, 4], lambda b: b, lambda e: False, deadline=10, clock=clock)
    ok(res == [1, 2] and largest == 2 and stopped == 'time', 'the ladder starts no batch past its deadline',
       (res, largest, stopped))
    try:
        pc.ladder([1], lambda b: 1 / 0, lambda e: False)
        ok(False, 'an error that is not out of memory is passed on')
    except ZeroDivisionError:
        ok(True, 'an error that is not out of memory is passed on')


def test_table(bench):
    with tempfile.TemporaryDirectory() as d:
        files = {}
        for label, mode in (('no offload, full card', 'none'), ('optimizer, 24GiB card', 'optimizer')):
            rc, out = run([bench, '--backend', 'host', '--model', 'd1', '--batch', '2', '--seq', '32', '--steps',
                           '1', '--warmup', '0', '--modes', mode, '--threads', '1', '--peak-tflops', '0.5'])
            ok(rc == 0, 'bench_engine on the host backend, mode %s, runs' % mode, out)
            files[label] = os.path.join(d, mode + '.out')
            with open(files[label], 'w') as f:
                f.write(out)
        rows = {lab: pt.ferry_rows(lab, pt.read(path)) for lab, path in files.items()}
        none = rows['no offload, full card']
        line = [ln for ln in pt.read(files['no offload, full card']) if ln.startswith('result offload')]
        ok(len(none) == 1 and len(line) == 1 and none[0]['batch'] == 2 and
           ('%.0f tokens/s' % none[0]['tokens_per_s']) in line[0] and none[0]['mfu'] is not None and
           ('MFU %.3f' % none[0]['mfu']) in line[0] and not none[0]['offload'],
           "bench_engine's result line read back: batch, tokens/s and MFU as it printed them", (none, line))
        opt = rows['optimizer, 24GiB card']
        ok(len(opt) == 1 and opt[0]['offload'], 'a label not starting "no offload" is an offloading row', opt)
        # peers at 1/1.25 and 1/2.5 of ferry's speed: the table must say 1.25x and 2.50x
        peer = os.path.join(d, 'peers.out')
        with open(peer, 'w') as f:
            pc.emit({'system': 'pytorch', 'mode': 'no offload', 'batch': 2, 'tokens_per_s':
                     none[0]['tokens_per_s'] / 1.25, 'mfu': 0.1}, f)
            pc.emit({'system': 'pytorch', 'mode': 'FSDP2 CPU offload, 24GiB card, checkpointing', 'batch': 8,
                     'tokens_per_s': opt[0]['tokens_per_s'] / 2.5, 'mfu': 0.05, 'best': True,
                     'largest_batch': 8, 'ladder': 'oom at 16'}, f)
            f.write('PEER_SKIP torch.compile: not compiled and warm within --time-limit 100 s\n')
        rc, out = run([sys.executable, os.path.join(GPU, 'peer_table.py'), '--ferry',
                       'no offload, full card=' + files['no offload, full card'], '--ferry',
                       'optimizer, 24GiB card=' + files['optimizer, 24GiB card'], '--peer', peer])
        ok(rc == 0 and '| 1.25x (ferry no offload, full card (none))' in out,
           'ferry without offload against the peer without offload at the same batch: 1.25x', out)
        ok('| 2.50x (ferry optimizer, 24GiB card (optimizer))' in out and 'largest batch 8 (oom at 16)' in out,
           "ferry's best offloading row against the offloading peer's best: 2.50x, its largest batch said", out)
        ok('skipped: torch.compile: not compiled' in out, 'a peer row given up is said, not left out', out)
        rc, out = run([sys.executable, os.path.join(GPU, 'peer_table.py'), '--ferry', 'x=' + d])
        ok(rc == 2 and 'cannot read' in out, 'an output that cannot be read (a folder) is exit 2, saying so', out)
        rc, out = run([sys.executable, os.path.join(GPU, 'peer_table.py'), '--ferry', 'x=' + d + '/none.missing',
                       '--peer', peer])
        ok(rc == 0 and 'none.missing does not exist (its step did not run)' in out,
           "a step's output that does not exist is said and left out", out)
        rc, out = run([sys.executable, os.path.join(GPU, 'peer_table.py'), '--peer', peer])
        ok(rc == 0 and 'n/a: no ferry row' in out and 'not measured: ferry' in out,
           'without ferry rows the table says what is missing and makes up no ratio', out)


def test_peers(python):
    rc, out = run([python, '-c', 'import torch; print(torch.__version__, torch.cuda.is_available())'])
    if rc != 0:
        for what in ('the peers with torch',):
            skip(what, '%s cannot import torch' % python)
        return
    version, cuda = out.split()
    rc, out = run([python, os.path.join(GPU, 'peer_fsdp.py'), '--card', '24G'])
    ok(rc == 2 and 'ambiguous' in out, 'peer_fsdp --card 24G: exit 2, the unit is ambiguous', out)
    rc, out = run([python, os.path.join(GPU, 'peer_torch.py'), '--batch', '0'])
    ok(rc == 2 and '--batch' in out, 'peer_torch --batch 0: exit 2', out)
    if cuda == 'False':
        for script in ('peer_torch.py', 'peer_fsdp.py'):
            rc, out = run([python, os.path.join(GPU, script), '--model', 'tiny'])
            ok(rc == 77 and 'no GPU' in out, '%s on cuda without a GPU: exit 77, saying so' % script, out)
    else:
        skip('exit 77 without a GPU', 'torch %s sees a GPU here' % version)
    rc, out = run([python, os.path.join(GPU, 'peer_torch.py'), '--device', 'cpu', '--model', 'tiny', '--batch', '2',
                   '--seq', '32', '--steps', '2', '--warmup', '1', '--peak-tflops', '1'])
    rows = peers(out)
    ok(rc == 0 and len(rows) == 1, 'peer_torch dry run on the CPU (torch %s, --model tiny): one PEER line' % version,
       out)
    if rows:
        r = rows[0]
        ok(abs(r['loss'] - math.log(pc.VOCAB)) < 0.5,
           'it trains a freshly initialised GPT-2: loss %.3f within 0.5 of ln 50257 = %.3f' %
           (r['loss'], math.log(pc.VOCAB)), r)
        ok(abs(r['tokens_per_s'] - 2 * 32 / (r['step_ms'] / 1e3)) <= 0.01 * r['tokens_per_s'] and
           r['batch'] == 2 and r['seq'] == 32,
           'its tokens/s is batch x seq over the step time it reports', r)
        want_mfu = r['tokens_per_s'] * pc.flops_per_token(r['params'], 2, 64, 32) / 1e12 / 1.0
        ok(r['mfu'] is not None and abs(r['mfu'] - want_mfu) <= 1e-4 + 0.01 * want_mfu,
           'its MFU is the model flops of its tokens/s over --peak-tflops', r)
    rc, out = run([python, os.path.join(GPU, 'peer_fsdp.py'), '--device', 'cpu', '--model', 'tiny', '--seq', '32',
                   '--batches', '1,2,3', '--steps', '1', '--warmup', '0'])
    rows = peers(out)
    best = [r for r in rows if r.get('best')]
    ok(rc == 0 and [r['batch'] for r in rows if not r.get('best')] == [1, 2, 3] and len(best) == 1 and
       best[0]['largest_batch'] == 3 and best[0]['ladder'] == 'end' and
       best[0]['tokens_per_s'] == max(r['tokens_per_s'] for r in rows),
       'peer_fsdp dry run: each batch of the ladder, then the fastest as the best, the largest that ran', out)
    rc, out = run([python, '-c', 'import torch; print(hasattr(torch, "compile"))'])
    if out.strip() == 'False':
        rc, out = run([python, os.path.join(GPU, 'peer_torch.py'), '--device', 'cpu', '--model', 'tiny',
                       '--compile'])
        ok(rc == 0 and 'PEER_SKIP torch.compile' in out and not peers(out),
           'torch %s has no torch.compile: the row is skipped, saying so' % version, out)
    else:
        skip('the torch.compile skip', 'torch %s has torch.compile' % version)


GOAL_FILES = {
    'kl.out': """ceilings: cuBLASLt bf16 matmul 8192^3 787.6 TFLOP/s; device copy 3758 GB/s (read + write)
time   attention_forward              production                     0.604 ms     44.5 TF/s    5.6% of matmul
time   attention_forward              1 32-query                     0.300 ms     89.0 TF/s   50.0% of matmul
time   attention_backward             production                     1.000 ms    250.0 TF/s   31.7% of matmul
""",
    'xl24.out': """bench_engine: gpt2-xl (1557.6M parameters, 50 groups), T=1024, recompute, cuda backend;
result offload optimizer, batch 40 x 1024: 18549 tokens/s, 200.00 model TFLOP/s (MFU 0.240 of 787.6 TFLOP/s); \
step 2200.0 ms = 1.11 x max(compute 1900.0, update 300.0); device peak 23.1 GiB
result offload params, batch 96 x 1024: 36000 tokens/s, 210.00 model TFLOP/s (MFU 0.260 of 787.6 TFLOP/s); \
step 4000.0 ms = 1.00 x max(compute 4000.0, update 300.0); device peak 23.0 GiB
""".replace('\\\n', ''),
    'fsdp.out': 'PEER {"system": "FSDP2 CPU offload", "mode": "offload, 24GiB card", "batch": 24, '
                '"tokens_per_s": 14320.0, "mfu": 0.19, "best": true, "largest_batch": 24, "ladder": "32 oom"}\n',
    'l1b.out': 'result offload none, batch 8 x 2048: 90000 tokens/s, 400.00 model TFLOP/s (MFU 0.500 of 787.6 '
               'TFLOP/s); step 180.0 ms = 1.00 x max(compute 180.0, update 0.0); device peak 60.0 GiB\n',
    'l8b.out': 'bench_engine: llama3.1-8b (8030.3M parameters, 34 groups), T=2048, recompute, cuda backend;\n'
               'result offload params, batch 14 x 2048: 5000 tokens/s, 260.00 model TFLOP/s (MFU 0.330 of 787.6 '
               'TFLOP/s); step 5700.0 ms = 1.05 x max(compute 5400.0, update 3000.0); device peak 23.2 GiB\n',
}


def test_goals():
    """tools/gpu/goals.py on outputs written here, its verdicts worked out by hand."""
    with tempfile.TemporaryDirectory() as d:
        for name, text in GOAL_FILES.items():
            with open(os.path.join(d, name), 'w') as f:
                f.write(text)
        f = lambda n: os.path.join(d, n)  # noqa: E731
        rc, out = run([sys.executable, os.path.join(GPU, 'goals.py'), '--kernel-lab', f('kl.out'), '--xl-24',
                       f('xl24.out'), '--fsdp', f('fsdp.out'), '--llama-1b', f('l1b.out'), '--llama-big',
                       f('l8b.out'), '--xl-none', f('missing.out'), '--bench', f('xl24.out'), '--bench', f('l8b.out')])
        rows = {r.split(' | ')[0].lstrip('| '): r for r in out.splitlines() if r.startswith('| ')}
        get = lambda key: next((v for k, v in rows.items() if k.startswith(key)), '')  # noqa: E731
        ok(rc == 0 and get('attention_forward').endswith('| 5.6% |  |  | >= 45% | FAIL |') and
           get('attention_backward').endswith('| 31.7% |  |  | >= 30% | PASS |'),
           'goals: the attention rows read the production variant alone, 5.6% fails 45%, 31.7% passes 30%', out)
        ok('| 2.51x | >= 2.50x | PASS |' in get('GPT-2 XL, 24 GiB card'),
           'goals: ferry\'s best at 24 GiB (params, 36000) over FSDP2\'s best (14320) is 2.51x, which meets 2.5x',
           out)
        ok(rows.get('GPT-2 XL without offload', '').endswith('| n/a |  |  | MFU >= 0.55 | not measured |'),
           'goals: a step that did not run is "not measured", never a pass', out)
        ok('| MFU 0.500 (batch 8) |  |  | MFU >= 0.50 | PASS |' in get('Llama 3.2 1B'),
           'goals: Llama 3.2 1B at MFU 0.500 meets 0.5', out)
        ok('| 0.88 | >= 0.80 | PASS |' in get('llama3.1-8b, 24 GiB card'),
           'goals: the 8B\'s share of its bound is 4/3 x 0.330 / 0.500 = 0.88', out)
        ok(get('gpt2-xl, optimizer (batch 40)').endswith('| 1.11x |  |  | <= 1.10x | FAIL |') and
           get('llama3.1-8b, params (batch 14)').endswith('| 1.05x |  |  | <= 1.10x | PASS |'),
           'goals: each mode\'s step against its overlap floor, 1.11x fails and 1.05x meets 1.10x', out)
        ok('goals: 6 of 10 met, 2 not measured' in out,
           'goals: the count line: 6 of the 10 rows with a goal met (attention backward, the 24 GiB ratio, the two '
           'Llama rows, 2 of 3 floors), 2 not measured (GPT-2 XL without offload, its eager peer); torch.compile\'s '
           'row has no goal', out)


def main(argv):
    if len(argv) != 3:
        print('Bail out! usage: test_gpu_peers.py BENCH_ENGINE PYTHON_WITH_TORCH')
        return 1
    test_common()
    test_ladder()
    test_table(argv[1])
    test_goals()
    test_peers(argv[2])
    print('1..%d' % n)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
