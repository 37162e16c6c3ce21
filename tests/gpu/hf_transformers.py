# The Hugging Face side of tests/gpu/test_hf_gpu.c: loads the checkpoint
# ferry wrote with transformers' own GPT2LMHeadModel.from_pretrained (not a
# model of ours) and prints its loss on the tokens the C side wrote, in
# float64 from float32 weights.
#
# Usage: hf_transformers.py CHECKPOINT_DIR TOKENS_FILE
#   TOKENS_FILE: int32 B, T, then B*T input tokens, then B*T targets
#   (-1 = ignored). Prints "loss X": the mean cross-entropy over the valid
#   targets.
# Exit 3 when torch, numpy or transformers cannot be imported: on the GPU
# machine that is a failure of its set-up, which the C side reports as one.
import os
import sys

# The GPU machine reaches no network: never let transformers wait on the hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

try:
    import numpy as np
    import torch
    import transformers
    from transformers import GPT2LMHeadModel
except ImportError as e:
    print("hf_transformers.py: cannot import torch, numpy or transformers: %s" % e)
    sys.exit(3)


def main():
    ckpt, tokens_path = sys.argv[1], sys.argv[2]
    raw = np.fromfile(tokens_path, dtype="<i4")
    B, T = int(raw[0]), int(raw[1])
    if raw.size != 2 + 2 * B * T:
        sys.exit("%s: %d values, expected %d for B=%d T=%d" % (tokens_path, raw.size, 2 + 2 * B * T, B, T))
    inputs = torch.from_numpy(raw[2:2 + B * T].astype(np.int64).reshape(B, T))
    targets = torch.from_numpy(raw[2 + B * T:].astype(np.int64).reshape(B * T))
    model = GPT2LMHeadModel.from_pretrained(ckpt).float().eval()
    with torch.no_grad():
        logits = model(input_ids=inputs).logits.double()
    loss = torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets, ignore_index=-1)
    print("transformers %s, torch %s: GPT2LMHeadModel.from_pretrained('%s'): %d layers, vocab %d, "
          "%d parameters" % (transformers.__version__, torch.__version__, ckpt, model.config.n_layer,
                             model.config.vocab_size, sum(p.numel() for p in model.parameters())))
    print("loss %.9f" % loss.item())


if __name__ == "__main__":
    main()
