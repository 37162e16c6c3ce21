#!/usr/bin/env python3
"""The GPU check's first PyTorch peer: GPT-2 trained without offload on the
whole card, as a PyTorch user would: transformers' GPT2LMHeadModel with SDPA
attention, fp32 weights under bf16 autocast, torch.optim.AdamW(fused=True)
on the GPU, random tokens (the same tokens per step as ferry's bench_engine
row it is set beside: --batch x --seq). With --compile, the model goes
through torch.compile first (a second row; the compile time is reported,
not timed), given up with a line saying so when it has not compiled by
--time-limit.

  peer_torch.py [--model gpt2-xl] [--batch 16] [--seq 1024] [--steps 3] [--warmup 2]
                [--compile] [--peak-tflops X] [--time-limit S] [--device cuda|cpu]

Prints one PEER line (peer_common.py) per measured batch; --device cpu runs
the same harness on the CPU (bf16 autocast there, plain AdamW) for a dry run
at --model tiny. Exit status: 0 measured (or --compile given up in time, said
by a PEER_SKIP line); 1 a failure, an out-of-memory included; 2 a bad command
line; 77 no GPU (or no torch) where --device cuda was asked."""
import argparse
import signal
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0] if '/' in __file__ else '.')
import peer_common as pc  # noqa: E402


class CompileTimeout(Exception):
    pass


def parse(argv):
    p = argparse.ArgumentParser(prog='peer_torch.py', description=__doc__.split('\n\n')[0])
    pc.add_common_args(p)
    p.add_argument('--batch', type=int, default=16, help='sequences per step (default 16)')
    p.add_argument('--compile', action='store_true', help='torch.compile the model (a second row)')
    a = p.parse_args(argv)
    pc.check_common(p, a)
    if a.batch <= 0:
        p.error('--batch must be positive (got %d)' % a.batch)
    return a


def step_fn(torch, model, opt, ids, device):
    def step():
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def run(a):
    torch = pc.import_torch()
    if torch is None:
        return pc.EXIT_NO_GPU
    if a.device == 'cuda' and not torch.cuda.is_available():
        print('peer_torch: no GPU: torch %s sees no CUDA device' % torch.__version__, flush=True)
        return pc.EXIT_NO_GPU
    if a.compile and not hasattr(torch, 'compile'):
        print('PEER_SKIP torch.compile: torch %s has none' % torch.__version__, flush=True)
        return pc.EXIT_OK
    torch.manual_seed(a.seed)
    t0 = time.monotonic()
    model, impl = pc.build_model(torch, a.model, a.seq, a.device)
    n_params = sum(p.numel() for p in model.parameters())
    fused = a.device == 'cuda'
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, **({'fused': True} if fused else {}))
    ids = torch.randint(0, pc.VOCAB, (a.batch, a.seq), device=a.device)
    setup_s = time.monotonic() - t0
    mode = 'no offload' + (', torch.compile' if a.compile else '')
    compile_s = 0.0
    if a.compile:
        model = torch.compile(model)
    step = step_fn(torch, model, opt, ids, a.device)
    sync = torch.cuda.synchronize if a.device == 'cuda' else (lambda: None)
    if a.compile and a.time_limit:
        def give_up(signum, frame):
            raise CompileTimeout()
        signal.signal(signal.SIGALRM, give_up)
        signal.alarm(max(1, int(a.time_limit - (time.monotonic() - t0))))
    try:
        t1 = time.monotonic()
        for i in range(max(a.warmup, 1 if a.compile else 0)):
            step()
        sync()
        compile_s = time.monotonic() - t1 if a.compile else 0.0
    except CompileTimeout:
        print('PEER_SKIP torch.compile: not compiled and warm within --time-limit %g s' % a.time_limit, flush=True)
        return pc.EXIT_OK
    finally:
        if a.compile and a.time_limit:
            signal.alarm(0)
    times = []
    for i in range(a.steps):
        t = time.monotonic()
        loss = step()
        sync()
        times.append(time.monotonic() - t)
    if not torch.isfinite(loss.detach()).item():
        print('peer_torch: the loss is not finite (%s)' % loss.item(), flush=True)
        return pc.EXIT_FAIL
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if a.device == 'cuda' else None
    pc.emit(pc.record('pytorch', mode, a.batch, a.seq, pc.median(times), n_params, pc.MODELS[a.model],
                      a.peak_tflops, impl, torch=torch.__version__, device_peak_gib=peak and round(peak, 2),
                      setup_s=round(setup_s, 1), compile_s=round(compile_s, 1), loss=round(loss.item(), 4)))
    return pc.EXIT_OK


def main(argv):
    return pc.guarded('peer_torch', run, parse(argv))


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
