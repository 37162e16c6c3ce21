/* The upload window's ring (engine/window.h): its chunks from the host
 * pool, its converter thread, and the uploads through it. A group's upload
 * is, per chunk, a host function on the h2d stream (the chunk's conversion
 * finished, the next chunk's handed to the converter) followed by the
 * chunk's copy. The stream runs them in order, so a host function runs only
 * after every copy queued before it completed: the chunk converted ahead is
 * one whose last copy is done (with a ring of one chunk nothing is converted
 * ahead). The converter is the window's own thread, not the optimizer
 * pool: the pool's queue may hold drain tiles that wait for a copy which,
 * through the streams, waits for this upload. Owns no decision of where the
 * weights go. */
#include "engine/window.h"

#include <pthread.h>
#include <stdlib.h>

#include "common/error.h"
#include "engine/layout.h"
#include "optim/half.h"

typedef struct convert_job {
    void *dst;
    const float *src;
    ferry_dtype dt;
    size_t n;
} convert_job;

struct engine_window {
    char *ring;
    size_t chunk_elems, elem_bytes;
    int count;
    ferry_dtype dt;
    /* the converter: one job at a time, handed over under the lock */
    pthread_t thread;
    bool started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool posted, done, stop;
    convert_job job;
    ferry_status job_st;
    const float *ahead_src; /* of the group (its master weights) and chunk posted */
    size_t ahead_k;
};

typedef struct stage_args {
    engine_window *w;
    const float *master;
    size_t numel, k;
} stage_args;

static ferry_status convert(const convert_job *j)
{
    return half_convert(j->dst, j->dt, j->src, FERRY_DTYPE_F32, j->n);
}

static void *converter_main(void *p)
{
    engine_window *w = p;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->stop && !(w->posted && !w->done))
            pthread_cond_wait(&w->cond, &w->lock);
        if (w->stop)
            break;
        convert_job j = w->job;
        pthread_mutex_unlock(&w->lock);
        ferry_status st = convert(&j);
        pthread_mutex_lock(&w->lock);
        w->job_st = st;
        w->done = true;
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static char *slot(const engine_window *w, size_t k)
{
    return w->ring + (k % (size_t)w->count) * w->chunk_elems * w->elem_bytes;
}

static convert_job chunk_job(const engine_window *w, const stage_args *a, size_t k)
{
    size_t at = k * w->chunk_elems, left = a->numel - at;
    return (convert_job){slot(w, k), a->master + at, w->dt, left < w->chunk_elems ? left : w->chunk_elems};
}

/* The job posted, finished; *mine: it was chunk k of `src`. */
static ferry_status wait_ahead(engine_window *w, const float *src, size_t k, bool *mine)
{
    pthread_mutex_lock(&w->lock);
    while (w->posted && !w->done)
        pthread_cond_wait(&w->cond, &w->lock);
    *mine = w->posted && w->ahead_src == src && w->ahead_k == k;
    ferry_status st = w->posted ? w->job_st : FERRY_OK;
    w->posted = false;
    pthread_mutex_unlock(&w->lock);
    return st;
}

static void post(engine_window *w, convert_job j, const float *src, size_t k)
{
    pthread_mutex_lock(&w->lock);
    w->job = j;
    w->ahead_src = src;
    w->ahead_k = k;
    w->posted = true;
    w->done = false;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* On the h2d stream, before chunk k's copy: chunk k converted, chunk k+1 posted. */
static ferry_status stage_chunk(void *p)
{
    const stage_args *a = p;
    engine_window *w = a->w;
    bool mine = false;
    ferry_status st = wait_ahead(w, a->master, a->k, &mine);
    if (st == FERRY_OK && !mine) {
        convert_job j = chunk_job(w, a, a->k);
        st = convert(&j);
    }
    if (st != FERRY_OK)
        return err_wrap(st, "the upload window's conversion");
    size_t next = a->k + 1;
    /* the next chunk's place last held chunk next - count, copied before this ran */
    if (w->count >= 2 && next * w->chunk_elems < a->numel)
        post(w, chunk_job(w, a, next), a->master, next);
    return FERRY_OK;
}

static void window_free(engine_window *w)
{
    if (w->started) {
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
    }
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w); /* the ring goes with the pool */
}

ferry_status engine_window_open(const engine_ctx *c, size_t largest, engine_window **out)
{
    *out = NULL;
    const ferry_engine_config *cfg = c->cfg;
    engine_window *w = calloc(1, sizeof *w);
    if (!w)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    engine_window_shape(cfg->upload_window_chunks, cfg->upload_window_chunk_bytes, c->act_size, largest,
                        &w->chunk_elems, &w->count);
    w->elem_bytes = c->act_size;
    w->dt = c->act;
    void *ring = NULL;
    ferry_status st = w->count > 0 ? pool_alloc(c->pool, engine_window_bytes(w), 0, FERRY_MEM_STAGING,
                                                "upload window", &ring)
                                   : FERRY_OK;
    w->ring = ring;
    if (st == FERRY_OK && w->count >= 2) { /* one chunk: nothing to convert ahead */
        w->started = pthread_create(&w->thread, NULL, converter_main, w) == 0;
        if (!w->started)
            st = err_set(FERRY_ERR_BACKEND, "ferry_engine_setup: the upload window's converter thread could not "
                                            "start; set upload_window_chunks 1 or FERRY_UPLOAD_WINDOW_OFF");
    }
    if (st != FERRY_OK) {
        window_free(w);
        return err_wrap(st, "the upload window's ring");
    }
    *out = w;
    return FERRY_OK;
}

void engine_window_close(engine_window *w, backend_stream *h2d)
{
    if (!w)
        return;
    if (backend_stream_synchronize(h2d) != FERRY_OK) /* its host functions use the ring */
        err_clear();
    bool mine;
    if (wait_ahead(w, NULL, 0, &mine) != FERRY_OK) /* a stream that failed mid-group */
        err_clear();
    window_free(w);
}

ferry_status engine_window_upload_span(engine_window *w, const engine_ctx *c, const char *name, const float *master,
                                       size_t n, void *dst)
{
    if (!w->count || !master)
        return err_set(FERRY_ERR_STATE, "group '%s': the upload window has no ring or the group no master weights",
                       name);
    ferry_status st = FERRY_OK;
    for (size_t k = 0; k * w->chunk_elems < n && st == FERRY_OK; k++) {
        stage_args a = {w, master, n, k};
        size_t at = k * w->chunk_elems, len = n - at < w->chunk_elems ? n - at : w->chunk_elems;
        if ((st = backend_launch_host(c->h2d, stage_chunk, &a, sizeof a)) == FERRY_OK)
            st = backend_memcpy_async(c->h2d, (char *)dst + at * w->elem_bytes, slot(w, k), len * w->elem_bytes,
                                      BACKEND_COPY_H2D);
    }
    return st;
}

ferry_status engine_window_upload(engine_window *w, const engine_ctx *c, const engine_group *g, void *dst)
{
    return engine_window_upload_span(w, c, g->name, g->master, g->numel, dst);
}

size_t engine_window_bytes(const engine_window *w) { return w->chunk_elems * w->elem_bytes * (size_t)w->count; }
int engine_window_chunks(const engine_window *w) { return w->count; }
