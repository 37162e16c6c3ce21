# The Hugging Face side of tests/train/test_hf_checkpoint.c: a GPT-2 built
# here with GPT2LMHeadModel's module structure and tensor names (not ferry's
# code), so loading ferry's model.safetensors with load_state_dict(strict=True)
# checks every name and shape that transformers expects.
#
# Usage: hf_gpt2.py WORKDIR SEED
#   reads   WORKDIR/ours/model.safetensors, WORKDIR/ours/config.json,
#           WORKDIR/tokens.bin (int32 B, T, then B*T tokens)
#   writes  WORKDIR/ours_logits.bin (float64 [B, T, V]: the logits of ferry's
#           weights, computed here in float64);
#           WORKDIR/hf_<dt>/model.safetensors + config.json for dt in f32, f16,
#           bf16: a GPT-2 of the same shape with weights drawn here, laid out as
#           the official gpt2 file is (no "transformer." prefix, the
#           attn.bias / attn.masked_bias buffers of old exports), and
#           WORKDIR/hf_<dt>_logits.bin: their logits (float64), from the
#           values as rounded to that dtype.
# Exit 77 when torch or numpy cannot be imported.
import json
import math
import os
import struct
import sys

try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as e:
    print("hf_gpt2.py: cannot import torch/numpy: %s" % e)
    sys.exit(77)


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: weight [in, out], y = x @ W + b."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        y = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return y.reshape(*x.shape[:-1], self.weight.shape[1])


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        n, t = c["n_embd"], c["n_positions"]
        self.n_head = c["n_head"]
        # A buffer, as in transformers; not part of the saved state.
        self.register_buffer("bias", torch.tril(torch.ones(t, t, dtype=torch.bool)).view(1, 1, t, t),
                             persistent=False)
        self.c_attn = Conv1D(3 * n, n)
        self.c_proj = Conv1D(n, n)

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, T, self.n_head, hd).transpose(1, 2) for z in (q, k, v))
        w = q @ k.transpose(-1, -2) / math.sqrt(hd)
        w = torch.where(self.bias[:, :, :T, :T], w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        y = torch.softmax(w, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class GPT2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = Conv1D(4 * c["n_embd"], c["n_embd"])
        self.c_proj = Conv1D(c["n_embd"], 4 * c["n_embd"])

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c["layer_norm_epsilon"]
        self.ln_1 = nn.LayerNorm(c["n_embd"], eps=eps)
        self.attn = GPT2Attention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"], eps=eps)
        self.mlp = GPT2MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["n_positions"], c["n_embd"])
        self.h = nn.ModuleList([GPT2Block(c) for _ in range(c["n_layer"])])
        self.ln_f = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1])
        x = self.wte(tokens) + self.wpe(pos)[None]
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = GPT2Model(c)
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as tie_word_embeddings

    def forward(self, tokens):
        return self.lm_head(self.transformer(tokens))


# ---- safetensors, with a few lines of our own ----

DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2)}


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        npdt, _ = DTYPES[e["dtype"]]
        a = np.frombuffer(data[b:end], dtype=npdt)
        if e["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(a.astype(np.float64).reshape(e["shape"]))
    return out, header


def write_safetensors(path, tensors):
    """tensors: name -> (dtype name, shape, bytes). Laid out as the safetensors
    library does: largest element first, then by name; header padded with
    spaces to 8 bytes."""
    order = sorted(tensors, key=lambda k: (-DTYPES[tensors[k][0]][1], k))
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in order:
        dt, shape, blob = tensors[name]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def round_to(values, dt):
    """float64 array -> (bytes in dtype dt, the float64 values those bytes hold)."""
    shape = np.shape(values)
    f32 = np.asarray(values, dtype=np.float32).reshape(-1)
    if dt == "F32":
        return f32.tobytes(), f32.astype(np.float64).reshape(shape)
    if dt == "F16":
        h = f32.astype("<f2")
        return h.tobytes(), h.astype(np.float64).reshape(shape)
    bits = f32.view(np.uint32).astype(np.uint64)
    bits = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)  # nearest even
    b = bits.astype("<u2")
    return b.tobytes(), (b.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64).reshape(shape)


# ---- the two directions ----

def check_config(c):
    want = {"model_type": "gpt2", "activation_function": "gelu_new", "tie_word_embeddings": True}
    for k, v in want.items():
        if c.get(k) != v:
            sys.exit("config.json: %s is %r, transformers expects %r" % (k, c.get(k), v))
    if c.get("architectures") != ["GPT2LMHeadModel"]:
        sys.exit("config.json: architectures is %r" % c.get("architectures"))
    if c.get("n_ctx", c["n_positions"]) != c["n_positions"]:
        sys.exit("config.json: n_ctx %r != n_positions %r" % (c.get("n_ctx"), c["n_positions"]))


def load_ours(work, tokens):
    cfg = json.load(open(os.path.join(work, "ours", "config.json")))
    check_config(cfg)
    state, header = read_safetensors(os.path.join(work, "ours", "model.safetensors"))
    for name, e in header.items():
        if name != "__metadata__" and e["dtype"] != "F32":
            sys.exit("ferry saved %s as %s, not F32" % (name, e["dtype"]))
    model = GPT2LMHeadModel(cfg).double()
    expected = set(model.state_dict()) - {"lm_head.weight"}  # tied: transformers re-ties it
    if set(state) != expected:
        sys.exit("tensor names differ from GPT2LMHeadModel's: missing %s, unexpected %s"
                 % (sorted(expected - set(state)), sorted(set(state) - expected)))
    state["lm_head.weight"] = state["transformer.wte.weight"]
    model.load_state_dict(state, strict=True)  # raises on any name or shape mismatch
    with torch.no_grad():
        logits = model(tokens)
    logits.numpy().astype("<f8").tofile(os.path.join(work, "ours_logits.bin"))
    print("ferry's checkpoint loads into GPT2LMHeadModel (strict): %d tensors, config %s"
          % (len(state) - 1, {k: cfg[k] for k in ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions")}))
    return cfg


def export(work, cfg, tokens, seed, dt):
    gen = torch.Generator().manual_seed(seed)
    model = GPT2LMHeadModel(cfg).double()
    files = {}
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if name == "lm_head.weight":
                continue
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            else:
                v = 0.02 * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            blob, held = round_to(v.numpy(), dt)
            p.copy_(torch.from_numpy(held.reshape(p.shape)))
            # The official gpt2 file has no "transformer." prefix.
            files[name[len("transformer."):]] = (dt, p.shape, blob)
        t = cfg["n_positions"]
        for i in range(cfg["n_layer"]):  # buffers that old exports carry
            mask = np.tril(np.ones((t, t))).reshape(1, 1, t, t)
            files["h.%d.attn.bias" % i] = (dt, (1, 1, t, t), round_to(mask, dt)[0])
            files["h.%d.attn.masked_bias" % i] = (dt, (), round_to(np.array(-1e4), dt)[0])
        logits = model(tokens)
    out = os.path.join(work, "hf_" + dt.lower())
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), files)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
    logits.numpy().astype("<f8").tofile(os.path.join(work, "hf_%s_logits.bin" % dt.lower()))
    print("wrote an HF-layout %s GPT-2 (%d tensors with buffers) to %s" % (dt, len(files), out))


def main():
    work, seed = sys.argv[1], int(sys.argv[2])
    raw = np.fromfile(os.path.join(work, "tokens.bin"), dtype="<i4")
    B, T = int(raw[0]), int(raw[1])
    tokens = torch.from_numpy(raw[2:2 + B * T].astype(np.int64).reshape(B, T))
    cfg = load_ours(work, tokens)
    for i, dt in enumerate(("F32", "F16", "BF16")):
        export(work, cfg, tokens, seed + i, dt)


if __name__ == "__main__":
    main()
