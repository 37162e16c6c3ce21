/* tools/bench/generate/bench_generate.c: what the key/value cache saves in
 * generation. Greedy generation of --tokens tokens after a --prompt-len
 * token prompt from a model of either family (--model, a preset; seeded
 * init, resident on the host backend, fp32), timed in the same run two
 * ways, rounds alternating so the machine's load falls on both alike:
 *   - the cache (train/sample.h's sample_generate): one forward of the
 *     prompt, then a decode step a token;
 *   - the recompute (sample_generate_recompute), the reference the cache is
 *     held to: a forward over the whole window (prompt + tokens) for every
 *     token, as sampling did before the cache.
 * It prints each round, the median tokens/s of each, the ratio cache /
 * recompute (the figure), and whether both generated the same tokens (they
 * must: tests/models/test_decode.c holds it). It owns nothing of the model
 * or the ops; it only drives them.
 * Exit status: 0 when both ran and agreed; 1 when one failed or they
 * differed; 2 on a bad command line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "train/sample.h"

typedef struct bench_args {
    const char *model;
    int prompt_len, tokens, rounds;
} bench_args;

static int usage(const char *why)
{
    fprintf(stderr, "bench_generate: %s\nusage: bench_generate [--model NAME (gpt2 d4)] [--prompt-len N (64)] "
                    "[--tokens N (128)] [--rounds N (3)]\n", why);
    return 2;
}

static int parse(int argc, char **argv, bench_args *a)
{
    *a = (bench_args){"d4", 64, 128, 3};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            return usage("a flag without its value");
        const char *f = argv[i], *v = argv[++i];
        char *end = NULL;
        long n = strtol(v, &end, 10);
        if (strcmp(f, "--model") == 0) {
            a->model = v;
            continue;
        }
        if (*end || n < 1 || n > 1000000)
            return usage("a count must be a whole number from 1 to 1000000");
        if (strcmp(f, "--prompt-len") == 0) a->prompt_len = (int)n;
        else if (strcmp(f, "--tokens") == 0) a->tokens = (int)n;
        else if (strcmp(f, "--rounds") == 0) a->rounds = (int)n;
        else return usage("an unknown flag");
    }
    return 0;
}

typedef struct bench {
    backend *be;
    backend_stream *s;
    lmodel *m;
    model_resident *r;
    model_hooks h;
    lmodel_kv *kv;
    lmodel_acts *acts;
    int T;
} bench;

static ferry_status setup(bench *b, const bench_args *a)
{
    model_spec spec;
    ferry_status st = model_spec_preset(a->model, &spec);
    b->T = a->prompt_len + a->tokens;
    if (st == FERRY_OK && b->T > model_spec_context(&spec))
        st = err_set(FERRY_ERR_INVALID_ARGUMENT, "prompt and tokens, %d positions, exceed the model's context %d",
                     b->T, model_spec_context(&spec));
    if (st == FERRY_OK) st = backend_open(FERRY_BACKEND_HOST, &b->be);
    if (st == FERRY_OK) st = ops_init(b->be, NULL, 0);
    if (st == FERRY_OK) st = backend_stream_create(b->be, "bench", &b->s);
    if (st == FERRY_OK) st = lmodel_create(&spec, &b->m);
    if (st != FERRY_OK)
        return st;
    int G = lmodel_num_groups(b->m);
    size_t *numel = calloc((size_t)G, sizeof *numel);
    if (!numel)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory");
    for (int g = 0; g < G; g++)
        numel[g] = lmodel_group_numel(b->m, g);
    st = model_resident_create(b->be, G, numel, "bench", &b->r);
    model_desc d = lmodel_desc(b->m);
    for (int g = 0; g < G && st == FERRY_OK; g++) {
        float *v = malloc(numel[g] * sizeof *v);
        st = v ? d.init_group(d.m, g, 7, v) : err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory");
        if (st == FERRY_OK) st = model_resident_set_params(b->r, b->s, g, v);
        free(v);
    }
    free(numel);
    b->h = model_resident_hooks(b->r);
    model_allocator alloc = model_backend_allocator(b->be);
    if (st == FERRY_OK) st = lmodel_kv_create(b->m, b->be, 1, b->T, 0, &alloc, &b->kv);
    if (st == FERRY_OK) st = lmodel_acts_create(b->m, b->be, 1, b->T, false, &alloc, &b->acts);
    return st;
}

/* One greedy generation; its tokens in *out (malloc'd) and its seconds. */
static ferry_status run(bench *b, const bench_args *a, bool cache, uint32_t **out, double *sec)
{
    tok_ids ids = {0};
    ids.cap = (size_t)b->T + 1;
    ids.ids = malloc(ids.cap * sizeof *ids.ids);
    if (!ids.ids)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory");
    int V = lmodel_vocab(b->m);
    for (int i = 0; i < a->prompt_len; i++)
        ids.ids[ids.len++] = (uint32_t)((i * 7919 + 13) % V);
    sampler g = {.temperature = 0.0f, .eos = -1};
    double t0 = clock_now_ms();
    ferry_status st = cache ? sample_generate(b->m, b->kv, &b->h, b->s, NULL, &ids, a->tokens, &g)
                            : sample_generate_recompute(b->m, b->acts, &b->h, b->s, 1, b->T, NULL, &ids, a->tokens, &g);
    *sec = (clock_now_ms() - t0) / 1000.0;
    *out = ids.ids;
    return st;
}

static int by_value(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv)
{
    bench_args a;
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc;
    bench b = {0};
    ferry_status st = setup(&b, &a);
    if (st != FERRY_OK) {
        fprintf(stderr, "bench_generate: setup: %s\n", ferry_last_error());
        return 1;
    }
    printf("model %s (%llu parameters), host backend fp32, prompt %d tokens, %d generated, greedy\n", a.model,
           (unsigned long long)lmodel_num_params(b.m), a.prompt_len, a.tokens);
    double *kv_s = calloc((size_t)a.rounds, sizeof *kv_s), *re_s = calloc((size_t)a.rounds, sizeof *re_s);
    bool same = true;
    for (int r = 0; r < a.rounds && st == FERRY_OK; r++) {
        uint32_t *x = NULL, *y = NULL;
        st = run(&b, &a, true, &x, &kv_s[r]);
        if (st == FERRY_OK)
            st = run(&b, &a, false, &y, &re_s[r]);
        if (st == FERRY_OK)
            same &= memcmp(x, y, (size_t)(a.prompt_len + a.tokens) * sizeof *x) == 0;
        if (st == FERRY_OK)
            printf("round %d: cache %.3f s (%.1f tok/s), recompute %.3f s (%.1f tok/s)\n", r + 1, kv_s[r],
                   a.tokens / kv_s[r], re_s[r], a.tokens / re_s[r]);
        free(x);
        free(y);
    }
    if (st != FERRY_OK) {
        fprintf(stderr, "bench_generate: %s\n", ferry_last_error());
        return 1;
    }
    qsort(kv_s, (size_t)a.rounds, sizeof *kv_s, by_value);
    qsort(re_s, (size_t)a.rounds, sizeof *re_s, by_value);
    double kv_tps = a.tokens / kv_s[a.rounds / 2], re_tps = a.tokens / re_s[a.rounds / 2];
    printf("cache %.1f tok/s, recompute %.1f tok/s (medians of %d): the cache is %.2fx the recompute; tokens %s\n",
           kv_tps, re_tps, a.rounds, kv_tps / re_tps, same ? "identical" : "DIFFER");
    backend_stream_synchronize(b.s);
    lmodel_kv_destroy(b.kv);
    lmodel_acts_destroy(b.acts);
    model_resident_destroy(b.r);
    lmodel_destroy(b.m);
    backend_stream_destroy(b.s);
    ops_shutdown(b.be);
    backend_close(b.be);
    free(kv_s);
    free(re_s);
    return same ? 0 : 1;
}
