#!/usr/bin/env python3
"""The GPU check's second PyTorch peer: GPT-2 trained with its state
offloaded to the CPU, as PyTorch offers it, on an emulated card: FSDP2
(fully_shard on every transformer block and the root) with
CPUOffloadPolicy(pin_memory=True) and MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32), activation checkpointing of every block, the fused CPU
AdamW (torch.optim.AdamW(fused=True) on the CPU-resident shards), and
torch.cuda.set_per_process_memory_fraction capping the allocator at --card
(24GiB by default) of the card. One process, world size 1. A batch ladder
(--batches) runs each batch for --warmup + --steps steps until one runs out
of memory; the largest that ran and the fastest are reported.

  peer_fsdp.py [--model gpt2-xl] [--seq 1024] [--card 24GiB] [--batches 8,16,24,32,48]
               [--steps 2] [--warmup 1] [--peak-tflops X] [--time-limit S] [--device cuda|cpu]

Prints a PEER line per batch that ran and a PEER line of the best, with
"largest_batch" and what stopped the ladder ("oom at B", "time", "end").
FSDP2 needs torch 2.4 or newer (torch.distributed.fsdp.fully_shard from
2.6, torch.distributed._composable.fsdp before); an older torch is said
and is exit 1 on a GPU. --device cpu: the ladder, the figures and the
output on the CPU without FSDP (its CPU offload needs a GPU), for a dry run
at --model tiny. Exit status: 0 when at least one batch ran; 1 when none
did or something failed; 2 a bad command line; 77 no GPU (or no torch)
where --device cuda was asked."""
import argparse
import os
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0] if '/' in __file__ else '.')
import peer_common as pc  # noqa: E402


def parse(argv):
    p = argparse.ArgumentParser(prog='peer_fsdp.py', description=__doc__.split('\n\n')[0])
    pc.add_common_args(p)
    p.add_argument('--card', default='24GiB', help='the memory the allocator may use (default 24GiB)')
    p.add_argument('--batches', default='8,16,24,32,48', help='the ladder, increasing (default 8,16,24,32,48)')
    a = p.parse_args(argv)
    pc.check_common(p, a)
    try:
        a.card_bytes = pc.parse_size(a.card)
        a.batch_list = pc.parse_batches(a.batches)
    except ValueError as e:
        p.error(str(e))
    return a


def fsdp_api(torch):
    """(fully_shard, CPUOffloadPolicy, MixedPrecisionPolicy), or None."""
    for mod in ('torch.distributed.fsdp', 'torch.distributed._composable.fsdp'):
        try:
            m = __import__(mod, fromlist=['fully_shard', 'CPUOffloadPolicy', 'MixedPrecisionPolicy'])
            return m.fully_shard, m.CPUOffloadPolicy, m.MixedPrecisionPolicy
        except (ImportError, AttributeError):
            continue
    return None


def setup(torch, a):
    """The model (sharded and offloaded on cuda), its optimizer, and which
    model ran."""
    model, impl = pc.build_model(torch, a.model, a.seq, 'cpu')
    n_params = sum(p.numel() for p in model.parameters())
    blocks = pc.blocks_of(model)
    if hasattr(model, 'gradient_checkpointing_enable'):
        model.gradient_checkpointing_enable()
    else:  # the builtin model: checkpoint each block's forward
        from torch.utils.checkpoint import checkpoint
        for blk in blocks:
            blk.forward = (lambda f: lambda x: checkpoint(f, x, use_reentrant=False))(blk.forward)
    if a.device == 'cuda':
        fully_shard, CPUOffloadPolicy, MixedPrecisionPolicy = fsdp_api(torch)
        kw = dict(offload_policy=CPUOffloadPolicy(pin_memory=True),
                  mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
        for blk in blocks:
            fully_shard(blk, **kw)
        fully_shard(model, **kw)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0,
                            **({'fused': True} if a.device == 'cuda' else {}))
    return model, opt, n_params, impl


def run(a):
    torch = pc.import_torch()
    if torch is None:
        return pc.EXIT_NO_GPU
    if a.device == 'cuda':
        if not torch.cuda.is_available():
            print('peer_fsdp: no GPU: torch %s sees no CUDA device' % torch.__version__, flush=True)
            return pc.EXIT_NO_GPU
        if fsdp_api(torch) is None:
            print('peer_fsdp: torch %s has no FSDP2 (fully_shard, CPUOffloadPolicy): it needs torch 2.4 or newer'
                  % torch.__version__, flush=True)
            return pc.EXIT_FAIL
        os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
        os.environ.setdefault('MASTER_PORT', '29517')
        torch.distributed.init_process_group('nccl', rank=0, world_size=1)
        total = torch.cuda.get_device_properties(0).total_memory
        if a.card_bytes > total:
            print('peer_fsdp: --card %s is more than this card\'s %.1f GiB' % (a.card, total / 2 ** 30), flush=True)
            return pc.EXIT_FAIL
        torch.cuda.set_per_process_memory_fraction(a.card_bytes / total)
    torch.manual_seed(a.seed)
    t0 = time.monotonic()
    model, opt, n_params, impl = setup(torch, a)
    setup_s = time.monotonic() - t0
    sync = torch.cuda.synchronize if a.device == 'cuda' else (lambda: None)
    mode = 'FSDP2 CPU offload, %s card, checkpointing' % a.card if a.device == 'cuda' else 'CPU dry run'
    deadline = time.monotonic() + a.time_limit if a.time_limit else None

    def try_batch(b):
        ids = torch.randint(0, pc.VOCAB, (b, a.seq), device=a.device)
        times = []
        for i in range(a.warmup + a.steps):
            t = time.monotonic()
            with torch.autocast(device_type=a.device, dtype=torch.bfloat16):
                loss = model(ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
            if i >= a.warmup:
                times.append(time.monotonic() - t)
        if not torch.isfinite(loss.detach()).item():
            raise RuntimeError('the loss is not finite at batch %d' % b)
        peak = torch.cuda.max_memory_allocated() / 2 ** 30 if a.device == 'cuda' else None
        r = pc.record('pytorch', mode, b, a.seq, pc.median(times), n_params, pc.MODELS[a.model], a.peak_tflops,
                      impl, torch=torch.__version__, device_peak_gib=peak and round(peak, 2),
                      setup_s=round(setup_s, 1), loss=round(loss.item(), 4))
        pc.emit(r)
        if a.device == 'cuda':
            torch.cuda.reset_peak_memory_stats()
        return r

    def is_oom(e):
        if a.device == 'cuda' and isinstance(e, torch.cuda.OutOfMemoryError):
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            return True
        return False

    results, largest, stopped = pc.ladder(a.batch_list, try_batch, is_oom, deadline)
    if not results:
        print('peer_fsdp: no batch ran (%s)' % stopped, flush=True)
        return pc.EXIT_FAIL
    best = max(results, key=lambda r: r['tokens_per_s'])
    pc.emit(dict(best, best=True, largest_batch=largest, ladder=stopped))
    return pc.EXIT_OK


def main(argv):
    return pc.guarded('peer_fsdp', run, parse(argv))


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
