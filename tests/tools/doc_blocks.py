"""Runs every command block of README.md and docs/*.md, as a reader would
type it, and says (TAP) which ran, which failed and which were not run, and
why.

A command block is a fenced block whose info string starts with sh, bash or
shell. Words after the language mark what a block needs, so that a new block
says so where it is written:

    ```sh                 runs everywhere, in CI too
    ```sh gpu             needs a GPU: run only where ferry-info finds one
    ```sh mpirun          starts several processes with mpirun: run only where
                          mpirun is on PATH
    ```sh srun            starts ranks with Slurm's srun: run only where srun is
                          on PATH
    ```sh long            takes minutes or more (a full build, the demo, a
                          fuzzing campaign): run only with FERRY_DOC_LONG=1

Markers combine (```sh gpu long). Other blocks (c, python, plain output) are
not commands and are not run.

Every block of a file runs in order, in one fresh folder, each in bash with
-euo pipefail and a time limit, so a later block may use what an earlier one
made. The folder looks like the repository to the block: tools/, tests/,
docs/, examples/ and build-deps/ are the source's, build/ the build's, and
mytext/ holds a few plain-text files to tokenize (the King James Bible's
Genesis where Debian's bible-kjv is installed).

FERRY_DOC_SHRINK (default 1): train_gpt2 in a block runs at the size of a
CPU test, on the host backend (on cuda in a block marked gpu): a model of 2 layers, a batch of 2 x 32 tokens, 4
steps (evaluations, samples and saves every 2), whatever the block asks. Set
it to 0 to run blocks as written (on a GPU machine, with FERRY_DOC_LONG=1,
that is the whole documentation, at full size).

    usage: doc_blocks.py SOURCE_ROOT BUILD_ROOT FILE.md|FOLDER...
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

LANGS = ("sh", "bash", "shell")
MARKERS = ("gpu", "mpirun", "srun", "long")
FENCE = re.compile(r"^(`{3,})([^`]*)$")  # a backtick fence has no backtick in its info string
TIMEOUT_S = 600

# What FERRY_DOC_SHRINK does to a train_gpt2 or bench_engine command: flags
# replaced by small values, flags dropped (with their value), flags added.
SHRINK_WRAPPER = r'''#!/usr/bin/env bash
# A documentation block's call of {name}, shrunk to a CPU test's size when
# FERRY_DOC_SHRINK is not 0 (tests/tools/doc_blocks.py).
real={real}
[ "${{FERRY_DOC_SHRINK:-1}}" = 0 ] && exec "$real" "$@"
backend=${{FERRY_DOC_BACKEND:-host}} # cuda in a block marked gpu
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model|--layers|--heads|--width) shift 2 ;;
    --batch) args+=(--batch 2); shift 2 ;;
    --seq) args+=(--seq 32); shift 2 ;;
    --steps) args+=(--steps 4); shift 2 ;;
    --grad-accum) args+=(--grad-accum 1); shift 2 ;;
    --eval-every|--sample-every|--checkpoint-every) args+=("$1" 2); shift 2 ;;
    --eval-batches) args+=(--eval-batches 2); shift 2 ;;
    --sample-tokens) args+=(--sample-tokens 8); shift 2 ;;
    --gpu-mem|--host-mem) [ "$backend" = cuda ] && args+=("$1" "$2"); shift 2 ;;
    --backend|--threads) shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
exec "$real" --backend "$backend" --threads 2 --model d2 "${{args[@]}}"
'''


def blocks(path):
    """(line, markers, text) of each command block of a Markdown file."""
    out, lines = [], open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).split()
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        if info and info[0] in LANGS:
            unknown = [w for w in info[1:] if w not in MARKERS]
            out.append((i + 1, set(info[1:]), "\n".join(lines[i + 1:j]), unknown))
        i = j + 1
    return out


def has_gpu(build):
    info = os.path.join(build, "tools", "info", "ferry-info")
    try:
        r = subprocess.run([info], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and re.search(r"backend\s*:\s*cuda", r.stdout) is not None


def place_wrapper(fake, build, rel, text):
    """Writes `text` as the executable fake/rel: every folder on the way that is
    a link to the build's becomes a folder of links to its entries."""
    parts = rel.split("/")
    here, real = fake, build
    for part in parts[:-1]:
        here, real = os.path.join(here, part), os.path.join(real, part)
        if os.path.islink(here):
            os.unlink(here)
            os.mkdir(here)
            for name in os.listdir(real):
                os.symlink(os.path.join(real, name), os.path.join(here, name))
    target = os.path.join(here, parts[-1])
    if os.path.lexists(target):
        os.unlink(target)
    with open(target, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(target, 0o755)


def make_folder(source, build):
    """A folder that looks like the repository to a block (see above)."""
    work = tempfile.mkdtemp(prefix="ferry-doc-")
    for name in ("tools", "tests", "docs", "examples", "build-deps"):
        if os.path.exists(os.path.join(source, name)):
            os.symlink(os.path.join(source, name), os.path.join(work, name))
    fake = os.path.join(work, "build")
    os.symlink(build, fake)
    if os.path.islink(fake):  # build/ itself becomes a folder of links, then the wrapper goes in
        os.unlink(fake)
        os.mkdir(fake)
        for name in os.listdir(build):
            os.symlink(os.path.join(build, name), os.path.join(fake, name))
    rel = "tools/train_gpt2/train_gpt2"
    place_wrapper(fake, build, rel, SHRINK_WRAPPER.format(name="train_gpt2", real=os.path.join(build, rel)))
    texts = os.path.join(work, "mytext")
    os.mkdir(texts)
    genesis = ""
    if shutil.which("bible"):
        r = subprocess.run(["bible", "gen1:1-gen11:32"], capture_output=True, text=True)
        genesis = r.stdout if r.returncode == 0 else ""
    if not genesis:
        words = "the ship carries the cold state across the water and brings back the warm part".split()
        genesis = "\n\n".join(" ".join(words[(i * 7 + k) % len(words)] for k in range(60)) for i in range(200))
    half = len(genesis) // 2
    for i, part in enumerate((genesis[:half], genesis[half:])):
        with open(os.path.join(texts, "part%d.txt" % i), "w", encoding="utf-8") as f:
            f.write(part)
    return work


def main():
    if len(sys.argv) < 4:
        print(__doc__.strip().split("\n")[-1].strip(), file=sys.stderr)
        return 2
    source, build, files = sys.argv[1], sys.argv[2], []
    for arg in sys.argv[3:]:  # a folder stands for every .md file in it, at any depth
        if os.path.isdir(arg):
            files += sorted(os.path.join(d, f) for d, _, names in os.walk(arg) for f in names if f.endswith(".md"))
        else:
            files.append(arg)
    long_ok = os.environ.get("FERRY_DOC_LONG", "0") == "1"
    gpu = has_gpu(build)
    mpirun = shutil.which("mpirun") is not None
    srun = shutil.which("srun") is not None
    n = failed = 0
    env = dict(os.environ, FERRY_DOC_SHRINK=os.environ.get("FERRY_DOC_SHRINK", "1"), OPENBLAS_NUM_THREADS="1")
    for md in files:
        work = make_folder(source, build)
        name = os.path.relpath(md, source)
        try:
            for line, marks, text, unknown in blocks(md):
                n += 1
                what = "%s:%d" % (name, line)
                if unknown:
                    print("not ok %d - %s: unknown marker(s) %s (known: %s)" % (n, what, " ".join(unknown),
                                                                               " ".join(MARKERS)))
                    failed += 1
                    continue
                why = None
                if "long" in marks and not long_ok:
                    why = "long: set FERRY_DOC_LONG=1 to run it"
                elif "gpu" in marks and not gpu:
                    why = "gpu: no GPU here"
                elif "mpirun" in marks and not mpirun:
                    why = "mpirun: not on PATH"
                elif "srun" in marks and not srun:
                    why = "srun: not on PATH (no Slurm here)"
                if why:
                    print("ok %d - %s # SKIP %s" % (n, what, why))
                    continue
                env["FERRY_DOC_BACKEND"] = "cuda" if "gpu" in marks else "host"
                # Under a sanitizer build, Open MPI's plugins leak at exit as
                # in the suite's own MPI tests: the same suppressions.
                env.pop("LSAN_OPTIONS", None)
                if "LSAN_OPTIONS" in os.environ:
                    env["LSAN_OPTIONS"] = os.environ["LSAN_OPTIONS"]
                if "mpirun" in marks:
                    env["LSAN_OPTIONS"] = ("suppressions=" + os.path.join(source, "tests", "mpi_lsan.supp") +
                                           ":fast_unwind_on_malloc=0")
                try:
                    r = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=work, env=env,
                                       capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S)
                    rc, out = r.returncode, r.stdout + r.stderr
                except subprocess.TimeoutExpired as e:
                    tail = e.stdout[-2000:] if isinstance(e.stdout, str) else (e.stdout or b"")[-2000:].decode(errors="replace")
                    rc, out = 124, "killed after %d s\n%s" % (TIMEOUT_S, tail)
                if rc == 0:
                    print("ok %d - %s ran" % (n, what))
                else:
                    failed += 1
                    print("not ok %d - %s exited %d" % (n, what, rc))
                    for l in text.split("\n"):
                        print("#   $ " + l)
                    for l in out.strip().split("\n")[-25:]:
                        print("#   " + l)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print("1..%d" % n)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
