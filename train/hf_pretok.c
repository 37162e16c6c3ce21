/* tokenizer.json's pre-tokenizers and the NFC test (see hf_pretok.h). Each
 * matcher applies its regex's alternatives in order, as a backtracking
 * regex engine does, with the character classes node sees. */
#define TOK_UNICODE_NFC
#include "train/hf_pretok.h"

#include <pthread.h>
#include <string.h>

#include "train/unicode_tables.h"

const char hf_pattern_gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char hf_pattern_llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char hf_pattern_qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

int hf_split_from_pattern(const char *re)
{
    if (!strcmp(re, hf_pattern_gpt2))
        return HF_SPLIT_GPT2;
    if (!strcmp(re, hf_pattern_llama3))
        return HF_SPLIT_LLAMA3;
    if (!strcmp(re, hf_pattern_qwen2))
        return HF_SPLIT_QWEN2;
    return -1;
}

const char *hf_split_name(hf_split s)
{
    static const char *const names[] = {"none", "GPT-2", "Llama 3", "Qwen2"};
    return names[s];
}

/* ---- classes ---------------------------------------------------------------- */

enum { C_OTHER = 0, C_LETTER = 1, C_NUMBER = 2, C_SPACE = 3 };

#define NRANGES(a) (sizeof(a) / sizeof((a)[0]))

static int in_ranges(const tok_uni_range *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

static int class_slow(uint32_t cp)
{
    if (in_ranges(tok_uni_letter, NRANGES(tok_uni_letter), cp))
        return C_LETTER;
    if (in_ranges(tok_uni_number, NRANGES(tok_uni_number), cp))
        return C_NUMBER;
    if (in_ranges(tok_uni_space, NRANGES(tok_uni_space), cp))
        return C_SPACE;
    return C_OTHER;
}

static uint8_t cls_bmp[0x10000];
static pthread_once_t cls_once = PTHREAD_ONCE_INIT;

static void build_classes(void)
{
    for (uint32_t cp = 0; cp < 0x10000; cp++)
        cls_bmp[cp] = (uint8_t)class_slow(cp);
}

size_t hf_utf8_next(const unsigned char *s, size_t n, size_t i, uint32_t *out)
{
    unsigned b0 = s[i];
    if (b0 < 0x80) {
        *out = b0;
        return 1;
    }
    uint32_t cp;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
        cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        cp = b0 & 0x0F;
        lo = b0 == 0xE0 ? 0xA0 : lo; /* no overlongs */
        hi = b0 == 0xED ? 0x9F : hi; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        cp = b0 & 0x07;
        lo = b0 == 0xF0 ? 0x90 : lo;
        hi = b0 == 0xF4 ? 0x8F : hi; /* nothing past U+10FFFF */
    } else {
        *out = 0xFFFFFFFFu;
        return 1;
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) {
        *out = 0xFFFFFFFFu;
        return 1;
    }
    for (size_t k = 1; k < len; k++) {
        if (k > 1 && (s[i + k] & 0xC0) != 0x80) {
            *out = 0xFFFFFFFFu;
            return 1;
        }
        cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    *out = cp;
    return len;
}

static size_t next_char(const unsigned char *s, size_t n, size_t i, int *cls)
{
    if (s[i] < 0x80) {
        *cls = cls_bmp[s[i]];
        return 1;
    }
    uint32_t cp;
    size_t l = hf_utf8_next(s, n, i, &cp);
    *cls = cp == 0xFFFFFFFFu ? C_OTHER : cp < 0x10000 ? cls_bmp[cp] : class_slow(cp);
    return l;
}

static int class_at(const unsigned char *s, size_t n, size_t i)
{
    int c;
    next_char(s, n, i, &c);
    return c;
}

static size_t run_of(const unsigned char *s, size_t n, size_t i, int want)
{
    while (i < n) {
        int c;
        size_t l = next_char(s, n, i, &c);
        if (c != want)
            break;
        i += l;
    }
    return i;
}

static int is_nl(unsigned char c) { return c == '\r' || c == '\n'; }

/* ---- GPT-2 ------------------------------------------------------------------- */

static size_t contraction(const unsigned char *s, size_t n, size_t i, int fold)
{
    if (s[i] != '\'' || i + 1 >= n)
        return 0;
    unsigned c1 = s[i + 1], c2 = i + 2 < n ? s[i + 2] : 0;
    if (fold) {
        c1 = c1 >= 'A' && c1 <= 'Z' ? c1 + 32 : c1;
        c2 = c2 >= 'A' && c2 <= 'Z' ? c2 + 32 : c2;
    }
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return 2;
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        return 3;
    return 0;
}

static size_t gpt2_end(const unsigned char *s, size_t n, size_t pos)
{
    size_t k = contraction(s, n, pos, 0);
    if (k)
        return pos + k;
    int cls;
    size_t l = next_char(s, n, pos, &cls);
    if (s[pos] == ' ' && pos + 1 < n) { /* " ?X+" for X = letter, number, other */
        int c2 = class_at(s, n, pos + 1);
        if (c2 != C_SPACE)
            return run_of(s, n, pos + 1, c2);
    }
    if (cls != C_SPACE)
        return run_of(s, n, pos + l, cls);
    /* \s+(?!\S): the whole run at the end of text, else the run less its
     * last character; a lone space before non-space falls to \s+. */
    size_t end = pos, last = pos;
    while (end < n) {
        int c;
        size_t cl = next_char(s, n, end, &c);
        if (c != C_SPACE)
            break;
        last = end;
        end += cl;
    }
    return end == n || last == pos ? end : last;
}

/* ---- Llama 3 and Qwen2 --------------------------------------------------------- */

static size_t llama3_end(const unsigned char *s, size_t n, size_t pos, size_t max_digits)
{
    size_t k = contraction(s, n, pos, 1);
    if (k)
        return pos + k;
    int c0;
    size_t l0 = next_char(s, n, pos, &c0);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c0 == C_LETTER)
        return run_of(s, n, pos + l0, C_LETTER);
    if (c0 != C_NUMBER && !is_nl(s[pos]) && pos + l0 < n && class_at(s, n, pos + l0) == C_LETTER)
        return run_of(s, n, pos + l0, C_LETTER);
    /* \p{N}{1,3} (Qwen2: \p{N}) */
    if (c0 == C_NUMBER) {
        size_t e = pos;
        for (size_t d = 0; d < max_digits && e < n; d++) {
            int c;
            size_t l = next_char(s, n, e, &c);
            if (c != C_NUMBER)
                break;
            e += l;
        }
        return e;
    }
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    size_t p = pos;
    if (s[p] == ' ' && p + 1 < n && class_at(s, n, p + 1) == C_OTHER)
        p++;
    if (class_at(s, n, p) == C_OTHER) {
        size_t e = run_of(s, n, p, C_OTHER);
        while (e < n && is_nl(s[e]))
            e++;
        return e;
    }
    /* c0 is white space. \s*[\r\n]+: up to the run's last newline. */
    size_t e = pos, last = pos, nl = SIZE_MAX;
    while (e < n) {
        int c;
        size_t l = next_char(s, n, e, &c);
        if (c != C_SPACE)
            break;
        if (is_nl(s[e]))
            nl = e;
        last = e;
        e += l;
    }
    if (nl != SIZE_MAX)
        return nl + 1;
    /* \s+(?!\S), then \s+ */
    return e == n || last == pos ? e : last;
}

size_t hf_pretoken_end(hf_split sp, const char *text, size_t n, size_t pos)
{
    pthread_once(&cls_once, build_classes);
    const unsigned char *s = (const unsigned char *)text;
    switch (sp) {
    case HF_SPLIT_GPT2:
        return gpt2_end(s, n, pos);
    case HF_SPLIT_LLAMA3:
        return llama3_end(s, n, pos, 3);
    case HF_SPLIT_QWEN2:
        return llama3_end(s, n, pos, 1);
    default:
        return n;
    }
}

/* ---- NFC ------------------------------------------------------------------------ */

int hf_nfc_stable(const char *text, size_t n, size_t *at, uint32_t *cp_out)
{
    const unsigned char *s = (const unsigned char *)text;
    int prev_mark_or_decomp = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) { /* ASCII: stable, neither a mark nor decomposable */
            prev_mark_or_decomp = 0;
            i++;
            continue;
        }
        uint32_t cp;
        size_t l = hf_utf8_next(s, n, i, &cp);
        if (cp != 0xFFFFFFFFu) {
            int mark = in_ranges(tok_uni_combining, NRANGES(tok_uni_combining), cp);
            if (in_ranges(tok_uni_nfc_unstable, NRANGES(tok_uni_nfc_unstable), cp) || (mark && prev_mark_or_decomp)) {
                *at = i;
                *cp_out = cp;
                return 0;
            }
            prev_mark_or_decomp = mark || in_ranges(tok_uni_decomposable, NRANGES(tok_uni_decomposable), cp);
        } else {
            prev_mark_or_decomp = 0;
        }
        i += l;
    }
    return 1;
}
