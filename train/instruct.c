/* JSON Lines instruction data to masked shards (see instruct.h). */
#include "train/instruct.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "train/jsonl.h"

void tok_examples_free(tok_examples *ex)
{
    tok_ids_free(&ex->ids);
    tok_flags_free(&ex->target);
    free(ex->starts);
    free(ex->lines);
    *ex = (tok_examples){0};
}

tok_shard_format tok_instruct_format(uint32_t vocab_size)
{
    return vocab_size > 65536 ? TOK_SHARD_MASKED32 : TOK_SHARD_MASKED16;
}

static ferry_status add_start(tok_examples *ex, size_t at, size_t line)
{
    if (ex->n == ex->cap) {
        size_t cap = ex->cap ? 2 * ex->cap : 1024;
        uint32_t *s = realloc(ex->starts, cap * sizeof *s);
        if (s)
            ex->starts = s;
        size_t *l = s ? realloc(ex->lines, cap * sizeof *l) : NULL;
        if (!l)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot hold %zu examples", cap);
        ex->lines = l;
        ex->cap = cap;
    }
    ex->starts[ex->n] = (uint32_t)at;
    ex->lines[ex->n++] = line;
    return FERRY_OK;
}

/* The example just encoded, from token `at` on: the length limit, and the
 * counts of the report. */
static ferry_status finish_example(const char *path, const tok_record *rec, const tok_instruct_options *o,
                                   tok_examples *ex, size_t at, tok_instruct_report *rep)
{
    size_t len = ex->ids.len - at;
    if (o->seq > 0 && len > (size_t)o->seq + 1) {
        if (o->too_long == TOK_TOO_LONG_REFUSE)
            return err_set(FERRY_ERR_FORMAT, "'%s' line %zu: the example is %zu tokens, more than --seq %d + 1 (an "
                           "example of L tokens fills L-1 positions); give --too-long truncate to keep its first %d "
                           "tokens, or a larger --seq", path, rec->line, len, o->seq, o->seq + 1);
        ex->ids.len = ex->target.len = at + (size_t)o->seq + 1;
        rep->truncated++;
    }
    size_t targets = 0;
    for (size_t i = at; i < ex->ids.len; i++)
        targets += ex->target.v[i];
    rep->untargeted += targets == 0;
    rep->targets += targets;
    rep->examples++;
    rep->tokens += ex->ids.len - at;
    if (ex->ids.len > TOK_SHARD_MAX_TOKENS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "'%s' line %zu: the data reaches %zu tokens, more than a shard "
                       "counts (%u); split the file", path, rec->line, ex->ids.len, TOK_SHARD_MAX_TOKENS);
    return add_start(ex, at, rec->line);
}

ferry_status tok_instruct_read(const char *path, const tok_text_encoder *enc, const tok_instruct_options *o,
                               tok_examples *ex, tok_instruct_report *rep)
{
    tok_jsonl *r = NULL;
    chat_segments segs = {0};
    ferry_status st = tok_jsonl_open(path, &r);
    for (bool done = false; st == FERRY_OK;) {
        tok_record rec;
        st = tok_jsonl_next(r, &rec, &done);
        if (st != FERRY_OK || done)
            break;
        size_t at = ex->ids.len;
        st = chat_render(o->tpl, &rec, path, &segs);
        for (size_t i = 0; st == FERRY_OK && i < segs.n; i++)
            rep->bytes += segs.seg[i].len;
        if (st == FERRY_OK && (st = chat_encode(enc, &segs, &ex->ids, &ex->target)) != FERRY_OK)
            st = err_wrap(st, "'%s' line %zu", path, rec.line);
        if (st == FERRY_OK)
            st = finish_example(path, &rec, o, ex, at, rep);
    }
    chat_segments_free(&segs);
    tok_jsonl_close(r);
    return st;
}

/* Tokens of examples [a, b). */
static size_t span(const tok_examples *ex, size_t a, size_t b)
{
    size_t end = b < ex->n ? ex->starts[b] : ex->ids.len;
    return end - ex->starts[a];
}

/* Examples [a, b) as one shard of `split`. */
static ferry_status add_shard(const tok_examples *ex, size_t a, size_t b, tok_shard_format f, tok_shard_set *set,
                              const char *split, FILE *say)
{
    size_t first = ex->starts[a], n = span(ex, a, b);
    uint32_t *starts = malloc((b - a) * sizeof *starts);
    if (!starts)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot hold the starts of %zu examples", b - a);
    for (size_t k = a; k < b; k++)
        starts[k - a] = ex->starts[k] - (uint32_t)first;
    tok_shard_examples se = {ex->ids.ids + first, ex->target.v + first, n, starts, b - a};
    const char *path = NULL;
    ferry_status st = tok_shard_set_add_masked(set, split, f, &se, &path);
    free(starts);
    if (st == FERRY_OK && say)
        fprintf(say, "%s: %zu tokens in %zu examples\n", path, n, b - a);
    return st;
}

/* Examples [a, b) as shards of at most o->shard_tokens tokens (an example
 * larger than that alone in its shard). */
static ferry_status write_part(const tok_examples *ex, size_t a, size_t b, const tok_instruct_options *o,
                               tok_shard_format f, tok_shard_set *set, const char *split, int *shards, FILE *say)
{
    ferry_status st = FERRY_OK;
    *shards = 0;
    while (st == FERRY_OK && a < b) {
        size_t e = a + 1;
        while (e < b && span(ex, a, e + 1) <= o->shard_tokens)
            e++;
        st = add_shard(ex, a, e, f, set, split, say);
        (*shards)++;
        a = e;
    }
    return st;
}

ferry_status tok_instruct_write(const tok_examples *ex, const tok_instruct_options *o, tok_shard_format f,
                                tok_shard_set *set, tok_instruct_report *rep, FILE *say)
{
    size_t want = (size_t)ceil(o->val_fraction * (double)ex->ids.len), nval = 0;
    while (nval < ex->n && span(ex, 0, nval) < want)
        nval++;
    if (nval == ex->n)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the data is %zu examples of %zu tokens, and --val-fraction %g "
                       "takes all of them for validation, leaving no training example; give more data or a "
                       "smaller --val-fraction", ex->n, ex->ids.len, o->val_fraction);
    rep->val_examples = nval;
    rep->val_tokens = nval ? span(ex, 0, nval) : 0;
    rep->train_examples = ex->n - nval;
    rep->train_tokens = ex->ids.len - rep->val_tokens;
    ferry_status st = write_part(ex, 0, nval, o, f, set, "val", &rep->val_shards, say);
    if (st == FERRY_OK)
        st = write_part(ex, nval, ex->n, o, f, set, "train", &rep->train_shards, say);
    return st;
}
