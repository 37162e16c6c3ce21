#!/usr/bin/python3
"""ferry-train on Hugging Face folders against PyTorch, end to end (TAP).

Usage: test_hf_llama_e2e.py FERRY_TRAIN LLAMA_ORACLE_PY

For three layouts a user brings, each a folder written here by hand (a
config.json as transformers writes it, a model.safetensors written by the
few lines below, not by ferry):
  - llama:   Llama 3's layout (grouped-query heads, an untied head, rope
             scaling of type llama3), F32 weights;
  - mistral: one key/value head (multi-query), rope_theta 1e6, F16 weights;
  - qwen2:   q/k/v biases, a tied head, BF16 weights;
it checks that
  1. `ferry-train --init-from DIR --eval-only` logs the validation loss that
     the float64 PyTorch model of tests/models/llama_oracle.py (written from
     transformers' model definitions, not from ferry) computes from the same
     values on the same batches, and that this comparison can tell a wrong
     model from the right one (the oracle with rope_theta changed lands far
     outside the tolerance);
  2. after 2 steps of training from the folder, the checkpoint ferry saves
     is a Hugging Face folder PyTorch reads back: config.json has the source
     model's fields, model.safetensors has exactly the source's tensor names
     and shapes (and new values), and the oracle's loss of those weights is
     the one `ferry-train --resume RUN --eval-only` logs.
Prints "1..0 # SKIP" when torch or numpy cannot be imported.
"""
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except Exception as exc:  # the oracle needs both
    print(f"1..0 # SKIP cannot import torch/numpy: {exc}")
    sys.exit(0)

B, T, EVAL_BATCHES = 2, 32, 3
TOL = 2e-6  # relative: ferry computes in fp32 (seen: 5e-8), the oracle in float64
checks = []


def ok(cond, what):
    checks.append(bool(cond))
    print(f"{'ok' if cond else 'not ok'} {len(checks)} - {what}", flush=True)


def diag(text):
    for line in str(text).splitlines():
        print(f"# {line}")


# ---- the folders, written here ----

LAYOUTS = {
    "llama": dict(config=dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=128,
                              intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, vocab_size=320, max_position_embeddings=256,
                              rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                              rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                high_freq_factor=4.0, original_max_position_embeddings=64),
                              hidden_act="silu", torch_dtype="float32", bos_token_id=1, eos_token_id=2),
                  dtype="F32"),
    "mistral": dict(config=dict(model_type="mistral", architectures=["MistralForCausalLM"], hidden_size=128,
                                intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=1, vocab_size=300, max_position_embeddings=512,
                                rms_norm_eps=1e-5, rope_theta=1000000.0, tie_word_embeddings=False,
                                sliding_window=None, hidden_act="silu", torch_dtype="float16"),
                    dtype="F16"),
    "qwen2": dict(config=dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], hidden_size=96,
                              intermediate_size=160, num_hidden_layers=2, num_attention_heads=6,
                              num_key_value_heads=2, vocab_size=352, max_position_embeddings=128,
                              rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                              use_sliding_window=False, sliding_window=None, max_window_layers=2,
                              hidden_act="silu", torch_dtype="bfloat16"),
                  dtype="BF16"),
}


def tensor_shapes(c):
    """The Hugging Face tensors of a config: name -> shape, as transformers names them."""
    C, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    NH, NKV = c["num_attention_heads"], c["num_key_value_heads"]
    HS = C // NH
    bias = c["model_type"] == "qwen2"
    shapes = {"model.embed_tokens.weight": (V, C)}
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        shapes[p + "input_layernorm.weight"] = (C,)
        shapes[p + "self_attn.q_proj.weight"] = (NH * HS, C)
        shapes[p + "self_attn.k_proj.weight"] = (NKV * HS, C)
        shapes[p + "self_attn.v_proj.weight"] = (NKV * HS, C)
        if bias:
            shapes[p + "self_attn.q_proj.bias"] = (NH * HS,)
            shapes[p + "self_attn.k_proj.bias"] = (NKV * HS,)
            shapes[p + "self_attn.v_proj.bias"] = (NKV * HS,)
        shapes[p + "self_attn.o_proj.weight"] = (C, NH * HS)
        shapes[p + "post_attention_layernorm.weight"] = (C,)
        shapes[p + "mlp.gate_proj.weight"] = (I, C)
        shapes[p + "mlp.up_proj.weight"] = (I, C)
        shapes[p + "mlp.down_proj.weight"] = (C, I)
    shapes["model.norm.weight"] = (C,)
    if not c["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def draw_weights(c, seed):
    """float32 values, large enough that attention's pattern (and so rope's
    positions) moves the loss: norms near 1, matrices of std 0.35/sqrt(in)*4."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in tensor_shapes(c).items():
        if name.endswith("norm.weight"):
            out[name] = (1.0 + 0.2 * rng.standard_normal(shape)).astype(np.float32)
        elif name.endswith(".bias"):
            out[name] = (0.3 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (1.4 / np.sqrt(shape[-1]) * rng.standard_normal(shape)).astype(np.float32)
    return out


def to_bf16_bits(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def as_stored(x, dtype):
    """The bytes of x in the file's dtype, and the float32 values they hold."""
    if dtype == "F32":
        return x.astype("<f4").tobytes(), x.astype(np.float32)
    if dtype == "F16":
        h = x.astype("<f2")
        return h.tobytes(), h.astype(np.float32)
    bits = to_bf16_bits(x)
    return bits.astype("<u2").tobytes(), (bits.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, dtype):
    """tensors: name -> float32 array; returns name -> the values as stored."""
    header, blobs, stored, off = {"__metadata__": {"format": "pt"}}, [], {}, 0
    for name in sorted(tensors):
        data, values = as_stored(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        stored[name] = values
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return stored


def read_safetensors(path):
    """name -> float32 array (F32, F16 or BF16 tensors)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8:8 + n])
    base, out = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = buf[base + b:base + e]
        if info["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif info["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif info["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{path}: {name} has dtype {info['dtype']}")
        out[name] = a.reshape(info["shape"])
    return out


def write_shard(path, tokens):
    """llm.c's GPT-2 token shard: 256 int32 (magic 20240520, version 1, count), uint16 tokens."""
    head = np.zeros(256, dtype="<i4")
    head[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(head.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


# ---- the oracle ----

def load_oracle(path):
    spec = importlib.util.spec_from_file_location("llama_oracle", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def oracle_cfg(c):
    rs = c.get("rope_scaling") or {}
    kind = {"": 0, "default": 0, "linear": 1, "llama3": 2}[rs.get("rope_type", rs.get("type", ""))]
    return dict(L=c["num_hidden_layers"], NH=c["num_attention_heads"], NKV=c["num_key_value_heads"],
                C=c["hidden_size"], HS=c["hidden_size"] // c["num_attention_heads"], I=c["intermediate_size"],
                V=c["vocab_size"], Vp=c["vocab_size"], maxT=c["max_position_embeddings"],
                qkv_bias=c["model_type"] == "qwen2", tied=c["tie_word_embeddings"], eps=c["rms_norm_eps"],
                theta=c["rope_theta"], rope_kind=kind, factor=rs.get("factor", 1.0),
                low_freq_factor=rs.get("low_freq_factor", 1.0), high_freq_factor=rs.get("high_freq_factor", 4.0),
                original_max_position_embeddings=rs.get("original_max_position_embeddings", 0))


def oracle_eval(oracle, cfg, weights, val_tokens):
    """The trainer's validation loss: the mean over the first EVAL_BATCHES
    windows of B*T+1 tokens of each batch's mean cross entropy."""
    P = {n: torch.tensor(v, dtype=torch.float64) for n, v in weights.items()}
    losses = []
    with torch.no_grad():
        for i in range(EVAL_BATCHES):
            w = np.asarray(val_tokens[i * B * T:(i + 1) * B * T + 1], dtype=np.int64)
            inputs = torch.tensor(w[:-1].reshape(B, T))
            targets = torch.tensor(w[1:].reshape(B, T))
            losses.append(oracle.llama_loss(cfg, P, inputs, targets).item())
    return sum(losses) / len(losses)


# ---- ferry ----

def run_ferry(ferry, args, log):
    cmd = [ferry] + args + ["--log", log, "--backend", "host", "--threads", "2", "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    records = []
    if os.path.exists(log):
        records = [json.loads(line) for line in open(log) if line.strip()]
    return r.returncode, records, r.stderr.strip()


def eval_loss(records):
    evals = [r["val_loss"] for r in records if r.get("kind") == "eval"]
    return evals[-1] if evals else None


def close(a, b):
    return a is not None and b is not None and abs(a - b) <= TOL * max(1.0, abs(b))


def check_layout(ferry, oracle, work, name, layout, seed):
    c, dtype = layout["config"], layout["dtype"]
    src = os.path.join(work, name + "-hf")
    os.makedirs(src)
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    stored = write_safetensors(os.path.join(src, "model.safetensors"), draw_weights(c, seed), dtype)
    rng = np.random.default_rng(seed + 1)
    V = c["vocab_size"]
    val, train = rng.integers(0, V, 4000), rng.integers(0, V, 4000)
    write_shard(os.path.join(work, name + "-val.bin"), val)
    write_shard(os.path.join(work, name + "-train.bin"), train)
    what = f"{name} ({dtype} weights)"

    # 1. the folder's weights evaluated by ferry and by PyTorch
    cfg = oracle_cfg(c)
    want = oracle_eval(oracle, cfg, stored, val)
    common = ["--val-data", os.path.join(work, name + "-val.bin"), "--eval-batches", str(EVAL_BATCHES),
              "--seq", str(T), "--batch", str(B)]
    rc, records, err = run_ferry(ferry, ["--init-from", src, "--eval-only"] + common,
                                 os.path.join(work, name + "-eval.jsonl"))
    got = eval_loss(records)
    ok(rc == 0 and close(got, want),
       f"{what}: --init-from the folder --eval-only logs val loss {got} where PyTorch (float64) computes "
       f"{want:.8f} (exit {rc}) {err}")
    wrong = dict(cfg, theta=cfg["theta"] / 10)
    off = oracle_eval(oracle, wrong, stored, val)
    ok(got is not None and abs(off - got) > 100 * TOL * max(1.0, abs(want)),
       f"{what}: and the comparison tells a wrong model: rope_theta / 10 moves PyTorch's loss by "
       f"{abs(off - want):.2e}, {abs(off - want) / (TOL * max(1.0, abs(want))):.0f} x the tolerance")

    # 2. trained from the folder, saved, read back
    run = os.path.join(work, name + "-run")
    rc, records, err = run_ferry(ferry, ["--init-from", src, "--data", os.path.join(work, name + "-train.bin"),
                                         "--steps", "2", "--lr", "1e-3", "--warmup", "0", "--seq", str(T),
                                         "--batch", str(B), "--checkpoint-dir", run],
                                 os.path.join(work, name + "-train.jsonl"))
    saved = os.path.join(run, "latest")
    ok(rc == 0 and os.path.isfile(os.path.join(saved, "model.safetensors")),
       f"{what}: 2 steps from the folder train and save a checkpoint (exit {rc}) {err}")
    if rc != 0 or not os.path.isfile(os.path.join(saved, "model.safetensors")):
        return
    back = json.load(open(os.path.join(saved, "config.json")))
    keys = ["model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
            "tie_word_embeddings"]
    differ = [k for k in keys if back.get(k) != c[k]]
    if c.get("rope_scaling"):
        differ += [f"rope_scaling.{k}" for k, v in c["rope_scaling"].items()
                   if (back.get("rope_scaling") or {}).get(k) != v]
    ok(not differ and back.get("architectures") == c["architectures"],
       f"{what}: the saved config.json has the source's fields and architectures (differing: {differ})")
    weights = read_safetensors(os.path.join(saved, "model.safetensors"))
    shapes = {n: tuple(v.shape) for n, v in weights.items()}
    ok(shapes == tensor_shapes(c),
       f"{what}: the saved model.safetensors has exactly the source's tensor names and shapes "
       f"({len(shapes)} tensors; missing {sorted(set(tensor_shapes(c)) - set(shapes))}, "
       f"extra {sorted(set(shapes) - set(tensor_shapes(c)))})")
    if shapes != tensor_shapes(c):
        return
    moved = max(float(np.abs(weights[n] - stored[n]).max()) for n in weights)
    rc, records, err = run_ferry(ferry, ["--resume", run, "--eval-only"] + common,
                                 os.path.join(work, name + "-eval2.jsonl"))
    got2, want2 = eval_loss(records), oracle_eval(oracle, cfg, weights, val)
    ok(rc == 0 and moved > 0 and close(got2, want2) and abs(want2 - want) > 100 * TOL,
       f"{what}: PyTorch reads the trained weights back (largest change {moved:.2e}) and computes val loss "
       f"{want2:.8f} (was {want:.8f}), the one ferry-train --resume --eval-only logs: {got2} (exit {rc}) {err}")


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: test_hf_llama_e2e.py FERRY_TRAIN LLAMA_ORACLE_PY")
    ferry, oracle = sys.argv[1], load_oracle(sys.argv[2])
    torch.manual_seed(0)
    print(f"1..{6 * len(LAYOUTS)}", flush=True)
    work = tempfile.mkdtemp(prefix="ferry-hf-e2e-")
    try:
        for i, (name, layout) in enumerate(LAYOUTS.items()):
            n = len(checks)
            check_layout(ferry, oracle, work, name, layout, 1000 + i)
            while len(checks) < n + 6:  # a layout that stopped early fails its remaining checks
                ok(False, f"{name}: not reached (an earlier check of this layout failed)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
