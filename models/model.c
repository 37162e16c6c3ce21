/* What the model families share (models/model.h): the hooks' checked calls,
 * the backend allocator, the activation planner and the seeded chunked
 * initialisation. The resident placement is models/model_resident.c. */
#include "models/model.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>

#include "common/error.h"

#define MODEL_ALLOC_ALIGN 256

/* ---- hooks ---- */

ferry_status model_check_hooks(const model_hooks *h, const char *who)
{
    if (!h || !h->acquire_params || !h->acquire_grads || !h->release)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: hooks are NULL or incomplete (acquire_params, acquire_grads and release are all needed; "
                       "model_resident_hooks() gives a ready set)",
                       who);
    return FERRY_OK;
}

ferry_status model_acquire(const model_hooks *h, const char *who, int g, ferry_phase phase, backend_stream *s,
                           const act_t **p)
{
    *p = NULL;
    ferry_status st = h->acquire_params(h->ctx, g, phase, s, p);
    if (st != FERRY_OK)
        return err_wrap(st, "%s: acquiring the params of group %d", who, g);
    if (!*p)
        return err_set(FERRY_ERR_STATE, "%s: acquire_params gave NULL for group %d", who, g);
    return FERRY_OK;
}

ferry_status model_acquire_grads(const model_hooks *h, const char *who, int g, backend_stream *s, act_t **p)
{
    *p = NULL;
    ferry_status st = h->acquire_grads(h->ctx, g, s, p);
    if (st != FERRY_OK)
        return err_wrap(st, "%s: acquiring the grads of group %d", who, g);
    if (!*p)
        return err_set(FERRY_ERR_STATE, "%s: acquire_grads gave NULL for group %d", who, g);
    return FERRY_OK;
}

ferry_status model_release(const model_hooks *h, const char *who, int g, ferry_phase phase, backend_stream *s)
{
    ferry_status st = h->release(h->ctx, g, phase, s);
    return st == FERRY_OK ? st : err_wrap(st, "%s: releasing group %d", who, g);
}

ferry_status model_keep_positions(const char *who, int32_t **keep, const int32_t *pos, int B, int T)
{
    if (!pos) {
        free(*keep);
        *keep = NULL;
        return FERRY_OK;
    }
    ferry_status st = ops_check_positions(who, pos, B, T);
    if (st != FERRY_OK)
        return st;
    size_t bytes = (size_t)B * T * sizeof *pos;
    if (!*keep && !(*keep = malloc(bytes)))
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "%s: out of host memory for %zu bytes", who, bytes);
    memcpy(*keep, pos, bytes);
    return FERRY_OK;
}

/* ---- a batch's inputs and its loss ---- */

ferry_status model_check_batch(const char *who, const int32_t *tokens, const int32_t *targets, int B, int T, int V,
                               int *n_valid)
{
    int N = B * T;
    for (int i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return err_set(FERRY_ERR_INVALID_ARGUMENT,
                           "%s: token %d at batch row %d, position %d is outside the vocabulary [0, %d); check the "
                           "token data",
                           who, (int)tokens[i], i / T, i % T, V);
    *n_valid = 0;
    for (int i = 0; targets && i < N; i++) {
        if (targets[i] >= V)
            return err_set(FERRY_ERR_INVALID_ARGUMENT,
                           "%s: target %d at batch row %d, position %d is outside the vocabulary [0, %d) (negative "
                           "targets are ignored)",
                           who, (int)targets[i], i / T, i % T, V);
        *n_valid += targets[i] >= 0;
    }
    return FERRY_OK;
}

float model_mean_loss(const float *losses, int N, int n_valid)
{
    double sum = 0.0;
    for (int i = 0; i < N; i++)
        sum += losses[i];
    return n_valid > 0 ? (float)(sum / n_valid) : 0.0f;
}

ferry_status model_check_run(const char *who, const void *m, const void *a, backend_stream *s, const backend *be,
                             const model_hooks *h)
{
    if (!m || !a || !s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: NULL model, activations or stream", who);
    if (backend_stream_backend(s) != be)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: the stream belongs to another backend than the activations",
                       who);
    return model_check_hooks(h, who);
}

/* ---- the backend allocator ---- */

static ferry_status backend_allocator_alloc(void *ctx, const char *what, size_t bytes, void **out)
{
    ferry_status st = backend_alloc(ctx, bytes, out);
    return st == FERRY_OK ? st : err_wrap(st, "%s", what);
}

static void backend_allocator_free(void *ctx, void *ptr) { backend_free(ctx, ptr); }

model_allocator model_backend_allocator(backend *be)
{
    return (model_allocator){be, backend_allocator_alloc, backend_allocator_free};
}

/* ---- activation buffers ---- */

ferry_status model_take_buf(model_take *t, void *out_ptr, size_t bytes, const char *fmt, ...)
{
    void **out = out_ptr;
    *out = NULL;
    bytes = (bytes + MODEL_ALLOC_ALIGN - 1) / MODEL_ALLOC_ALIGN * MODEL_ALLOC_ALIGN;
    char what[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (t->dry) {
        if (t->list)
            t->list(t->list_ctx, what, bytes);
        if (__builtin_add_overflow(t->bytes, bytes, &t->bytes))
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: more bytes than a size_t can count", t->who);
        return FERRY_OK;
    }
    if (t->owned_count == t->owned_cap) {
        size_t cap = t->owned_cap ? 2 * t->owned_cap : 64;
        void **grown = realloc(t->owned, cap * sizeof *grown);
        if (!grown)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "%s: out of host memory", t->who);
        t->owned = grown;
        t->owned_cap = cap;
    }
    ferry_status st = t->alloc.alloc(t->alloc.ctx, what, bytes, out);
    if (st != FERRY_OK)
        return err_wrap(st, "%s '%s'", t->who, what);
    t->owned[t->owned_count++] = *out;
    t->bytes += bytes;
    return FERRY_OK;
}

void model_take_free(model_take *t)
{
    for (size_t i = 0; i < t->owned_count; i++)
        t->alloc.free(t->alloc.ctx, t->owned[i]);
    free(t->owned);
    t->owned = NULL;
    t->owned_count = t->owned_cap = 0;
}

/* ---- initialisation ---- */

/* The draws of a tensor come in chunks of this many elements, each from its
 * own stream, so the chunks can be filled on every core at once and the bits
 * never depend on the number of threads. Even, so that a Box-Muller pair
 * never straddles two chunks. Chunk 0 draws from the tensor's own stream:
 * a tensor of at most one chunk has the values it always had. */
#define INIT_CHUNK ((size_t)1 << 16)

static uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Unit normals, two per Box-Muller draw, from a splitmix64 stream. */
static void fill_normal(float *out, size_t n, double std, uint64_t state)
{
    const double two_pi = 6.283185307179586;
    for (size_t i = 0; i < n; i += 2) {
        state = mix64(state);
        double u1 = ((double)(state >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
        state = mix64(state);
        double u2 = (double)(state >> 11) * 0x1.0p-53;
        double r = sqrt(-2.0 * log(u1));
        out[i] = (float)(std * r * cos(two_pi * u2));
        if (i + 1 < n)
            out[i + 1] = (float)(std * r * sin(two_pi * u2));
    }
}

/* One chunk of one tensor: elements [begin, end) of its span in the group. */
typedef struct init_job {
    float *dst;       /* the tensor's first element */
    size_t begin, end;
    size_t drawn;     /* elements [0, drawn) are real; the rest (a padded vocabulary's rows) stay 0 */
    model_init_kind kind;
    double std;
    uint64_t stream;  /* the tensor's stream */
} init_job;

static void run_job(const init_job *j)
{
    size_t real_end = j->end < j->drawn ? j->end : j->drawn;
    size_t real = real_end > j->begin ? real_end - j->begin : 0;
    float *dst = j->dst + j->begin;
    if (j->kind == MODEL_INIT_NORMAL) {
        size_t chunk = j->begin / INIT_CHUNK;
        fill_normal(dst, real, j->std, chunk == 0 ? j->stream : mix64(j->stream ^ mix64(chunk)));
    } else {
        for (size_t k = 0; k < real; k++)
            dst[k] = j->kind == MODEL_INIT_ONE ? 1.0f : 0.0f;
    }
    memset(dst + real, 0, (j->end - j->begin - real) * sizeof *dst);
}

typedef struct init_work {
    const init_job *jobs;
    size_t count;
    size_t next; /* the next job to claim (atomic) */
} init_work;

static void *init_worker(void *arg)
{
    init_work *w = arg;
    for (size_t j; (j = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED)) < w->count;)
        run_job(&w->jobs[j]);
    return NULL;
}

/* Threads to fill with: $FERRY_INIT_THREADS if set (1..1024), else every
 * online CPU; never more than there are jobs. */
static int init_threads(size_t jobs)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("FERRY_INIT_THREADS");
    if (env && atol(env) >= 1 && atol(env) <= 1024)
        n = atol(env);
    if (n < 1)
        n = 1;
    return (size_t)n > jobs ? (int)jobs : (int)n;
}

/* Runs every job on up to init_threads() threads, the caller among them.
 * A thread the system refuses only means fewer threads. */
static void run_jobs(const init_job *jobs, size_t count)
{
    init_work w = {jobs, count, 0};
    pthread_t tid[1024];
    int started = 0, want = init_threads(count);
    while (started < want - 1 && pthread_create(&tid[started], NULL, init_worker, &w) == 0)
        started++;
    init_worker(&w);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
}

/* The chunk jobs of every tensor of a group (jobs may be NULL: only
 * counted), and the gaps between and after the tensors zeroed. */
static size_t plan_jobs(const model_init_tensor *ts, int count, size_t group_numel, uint64_t seed, int group,
                        float *out, init_job *jobs)
{
    size_t n = 0;
    for (int i = 0; i < count; i++) {
        const model_init_tensor *t = &ts[i];
        size_t end = i + 1 < count ? ts[i + 1].offset : group_numel;
        memset(out + t->offset + t->numel, 0, (end - t->offset - t->numel) * sizeof *out);
        init_job j = {out + t->offset, 0, 0, t->drawn, t->kind, t->std,
                      mix64(mix64(seed) ^ ((uint64_t)group << 20) ^ (uint64_t)i)};
        for (size_t b = 0; b < t->numel; b += INIT_CHUNK, n++) {
            j.begin = b;
            j.end = t->numel - b < INIT_CHUNK ? t->numel : b + INIT_CHUNK;
            if (jobs)
                jobs[n] = j;
        }
    }
    return n;
}

ferry_status model_init_fill(const model_init_tensor *tensors, int count, size_t group_numel, uint64_t seed,
                             int group, float *out)
{
    if (count > 0 && tensors[0].offset > 0)
        memset(out, 0, tensors[0].offset * sizeof *out);
    size_t jobs_n = plan_jobs(tensors, count, group_numel, seed, group, out, NULL);
    init_job *jobs = malloc((jobs_n ? jobs_n : 1) * sizeof *jobs);
    if (!jobs)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "initialising group %d: out of host memory for %zu chunks", group,
                       jobs_n);
    plan_jobs(tensors, count, group_numel, seed, group, out, jobs);
    run_jobs(jobs, jobs_n);
    free(jobs);
    return FERRY_OK;
}
