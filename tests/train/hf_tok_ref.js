// Oracle for the tokenizer.json test: encodes a file with a family's npm
// reference encoder and prints the token ids, one per line.
// usage: node hf_tok_ref.js gpt2|llama3|llama2 NODE_MODULES_DIR TEXT_FILE
//   gpt2:   gpt-3-encoder's encode(), in pieces (see encode_js.js for why
//           cutting after a "\S\n" before "\S" gives the ids of the whole)
//   llama3: llama3-tokenizer-js, encode(text, {bos: false, eos: false})
//           (it recognises Llama 3's special tokens in the text)
//   llama2: llama-tokenizer-js, encode(text, false, true): no BOS, the
//           leading "▁" that SentencePiece prepends
'use strict';
const fs = require('fs');
const path = require('path');
const { pathToFileURL } = require('url');

async function main() {
  const [family, mods, file] = process.argv.slice(2);
  const text = fs.readFileSync(file, 'utf-8');
  let ids;
  if (family === 'gpt2') {
    const { encode } = require(path.resolve(mods, 'gpt-3-encoder', 'Encoder.js'));
    ids = [];
    for (const piece of text.split(/(?<=\S\n)(?=\S)/u))
      for (const id of encode(piece)) ids.push(id);
  } else if (family === 'llama3') {
    const mod = require(path.resolve(mods, 'llama3-tokenizer-js', 'bundle',
                                     'commonjs-llama3-tokenizer-with-baked-data.cjs'));
    ids = mod.llama3Tokenizer.encode(text, { bos: false, eos: false });
  } else if (family === 'llama2') {
    const mod = await import(pathToFileURL(path.resolve(mods, 'llama-tokenizer-js', 'llama-tokenizer.js')).href);
    ids = mod.default.encode(text, false, true);
  } else {
    throw new Error(`unknown family '${family}' (gpt2, llama3, llama2)`);
  }
  process.stdout.write(ids.join('\n') + '\n');
}

main().catch((e) => { process.stderr.write(`hf_tok_ref: ${e.message}\n`); process.exit(1); });
