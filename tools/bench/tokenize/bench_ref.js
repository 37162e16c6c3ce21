// The reference side of bench_tokenize: encodes TEXT_FILE ROUNDS times with a
// family's npm encoder (as tests/train/hf_tok_ref.js calls it) and prints
// each round's CPU seconds (the process's, user + system) and the token
// count, one round a line: "SECONDS TOKENS".
// The package is loaded and warmed on a first round that is not printed.
// usage: node bench_ref.js gpt2|llama3|llama2 NODE_MODULES_DIR TEXT_FILE ROUNDS
'use strict';
const fs = require('fs');
const path = require('path');
const { pathToFileURL } = require('url');

async function encoder(family, mods) {
  if (family === 'gpt2') {
    const { encode } = require(path.resolve(mods, 'gpt-3-encoder', 'Encoder.js'));
    // In pieces after "\S\n" before "\S": the package's encode() is quadratic
    // in the token count, and these cuts do not change the ids.
    return (text) => {
      const ids = [];
      for (const piece of text.split(/(?<=\S\n)(?=\S)/u)) for (const id of encode(piece)) ids.push(id);
      return ids;
    };
  }
  if (family === 'llama3') {
    const t = require(path.resolve(mods, 'llama3-tokenizer-js', 'bundle',
                                   'commonjs-llama3-tokenizer-with-baked-data.cjs')).llama3Tokenizer;
    return (text) => t.encode(text, { bos: false, eos: false });
  }
  if (family === 'llama2') {
    const t = (await import(pathToFileURL(path.resolve(mods, 'llama-tokenizer-js', 'llama-tokenizer.js')).href)).default;
    return (text) => t.encode(text, false, true);
  }
  throw new Error(`unknown family '${family}' (gpt2, llama3, llama2)`);
}

async function main() {
  const [family, mods, file, rounds] = process.argv.slice(2);
  const text = fs.readFileSync(file, 'utf-8');
  const encode = await encoder(family, mods);
  encode(text.slice(0, 10000));
  for (let r = 0; r < Number(rounds || 3); r++) {
    const t0 = process.cpuUsage();
    const n = encode(text).length;
    const u = process.cpuUsage(t0);
    const dt = (u.user + u.system) / 1e6;
    process.stdout.write(`${dt} ${n}\n`);
  }
}

main().catch((e) => { process.stderr.write(`bench_ref: ${e.message}\n`); process.exit(1); });
