"""What the GPU check's PyTorch peers (peer_torch.py, peer_fsdp.py) share:
the GPT-2 sizes ferry's bench_engine trains, the model (transformers'
GPT2LMHeadModel with SDPA attention where transformers is importable; else
the same architecture written here, and the output says which ran), the
flops a token costs as bench_engine counts them (6 N + 12 L C T: PaLM's
count, recomputation not counted), the batch ladder, and the one line each
measurement prints:

  PEER {"system": "pytorch", "mode": ..., "batch": 16, "seq": 1024, "tokens_per_s": ..., "mfu": ..., ...}

which peer_table.py reads beside bench_engine's "result" lines. Needs only
the Python standard library to import; torch is imported by the functions
that need it, so argument errors and the ladder's logic are testable
without it (tests/tools/test_gpu_peers.py)."""
import json
import math
import sys
import time

# Exit statuses, as ferry's programs use them.
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_NO_GPU = 0, 1, 2, 77

# GPT-2 sizes (layers, width, heads); vocabulary 50257, 1024 positions.
MODELS = {
    'gpt2': (12, 768, 12),
    'gpt2-medium': (24, 1024, 16),
    'gpt2-large': (36, 1280, 20),
    'gpt2-xl': (48, 1600, 25),
    'tiny': (2, 64, 4),  # the dry runs on a CPU
}
VOCAB = 50257


def flops_per_token(n_params, n_layer, n_embd, seq):
    """A training step's model flops per token, bench_engine's count."""
    return 6.0 * n_params + 12.0 * n_layer * n_embd * seq


def parse_size(text):
    """'24GiB' -> bytes; binary (KiB, MiB, GiB) and decimal (KB, MB, GB)
    units as ferry's programs take them, a bare '24G' refused as
    ambiguous."""
    units = {'KiB': 1 << 10, 'MiB': 1 << 20, 'GiB': 1 << 30, 'TiB': 1 << 40,
             'KB': 10 ** 3, 'MB': 10 ** 6, 'GB': 10 ** 9, 'TB': 10 ** 12, 'B': 1}
    for u in sorted(units, key=len, reverse=True):
        if text.endswith(u):
            num = text[:-len(u)]
            try:
                v = float(num)
            except ValueError:
                break
            if v > 0 and math.isfinite(v):
                return int(v * units[u])
            break
    raise ValueError('size %r: a positive number with a unit, 24GiB (2^30 bytes) or 24GB (10^9); a bare G is '
                     'ambiguous' % text)


def parse_batches(text):
    """'8,16,24' -> [8, 16, 24]: positive and increasing."""
    try:
        out = [int(x) for x in text.split(',')]
    except ValueError:
        raise ValueError('batches %r: a comma-separated list of integers, such as 8,16,24' % text)
    if not out or any(b <= 0 for b in out) or any(a >= b for a, b in zip(out, out[1:])):
        raise ValueError('batches %r: positive and increasing, such as 8,16,24' % text)
    return out


def ladder(batches, try_batch, is_oom, deadline=None, clock=time.monotonic):
    """Runs try_batch(b) for each batch in order until one runs out of
    memory (is_oom(exception)), the deadline passes, or the list ends.
    Returns (results, largest, stopped): results the values try_batch
    returned, largest the last batch that ran (None if none did), stopped
    'oom at B', 'time', or 'end'. Any other exception propagates."""
    results, largest = [], None
    for b in batches:
        if deadline is not None and clock() >= deadline:
            return results, largest, 'time'
        try:
            results.append(try_batch(b))
        except Exception as e:  # noqa: BLE001 (sorted out by is_oom)
            if is_oom(e):
                return results, largest, 'oom at %d' % b
            raise
        largest = b
    return results, largest, 'end'


def emit(record, stream=None):
    """One PEER line: a JSON object, sorted keys."""
    stream = stream or sys.stdout
    stream.write('PEER ' + json.dumps(record, sort_keys=True) + '\n')
    stream.flush()


def record(system, mode, batch, seq, step_s, n_params, model_cfg, peak_tflops, impl, **extra):
    """The figures of one measured batch."""
    n_layer, n_embd, _ = model_cfg
    tok_s = batch * seq / step_s
    tflops = tok_s * flops_per_token(n_params, n_layer, n_embd, seq) / 1e12
    out = {'system': system, 'mode': mode, 'batch': batch, 'seq': seq, 'step_ms': round(step_s * 1e3, 2),
           'tokens_per_s': round(tok_s, 1), 'model_tflops': round(tflops, 2), 'params': n_params, 'model': impl}
    out['mfu'] = round(tflops / peak_tflops, 4) if peak_tflops else None
    out.update(extra)
    return out


def import_torch():
    """torch, or None with the reason printed (the caller exits 77: no
    usable peer here)."""
    try:
        import torch  # noqa: F401
        return torch
    except Exception as e:  # noqa: BLE001 (any import failure means no peer)
        print('peer: torch is not importable by %s: %s' % (sys.executable, e), flush=True)
        return None


def build_model(torch, name, seq, device, dtype=None):
    """GPT-2 `name` with `seq` positions: transformers' GPT2LMHeadModel
    (attention through torch's scaled_dot_product_attention) where
    transformers is importable, else the same architecture below. Returns
    (model, impl): impl names which one."""
    n_layer, n_embd, n_head = MODELS[name]
    try:
        import transformers
        cfg = transformers.GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_positions=max(seq, 1024),
                                      vocab_size=VOCAB, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        try:
            model = transformers.GPT2LMHeadModel(cfg, attn_implementation='sdpa')
        except TypeError:  # transformers before 4.36 takes it from the config
            cfg._attn_implementation = 'sdpa'
            model = transformers.GPT2LMHeadModel(cfg)
        impl = 'transformers %s GPT2LMHeadModel (sdpa)' % transformers.__version__
    except ImportError:
        model = _builtin_gpt2(torch, n_layer, n_embd, n_head, max(seq, 1024))
        impl = 'builtin GPT-2 (transformers not importable)'
    model = model.to(device=device, dtype=dtype) if dtype else model.to(device=device)
    return model, impl


def _builtin_gpt2(torch, n_layer, n_embd, n_head, n_pos):
    """GPT-2 as transformers lays it out (pre-norm blocks, GELU tanh, tied
    embedding), for machines without transformers. model(ids, labels=ids)
    returns an object with .loss, as GPT2LMHeadModel does."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
            self.c_attn, self.c_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
            self.c_fc, self.mlp_proj = nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            if hasattr(F, 'scaled_dot_product_attention'):
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # torch before 2.0
                att = (q @ k.transpose(-2, -1)) / math.sqrt(C // n_head)
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                y = att.masked_fill(~mask, float('-inf')).softmax(-1) @ v
            x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate='tanh'))

    class Out:
        def __init__(self, loss):
            self.loss = loss

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, n_embd), nn.Embedding(n_pos, n_embd)
            self.h = nn.ModuleList(Block() for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(n_embd)

        def forward(self, ids, labels=None):
            x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
            for blk in self.h:
                x = blk(x)
            logits = self.ln_f(x) @ self.wte.weight.t()
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB).float(), labels[:, 1:].reshape(-1))
            return Out(loss)

    model = GPT2()
    for name, prm in model.named_parameters():  # GPT-2's initialization
        if name.endswith('bias'):
            nn.init.zeros_(prm)
        elif 'ln' in name:
            nn.init.ones_(prm)
        else:
            nn.init.normal_(prm, 0.0, 0.02)
    return model


def blocks_of(model):
    """The transformer blocks of either implementation (FSDP shards each)."""
    if hasattr(model, 'transformer'):
        return list(model.transformer.h)
    return list(model.h)


def add_common_args(p):
    p.add_argument('--model', default='gpt2-xl', choices=sorted(MODELS), help='GPT-2 size (default gpt2-xl)')
    p.add_argument('--seq', type=int, default=1024, help='tokens per sequence (default 1024)')
    p.add_argument('--steps', type=int, default=3, help='timed steps per batch (median; default 3)')
    p.add_argument('--warmup', type=int, default=2, help='steps run before timing (default 2)')
    p.add_argument('--peak-tflops', type=float, default=0.0,
                   help="the bf16 matmul rate MFU is a fraction of (the kernel lab's ceiling); 0: no MFU")
    p.add_argument('--device', default='cuda', choices=['cuda', 'cpu'],
                   help='cuda (the check), or cpu for a dry run of the harness at a tiny size')
    p.add_argument('--time-limit', type=float, default=0.0,
                   help='seconds after which no new batch starts (0: none); the check bounds every step')
    p.add_argument('--seed', type=int, default=1234)


def check_common(p, a):
    if a.seq <= 0 or a.seq > 1024:
        p.error('--seq %d: from 1 to 1024 (GPT-2 has 1024 positions)' % a.seq)
    if a.steps <= 0 or a.warmup < 0:
        p.error('--steps must be positive and --warmup not negative (got %d, %d)' % (a.steps, a.warmup))
    if a.peak_tflops < 0 or a.time_limit < 0:
        p.error('--peak-tflops and --time-limit are not negative')


def guarded(prog, run, a):
    """run(a)'s exit status; an exception is one line naming it, and exit 1."""
    try:
        return run(a)
    except Exception as e:  # noqa: BLE001 (one line, then the failure status)
        print('%s: %s: %s' % (prog, type(e).__name__, str(e).split('\n')[0]), flush=True)
        return EXIT_FAIL


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2]
