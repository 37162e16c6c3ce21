#!/usr/bin/python3
"""PyTorch oracle for ferry's Llama family (tests/models/test_llama_oracle.c).

Usage: llama_oracle.py INPUT OUTPUT. Exits 77 when torch cannot be imported.

A plain-torch causal LM (no transformers package) written from the model
definitions of Hugging Face's LlamaForCausalLM, Qwen2ForCausalLM and
MistralForCausalLM, not from ferry's code, run in float64 from the fp32
weights ferry wrote, so that the reference error is far below ferry's fp32
error. Per layer: RMSNorm, q/k/v projections (biases when the file has
them), rotary embedding in the rotate_half convention, grouped-query causal
attention (each key/value head repeated NH / NKV times), o_proj, residual;
RMSNorm, down(silu(gate(x)) * up(x)), residual. Then the final norm, the
head (the embedding when tied) over the V real rows only, and the mean cross
entropy over the targets >= 0.

The rotary frequencies are made as transformers makes them: in fp32 from
theta^(-2i/HS), then the scaling ('linear': divided by the factor; 'llama3':
by wavelength, low frequencies divided by the factor, high ones kept, a
smooth blend between). The angles, cos and sin are then float64.

INPUT (little-endian), written by the C test:
  8 bytes  b"FERRYLLM"
  int32    version (1), L, NH, NKV, C, HS, I, V, Vp, maxT, qkv_bias, tied,
           rope_kind (0 default, 1 linear, 2 llama3), original_max_position,
           B, T, steps, ntensors
  float64  rms_norm_eps, rope_theta, factor, low_freq_factor, high_freq_factor
  float64  lr, beta1, beta2, eps, weight_decay
  int32    tokens[steps][B*T], targets[steps][B*T]   (targets < 0 are ignored)
  ntensors times: int32 name_len, name bytes (Hugging Face name), int32 ndim,
           int32 shape[ndim], int32 decay (1: weight decay applies),
           float32 data -- ferry's layout: weights [out, in] as torch.nn.Linear
           stores them; the embedding and lm_head have Vp rows, of which the
           first V are real (the others never enter the softmax)
OUTPUT:
  8 bytes  b"FERRYLRF"
  int32    steps, ntensors, V
  float64  losses[steps]      (mean loss before each AdamW step)
  float64  logits[V]          (batch row 0, position T-1, step 0's weights)
  ntensors times: float64 grad[numel]   (gradient at step 0, same order/shapes)
Each step: zero grads, loss on batch `step`, backward, torch.optim.AdamW with
the weight decay on the tensors flagged decay and none on the others.
"""
import math
import os
import sys

# oracle_io.py lies beside this file, also when another test loads it by its path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_io import F, Input, paths, torch, train, write_output  # noqa: E402

ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3 = 0, 1, 2


def read_input(path):
    r = Input(path, b"FERRYLLM")
    (version, L, NH, NKV, C, HS, I, V, Vp, maxT, qkv_bias, tied, rope_kind, orig_max,
     B, T, steps, ntensors) = r.unpack("<18i")
    r.version(version)
    eps, theta, factor, low, high = r.unpack("<5d")
    lr, b1, b2, adam_eps, wd = r.unpack("<5d")
    tokens, targets = r.batches(steps, B, T)
    tensors = r.tensors(ntensors, with_decay=True)
    r.end()
    if tokens.min() < 0 or tokens.max() >= V or targets.max() >= V:
        raise SystemExit(f"{path}: a token or target outside [0, {V})")
    cfg = dict(L=L, NH=NH, NKV=NKV, C=C, HS=HS, I=I, V=V, Vp=Vp, maxT=maxT,
               qkv_bias=bool(qkv_bias), tied=bool(tied), eps=eps, theta=theta,
               rope_kind=rope_kind, factor=factor, low_freq_factor=low,
               high_freq_factor=high, original_max_position_embeddings=orig_max)
    opt = dict(lr=lr, betas=(b1, b2), eps=adam_eps, weight_decay=wd)
    return cfg, opt, tokens, targets, tensors


def rope_inv_freq(cfg):
    """The rotary frequencies [HS/2] in fp32, scaled as the config says."""
    HS = cfg["HS"]
    inv_freq = 1.0 / (cfg["theta"] ** (torch.arange(0, HS, 2, dtype=torch.int64).float() / HS))
    kind = cfg["rope_kind"]
    if kind == ROPE_DEFAULT:
        return inv_freq
    if kind == ROPE_LINEAR:
        return inv_freq / cfg["factor"]
    if kind != ROPE_LLAMA3:
        raise SystemExit(f"unknown rope kind {kind}")
    factor, low, high = cfg["factor"], cfg["low_freq_factor"], cfg["high_freq_factor"]
    orig = cfg["original_max_position_embeddings"]
    low_freq_wavelen = orig / low
    high_freq_wavelen = orig / high
    wavelen = 2 * math.pi / inv_freq
    # long wavelengths (low frequencies) slowed by the factor, short ones kept
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    # between the two: a blend, from all-scaled at low_freq_wavelen to unscaled at high_freq_wavelen
    smooth = (orig / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    middle = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(middle, blended, scaled)


def rope_cos_sin(cfg, T):
    """cos, sin [T, HS] in float64: both halves of the head use the same angles."""
    inv_freq = rope_inv_freq(cfg).double()
    pos = torch.arange(T, dtype=torch.float64)
    angles = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    """x [B, heads, T, HS]; cos, sin [T, HS]."""
    return x * cos + rotate_half(x) * sin


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def repeat_kv(x, n_rep):
    """[B, NKV, T, HS] -> [B, NKV * n_rep, T, HS]: query head h reads key/value head h // n_rep."""
    if n_rep == 1:
        return x
    B, nkv, T, hs = x.shape
    return x[:, :, None, :, :].expand(B, nkv, n_rep, T, hs).reshape(B, nkv * n_rep, T, hs)


def llama_hidden(cfg, P, tokens):
    """The final norm's output [B, T, C]."""
    L, NH, NKV, HS, eps = cfg["L"], cfg["NH"], cfg["NKV"], cfg["HS"], cfg["eps"]
    B, T = tokens.shape
    cos, sin = rope_cos_sin(cfg, T)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = P["model.embed_tokens.weight"][tokens]
    for l in range(L):
        p = lambda s: P.get(f"model.layers.{l}.{s}")
        h = rms_norm(x, p("input_layernorm.weight"), eps)
        q = F.linear(h, p("self_attn.q_proj.weight"), p("self_attn.q_proj.bias"))
        k = F.linear(h, p("self_attn.k_proj.weight"), p("self_attn.k_proj.bias"))
        v = F.linear(h, p("self_attn.v_proj.weight"), p("self_attn.v_proj.bias"))
        q = q.view(B, T, NH, HS).transpose(1, 2)
        k = k.view(B, T, NKV, HS).transpose(1, 2)
        v = v.view(B, T, NKV, HS).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k, v = repeat_kv(k, NH // NKV), repeat_kv(v, NH // NKV)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * HS)
        x = x + F.linear(y, p("self_attn.o_proj.weight"))
        h = rms_norm(x, p("post_attention_layernorm.weight"), eps)
        gate = F.linear(h, p("mlp.gate_proj.weight"))
        up = F.linear(h, p("mlp.up_proj.weight"))
        x = x + F.linear(F.silu(gate) * up, p("mlp.down_proj.weight"))
    return rms_norm(x, P["model.norm.weight"], eps)


def llama_logits(cfg, P, tokens):
    head = P["model.embed_tokens.weight"] if cfg["tied"] else P["lm_head.weight"]
    return llama_hidden(cfg, P, tokens) @ head[:cfg["V"]].t()  # the padded rows never enter


def llama_loss(cfg, P, tokens, targets):
    """Mean cross entropy over the targets >= 0 (every negative target is
    ignored, not only transformers' -100)."""
    logits = llama_logits(cfg, P, tokens).reshape(-1, cfg["V"])
    targets = targets.reshape(-1)
    valid = targets >= 0
    return F.cross_entropy(logits[valid], targets[valid])


def main():
    inp, out = paths("llama_oracle.py")
    cfg, opt, tokens, targets, tensors = read_input(inp)
    names = [n for n, _, _ in tensors]
    if cfg["tied"] == ("lm_head.weight" in names):
        raise SystemExit("lm_head.weight must be present exactly when the head is untied")
    P = {n: t for n, t, _ in tensors}
    params = [t for _, t, _ in tensors]
    wd = opt.pop("weight_decay")
    groups = [dict(params=[t for _, t, d in tensors if d], weight_decay=wd),
              dict(params=[t for _, t, d in tensors if not d], weight_decay=0.0)]
    optim = torch.optim.AdamW([g for g in groups if g["params"]], **opt)
    with torch.no_grad():
        logits0 = llama_logits(cfg, P, tokens[0])[0, -1].clone()
    losses, grads0 = train(lambda tok, tgt: llama_loss(cfg, P, tok, tgt), params, optim, tokens, targets)
    write_output(out, b"FERRYLRF", [len(losses), len(params), cfg["V"]], losses, grads0, extra=[logits0])


if __name__ == "__main__":
    main()
