# What the train_gpt2 shell tests share, sourced by each: TAP counting
# (ok STATUS TEXT; finish prints the plan and returns the exit status) and
# a token shard in llm.c's format (make_shard FILE: header magic 20240520,
# version 1, count; then 40000 uint16 tokens below 500); same_weights A B:
# two model.safetensors hold the same tensors, bit for bit (their metadata,
# which names the run, may differ); same_state A B: two state.ferry files
# hold the same engine state and run state, bit for bit, but for the run
# identity (16 bytes at 96 of the run state, the last section) and the two
# checksums that cover it (the blob's, and the header's CRC).
# same_engine_state A B: the engine state alone, bit for bit
# (engine/checkpoint.c's layout: the header's groups, step, state size,
# state hash, dtype and flags, the group table and the state; the trainer's
# blob after it, which holds the run's settings, may differ).
# ok STATUS TEXT prints one TAP line whatever TEXT holds: a message quoted
# into it (a program's stderr, several lines) goes on that line with its
# newlines made " | ", so that no line reaches a TAP reader that is not TAP
# (meson calls such lines "Unknown TAP output" and the test suspect).
# need PROGRAM PACKAGE: a test that calls a program the machine lacks stops
# at once ("Bail out!", which fails it) naming the program and the Debian
# package that has it, instead of failing case by case or waiting out its
# time; tools/setup/setup.sh installs every package a test needs.
# losses LOG [AFTER]: the loss of every step record of a --log JSON Lines
# file, in order, as Python prints them (repr), only the steps after AFTER
# when it is given; scales LOG: each step's loss scale and skipped steps
# (scale/skipped), for the f16 runs.
# $private_mounts runs a command in a mount namespace of its own, where it
# may mount a small or read-only file system for a full-disk or read-only
# case: as root `unshare -m` (a chroot, where CI runs the README's commands,
# forbids the user namespace of `unshare -rm`), else `unshare -rm`.
python=/usr/bin/python3
private_mounts="unshare -rm"
[ "$(id -u)" -ne 0 ] || private_mounts="unshare -m"
n=0; failed=0
ok() {
  local text=${2//$'\r'/}
  text=${text%$'\n'}
  text=${text//$'\n'/ | }
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then echo "ok $n - $text"; else echo "not ok $n - $text"; failed=$((failed + 1)); fi
}
finish() { echo "1..$n"; [ "$failed" -eq 0 ]; }
# no_private_mount WHAT: the cases needing a private mount cannot run: as
# root that is a failure (root can always mount, so a skip would hide a
# broken runner, as in a chroot whose "/" is no mount point), else a note.
no_private_mount() {
  if [ "$(id -u)" -eq 0 ]; then
    ok 1 "as root, '$private_mounts' could not mount a tmpfs, so $1"
  else
    echo "# unshare cannot mount a tmpfs here (not root): $1"
  fi
}
need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "Bail out! this test runs '$1', which is not installed: install Debian's package $2 (tools/setup/setup.sh does)"
  exit 1
}
make_shard() {
  $python - "$1" <<'PY'
import struct, sys
n = 40000
tokens = [(i * 7 + (i // 13) * 3) % 500 for i in range(n)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *tokens))
PY
}
same_weights() {
  $python - "$1" "$2" <<'PY'
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
sys.exit(0 if tensors(sys.argv[1]) == tensors(sys.argv[2]) else 1)
PY
}
same_state() {
  $python - "$1" "$2" <<'PY'
import struct, sys
def state(path):
    b = bytearray(open(path, "rb").read())
    groups, = struct.unpack_from("<I", b, 12)
    user, = struct.unpack_from("<Q", b, 24)
    blob = len(b) - user             # the blob ends the file
    if user < 112 or blob < 72 + groups * 72:
        return None
    b[48:56] = bytes(8)              # user_checksum: of the blob
    b[64:68] = bytes(4)              # head_crc: of the header, user_checksum included
    b[blob + 96:blob + 112] = bytes(16)  # the run identity
    return bytes(b)
a, b = state(sys.argv[1]), state(sys.argv[2])
sys.exit(0 if a is not None and a == b else 1)
PY
}
same_engine_state() {
  $python - "$1" "$2" <<'PY'
import struct, sys
def state(path):
    b = open(path, "rb").read()
    groups = struct.unpack("<I", b[12:16])[0]
    user, payload = struct.unpack("<QQ", b[24:40])
    end = 72 + 72 * groups + payload - user # the blob is the payload's last user bytes
    if len(b) < end:
        sys.exit("%s: %d bytes, shorter than its header says (%d)" % (path, len(b), end))
    return b[0:24] + b[32:48] + b[56:64] + b[72:end]
sys.exit(0 if state(sys.argv[1]) == state(sys.argv[2]) else 1)
PY
}
losses() {
  $python -c 'import json,sys; after=int(sys.argv[2]) if len(sys.argv) > 2 else None; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"step\"" in l and "\"loss\"" in l and (after is None or json.loads(l)["step"] > after)))' "$@"
}
scales() { $python -c 'import json,sys; print(" ".join("%g/%d" % (j.get("loss_scale", 0), j["skipped_steps"]) for j in map(json.loads, open(sys.argv[1])) if j["kind"] == "step"))' "$1"; }
