/* Chat templates and their encoding (see chat_template.h): a record becomes
 * a list of segments, each text, a special token, BOS or EOS, with its
 * target flag; the segments become token ids through a tok_text_encoder. */
#include "train/chat_template.h"

#include "train/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

static const char *const template_names[] = {"plain", "llama3", "chatml", "mistral"};
#define NTEMPLATES 4

ferry_status chat_template_parse(const char *name, chat_template_id *out)
{
    for (int i = 0; i < NTEMPLATES; i++)
        if (name && strcmp(name, template_names[i]) == 0) {
            *out = (chat_template_id)i;
            return FERRY_OK;
        }
    return err_set(FERRY_ERR_INVALID_ARGUMENT, "chat template '%s' is not one of plain, llama3, chatml, mistral",
                   name ? name : "(none)");
}

const char *chat_template_name(chat_template_id t) { return (unsigned)t < NTEMPLATES ? template_names[t] : "?"; }

void chat_segments_free(chat_segments *s)
{
    free(s->seg);
    *s = (chat_segments){0};
}

void tok_flags_free(tok_flags *f)
{
    free(f->v);
    *f = (tok_flags){0};
}

/* ---- rendering ---- */

static ferry_status push(chat_segments *s, chat_seg_kind kind, const char *text, size_t len, bool target)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        chat_segment *p = realloc(s->seg, cap * sizeof *p);
        if (!p)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot hold %zu segments of a record", cap);
        s->seg = p;
        s->cap = cap;
    }
    s->seg[s->n++] = (chat_segment){kind, text, len, target};
    return FERRY_OK;
}

#define LIT(s) s, sizeof(s) - 1

static ferry_status push_lit(chat_segments *s, chat_seg_kind kind, const char *text, bool target)
{
    return push(s, kind, text, strlen(text), target);
}

/* Jinja's `trim`, as Llama 3's template applies it, for ASCII blanks. */
static void trim(const char **s, size_t *n)
{
    while (*n > 0 && strchr(" \t\n\r\v\f", (*s)[0]))
        (*s)++, (*n)--;
    while (*n > 0 && strchr(" \t\n\r\v\f", (*s)[*n - 1]))
        (*n)--;
}

static ferry_status llama3_message(chat_segments *s, const tok_message *m)
{
    bool a = m->role == TOK_ROLE_ASSISTANT;
    const char *c = m->content;
    size_t n = m->len;
    trim(&c, &n);
    ferry_status st = push(s, CHAT_SEG_SPECIAL, LIT("<|start_header_id|>"), false);
    if (st == FERRY_OK) st = push_lit(s, CHAT_SEG_TEXT, tok_role_name(m->role), false);
    if (st == FERRY_OK) st = push(s, CHAT_SEG_SPECIAL, LIT("<|end_header_id|>"), false);
    if (st == FERRY_OK) st = push(s, CHAT_SEG_TEXT, LIT("\n\n"), false);
    if (st == FERRY_OK && n > 0) st = push(s, CHAT_SEG_TEXT, c, n, a);
    if (st == FERRY_OK) st = push(s, CHAT_SEG_SPECIAL, LIT("<|eot_id|>"), a);
    return st;
}

static ferry_status chatml_message(chat_segments *s, const tok_message *m)
{
    bool a = m->role == TOK_ROLE_ASSISTANT;
    ferry_status st = push(s, CHAT_SEG_SPECIAL, LIT("<|im_start|>"), false);
    if (st == FERRY_OK) st = push_lit(s, CHAT_SEG_TEXT, tok_role_name(m->role), false);
    if (st == FERRY_OK) st = push(s, CHAT_SEG_TEXT, LIT("\n"), false);
    if (st == FERRY_OK && m->len > 0) st = push(s, CHAT_SEG_TEXT, m->content, m->len, a);
    if (st == FERRY_OK) st = push(s, CHAT_SEG_SPECIAL, LIT("<|im_end|>"), a);
    if (st == FERRY_OK) st = push(s, CHAT_SEG_TEXT, LIT("\n"), false);
    return st;
}

static ferry_status mistral_message(chat_segments *s, const tok_message *m)
{
    if (m->role == TOK_ROLE_ASSISTANT) {
        ferry_status st = m->len > 0 ? push(s, CHAT_SEG_TEXT, m->content, m->len, true) : FERRY_OK;
        return st == FERRY_OK ? push(s, CHAT_SEG_SPECIAL, LIT("</s>"), true) : st;
    }
    ferry_status st = push(s, CHAT_SEG_MARKER, LIT("[INST]"), false);
    if (st == FERRY_OK && m->len > 0) st = push(s, CHAT_SEG_TEXT, m->content, m->len, false);
    if (st == FERRY_OK) st = push(s, CHAT_SEG_MARKER, LIT("[/INST]"), false);
    return st;
}

static ferry_status refuse(const char *file, size_t line, chat_template_id t, const char *what)
{
    return err_set(FERRY_ERR_FORMAT, "'%s' line %zu: the %s template %s", file, line, template_names[t], what);
}

/* The template's rules on the roles: an assistant message somewhere
 * (otherwise nothing is learned); mistral's user, assistant, user, ... */
static ferry_status check_roles(chat_template_id t, const tok_message *m, size_t n, const char *file, size_t line)
{
    size_t answers = 0;
    char msg[200];
    for (size_t i = 0; i < n; i++) {
        answers += m[i].role == TOK_ROLE_ASSISTANT;
        if (t == CHAT_MISTRAL && m[i].role == TOK_ROLE_SYSTEM) {
            snprintf(msg, sizeof msg, "knows the roles user and assistant, and message %zu has the role system "
                     "(as Mistral's own template, it has none); fold the system text into the first user message",
                     i);
            return refuse(file, line, t, msg);
        }
        tok_role want = i % 2 == 0 ? TOK_ROLE_USER : TOK_ROLE_ASSISTANT;
        if (t == CHAT_MISTRAL && m[i].role != want) {
            snprintf(msg, sizeof msg, "needs the roles to alternate user, assistant, user, ...; message %zu is %s "
                     "where %s was due", i, tok_role_name(m[i].role), tok_role_name(want));
            return refuse(file, line, t, msg);
        }
    }
    if (answers == 0)
        return refuse(file, line, t, "found no assistant message in the record: it has nothing to learn (only the "
                      "assistant's tokens are targets); give each conversation an answer");
    return FERRY_OK;
}

static ferry_status render_messages(chat_template_id t, const tok_message *m, size_t n, chat_segments *out)
{
    ferry_status st = FERRY_OK;
    if (t == CHAT_LLAMA3)
        st = push(out, CHAT_SEG_SPECIAL, LIT("<|begin_of_text|>"), false);
    else if (t == CHAT_MISTRAL)
        st = push(out, CHAT_SEG_SPECIAL, LIT("<s>"), false);
    for (size_t i = 0; st == FERRY_OK && i < n; i++)
        st = t == CHAT_LLAMA3 ? llama3_message(out, &m[i])
           : t == CHAT_CHATML ? chatml_message(out, &m[i])
                              : mistral_message(out, &m[i]);
    return st;
}

ferry_status chat_render(chat_template_id t, const tok_record *rec, const char *file, chat_segments *out)
{
    out->n = 0;
    if ((unsigned)t >= NTEMPLATES)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "chat_render: template %d is not one of the four", (int)t);
    if (t == CHAT_PLAIN && rec->kind == TOK_RECORD_MESSAGES)
        return refuse(file, rec->line, t, "renders {\"prompt\", \"completion\"} records; a \"messages\" record needs "
                      "a chat template (--template llama3, chatml or mistral, the one the model was tuned with)");
    if (t == CHAT_PLAIN) {
        ferry_status st = push(out, CHAT_SEG_BOS, "", 0, false);
        if (st == FERRY_OK && rec->prompt_len) st = push(out, CHAT_SEG_TEXT, rec->prompt, rec->prompt_len, false);
        if (st == FERRY_OK && rec->completion_len)
            st = push(out, CHAT_SEG_TEXT, rec->completion, rec->completion_len, true);
        if (st == FERRY_OK) st = push(out, CHAT_SEG_EOS, "", 0, true);
        return st;
    }
    if (rec->kind == TOK_RECORD_PROMPT) {
        tok_message pair[2] = {{TOK_ROLE_USER, rec->prompt, rec->prompt_len},
                               {TOK_ROLE_ASSISTANT, rec->completion, rec->completion_len}};
        return render_messages(t, pair, 2, out);
    }
    ferry_status st = check_roles(t, rec->messages, rec->nmessages, file, rec->line);
    return st == FERRY_OK ? render_messages(t, rec->messages, rec->nmessages, out) : st;
}

/* ---- encoding ---- */

static ferry_status reserve_ids(tok_ids *ids, size_t more)
{
    if (ids->len + more <= ids->cap)
        return FERRY_OK;
    size_t cap = ids->cap ? ids->cap : 256;
    while (cap < ids->len + more)
        cap *= 2;
    uint32_t *p = realloc(ids->ids, cap * sizeof *p);
    if (!p)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot hold %zu tokens", cap);
    ids->ids = p;
    ids->cap = cap;
    return FERRY_OK;
}

static ferry_status reserve_flags(tok_flags *f, size_t n)
{
    if (n <= f->cap)
        return FERRY_OK;
    size_t cap = f->cap ? f->cap : 256;
    while (cap < n)
        cap *= 2;
    uint8_t *p = realloc(f->v, cap);
    if (!p)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot hold %zu target flags", cap);
    f->v = p;
    f->cap = cap;
    return FERRY_OK;
}

static ferry_status push_id(tok_ids *ids, uint32_t id)
{
    ferry_status st = reserve_ids(ids, 1);
    if (st == FERRY_OK)
        ids->ids[ids->len++] = id;
    return st;
}

/* The id of a segment that is one token, or TOK_NO_TOKEN for text (a marker
 * the tokenizer does not have, a BOS it does not have: *skip). */
static ferry_status one_token(const tok_text_encoder *enc, const chat_segment *g, uint32_t *id, bool *skip)
{
    *id = TOK_NO_TOKEN;
    *skip = false;
    if (g->kind == CHAT_SEG_BOS) {
        *id = enc->bos;
        *skip = enc->bos == TOK_NO_TOKEN;
        return FERRY_OK;
    }
    if (g->kind == CHAT_SEG_EOS) {
        *id = enc->eos;
        if (enc->eos == TOK_NO_TOKEN)
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "the tokenizer has no EOS token, and the plain template ends "
                           "each completion with one; use a tokenizer that has one");
        return FERRY_OK;
    }
    if (g->kind == CHAT_SEG_TEXT)
        return FERRY_OK;
    int64_t v = enc->special(enc->ctx, g->text, g->len);
    if (v >= 0 && (uint64_t)v < enc->vocab_size)
        *id = (uint32_t)v;
    else if (g->kind == CHAT_SEG_SPECIAL)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the template needs the special token '%.*s', which the "
                       "tokenizer does not have; use the template of the model's own tokenizer (plain for GPT-2)",
                       (int)g->len, g->text);
    return FERRY_OK;
}

/* Encodes the text run buf[0..n) and flags its tokens. */
static ferry_status encode_run(const tok_text_encoder *enc, const char *buf, size_t n, bool target, tok_ids *ids,
                               tok_flags *flags)
{
    size_t before = ids->len;
    ferry_status st = n ? enc->encode(enc->ctx, buf, n, ids) : FERRY_OK;
    for (size_t i = before; st == FERRY_OK && i < ids->len; i++)
        if (ids->ids[i] >= enc->vocab_size)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "the tokenizer gave id %u, not below its vocabulary of %u",
                         ids->ids[i], enc->vocab_size);
    if (st == FERRY_OK)
        st = reserve_flags(flags, ids->len);
    if (st == FERRY_OK)
        memset(flags->v + before, target, ids->len - before);
    return st;
}

typedef struct text_run {
    char *buf;
    size_t len, cap;
    bool target;
} text_run;

static ferry_status run_add(text_run *r, const char *s, size_t n)
{
    if (r->len + n > r->cap) {
        size_t cap = r->cap ? r->cap : 256;
        while (cap < r->len + n)
            cap *= 2;
        char *p = realloc(r->buf, cap);
        if (!p)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot hold %zu bytes of a record's text", cap);
        r->buf = p;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, s, n);
    r->len += n;
    return FERRY_OK;
}

static ferry_status flush(const tok_text_encoder *enc, text_run *r, tok_ids *ids, tok_flags *flags)
{
    ferry_status st = encode_run(enc, r->buf, r->len, r->target, ids, flags);
    r->len = 0;
    return st;
}

static ferry_status encode_all(const tok_text_encoder *enc, const chat_segments *segs, tok_ids *ids,
                               tok_flags *flags, text_run *run)
{
    ferry_status st = FERRY_OK;
    for (size_t i = 0; st == FERRY_OK && i < segs->n; i++) {
        const chat_segment *g = &segs->seg[i];
        uint32_t id;
        bool skip;
        if ((st = one_token(enc, g, &id, &skip)) != FERRY_OK || skip)
            continue;
        if (id == TOK_NO_TOKEN && g->kind == CHAT_SEG_MARKER) { /* a marker as text: encoded alone */
            if (run->len)
                st = flush(enc, run, ids, flags);
            if (st == FERRY_OK)
                st = encode_run(enc, g->text, g->len, g->target, ids, flags);
            continue;
        }
        if (id == TOK_NO_TOKEN) { /* text: joins the run when the flag is the same */
            if (run->len && run->target != g->target)
                st = flush(enc, run, ids, flags);
            run->target = g->target;
            if (st == FERRY_OK)
                st = run_add(run, g->text, g->len);
            continue;
        }
        if (run->len)
            st = flush(enc, run, ids, flags);
        if (st == FERRY_OK) st = push_id(ids, id);
        if (st == FERRY_OK) st = reserve_flags(flags, ids->len);
        if (st == FERRY_OK) flags->v[ids->len - 1] = g->target;
    }
    if (st == FERRY_OK && run->len)
        st = flush(enc, run, ids, flags);
    return st;
}

ferry_status chat_encode(const tok_text_encoder *enc, const chat_segments *segs, tok_ids *ids, tok_flags *flags)
{
    if (flags->len != ids->len)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "chat_encode: %zu flags for %zu tokens", flags->len, ids->len);
    size_t before = ids->len;
    text_run run = {0};
    ferry_status st = encode_all(enc, segs, ids, flags, &run);
    free(run.buf);
    ids->len = st == FERRY_OK ? ids->len : before;
    flags->len = ids->len;
    return st;
}

/* ---- GPT-2's tokenizer as an encoder ---- */

static ferry_status gpt2_encode(void *ctx, const char *s, size_t n, tok_ids *out)
{
    return tok_bpe_encode(ctx, s, n, out);
}

static int64_t gpt2_special(void *ctx, const char *s, size_t n)
{
    (void)ctx;
    return n == 13 && memcmp(s, "<|endoftext|>", 13) == 0 ? (int64_t)TOK_GPT2_EOT : -1;
}

void tok_text_encoder_gpt2(tok_bpe *t, tok_text_encoder *out)
{
    *out = (tok_text_encoder){t, gpt2_encode, gpt2_special, TOK_GPT2_EOT, TOK_GPT2_EOT, tok_bpe_vocab_size(t)};
}

/* Any tokenizer train/tokenizer.h opens. */
static ferry_status face_encode(void *ctx, const char *s, size_t n, tok_ids *out)
{
    return tok_encode(ctx, s, n, out);
}

static int64_t face_special(void *ctx, const char *s, size_t n)
{
    return tok_token_id(ctx, s, n);
}

void tok_text_encoder_of(tok_tokenizer *t, tok_text_encoder *out)
{
    int64_t bos = tok_bos(t), eos = tok_eos(t);
    *out = (tok_text_encoder){t, face_encode, face_special, bos < 0 ? TOK_NO_TOKEN : (uint32_t)bos,
                              eos < 0 ? TOK_NO_TOKEN : (uint32_t)eos, tok_vocab_size(t)};
}
