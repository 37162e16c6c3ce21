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
import os
import sys

# oracle_io.py lies beside this file, also when another test loads it by its path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_io import F, Input, paths, torch, train, write_output  # noqa: E402


def read_input(path):
    r = Input(path, b"FERRYGPT")
    version, L, NH, C, V, Vp, maxT, B, T, steps, ntensors = r.unpack("<11i")
    r.version(version)
    lr, b1, b2, eps, wd = r.unpack("<5d")
    tokens, targets = r.batches(steps, B, T)
    tensors = [(name, t) for name, t, _ in r.tensors(ntensors, with_decay=False)]
    r.end()
    cfg = dict(L=L, NH=NH, C=C, V=V, Vp=Vp, maxT=maxT)
    opt = dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    return cfg, opt, tokens, targets, tensors


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
    inp, out = paths("gpt2_oracle.py")
    torch.manual_seed(0)
    cfg, opt, tokens, targets, tensors = read_input(inp)
    P = dict(tensors)
    params = [t for _, t in tensors]
    optim = torch.optim.AdamW(params, **opt)
    losses, grads0 = train(lambda tok, tgt: gpt2_loss(cfg, P, tok, tgt), params, optim, tokens, targets)
    write_output(out, b"FERRYREF", [len(losses), len(params)], losses, grads0)


if __name__ == "__main__":
    main()
