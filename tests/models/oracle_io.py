"""What the PyTorch oracles of the model tests share (gpt2_oracle.py,
llama_oracle.py): torch and numpy imported, or exit 77 (the C test's skip)
without them; the command line; the input file read in order (its magic,
header fields, the batches, the tensors in ferry's layout as float64 leaves
of the graph); the training loop whose losses and first gradients the C
tests compare; and the output file. Each model's definition, the fields of
its header and its optimizer's groups stay in its own script, as does the
documentation of its file format.
"""
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F  # noqa: F401 (for the models)
except Exception as exc:  # torch or numpy missing: the test is skipped
    print(f"# SKIP: cannot import torch/numpy: {exc}")
    sys.exit(77)


def paths(script):
    """INPUT and OUTPUT from the command line."""
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {script} INPUT OUTPUT")
    return sys.argv[1], sys.argv[2]


class Input:
    """An input file, read from its start; `magic` its first 8 bytes."""

    def __init__(self, path, magic):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.path = path
        if self.buf[:8] != magic:
            raise SystemExit(f"{path}: bad magic {self.buf[:8]!r}")
        self.off = 8

    def unpack(self, fmt):
        values = struct.unpack_from(fmt, self.buf, self.off)
        self.off += struct.calcsize(fmt)
        return values

    def version(self, got, want=1):
        if got != want:
            raise SystemExit(f"{self.path}: version {got}, expected {want}")

    def array(self, dtype, count, shape):
        a = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.off).reshape(shape)
        self.off += np.dtype(dtype).itemsize * count
        return a

    def batches(self, steps, B, T):
        """tokens and targets [steps, B, T] (int32 in the file), as int64 tensors."""
        n = steps * B * T
        tokens = self.array("<i4", n, (steps, B, T))
        targets = self.array("<i4", n, (steps, B, T))
        return torch.tensor(tokens.astype(np.int64)), torch.tensor(targets.astype(np.int64))

    def tensors(self, count, with_decay):
        """(name, float64 leaf tensor, decay) for each of `count` tensors:
        int32 name_len, the name, int32 ndim, int32 shape[ndim], with_decay:
        int32 decay, then the float32 data. decay is True without the field."""
        out = []
        for _ in range(count):
            (nl,) = self.unpack("<i")
            name = self.buf[self.off:self.off + nl].decode()
            self.off += nl
            (ndim,) = self.unpack("<i")
            shape = self.unpack(f"<{ndim}i")
            decay = self.unpack("<i")[0] if with_decay else 1
            data = self.array("<f4", int(np.prod(shape)), shape)
            out.append((name, torch.tensor(data, dtype=torch.float64, requires_grad=True), bool(decay)))
        return out

    def end(self):
        if self.off != len(self.buf):
            raise SystemExit(f"{self.path}: {len(self.buf) - self.off} trailing bytes")


def train(loss_of, params, optim, tokens, targets):
    """Each step: zero grads, loss_of(tokens[step], targets[step]), backward,
    optim.step(). The losses before each step and the gradients at step 0."""
    losses, grads0 = [], None
    for step in range(tokens.shape[0]):
        optim.zero_grad(set_to_none=False)
        loss = loss_of(tokens[step], targets[step])
        loss.backward()
        losses.append(loss.item())
        if grads0 is None:
            grads0 = [t.grad.detach().clone() for t in params]
        optim.step()
    return losses, grads0


def write_output(path, magic, header, losses, grads, extra=()):
    """magic, int32 header fields, float64 losses, each extra tensor and
    each gradient as float64."""
    with open(path, "wb") as f:
        f.write(magic)
        f.write(struct.pack(f"<{len(header)}i", *header))
        f.write(np.asarray(losses, dtype="<f8").tobytes())
        for t in list(extra) + list(grads):
            f.write(t.numpy().astype("<f8").tobytes())
