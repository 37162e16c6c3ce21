#!/usr/bin/env python3
"""The layering of ferry's tree, checked (docs/design.md, "The layers").

One top folder is one library, and dependencies point one way:
common <- backend <- offload, optim <- engine <- models <- train <- tools.
A file may include ferry.h, the headers of its own folder, and the public
headers of the folders below it; a folder's private headers (PRIVATE below)
belong to it alone, to its tests (tests/<folder>...) and to its lab
(dev/<folder>). FERRY_HAVE_CUDA is tested only inside backend/ (the backend
decides; nobody above branches on CUDA). Examples see only ferry.h. The
simulated CUDA device (dev/cudasim) is test infrastructure: its tests
(tests/cudasim) test the cuda backend, and they alone may include its
control header. So are the op drivers (dev/ops), which the op tests and
the kernel lab alone include. Inside engine/, components sit on floors (ENGINE_FLOORS,
engine/context.h): a component includes only lower floors' headers.

usage: check_layers.py ROOT          prints TAP; exit 1 on any violation
       check_layers.py --self-test   builds trees with known faults and
                                     requires each to be caught
"""
import os
import re
import sys
import tempfile

# What each folder may include (besides itself). optim knows nothing of the
# backend; offload knows the backend (pinning, device memory) but not optim.
MAY_USE = {
    "include": set(),
    "common": {"include"},
    "backend": {"include", "common"},
    "offload": {"include", "common", "backend"},
    "optim": {"include", "common"},
    "engine": {"include", "common", "backend", "offload", "optim"},
    "models": {"include", "common", "backend", "offload", "optim", "engine"},
    "train": {"include", "common", "backend", "offload", "optim", "engine", "models"},
    "tools": {"include", "common", "backend", "offload", "optim", "engine", "models", "train"},
    "dev": {"include", "common", "backend"},
    "tests": {"include", "common", "backend", "offload", "optim", "engine", "models", "train", "tools"},
    "examples": {"include"},
}

# Headers only their own folder (and its tests and lab) may include.
PRIVATE = {
    "engine/engine.h",
    "backend/backend_impl.h",
    "backend/ops/ops_host.h",
    "backend/ops/ops_cuda.h",
    "backend/ops/cuda_util.cuh",
    "backend/ops/mma.cuh",
    "backend/cuda_check.h",
    "optim/kernels.h",
    "models/gpt2_internal.h",
    "models/llama_internal.h",
    "train/trainer_internal.h",
}

# Headers outside the layers' rules, with the test folders that may include them.
# The op drivers (dev/ops) are the op tests' and the kernel lab's, never the
# product's.
OP_DRIVER_USERS = {"tests/ops", "tests/gpu", "tests/cudasim", "dev/kernels"}
TEST_ONLY = {
    "dev/cudasim/cudasim.h": {"tests/cudasim"},
    "dev/ops/opcheck.h": OP_DRIVER_USERS,
    "dev/ops/opdrive.h": OP_DRIVER_USERS,
    "dev/ops/opinfo.h": OP_DRIVER_USERS,
    "dev/ops/op_shapes.h": OP_DRIVER_USERS,
}

# Headers meson generates into the build tree, with the folder that owns them
# (they count as private to it).
GENERATED = {
    "ferry_cuda_build.h": "backend",
}

# Inside engine/: components on floors (engine/context.h lists them). A
# component's files may include the headers of components on lower floors
# and their own, never a sibling's on the same floor or one above: the
# orchestrator (engine.c) is on top and nothing calls back up into it.
ENGINE_FLOORS = {
    "context": 0, "groups": 0, "intree": 0,
    "layout": 1, "memplan": 1, "device_share": 1,
    "plan": 2, "window": 2,
    "auto": 3, "dp": 3,
    "placement": 4, "residency": 4,
    "update": 5,
    "drain": 6,
    "schedule": 7,
    "step": 8,
    "checkpoint": 9,
    "engine": 10,
}


def engine_component(rel):
    """The engine component a file of engine/ belongs to (update_*.c are the update's)."""
    name = os.path.splitext(os.path.basename(rel))[0]
    return "update" if name.startswith("update_") else name


SOURCES = (".c", ".h", ".cu", ".cuh")
# The library's folders: what an embedder links. Their messages name ferry.h's
# config fields, never a program's flags (train_gpt2 translates them).
LIBRARY = ("include", "common", "backend", "offload", "optim", "engine")
STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")
# Another program's flags, which a message may name: "srun --mpi=pmix".
FOREIGN_FLAGS = re.compile(r"\b(?:srun|mpirun|mpiexec)(?:\s+--[a-z][a-z0-9-]*(?:=\S+)?)+")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CUDA_FLAG = re.compile(r"\bFERRY_HAVE_CUDA\b")


def top(rel):
    return rel.split("/", 1)[0]


def owner_folders(rel):
    """The library folders whose private headers a file may include."""
    parts = rel.split("/")
    if parts[0] in ("tests", "dev") and len(parts) > 2:
        sub = parts[1]
        # tests/backend, tests/ops, tests/gpu, tests/cudasim and dev/kernels (the
        # kernel lab) test the backend
        if sub in ("backend", "ops", "kernels", "gpu", "cudasim"):
            return {"backend"}
        return {sub}
    return {parts[0]}


def resolve(root, rel, inc):
    """The tree-relative path an include names, or None for a system header."""
    here = os.path.dirname(rel)
    for cand in (os.path.join(here, inc), inc, os.path.join("include", inc), os.path.join("tests", inc)):
        cand = os.path.normpath(cand)
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def sources(root):
    for folder in MAY_USE:
        base = os.path.join(root, folder)
        for dirpath, dirnames, files in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(("build", "."))]
            for f in sorted(files):
                if f.endswith(SOURCES):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def engine_floor_violations(root, rel, text):
    """An engine/ file's includes of other engine components, against the floors."""
    found = []
    mine = engine_component(rel)
    if mine not in ENGINE_FLOORS:
        return [f"{rel}: an engine file of no known component; give it a floor in ENGINE_FLOORS "
                "(tests/layering/check_layers.py) and in engine/context.h's list"]
    for inc in INCLUDE.findall(text):
        target = resolve(root, rel, inc)
        if not target or not target.startswith("engine/"):
            continue
        theirs = engine_component(target)
        if theirs == mine:
            continue
        if theirs not in ENGINE_FLOORS:
            found.append(f"{rel}: includes {target}, an engine file of no known component")
        elif ENGINE_FLOORS[theirs] >= ENGINE_FLOORS[mine]:
            found.append(f"{rel}: includes {target}: engine component '{mine}' (floor {ENGINE_FLOORS[mine]}) "
                         f"may use only lower floors, not '{theirs}' (floor {ENGINE_FLOORS[theirs]})")
    return found


def violations(root):
    found = []
    for rel in sources(root):
        text = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
        layer = top(rel)
        for inc in INCLUDE.findall(text):
            if inc in GENERATED:
                if GENERATED[inc] not in owner_folders(rel):
                    found.append(f"{rel}: includes {inc}, generated for {GENERATED[inc]}/ alone")
                continue
            target = resolve(root, rel, inc)
            if target is None:
                found.append(f"{rel}: includes \"{inc}\", which is no file of the tree")
                continue
            tl = top(target)
            if target in TEST_ONLY:
                if not any(rel.startswith(t + "/") for t in TEST_ONLY[target]) and not rel.startswith(
                        os.path.dirname(target) + "/"):
                    found.append(f"{rel}: includes {target}, for {', '.join(sorted(TEST_ONLY[target]))} alone")
                continue
            if tl == layer and target not in PRIVATE:
                continue
            if target in PRIVATE:
                if tl not in owner_folders(rel):
                    found.append(f"{rel}: includes {target}, private to {tl}/")
                continue
            if tl == layer:
                continue
            if tl not in MAY_USE[layer]:
                found.append(f"{rel}: includes {target}: {layer}/ may not use {tl}/")
        if layer in LIBRARY:
            for line in text.splitlines():
                if line.lstrip().startswith(("*", "/*", "//", "#")):
                    continue
                for lit in STRING.findall(line):
                    for flag in FLAG.findall(FOREIGN_FLAGS.sub("", lit)):
                        found.append(f"{rel}: a message names the flag {flag}; name the config field "
                                     "(train/flag_words.c says it in the trainer's flags)")
        if layer == "engine" and rel.count("/") == 1:
            found += engine_floor_violations(root, rel, text)
        if CUDA_FLAG.search(text) and layer != "backend":
            found.append(f"{rel}: tests FERRY_HAVE_CUDA outside backend/ (ask the backend instead)")
    return found


def tap(root):
    bad = violations(root)
    n = sum(1 for _ in sources(root))
    print(f"ok 1 - {n} source files scanned" if n > 100 else f"not ok 1 - only {n} source files found under {root}")
    print("ok 2 - every #include points down the layers; library messages name no program flag" if not bad
          else "not ok 2 - against the layering:")
    for v in bad:
        print(f"#   {v}")
    print("1..2")
    return 0 if n > 100 and not bad else 1


def self_test():
    """Each fault planted in a tiny tree must be found; the clean tree must pass."""
    cases = {
        "clean": ({}, 0),
        "upward": ({"backend/x.c": '#include "engine/intree.h"\n'}, 1),
        "private": ({"models/y.c": '#include "engine/engine.h"\n'}, 1),
        "optim-backend": ({"optim/z.c": '#include "backend/backend.h"\n'}, 1),
        "cuda-flag": ({"engine/w.c": "#ifdef FERRY_HAVE_CUDA\n#endif\n"}, 1),
        "example": ({"examples/e.c": '#include "common/error.h"\n'}, 1),
        "test-private-ok": ({"tests/engine/t.c": '#include "engine/engine.h"\n'}, 0),
        "test-private-other": ({"tests/train/t.c": '#include "engine/engine.h"\n'}, 1),
        "missing": ({"train/m.c": '#include "train/nothere.h"\n'}, 1),
        "flag-in-library": ({"offload/a.c": 'err_set(1, "lower --batch");\n'}, 1),
        "flag-in-tools-ok": ({"tools/t.c": 'puts("lower --batch");\n'}, 0),
        "decrement-ok": ({"engine/step.c": 'n = a[--i]; puts("rebuild with -Dcuda=enabled");\n'}, 0),
        "cudasim-test-ok": ({"tests/cudasim/t.c": '#include "dev/cudasim/cudasim.h"\n'}, 0),
        "cudasim-elsewhere": ({"tests/engine/t.c": '#include "dev/cudasim/cudasim.h"\n'}, 1),
        "op-driver-test-ok": ({"tests/ops/t.c": '#include "dev/ops/opdrive.h"\n'}, 0),
        "op-driver-lab-ok": ({"dev/kernels/k.c": '#include "dev/ops/opcheck.h"\n'}, 0),
        "op-driver-in-product": ({"backend/ops/x.c": '#include "dev/ops/opdrive.h"\n'}, 1),
        "engine-floor-down-ok": ({"engine/step.c": '#include "engine/dp.h"\n', "engine/dp.h": ""}, 0),
        "engine-floor-up": ({"engine/dp.c": '#include "engine/step.h"\n', "engine/step.h": ""}, 1),
        "engine-floor-sibling": ({"engine/dp.c": '#include "engine/auto.h"\n', "engine/auto.h": ""}, 1),
        "engine-update-impl-ok": ({"engine/update_cpu.c": '#include "engine/update_impl.h"\n',
                                   "engine/update_impl.h": ""}, 0),
        "engine-unknown-file": ({"engine/newpart.c": '#include "engine/context.h"\n',
                                 "engine/context.h": ""}, 1),
    }
    base = {
        "include/ferry.h": "",
        "common/error.h": '#include "ferry.h"\n',
        "backend/backend.h": '#include "ferry.h"\n',
        "engine/engine.h": '#include "backend/backend.h"\n',
        "engine/intree.h": '#include "backend/backend.h"\n',
        "engine/engine.c": '#include "engine/engine.h"\n#include "common/error.h"\n',
        "models/m.c": '#include "engine/intree.h"\n',
        "dev/cudasim/cudasim.h": "",
        "dev/ops/opdrive.h": '#include "dev/ops/opcheck.h"\n',
        "dev/ops/opcheck.h": '#include "backend/backend.h"\n',
    }
    failures = 0
    for i, (name, (extra, want)) in enumerate(cases.items(), 1):
        with tempfile.TemporaryDirectory() as d:
            for rel, text in {**base, **extra}.items():
                os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
                open(os.path.join(d, rel), "w").write(text)
            got = 1 if violations(d) else 0
        ok = got == want
        failures += not ok
        print(f"{'ok' if ok else 'not ok'} {i} - {name}: {'caught' if want else 'passes'}")
    print(f"1..{len(cases)}")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(tap(sys.argv[1]))
