/* The upload window's ring (engine/window.h): its chunks from the host
 * pool, and the uploads through it. A group's upload is, per chunk, a host
 * function on the h2d stream (the chunk's conversion done, and the next
 * chunk's started on the optimizer threads) followed by the chunk's copy.
 * The stream runs them in order, so a host function runs only after every
 * copy queued before it completed: the chunk converted ahead is one whose
 * last copy is done (with a ring of one chunk nothing is converted ahead).
 * The state of the conversion under way is touched by those host functions
 * alone, one at a time. Owns no decision of where the weights go. */
#include "engine/window.h"

#include <stdlib.h>

#include "common/error.h"
#include "engine/layout.h"
#include "optim/adamw.h"
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
    tp_pool *threads;
    /* the next chunk's conversion, started by the host function before */
    tp_ticket *ahead;
    const float *ahead_src; /* of the group (its master weights) and chunk it converts */
    size_t ahead_k;
    convert_job job;
};

typedef struct stage_args {
    engine_window *w;
    const float *master;
    size_t numel, k;
} stage_args;

static void convert_tile(void *ctx, size_t tile, int worker)
{
    (void)worker;
    const convert_job *j = ctx;
    size_t off = tile * OPTIM_TILE, len = j->n - off < OPTIM_TILE ? j->n - off : OPTIM_TILE;
    /* checked whole: pointers set, a float type */
    (void)half_convert((char *)j->dst + off * dtype_size(j->dt), j->dt, j->src + off, FERRY_DTYPE_F32, len);
}

static size_t tiles(size_t n) { return (n + OPTIM_TILE - 1) / OPTIM_TILE; }

static char *slot(const engine_window *w, size_t k)
{
    return w->ring + (k % (size_t)w->count) * w->chunk_elems * w->elem_bytes;
}

static convert_job chunk_job(const engine_window *w, const stage_args *a, size_t k)
{
    size_t at = k * w->chunk_elems, left = a->numel - at;
    return (convert_job){slot(w, k), a->master + at, w->dt, left < w->chunk_elems ? left : w->chunk_elems};
}

static ferry_status wait_ahead(engine_window *w)
{
    ferry_status st = w->ahead ? tp_wait(w->ahead) : FERRY_OK;
    w->ahead = NULL;
    return st;
}

/* On the h2d stream, before chunk k's copy: chunk k converted, chunk k+1 started. */
static ferry_status stage_chunk(void *p)
{
    const stage_args *a = p;
    engine_window *w = a->w;
    bool mine = w->ahead && w->ahead_src == a->master && w->ahead_k == a->k;
    ferry_status st = wait_ahead(w);
    if (st == FERRY_OK && !mine) {
        convert_job j = chunk_job(w, a, a->k);
        st = tp_parallel_for(w->threads, tiles(j.n), convert_tile, &j);
    }
    if (st != FERRY_OK)
        return err_wrap(st, "the upload window's conversion");
    size_t next = a->k + 1;
    /* the next chunk's place last held chunk next - count, copied before this ran */
    if (w->count >= 2 && next * w->chunk_elems < a->numel) {
        w->job = chunk_job(w, a, next);
        if (tp_submit(w->threads, tiles(w->job.n), convert_tile, &w->job, NULL, &w->ahead) == FERRY_OK) {
            w->ahead_src = a->master;
            w->ahead_k = next;
        } else {
            w->ahead = NULL; /* converted in its own turn */
            err_clear();
        }
    }
    return FERRY_OK;
}

ferry_status engine_window_open(const engine_ctx *c, size_t largest, engine_window **out)
{
    *out = NULL;
    const ferry_engine_config *cfg = c->cfg;
    engine_window *w = calloc(1, sizeof *w);
    if (!w)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    engine_window_shape(cfg->upload_window_chunks, cfg->upload_window_chunk_bytes, c->act_size, largest,
                        &w->chunk_elems, &w->count);
    w->elem_bytes = c->act_size;
    w->dt = c->act;
    w->threads = c->threads;
    void *ring = NULL;
    ferry_status st = w->count > 0 ? pool_alloc(c->pool, engine_window_bytes(w), 0, FERRY_MEM_STAGING,
                                                "upload window", &ring)
                                   : FERRY_OK;
    if (st != FERRY_OK) {
        free(w);
        return err_wrap(st, "the upload window's ring");
    }
    w->ring = ring;
    *out = w;
    return FERRY_OK;
}

void engine_window_close(engine_window *w, backend_stream *h2d)
{
    if (!w)
        return;
    if (backend_stream_synchronize(h2d) != FERRY_OK) /* its host functions use the ring */
        err_clear();
    if (wait_ahead(w) != FERRY_OK) /* a stream that failed mid-group */
        err_clear();
    free(w);
}

ferry_status engine_window_upload(engine_window *w, const engine_ctx *c, const engine_group *g, void *dst)
{
    if (!w->count || !g->master)
        return err_set(FERRY_ERR_STATE, "group '%s': the upload window has no ring or the group no master weights",
                       g->name);
    ferry_status st = FERRY_OK;
    for (size_t k = 0; k * w->chunk_elems < g->numel && st == FERRY_OK; k++) {
        stage_args a = {w, g->master, g->numel, k};
        size_t at = k * w->chunk_elems, n = g->numel - at < w->chunk_elems ? g->numel - at : w->chunk_elems;
        if ((st = backend_launch_host(c->h2d, stage_chunk, &a, sizeof a)) == FERRY_OK)
            st = backend_memcpy_async(c->h2d, (char *)dst + at * w->elem_bytes, slot(w, k), n * w->elem_bytes,
                                      BACKEND_COPY_H2D);
    }
    return st;
}

size_t engine_window_bytes(const engine_window *w) { return w->chunk_elems * w->elem_bytes * (size_t)w->count; }
int engine_window_chunks(const engine_window *w) { return w->count; }
