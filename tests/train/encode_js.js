// Oracle for the tokenizer test: encodes a file with the gpt-3-encoder npm
// package's own JavaScript encoder and prints the token ids, one per line.
// usage: node encode_js.js PACKAGE_DIR TEXT_FILE
//
// The package's encode() grows its result with Array.concat, which is
// quadratic in the token count (minutes for 300 KB), so the text is cut into
// pieces right after a '\n' that has non-whitespace on both sides: such a
// '\n' is a whitespace run of one, matched alone both inside the whole text
// (by \s+) and at the end of a piece (by \s+(?!\S)), and the next match
// starts fresh after it; so encoding the pieces one by one gives exactly the
// ids of encoding the whole text.
'use strict';
const fs = require('fs');
const path = require('path');
const { encode } = require(path.resolve(process.argv[2], 'Encoder.js'));
const text = fs.readFileSync(process.argv[3], 'utf-8');
const out = [];
for (const piece of text.split(/(?<=\S\n)(?=\S)/u))
  for (const id of encode(piece)) out.push(id);
process.stdout.write(out.join('\n') + '\n');
