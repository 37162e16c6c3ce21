#!/usr/bin/python3
"""PyTorch oracle for ferry's GPT-2 (tests/models/test_gpt2_oracle.c).

Usage: gpt2_oracle.py INPUT OUTPUT. Exits 77 when torch cannot be imported.

A plain-torch GPT-2 (no transformers package), run in float64 from the fp32
weights ferry wrote, so the reference error is far below ferry's fp32 error.

INPUT (little-endian), written by the C test:
  8 bytes  b"FERRYGPT"
  int32    version (1), L, NH, C, V, Vp, maxT, B, T, steps, ntensors
  float64  lr, beta1, beta2, eps, weight_decay
  int32    tokens[steps][B*T], targets[steps][B*T]   (targets < 0 are ignored)
  ntensors times: int32 name_len, name bytes (Hugging Face name), int32 ndim,
           int32 shape[ndim], float32 data  -- ferry's layout: linear weights
           [out, in] (as torch.nn.Linear), wte [Vp, C] with rows V..Vp-1 padding
OUTPUT:
  8 bytes  b"FERRYREF"
  int32    steps, ntensors
  float64  losses[steps]      (mean loss before each AdamW step)
  ntensors times: float64 grad[numel]   (gradient at step 0, same order/shapes)
Each step: zero grads, loss on batch `step`, backward, torch.optim.AdamW.
"""
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except Exception as exc:  # torch or numpy missing: the test is skipped
    print(f"# SKIP: cannot import torch/numpy: {exc}")
    sys.exit(77)


def read_input(path):
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:8] != b"FERRYGPT":
        raise SystemExit(f"{path}: bad magic {buf[:8]!r}")
    off = 8
    hdr = struct.unpack_from("<11i", buf, off)
    off += 44
    version, L, NH, C, V, Vp, maxT, B, T, steps, ntensors = hdr
    if version != 1:
        raise SystemExit(f"{path}: version {version}, expected 1")
    lr, b1, b2, eps, wd = struct.unpack_from("<5d", buf, off)
    off += 40
    n = steps * B * T
    tokens = np.frombuffer(buf, dtype="<i4", count=n, offset=off).reshape(steps, B, T)
    off += 4 * n
    targets = np.frombuffer(buf, dtype="<i4", count=n, offset=off).reshape(steps, B, T)
    off += 4 * n
    tensors = []
    for _ in range(ntensors):
        (nl,) = struct.unpack_from("<i", buf, off)
        off += 4
        name = buf[off:off + nl].decode()
        off += nl
        (ndim,) = struct.unpack_from("<i", buf, off)
        off += 4
        shape = struct.unpack_from(f"<{ndim}i", buf, off)
        off += 4 * ndim
        count = int(np.prod(shape))
        data = np.frombuffer(buf, dtype="<f4", count=count, offset=off).reshape(shape)
        off += 4 * count
        tensors.append((name, torch.tensor(data, dtype=torch.float64, requires_grad=True)))
    if off != len(buf):
        raise SystemExit(f"{path}: {len(buf) - off} trailing bytes")
    cfg = dict(L=L, NH=NH, C=C, V=V, Vp=Vp, maxT=maxT)
    opt = dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    return cfg, opt, torch.tensor(tokens.astype(np.int64)), torch.tensor(targets.astype(np.int64)), tensors


def gpt2_loss(cfg, P, tokens, targets):
    L, NH, C, V = cfg["L"], cfg["NH"], cfg["C"], cfg["V"]
    B, T = tokens.shape
    HS = C // NH
    x = P["transformer.wte.weight"][tokens] + P["transformer.wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = lambda s: P[f"transformer.h.{l}.{s}"]
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), eps=1e-5)
        qkv = F.linear(h, p("attn.c_attn.weight"), p("attn.c_attn.bias"))
        q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / (HS ** 0.5)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p("attn.c_proj.weight"), p("attn.c_proj.bias"))
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), eps=1e-5)
        h = F.gelu(F.linear(h, p("mlp.c_fc.weight"), p("mlp.c_fc.bias")), approximate="tanh")
        x = x + F.linear(h, p("mlp.c_proj.weight"), p("mlp.c_proj.bias"))
    x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps=1e-5)
    logits = x @ P["transformer.wte.weight"][:V].t()  # the padded rows never enter
    valid = targets.reshape(-1) >= 0
    return F.cross_entropy(logits.reshape(-1, V)[valid], targets.reshape(-1)[valid])


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: gpt2_oracle.py INPUT OUTPUT")
    torch.manual_seed(0)
    cfg, opt, tokens, targets, tensors = read_input(sys.argv[1])
    P = dict(tensors)
    params = [t for _, t in tensors]
    optim = torch.optim.AdamW(params, **opt)
    losses, grads0 = [], None
    for step in range(tokens.shape[0]):
        optim.zero_grad(set_to_none=False)
        loss = gpt2_loss(cfg, P, tokens[step], targets[step])
        loss.backward()
        losses.append(loss.item())
        if grads0 is None:
            grads0 = [t.grad.detach().clone() for t in params]
        optim.step()
    with open(sys.argv[2], "wb") as f:
        f.write(b"FERRYREF")
        f.write(struct.pack("<2i", len(losses), len(params)))
        f.write(np.asarray(losses, dtype="<f8").tobytes())
        for g in grads0:
            f.write(g.numpy().astype("<f8").tobytes())


if __name__ == "__main__":
    main()
