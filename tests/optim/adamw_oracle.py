"""tests/optim/adamw_oracle.py: the PyTorch side of test_adamw_torch.

Reads the inputs test_adamw_torch.c wrote (parameter groups, hyperparameters,
initial weights, the gradients of every step), runs torch.optim.AdamW with
GradScaler-style skipping of non-finite steps and clip_grad_norm_'s clipping
(norm in float64, see clip), and writes the weights and moments after every
step.

usage: adamw_oracle.py INPUT OUTPUT    (exit 77 when torch is missing)
File layout, little-endian: see test_adamw_torch.c.
"""
import struct
import sys

try:
    import torch
except ImportError:
    sys.exit(77)


def clip(params, max_norm):
    """clip_grad_norm_'s formula (coef = max_norm / (norm + 1e-6), clamped to
    1, multiplied into the fp32 gradients) with the norm taken in float64:
    torch's own fp32 norm is off by ~1e-6 relative for these sizes, which
    would blur the comparison of the update itself."""
    norm = torch.norm(torch.stack([torch.norm(p.grad.double()) for p in params]))
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0).float()
    for p in params:
        p.grad.mul_(coef)


def main():
    data = open(sys.argv[1], "rb").read()
    off = 0

    def take(fmt):
        nonlocal off
        vals = struct.unpack_from("<" + fmt, data, off)
        off += struct.calcsize("<" + fmt)
        return vals

    def floats(n):
        nonlocal off
        t = torch.frombuffer(bytearray(data[off:off + 4 * n]), dtype=torch.float32).clone()
        off += 4 * n
        return t

    ngroups, nsteps = take("ii")
    (max_norm,) = take("d")
    sizes, hps = [], []
    for _ in range(ngroups):
        (n,) = take("q")
        lr, b1, b2, eps, wd = take("ddddd")
        sizes.append(n)
        hps.append(dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd))
    params = [torch.nn.Parameter(floats(n)) for n in sizes]
    groups = [dict(params=[p], **hp) for p, hp in zip(params, hps)]
    opt = torch.optim.AdamW(groups)
    out = bytearray()
    for _ in range(nsteps):
        grads = [floats(n) for n in sizes]
        finite = all(bool(torch.isfinite(g).all()) for g in grads)
        if finite:  # clip, then step; a non-finite step is skipped, as GradScaler does
            for p, g in zip(params, grads):
                p.grad = g.clone()
            clip(params, max_norm)
            opt.step()
        out += struct.pack("<i", 1 if finite else 0)
        for p in params:
            st = opt.state.get(p, {})
            for t in (p.detach(), st.get("exp_avg"), st.get("exp_avg_sq")):
                if t is None:
                    t = torch.zeros_like(p.detach())
                out += t.contiguous().numpy().tobytes()
    open(sys.argv[2], "wb").write(bytes(out))


if __name__ == "__main__":
    main()
