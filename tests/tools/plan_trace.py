"""A memory trace's plan read here from the bytes docs/memprof.md lays out,
for test_plan_check.sh, independently of memprof's reader:

  plan_trace.py plant KIND IN OUT   writes IN with one fault planted, every
                                    record it changes given its CRC-32C again,
                                    and prints the words memprof must say:
                                    moved (a planned buffer's allocation and
                                    free 256 bytes up), resized (its size 256
                                    bytes more), shared (a group's stay moved
                                    into a slot of its kind another group
                                    holds then)
  plan_trace.py svg TRACE SVG       checks the address-space panel of SVG
                                    against TRACE: every planned buffer drawn
                                    once (thin neighbours as one rectangle
                                    counting them), each alone at its offset
                                    with its size, each slot at its offset,
                                    every stay of a group; prints what it
                                    counted, exits 1 on a difference
"""
import struct
import sys
import xml.etree.ElementTree as ET

HEADER, RECORD = 32, 96
ALLOC, FREE, REGION, PLANNED, OCCUPY, VACATE = 1, 2, 8, 9, 10, 11
CATEGORIES = ["params", "grads", "optimizer", "activations", "staging", "workspace", "other", "nvme_window"]


def crc32c(data):
    """The Castagnoli CRC, bit by bit (reflected 0x82F63B78, ~0 in and out)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


class Record:
    def __init__(self, raw):
        (self.t, self.kind, self.pool, self.cat, self.role, self.crc, self.bytes, self.addr, self.step,
         self.value) = struct.unpack_from("<QBBBBIQQqd", raw)
        self.name = raw[48:].split(b"\0", 1)[0].decode()


def read(path):
    b = bytearray(open(path, "rb").read())
    assert b[:8] == b"FERRYMEM" and struct.unpack_from("<I", b, 8)[0] == 3, "%s: not a version-3 trace" % path
    n = (len(b) - HEADER) // RECORD
    return b, [Record(b[HEADER + i * RECORD:HEADER + (i + 1) * RECORD]) for i in range(n)]


def put(b, i, **fields):
    """Record i with some fields changed, its CRC recomputed (seeded with its index)."""
    at = HEADER + i * RECORD
    offsets = {"bytes": (16, "<Q"), "addr": (24, "<Q")}
    for k, v in fields.items():
        off, fmt = offsets[k]
        struct.pack_into(fmt, b, at + off, v)
    struct.pack_into("<I", b, at + 12, 0)
    struct.pack_into("<I", b, at + 12, crc32c(struct.pack("<Q", i) + bytes(b[at:at + RECORD])))


def region(recs):
    r = next(r for r in recs if r.kind == REGION)
    return r.addr, r.bytes


def plant(kind, src, dst):
    b, recs = read(src)
    base, _ = region(recs)
    if kind in ("moved", "resized"):
        # the first planned buffer (not a slot or a range) that was allocated
        for p in (r for r in recs if r.kind == PLANNED and r.role == 0):
            hits = [i for i, r in enumerate(recs)
                    if r.kind in (ALLOC, FREE) and r.pool == 0 and r.addr == base + p.addr]
            if hits:
                break
        else:
            sys.exit("no planned buffer was allocated")
        for i in hits:
            if kind == "moved":
                put(b, i, addr=base + p.addr + 256)
            else:
                put(b, i, bytes=recs[i].bytes + 256)
        if kind == "moved":
            print("'%s': planned at offset %d (%d bytes, %s), traced at offset %d" %
                  (p.name, p.addr, p.bytes, CATEGORIES[p.cat], p.addr + 256))
        else:
            print("'%s' at offset %d: planned with %d bytes of %s, traced with %d bytes" %
                  (p.name, p.addr, p.bytes, CATEGORIES[p.cat], p.bytes + 256))
    elif kind == "shared":
        held = {}  # slot address -> (group, category, bytes) of its stay now
        for i, r in enumerate(recs):
            if r.kind == VACATE:
                held.pop(r.addr, None)
            if r.kind != OCCUPY:
                continue
            other = [a for a, h in held.items() if h[1] == r.cat and h[0] != r.step and h[2] == r.bytes]
            if other:
                slot = other[0]
                names = {q.addr: q.name for q in recs if q.kind == PLANNED}
                put(b, i, addr=slot)
                vac = next((k for k in range(i + 1, len(recs)) if recs[k].kind == VACATE and
                            recs[k].addr == r.addr and recs[k].step == r.step), None)
                if vac is not None:  # its stay ends in the slot it took
                    put(b, vac, addr=slot)
                print("'%s' (group %d) takes slot '%s' at offset %d" %
                      (r.name, r.step, names[slot - base], slot - base))
                print("while '%s' (group %d) holds it" % (held[slot][3], held[slot][0]))
                break
            held[r.addr] = (r.step, r.cat, r.bytes, r.name)
        else:
            sys.exit("no stay began while another group held a slot of its kind")
    else:
        sys.exit("unknown fault " + kind)
    open(dst, "wb").write(b)


def check_svg(trace, svg):
    _, recs = read(trace)
    planned = [r for r in recs if r.kind == PLANNED]
    stays = sum(1 for r in recs if r.kind == OCCUPY)
    ns = "{http://www.w3.org/2000/svg}"
    rects = [e for e in ET.parse(svg).iter(ns + "rect") if e.get("class")]
    count = lambda cls: sum(int(e.get("data-count", "1")) for e in rects if e.get("class") == cls)
    drawn = count("planned") + count("slot") + count("range")
    bad = []
    if drawn != len(planned):
        bad.append("%d planned buffers drawn, the trace plans %d" % (drawn, len(planned)))
    if count("occupancy") != stays:
        bad.append("%d stays drawn, the trace has %d" % (count("occupancy"), stays))
    where = {(r.addr, r.bytes) for r in planned}
    for e in rects:
        if e.get("class") in ("planned", "slot", "range") and e.get("data-count", "1") == "1":
            if (int(e.get("data-offset")), int(e.get("data-bytes"))) not in where:
                bad.append("a %s at offset %s of %s bytes, which no planned buffer is" %
                           (e.get("class"), e.get("data-offset"), e.get("data-bytes")))
    slots = {r.addr for r in planned if r.role in (1, 2)}
    if {int(e.get("data-offset")) for e in rects if e.get("class") == "slot"} != slots:
        bad.append("the slots drawn are not at the planned slots' offsets")
    print("# %d planned buffers in %d rectangles (%d slots); %d stays of groups" %
          (drawn, sum(1 for e in rects if e.get("class") in ("planned", "slot", "range")), len(slots), stays))
    for line in bad:
        print("# " + line)
    sys.exit(1 if bad or not planned else 0)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "plant":
        plant(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 4 and sys.argv[1] == "svg":
        check_svg(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
