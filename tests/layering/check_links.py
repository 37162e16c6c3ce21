#!/usr/bin/env python3
"""The layering of ferry's build, checked: what each target compiles and
links, read from the build folder (meson's introspection,
meson-info/intro-targets.json, and the link edges of build.ninja), where
check_layers.py reads only #include lines.

Rules:
1. One folder, one library: a layer library (common, backend, offload,
   optim, engine, models, train) compiles sources of its own folder only.
2. A layer library links only layer libraries of the layers below it
   (check_layers.MAY_USE), and libferry (the product, shared and static) is
   made of the five library layers alone (include .. engine).
3. The product never links test infrastructure: no layer library, no
   libferry and no program of tools/ links a library defined in dev/ or
   tests/.
4. Test doubles that need the whole product (a target of dev/ or tests/
   that compiles a product source, of a layer or a program of tools/, or
   holds objects of two or more layers) are declared below, live under
   dev/cudasim, and are never installed.

usage: check_links.py SOURCE_ROOT BUILD_DIR   prints TAP; exit 1 on any violation
       check_links.py --self-test             plants each fault in a made-up build
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_layers import MAY_USE  # noqa: E402

LAYERS = ("common", "backend", "offload", "optim", "engine", "models", "train")
LIBRARY = ("common", "backend", "offload", "optim", "engine")  # what libferry holds
# The simulated device's stand-ins for the product (docs/cudasim.md): the
# product's C objects with its CUDA sources rewritten for the simulator,
# and the programs built on them. Test infrastructure, never installed.
TEST_DOUBLES = {
    "ferry_sim": "libferry with the simulated device for CUDA",
    "ferry_models_sim": "models/ on ferry_sim",
    "ferry_train_sim": "train/ on ferry_sim",
    "train_gpt2_sim": "tools/train_gpt2 on ferry_train_sim",
    "kernel_lab_sim": "the kernel lab on ferry_sim",
}


def folder_of(root, path):
    """The tree-relative folder a file lies in ('engine', 'dev/cudasim', ...), or None outside the tree."""
    rel = os.path.relpath(os.path.abspath(path), root)
    if rel.startswith(".."):
        return None
    return os.path.dirname(rel)


def top(folder):
    return folder.split("/", 1)[0] if folder else ""


def ninja_edges(build):
    """{output: (inputs, implicit)} for every edge of build.ninja."""
    edges = {}
    with open(os.path.join(build, "build.ninja"), encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.startswith("build "):
                continue
            line = line.rstrip("\n").replace("$ ", "\0")
            head, _, rest = line[6:].partition(": ")
            words = rest.split(" ")[1:]  # the rule, then the inputs
            inputs, implicit, part = [], [], 0
            for w in words:
                if w == "|":
                    part = 1
                elif w == "||":
                    part = 2
                elif part == 0:
                    inputs.append(w.replace("\0", " "))
                elif part == 1:
                    implicit.append(w.replace("\0", " "))
            for out in head.split(" "):
                edges[out.replace("\0", " ")] = (inputs, implicit)
    return edges


def violations(root, build):
    targets = json.load(open(os.path.join(build, "meson-info", "intro-targets.json")))
    edges = ninja_edges(build)
    by_file = {}
    for t in targets:
        for f in t["filename"]:
            by_file[os.path.relpath(f, build)] = t
    found = []
    for t in targets:
        name, home = t["name"], top(folder_of(root, t["defined_in"]))
        home_dir = folder_of(root, t["defined_in"])
        sources = [s for ts in t["target_sources"] for s in ts["sources"]]
        src_layers = {top(folder_of(root, s)) for s in sources if folder_of(root, s) is not None}
        linked, objects = [], set()
        for f in t["filename"]:
            inputs, implicit = edges.get(os.path.relpath(f, build), ([], []))
            for w in inputs + implicit:
                if w.endswith((".a", ".so")) or ".so." in w:
                    if w in by_file and by_file[w] is not t:
                        linked.append(by_file[w])
                elif w.endswith(".o") and ".p/" in w:
                    lib = w.split(".p/", 1)[0]
                    if lib in by_file and by_file[lib] is not t:
                        objects.add(top(folder_of(root, by_file[lib]["defined_in"])))
        # 1. one folder, one library
        if home in LAYERS and t["type"] == "static library":
            stray = sorted(s for s in sources if top(folder_of(root, s)) != home)
            if stray:
                found.append(f"{name} ({home}/): compiles {', '.join(os.path.relpath(s, root) for s in stray[:3])} "
                             f"from another folder; one folder is one library")
        # 2. layers link only lower layers; libferry is the library layers alone
        for lt in linked:
            their = top(folder_of(root, lt["defined_in"]))
            if home in LAYERS and their in LAYERS and their != home and their not in MAY_USE.get(home, ()):
                found.append(f"{name} ({home}/): links {lt['name']} of {their}/, which {home}/ may not use")
            # 3. the product never links test infrastructure
            product = home in LAYERS or home == "tools" or name in ("ferry", "ferry_internal")
            if product and their in ("dev", "tests"):
                found.append(f"{name} ({home or 'the root'}): links {lt['name']}, test infrastructure of {their}/")
        if name == "ferry" or name == "ferry_internal":
            layers = {top(folder_of(root, lt["defined_in"])) for lt in linked} | objects
            extra = sorted(layers - set(LIBRARY) - {""})
            if extra:
                found.append(f"{name}: holds {', '.join(extra)}, which are not the library's layers "
                             f"({', '.join(LIBRARY)})")
        # 4. test doubles of the whole product are declared, kept apart, not installed
        if home in ("dev", "tests") and t["type"] in ("static library", "shared library", "executable"):
            product = (src_layers | objects) & (set(LAYERS) | {"tools"})
            whole = bool(src_layers & (set(LAYERS) | {"tools"})) or len(objects & set(LAYERS)) >= 2
            if whole and name not in TEST_DOUBLES:
                found.append(f"{name} ({home_dir}): holds objects or sources of {', '.join(sorted(product))}: "
                             "a stand-in for the product must be declared in TEST_DOUBLES "
                             "(tests/layering/check_links.py) and live under dev/cudasim")
            if name in TEST_DOUBLES and not (home_dir or "").startswith("dev/cudasim"):
                found.append(f"{name}: a test double defined in {home_dir}, not under dev/cudasim")
            if name in TEST_DOUBLES and t.get("installed"):
                found.append(f"{name}: a test double is installed")
    return found, len(targets)


def tap(root, build):
    bad, n = violations(root, build)
    print(f"ok 1 - {n} targets read from {build}" if n > 20 else f"not ok 1 - only {n} targets in {build}")
    print("ok 2 - every target compiles and links down the layers; test doubles stay apart" if not bad
          else "not ok 2 - against the layering of the build:")
    for v in bad:
        print(f"#   {v}")
    print("1..2")
    return 0 if n > 20 and not bad else 1


def self_test():
    """A made-up build: each fault planted must be found, the clean one must pass."""
    def lib(name, folder, sources, installed=False, kind="static library"):
        return {"name": name, "type": kind, "defined_in": f"/src/{folder}/meson.build",
                "filename": [f"/b/{folder}/lib{name}.a"], "installed": installed,
                "target_sources": [{"sources": [f"/src/{s}" for s in sources]}]}

    def edge(t, inputs):
        return f"build {t['filename'][0][3:]}: STATIC_LINKER " + " ".join(inputs)

    base = [lib("ferry_common", "common", ["common/a.c"]), lib("ferry_engine", "engine", ["engine/e.c"]),
            lib("ferry_models", "models", ["models/m.c"])]
    ok_edges = [edge(base[1], ["engine/libferry_engine.a.p/e.c.o", "|", "common/libferry_common.a"]),
                edge(base[2], ["models/libferry_models.a.p/m.c.o", "|", "engine/libferry_engine.a"])]
    sim = lib("ferry_sim", "dev/cudasim", ["backend/x.cu"])
    rogue = lib("rogue_sim", "tests/x", ["tests/x/t.c"])
    cases = {
        "clean": (base, ok_edges, 0),
        "stray-source": ([lib("ferry_engine", "engine", ["engine/e.c", "models/m.c"])] + base[:1], [], 1),
        "upward-link": (base, [edge(base[1], ["x.o", "|", "models/libferry_models.a"])], 1),
        "product-links-test-double": (base + [sim], ok_edges + [
            edge(sim, ["engine/libferry_engine.a.p/e.c.o", "common/libferry_common.a.p/a.c.o"]),
            edge(base[2], ["m.o", "|", "dev/cudasim/libferry_sim.a"])], 1),
        "declared-double-ok": (base + [sim], ok_edges + [
            edge(sim, ["engine/libferry_engine.a.p/e.c.o", "common/libferry_common.a.p/a.c.o"])], 0),
        "undeclared-double": (base + [rogue], ok_edges + [
            edge(rogue, ["engine/libferry_engine.a.p/e.c.o", "common/libferry_common.a.p/a.c.o"])], 1),
        "program-rebuilt-undeclared": (base + [lib("my_trainer_sim", "dev/cudasim", ["tools/t/t.c"],
                                                    kind="executable")], ok_edges, 1),
        "installed-double": (base + [lib("ferry_sim", "dev/cudasim", ["backend/x.cu"], installed=True)],
                             ok_edges + [edge(sim, ["engine/libferry_engine.a.p/e.c.o",
                                                    "common/libferry_common.a.p/a.c.o"])], 1),
    }
    failures = 0
    for i, (name, (targets, lines, want)) in enumerate(cases.items(), 1):
        with tempfile.TemporaryDirectory() as d:
            b = os.path.join(d, "b")
            os.makedirs(os.path.join(b, "meson-info"))
            fix = json.loads(json.dumps(targets).replace("/src/", d + "/src/").replace("/b/", b + "/"))
            json.dump(fix, open(os.path.join(b, "meson-info", "intro-targets.json"), "w"))
            open(os.path.join(b, "build.ninja"), "w").write("\n".join(lines) + "\n")
            got = 1 if violations(os.path.join(d, "src"), b)[0] else 0
        ok = got == want
        failures += not ok
        print(f"{'ok' if ok else 'not ok'} {i} - {name}: {'caught' if want else 'passes'}")
    print(f"1..{len(cases)}")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(tap(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])))
