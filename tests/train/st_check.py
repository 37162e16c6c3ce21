# Reads a safetensors file written by test_safetensors with a few lines of its
# own (8-byte little-endian length, JSON header, raw bytes) and checks every
# value against the formulas the C test used. Prints "OK" or the mismatch;
# exit 77 when numpy is missing.
import json, struct, sys
try:
    import numpy as np
except ImportError:
    print("numpy unavailable"); sys.exit(77)

if sys.argv[1] == "--write":
    # A file as another writer might lay it out: no padding, data in the
    # reverse of the header's order.
    a = np.array([[1, 2], [3, 4]], dtype="<f4").tobytes()
    b = np.array([7, 8, 9], dtype="<i8").tobytes()
    hdr = json.dumps({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [len(b), len(b) + len(a)]},
                      "b": {"dtype": "I64", "shape": [3], "data_offsets": [0, len(b)]}}).encode()
    if len(hdr) % 8 == 0:
        hdr += b" "  # keep it unaligned on purpose
    open(sys.argv[2], "wb").write(struct.pack("<Q", len(hdr)) + hdr + b + a)
    sys.exit(0)

path = sys.argv[1]
raw = open(path, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
assert (8 + n) % 8 == 0, "header not padded to 8 bytes"
assert header["__metadata__"] == {"format": "pt", "step": "42"}, header["__metadata__"]

def load(name, dtype):
    e = header[name]
    b, end = e["data_offsets"]
    count = int(np.prod(e["shape"])) if e["shape"] else 1
    if dtype == "bf16":
        u = np.frombuffer(data[b:end], dtype="<u2").astype(np.uint32) << 16
        arr = u.view(np.float32)
    else:
        arr = np.frombuffer(data[b:end], dtype=dtype)
    assert arr.size == count, (name, arr.size, count)
    return arr.reshape(e["shape"]), e

i = np.arange(24, dtype=np.float64)
checks = [
    ("w.f32", "<f4", "F32", [2, 3, 4], (i * 3 - 7) / 4),
    ("w.bf16", "bf16", "BF16", [4, 6], (i - 11) / 2),
    ("w.f16", "<f2", "F16", [24], (i - 5) / 8),
    ("w.i32", "<i4", "I32", [3, 8], i * 1000 - 5),
    ("w.i64", "<i8", "I64", [2, 12], i * 2.0**40 - 3),
]
for name, dt, dname, shape, want in checks:
    arr, e = load(name, dt)
    assert e["dtype"] == dname and e["shape"] == shape, (name, e)
    got = arr.astype(np.float64).reshape(-1)
    if not np.array_equal(got, want):
        print("MISMATCH", name, got[:5], want[:5]); sys.exit(1)
scalar, e = load("scalar", "<f4")
assert e["shape"] == [] and float(scalar) == 1.5, (e, scalar)
empty, e = load("empty", "<f4")
assert e["shape"] == [0, 3] and empty.size == 0
print("OK", len(header) - 1, "tensors", file=sys.stderr)
