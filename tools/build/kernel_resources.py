#!/usr/bin/env python3
"""Every kernel's resources on every card it is built for, against what the
card allows at the launches the product makes: the check that a launch a
card would refuse ("too many resources requested for launch"), or a kernel
that spills or keeps arrays in local memory, is caught at build time, not
on the card.

Reads
  - ptxas -v output (nvcc -Xptxas -v) of the kernels' sources, any number
    of files, each holding one or more cards' compiles: per kernel entry and
    card, its registers a thread, static shared memory, stack frame and
    spill stores and loads;
  - the simulated device's launch log (FERRY_CUDASIM_LAUNCH_LOG, written by
    the test suite's runs): per launch shape, the card simulated, the
    kernel, threads a block, dynamic shared memory, __launch_bounds__ (0:
    none), the launch site, and the program and address of the kernel's
    instantiation, which `nm` turns into its name with its template
    arguments, and the program's mtime then: a line from before the
    program was relinked (the log grows across runs) names its kernel
    alone, since the address may now be another instantiation's.
A kernel instantiation (`k<__nv_bfloat16, 4, 64>`) is held to the largest
block its launches used on any card, and to the largest dynamic shared
memory they used on that card; an instantiation the log never launched, to
those of its kernel's other instantiations. It is on the training step's
path when a program that runs training steps launched it (train_gpt2, the
engine's, data parallelism's and the checkpoint's tests on the simulated
device, on RTX 3090, RTX 4090 and T4 limits), and then on every card it is
compiled for: the A100's and H100's machine code too, which no simulated
training run covers.

Checks, each failure a sentence naming the kernel, the card and the numbers:
  - registers: a warp's registers are allocated in units of 256
    (ceil(regs x 32 / 256) x 256), and the block's warps together may hold
    at most 65,536 (every card from sm_70 to sm_90);
  - a kernel launched with more than 256 threads declares __launch_bounds__
    (without it ptxas may give it up to 255 registers, and 256 threads are
    all that 255 registers a thread guarantee);
  - static shared memory at most 48 KiB, and static plus the largest dynamic
    shared memory launched on a card at most that card's opt-in limit;
  - no spill stores or loads, and no stack frame (local memory: an array
    indexed at run time, a call's frame), in an instantiation on the step's
    path, but a kernel of STACK_ALLOWED within its bytes there (the
    others' are reported, not failed);
  - every kernel compiled was launched by the suite (else its block size is
    unknown and nothing above can be checked).
Prints a line per card (kernels, the largest registers x block, the largest
shared memory, spills, stack frames) and exits 1 on any failure.

usage: kernel_resources.py --launch-log FILE [--step KERNEL]... [--occupancy REGEX]
                           [--floors SOURCE... --] PTXAS_OUTPUT...
  --step KERNEL      every instantiation of KERNEL is on the step's path too
  --floors SOURCE... the kernels' sources: a comment "occupancy floor: N
                     warps/SM: `REGEX`" holds every instantiation whose name
                     REGEX matches whole to at least N warps an SM at its
                     largest launch, on every card it can launch on
                     ("N warps/SM from sm_M: `REGEX`": on sm_M and up, for
                     a kernel that traps below M); a floor that names no
                     kernel compiled fails too
  --occupancy REGEX  also print, for each instantiation whose name matches,
                     a markdown table of its registers, stack frame, block
                     and the warps an SM holds on each card (by registers,
                     shared memory, threads and blocks, whichever binds
                     first), at the largest launch the log has of it (on
                     that card, else on any); "-" where its shared memory
                     is over the card's. Instantiations the log never
                     launched are left out. Pass the outputs of the cards
                     a kernel is written for (an ARCH 75 attention kernel
                     compiles to a trap on sm_80).
"""
import argparse
import os
import re
import subprocess
import sys

REGS_PER_BLOCK = 65536
REG_UNIT = 256            # registers are allocated per warp in units of 256
STATIC_SMEM = 48 * 1024
BOUNDS_NEEDED_ABOVE = 256
# Shared memory a block may have with the opt-in (cudaFuncSetAttribute), per
# card: NVIDIA's table of compute capabilities (dev/cudasim/arch.cpp holds
# the same numbers for the simulated device; the check here is independent).
OPTIN_SMEM = {70: 96 * 1024, 75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}
# For --occupancy, from the same table: shared memory an SM has for blocks,
# what the system reserves of it per block, and the warps and blocks an SM
# may hold at once.
SM_SMEM = {70: 96 * 1024, 75: 64 * 1024, 80: 164 * 1024, 86: 100 * 1024, 89: 100 * 1024, 90: 228 * 1024}
SMEM_RESERVED = {70: 0, 75: 0, 80: 1024, 86: 1024, 89: 1024, 90: 1024}
SM_WARPS = {70: 64, 75: 32, 80: 64, 86: 48, 89: 48, 90: 64}
SM_BLOCKS = {70: 32, 75: 16, 80: 32, 86: 16, 89: 24, 90: 32}
# The simulated device's programs that run training steps: what they launch
# is on the step's path.
STEP_PROGRAMS = ("train_gpt2_sim", "test_engine_sim", "test_engine_gpu_sim", "test_dp_sim", "test_dp_gpu_sim",
                 "test_hf_gpu_sim", "test_split_sim")
# Kernels on the step's path whose machine code may keep a stack frame, by
# name: the most bytes it may have on any card and why. Nothing else on the
# path may have one.
STACK_ALLOWED = {
    # sincosf's slow path (Payne-Hanek's reduction, only for |angle| >
    # 105615, i.e. positions past 105615 at inv_freq 1) keeps an array of
    # the angle's bits on the stack, 32 bytes on every card; every smaller
    # angle takes the fast path, which touches none (backend/ops/rope.cu).
    "rope_forward_kernel": (32, "sincosf's Payne-Hanek reduction for angles above 105615"),
    "rope_backward_kernel": (32, "sincosf's Payne-Hanek reduction for angles above 105615"),
    # generation's rotation of the new token, the same sincosf (backend/ops/attention_decode.cu)
    "kv_append_kernel": (32, "sincosf's Payne-Hanek reduction for angles above 105615"),
}


def read_ptxas(paths):
    """{(arch, mangled): {regs, smem, stack, spill_st, spill_ld}} for kernel entries."""
    out, entry = {}, {}
    for path in paths:
        fn_arch = None
        current = None
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.search(r"Compiling entry function '([^']+)' for 'sm_(\d+)'", line)
                if m:
                    current = (int(m.group(2)), m.group(1))
                    out[current] = {"regs": 0, "smem": 0, "stack": 0, "spill_st": 0, "spill_ld": 0}
                    continue
                m = re.search(r"Function properties for (\S+)", line)
                if m:
                    fn_arch = current if current and current[1] == m.group(1) else None
                    continue
                m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
                if m and fn_arch:
                    r = out[fn_arch]
                    r["stack"], r["spill_st"], r["spill_ld"] = (int(g) for g in m.groups())
                    continue
                m = re.search(r"Used (\d+) registers", line)
                if m and current:
                    r = out[current]
                    r["regs"] = int(m.group(1))
                    s = re.search(r"(\d+) bytes smem", line)
                    r["smem"] = int(s.group(1)) if s else 0
                    current = None
    return out


def demangle(names):
    if not names:
        return {}
    p = subprocess.run(["c++filt"], input="\n".join(names) + "\n", stdout=subprocess.PIPE, text=True, check=True)
    return dict(zip(names, p.stdout.splitlines()))


def split_name(signature):
    """'void (anonymous namespace)::k<T, 2>(T*, int)' -> ('k', 'k<T, 2>')."""
    s = signature.replace("(anonymous namespace)::", "")
    depth, cut, tmpl = 0, len(s), None
    for i, ch in enumerate(s):
        if ch == "<":
            if depth == 0 and tmpl is None:
                tmpl = i
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = s[:cut].strip()
    start = tmpl if tmpl is not None and tmpl < cut else len(head)
    name = re.split(r"[\s:]+", head[:start].strip())[-1]
    return name, name + head[start:]


def base_name(signature):
    return split_name(signature)[0]


def symbols(obj, cache={}):
    """{address: demangled name} of an object's functions, by nm."""
    if obj not in cache:
        cache[obj] = {}
        if os.path.isfile(obj):
            p = subprocess.run(["nm", "-C", "--defined-only", obj], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
            for line in p.stdout.splitlines():
                parts = line.split(" ", 2)
                if len(parts) == 3 and parts[1] in "tTwW":
                    cache[obj][int(parts[0], 16)] = parts[2]
    return cache[obj]


def mtime_of(path):
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return None


def read_launches(path):
    """{key: {"threads", "bounds", "dyn": {arch: bytes}, "sites", "step"}} by kernel name and by
    instantiation (where the line names its program and address); "step": the cards on which a
    training program launched it."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) not in (6, 8, 9) or not parts[0].startswith("sm_"):
                sys.exit("kernel_resources: %s:%d is not a launch log line: %r" % (path, n, line))
            arch, name, threads, dyn, bounds, site = parts[:6]
            keys = [base_name(name)]
            step = False
            if len(parts) >= 8:
                current = len(parts) == 8 or mtime_of(parts[6]) == int(parts[8])
                sym = symbols(parts[6]).get(int(parts[7], 16)) if current else None
                if sym and base_name(sym) == keys[0]:
                    keys.append(split_name(sym)[1])
                step = os.path.basename(parts[6]) in STEP_PROGRAMS
            for key in keys:
                k = out.setdefault(key, {"threads": 0, "bounds": 0, "dyn": {}, "sites": set(), "step": set()})
                k["threads"] = max(k["threads"], int(threads))
                k["bounds"] = max(k["bounds"], int(bounds))
                a = int(arch[3:])
                k["dyn"][a] = max(k["dyn"].get(a, 0), int(dyn))
                k["sites"].add(site)
                if step:
                    k["step"].add(a)
    return out


def regs_needed(regs, threads):
    per_warp = -(-regs * 32 // REG_UNIT) * REG_UNIT
    return -(-threads // 32) * per_warp


def occupancy(arch, regs, threads, smem):
    """(blocks an SM holds, what limits it) for a kernel of `regs` registers a
    thread launched with `threads` a block and `smem` bytes of shared memory."""
    warps = -(-threads // 32)
    per_warp = -(-regs * 32 // REG_UNIT) * REG_UNIT
    limits = [(SM_BLOCKS[arch], "blocks an SM"), (SM_WARPS[arch] // warps, "warps an SM")]
    if per_warp:
        limits.append(((REGS_PER_BLOCK // per_warp) // warps, "registers"))
    if smem:
        limits.append((SM_SMEM[arch] // (smem + SMEM_RESERVED[arch]), "shared memory"))
    return min(limits, key=lambda l: l[0])  # on a tie, the first named


def occupancy_table(res, launches, names, pattern):
    """Markdown: a row per matching instantiation, a column per card."""
    archs = sorted({a for a, _ in res if a in SM_WARPS})
    rows = {}
    for (arch, mangled), r in res.items():
        name, inst = split_name(names.get(mangled, mangled))
        L = launches.get(inst)
        if not re.search(pattern, inst) or L is None or arch not in SM_WARPS:
            continue
        smem = r["smem"] + L["dyn"].get(arch, max(L["dyn"].values(), default=0))
        if smem > OPTIN_SMEM[arch]:
            continue  # the card cannot launch it
        blocks, limit = occupancy(arch, r["regs"], L["threads"], smem)
        cell = "%d regs, %s; %d warps (%s)" % (r["regs"], "frame %d B" % r["stack"] if r["stack"] else "no frame",
                                              blocks * -(-L["threads"] // 32), limit)
        rows.setdefault(inst, {})[arch] = cell
        rows[inst]["block"] = "%d, %.1f KiB" % (L["threads"], smem / 1024)
    out = ["| kernel | threads, shared memory | " + " | ".join("sm_%d" % a for a in archs) + " |",
           "| --- | --- | " + " | ".join("---" for _ in archs) + " |"]
    for inst in sorted(rows):
        out.append("| %s | %s | %s |" % (inst, rows[inst]["block"], " | ".join(rows[inst].get(a, "-") for a in archs)))
    return "\n".join(out)


def check(res, launches, names, step_names=()):
    fails, notes, rows = [], [], {}
    for (arch, mangled), r in sorted(res.items()):
        sig = names.get(mangled, mangled)
        name, inst = split_name(sig)
        row = rows.setdefault(arch, {"kernels": 0, "regs": (0, ""), "smem": (0, ""), "spills": 0, "frames": 0})
        row["kernels"] += 1
        where = "%s on sm_%d" % (inst, arch)
        L = launches.get(inst) or launches.get(name)
        step_cards = sorted(launches.get(inst, {}).get("step", ()))
        on_step = bool(step_cards) or name in step_names
        path = ("it is on the training step's path (launched by a training step on %s)"
                % ", ".join("sm_%d" % a for a in step_cards) if step_cards else "it is on the training step's path")
        if inst not in launches and L is not None:
            where += " (not launched itself: held to its kernel's largest launch)"
        spills = r["spill_st"] or r["spill_ld"]
        if spills:
            row["spills"] += 1
            said = "%s spills: %d bytes of spill stores and %d of spill loads (%d registers)" % (
                where, r["spill_st"], r["spill_ld"], r["regs"])
            if on_step:
                fails.append(said + "; " + path + ", which must not spill")
            else:
                notes.append(said + " (not launched by a training step the suite runs)")
        if r["stack"] and not spills:
            row["frames"] += 1
            said = "%s has a %d-byte stack frame (local memory, %d registers)" % (where, r["stack"], r["regs"])
            allowed = STACK_ALLOWED.get(name)
            if allowed and r["stack"] <= allowed[0]:
                notes.append("%s: allowed, up to %d bytes: %s" % (said, allowed[0], allowed[1]))
            elif on_step:
                fails.append(said + "; " + path + ", which must keep its arrays in registers: unroll the loops "
                             "over them (#pragma unroll, trip counts known at compile time)" +
                             (" (its allowance is %d bytes: %s)" % allowed if allowed else ""))
            else:
                notes.append(said + " (not launched by a training step the suite runs)")
        if r["smem"] > STATIC_SMEM:
            fails.append("%s has %d bytes of static shared memory, above the %d a block may have"
                         % (where, r["smem"], STATIC_SMEM))
        if L is None:
            fails.append("%s was never launched by the test suite on the simulated device: the launch log has no "
                         "'%s', so its block size is unknown" % (where, name))
            continue
        need = regs_needed(r["regs"], L["threads"])
        if need > row["regs"][0]:
            row["regs"] = (need, "%s, %d registers x %d threads" % (inst, r["regs"], L["threads"]))
        if need > REGS_PER_BLOCK:
            fails.append("%s uses %d registers a thread; launched with %d threads a block it needs %d registers, "
                         "above the %d a block may have: the card refuses the launch (too many resources requested "
                         "for launch); declare __launch_bounds__(%d) or launch fewer threads"
                         % (where, r["regs"], L["threads"], need, REGS_PER_BLOCK, L["threads"]))
        if L["threads"] > BOUNDS_NEEDED_ABOVE and L["bounds"] == 0:
            fails.append("%s is launched with %d threads a block (at %s) and declares no __launch_bounds__: above %d "
                         "threads a kernel must, so that ptxas keeps its registers within the block's share"
                         % (where, L["threads"], ", ".join(sorted(L["sites"])), BOUNDS_NEEDED_ABOVE))
        dyn = L["dyn"].get(arch, 0)
        total = r["smem"] + dyn
        if total > row["smem"][0]:
            row["smem"] = (total, "%s, %d static + %d dynamic%s" % (inst, r["smem"], dyn, "" if inst in launches
                                                                     else " of its kernel's largest launch"))
        if arch in OPTIN_SMEM and total > OPTIN_SMEM[arch]:
            fails.append("%s has %d bytes of static shared memory and is launched with %d dynamic on that card: %d, "
                         "above the card's %d" % (where, r["smem"], dyn, total, OPTIN_SMEM[arch]))
    return fails, notes, rows


FLOOR = re.compile(r"occupancy floor: (\d+) warps/SM(?: from sm_(\d+))?: `([^`]+)`")


def read_floors(paths):
    """[(warps, first arch, regex, "file:line")] from the sources' comments;
    "from sm_N" names the first card the floor holds on (a kernel whose body
    is compiled for that card and up, a trap below it), 0 for every card."""
    floors = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for i, line in enumerate(f, 1):
                m = FLOOR.search(line)
                if m:
                    floors.append((int(m.group(1)), int(m.group(2) or 0), m.group(3), "%s:%d" % (path, i)))
    return floors


def check_floors(res, launches, names, floors):
    """Each instantiation a floor's regex names holds at least that many
    warps an SM, on every card it is compiled for and can launch on, at its
    largest launch; a floor naming nothing is stale. (failures, summary)"""
    fails, held = [], 0
    for warps, first, pattern, where in floors:
        matched = 0
        for (arch, mangled), r in sorted(res.items()):
            name, inst = split_name(names.get(mangled, mangled))
            if not re.fullmatch(pattern, inst) or arch not in SM_WARPS or arch < first:
                continue
            matched += 1
            L = launches.get(inst) or launches.get(name)
            if L is None:
                continue  # check() fails a kernel the suite never launched
            smem = r["smem"] + L["dyn"].get(arch, max(L["dyn"].values(), default=0))
            if smem > OPTIN_SMEM[arch]:
                continue  # the card cannot launch it: the launch checks say so where it would
            blocks, limit = occupancy(arch, r["regs"], L["threads"], smem)
            got = blocks * -(-L["threads"] // 32)
            held += 1
            if got < warps:
                fails.append("%s on sm_%d holds %d warps an SM (limited by %s: %d registers, %d threads, %.1f KiB of "
                             "shared memory), under the floor of %d its source states (%s)"
                             % (inst, arch, got, limit, r["regs"], L["threads"], smem / 1024, warps, where))
        if matched == 0:
            fails.append("the occupancy floor at %s names no kernel compiled (%s): a stale floor" % (where, pattern))
    return fails, "occupancy floors: %d stated, %d kernel compiles held to them" % (len(floors), held)


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("--launch-log", required=True)
    ap.add_argument("--step", action="append", default=[])
    ap.add_argument("--occupancy")
    ap.add_argument("--floors", nargs="+", default=[])
    ap.add_argument("ptxas", nargs="+")
    a = ap.parse_args()
    res = read_ptxas(a.ptxas)
    if not res:
        sys.exit("kernel_resources: no kernel entry in %s: nothing to check" % " ".join(a.ptxas))
    launches = read_launches(a.launch_log)
    names = demangle(sorted({m for _, m in res}))
    fails, notes, rows = check(res, launches, names, set(a.step))
    floor_fails, floor_summary = check_floors(res, launches, names, read_floors(a.floors))
    fails += floor_fails
    if a.floors:
        notes.append(floor_summary)
    for arch in sorted(rows):
        r = rows[arch]
        print("sm_%d: %d kernels; at most %d of %d registers a block (%s); at most %d bytes of shared memory a block "
              "(%s; the card allows %d); %d spilling, %d more with a stack frame (failing only on the step's "
              "path, but the allowed)" % (arch, r["kernels"], r["regs"][0], REGS_PER_BLOCK, r["regs"][1] or "-",
                                    r["smem"][0], r["smem"][1] or "-", OPTIN_SMEM.get(arch, 0), r["spills"],
                                    r["frames"]))
    for n in notes:
        print("kernel_resources: note: " + n)
    if a.occupancy:
        print(occupancy_table(res, launches, names, a.occupancy))
    for f in fails:
        print("kernel_resources: " + f, file=sys.stderr)
    if fails:
        print("kernel_resources: %d problem(s) in %d kernel compiles" % (len(fails), len(res)), file=sys.stderr)
        return 1
    print("kernel_resources: %d kernel compiles on %s fit their cards at the launches the suite makes"
          % (len(res), ", ".join("sm_%d" % a for a in sorted(rows))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
