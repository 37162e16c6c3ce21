/* ZeRO data parallelism: what each rank owns and the collectives that keep
 * the ranks one model. Owns the communicators and their two streams (one
 * for gradients, one for weights: each communicator is used by one stream,
 * in program order, so every rank issues its collectives in the same
 * order), the reduce buffers, and the rules below. Where the bytes of a
 * group live stays placement.c's; the schedule, the drains, the update and
 * the step call in here, handing it what it works on.
 *
 * Offload none (plain data parallel): each rank keeps everything; at the
 * step's last micro-batch each group's gradient, summed over the rank's
 * micro-batches in fp32, is all-reduced in fp32 on the gradient stream as
 * its backward is released; the compute stream waits for those sums before
 * the norm and the device AdamW, which then run identically on every rank.
 *
 * Optimizer mode (ZeRO-2 with offload): every rank holds the whole device
 * weights and gradients, and 1/N of the host state: master weights, Adam
 * moments, the summed gradients, the upload copy. Each micro-batch's
 * gradients of a group are widened to fp32 and reduce-scattered as the
 * group's backward is released, a chunk of every slot at a time through two
 * pairs of buffers that take turns (a chunk reduces while the last one
 * drains; the buffers stay 64 MiB whatever the group); the rank drains only its slot,
 * sums micro-batches and takes the norm's tiles on the CPU, and updates
 * only its slot. Each updated slot goes up on the h2d stream and is
 * all-gathered into every rank's device weights on the weight stream,
 * group by group: the next forward of group i waits for group i only.
 * With the upload window (engine/window.h) the slot is converted from the
 * rank's master weights, padding and all, as it goes up, in place of an
 * upload copy of its own.
 *
 * Params mode (ZeRO-3 with offload): as optimizer mode, and the device
 * weights of a group exist only while fetched: a fetch uploads the rank's
 * slot and all-gathers the others'. Every rank must fetch the same groups
 * in the same order, so a prefetch that finds no memory waits for the
 * drains (a choice every rank makes alike) instead of giving up by timing.
 *
 * Exactness: slots are whole tiles of the norm (NUMERICS_TILE), so each
 * tile's partial sum is the one a single process takes, and the step adds
 * every rank's partials in tile order. The host backend sums across ranks
 * in rank order (backend/comm_host.c), the order in which one process adds
 * its micro-batches: N ranks with one micro-batch each train bitwise as one
 * process with N micro-batches. The skip decision is taken from flags
 * all-reduced across the ranks, so every rank skips or none does. */
#include "engine/dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/comm.h"
#include "backend/ops/ops.h"
#include "common/error.h"
#include "common/numerics.h"
#include "engine/layout.h"
#include "engine/window.h"

struct engine_dp {
    int rank, world;
    ferry_offload mode;
    backend_stream *grads_stream, *weights_stream;
    backend_comm *grads_comm, *weights_comm;
    float *send[2], *recv[2];         /* partitioned modes: a chunk of every rank's slot of the fp32
                                         gradients, and this rank's chunk of their sum */
    size_t chunk;                     /* elements of each slot per reduce (engine_reduce_chunk) */
    backend_event *ring_ready[2];     /* recv[b] holds a reduced chunk (gradient comm stream) */
    backend_event *ring_free[2];      /* the drain has read recv[b] (d2h stream) */
    int next;
    backend_event *wait_begin, *wait_end; /* offload none: the compute stream's wait for the sums */
    bool wait_recorded;
    double *norm_buf;
    size_t norm_cap;
    /* per group */
    int ngroups;
    backend_event **staged;   /* this rank's slot of the weights is on the device (h2d stream) */
    backend_event **reduced;  /* offload none: the gradients are summed across the ranks (gradient comm stream) */
    backend_event **wait_mid; /* compute stream: a timed weight wait is past the staged part */
};

bool dp_partitioned(const engine_dp *d, ferry_offload mode) { return d && mode != FERRY_OFFLOAD_NONE; }
int dp_rank(const engine_dp *d) { return d ? d->rank : 0; }
int dp_world(const engine_dp *d) { return d ? d->world : 1; }
backend_event *dp_staged(const engine_dp *d, int gi) { return d && d->staged ? d->staged[gi] : NULL; }
backend_event *dp_wait_mid(const engine_dp *d, int gi) { return d && d->wait_mid ? d->wait_mid[gi] : NULL; }

static size_t act_bytes(const engine_ctx *c, size_t n) { return n * c->act_size; }

/* ---- joining, streams and communicators ---- */

ferry_status dp_join(const ferry_engine_config *cfg, bool nvme, engine_dp **out)
{
    *out = NULL;
    if (cfg->data_parallel < 0)
        return FERRY_OK;
    ferry_world_info w;
    ferry_status st = comm_world_join(&w);
    if (st != FERRY_OK)
        return err_wrap(st, "joining the ranks the launcher started (data_parallel -1 trains each rank alone)");
    if (cfg->comm_timeout_s > 0)
        comm_world_set_timeout(cfg->comm_timeout_s);
    if (w.world_size == 1 && cfg->data_parallel != 1)
        return FERRY_OK;
    if (nvme)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: the NVMe tier (offload nvme, or nvme_path) trains alone: with %d ranks "
                       "each holds a part of the state in host memory instead; leave nvme_path unset, or set "
                       "data_parallel -1",
                       w.world_size);
    engine_dp *d = calloc(1, sizeof *d);
    if (!d)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "data parallelism: out of host memory");
    d->rank = w.rank;
    d->world = w.world_size;
    *out = d;
    return FERRY_OK;
}

int dp_optimizer_threads(const engine_dp *d, const ferry_engine_config *cfg)
{
    int local = comm_world_local_size();
    if (!d || cfg->optimizer_threads > 0 || local <= 1)
        return cfg->optimizer_threads;
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    int cores = ferry_system_probe(&info) == FERRY_OK && info.cores > 0 ? info.cores : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cfg->numa_node >= 0 && info.numa_nodes > 1)
        cores /= info.numa_nodes;
    return cores / local > 1 ? cores / local : 1;
}

ferry_status dp_open(engine_dp *d, const engine_ctx *c)
{
    if (!d)
        return FERRY_OK;
    ferry_status st;
    if ((st = backend_stream_create(c->be, "gradient collectives", &d->grads_stream)) != FERRY_OK ||
        (st = backend_comm_open(c->be, "gradients", &d->grads_comm)) != FERRY_OK)
        return st;
    if (ctx_mode(c) == FERRY_OFFLOAD_NONE)
        return FERRY_OK;
    if ((st = backend_stream_create(c->be, "weight collectives", &d->weights_stream)) != FERRY_OK)
        return st;
    return backend_comm_open(c->be, "weights", &d->weights_comm);
}

void dp_close(engine_dp *d)
{
    if (!d)
        return;
    if (d->grads_stream)
        backend_stream_synchronize(d->grads_stream);
    if (d->weights_stream)
        backend_stream_synchronize(d->weights_stream);
    backend_comm_close(d->grads_comm);
    backend_comm_close(d->weights_comm);
    backend_stream_destroy(d->grads_stream);
    backend_stream_destroy(d->weights_stream);
    dp_unplace(d);
    free(d->norm_buf);
    free(d);
}

/* ---- placement ---- */

void dp_layout(const engine_dp *d, ferry_offload mode, engine_group *g)
{
    g->part_lo = 0;
    g->part_n = g->part_cap = g->padded = g->numel;
    if (!dp_partitioned(d, mode))
        return;
    size_t cap = engine_part_cap(g->numel, d->world), lo = (size_t)d->rank * cap;
    g->part_cap = cap;
    g->padded = cap * (size_t)d->world;
    g->part_lo = lo;
    g->part_n = lo >= g->numel ? 0 : (g->numel - lo < cap ? g->numel - lo : cap);
}

ferry_status dp_place(engine_dp *d, const engine_ctx *c, const engine_groups *gs, void *const reduce[4])
{
    if (!d)
        return FERRY_OK;
    d->mode = ctx_mode(c);
    d->staged = calloc((size_t)gs->n, sizeof *d->staged);
    d->reduced = calloc((size_t)gs->n, sizeof *d->reduced);
    d->wait_mid = calloc((size_t)gs->n, sizeof *d->wait_mid);
    if (!d->staged || !d->reduced || !d->wait_mid)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "data parallelism: out of host memory");
    d->ngroups = gs->n;
    ferry_status st = FERRY_OK;
    for (int i = 0; i < gs->n && st == FERRY_OK; i++) {
        backend_event **all[] = {&d->staged[i], &d->reduced[i], &d->wait_mid[i]};
        for (size_t k = 0; k < sizeof all / sizeof all[0] && st == FERRY_OK; k++)
            st = backend_event_create(c->be, all[k]);
    }
    backend_event **ev[] = {&d->ring_free[0], &d->ring_free[1], &d->ring_ready[0], &d->ring_ready[1],
                            &d->wait_begin,   &d->wait_end};
    for (size_t i = 0; i < sizeof ev / sizeof ev[0] && st == FERRY_OK; i++)
        st = backend_event_create(c->be, ev[i]);
    if (st != FERRY_OK || ctx_mode(c) == FERRY_OFFLOAD_NONE)
        return st;
    size_t cap = 0;
    for (int i = 0; i < gs->n; i++)
        cap = gs->g[i].part_cap > cap ? gs->g[i].part_cap : cap;
    d->chunk = engine_reduce_chunk(d->world, cap);
    for (int b = 0; b < 2; b++) {
        d->send[b] = reduce[2 * b];
        d->recv[b] = reduce[2 * b + 1];
        if (!d->send[b] || !d->recv[b])
            return err_set(FERRY_ERR_STATE, "data parallelism: the memory plan holds no reduce buffers");
    }
    return FERRY_OK;
}

void dp_unplace(engine_dp *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->ngroups; i++) {
        backend_event_destroy(d->staged[i]);
        backend_event_destroy(d->reduced[i]);
        backend_event_destroy(d->wait_mid[i]);
    }
    free(d->staged);
    free(d->reduced);
    free(d->wait_mid);
    d->staged = d->reduced = d->wait_mid = NULL;
    d->ngroups = 0;
    backend_event *ev[] = {d->ring_free[0], d->ring_free[1], d->ring_ready[0], d->ring_ready[1], d->wait_begin,
                           d->wait_end};
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)
        backend_event_destroy(ev[i]);
    d->ring_free[0] = d->ring_free[1] = d->ring_ready[0] = d->ring_ready[1] = NULL;
    d->wait_begin = d->wait_end = NULL;
    d->send[0] = d->send[1] = d->recv[0] = d->recv[1] = NULL; /* arena memory, freed with it */
}

/* ---- gradients ---- */

ferry_status dp_release_resident(engine_dp *d, const engine_ctx *c, engine_progress *p, engine_group *g, int gi,
                                 backend_stream *s, bool last)
{
    ferry_status st;
    if (!last)
        return p->accumulating ? ops_accumulate(s, g->grad_acc, g->dev_grads, g->numel, p->micro_index == 0)
                               : FERRY_OK;
    /* The rank's fp32 sum of its micro-batches, then the sum over ranks
     * (the ledger writes the group with it). */
    backend_comm_set_tag(d->grads_comm, gi);
    if ((st = ops_accumulate(s, g->grad_acc, g->dev_grads, g->numel, p->micro_index == 0)) != FERRY_OK ||
        (st = backend_event_record(g->grads_done, s)) != FERRY_OK ||
        (st = backend_stream_wait_event(d->grads_stream, g->grads_done)) != FERRY_OK ||
        (st = ops_all_reduce(d->grads_stream, d->grads_comm, g->grad_acc, g->grad_acc, g->numel, FERRY_DTYPE_F32)) !=
            FERRY_OK)
        return st;
    (void)c;
    p->acc.comm_bytes += 2.0 * (double)(d->world - 1) / d->world * (double)g->numel * sizeof(float);
    return backend_event_record(d->reduced[gi], d->grads_stream);
}

/* One chunk: [c0, c0 + x) of every rank's slot, widened to fp32 side by
 * side in send[b] (zero past the group's end), reduce-scattered into
 * recv[b], and this rank's sum copied down to host_grads + c0. */
static ferry_status reduce_chunk(engine_dp *d, const engine_ctx *c, engine_progress *p, engine_group *g, size_t c0,
                                 size_t x)
{
    backend_stream *cs = d->grads_stream;
    int b = d->next;
    d->next ^= 1;
    ferry_status st = backend_stream_wait_event(cs, d->ring_free[b]); /* its last drain has read recv[b] */
    for (int q = 0; q < d->world && st == FERRY_OK; q++) {
        size_t from = (size_t)q * g->part_cap + c0;
        size_t valid = from >= g->numel ? 0 : (g->numel - from < x ? g->numel - from : x);
        float *to = d->send[b] + (size_t)q * x;
        if (valid)
            st = ops_accumulate(cs, to, (const char *)g->dev_grads + act_bytes(c, from), valid, true);
        if (st == FERRY_OK && valid < x)
            st = backend_memset_async(cs, to + valid, 0, (x - valid) * sizeof(float));
    }
    if (st != FERRY_OK ||
        (st = ops_reduce_scatter(cs, d->grads_comm, d->send[b], d->recv[b], x, FERRY_DTYPE_F32)) != FERRY_OK ||
        (st = backend_event_record(d->ring_ready[b], cs)) != FERRY_OK ||
        (st = backend_stream_wait_event(c->d2h, d->ring_ready[b])) != FERRY_OK ||
        (st = backend_memcpy_async(c->d2h, (float *)g->host_grads + c0, d->recv[b], x * sizeof(float),
                                   BACKEND_COPY_D2H)) != FERRY_OK)
        return st;
    p->acc.transfer_d2h_bytes += (double)x * sizeof(float);
    p->acc.comm_bytes += (double)(d->world - 1) * (double)x * sizeof(float);
    return backend_event_record(d->ring_free[b], c->d2h);
}

ferry_status dp_reduce_and_drain(engine_dp *d, const engine_ctx *c, engine_progress *p, engine_group *g, int gi)
{
    backend_comm_set_tag(d->grads_comm, gi); /* the ledger writes the group with each chunk */
    ferry_status st = backend_stream_wait_event(d->grads_stream, g->grads_done);
    for (size_t c0 = 0; c0 < g->part_cap && st == FERRY_OK; c0 += d->chunk)
        st = reduce_chunk(d, c, p, g, c0, g->part_cap - c0 < d->chunk ? g->part_cap - c0 : d->chunk);
    return st == FERRY_OK ? backend_event_record(g->drained, c->d2h) : st;
}

/* ---- weights ---- */

ferry_status dp_upload(engine_dp *d, const engine_ctx *c, engine_progress *p, engine_group *g, int gi,
                       backend_event *also_wait)
{
    size_t bytes = act_bytes(c, g->part_cap);
    char *slot = (char *)g->dev_weights + act_bytes(c, g->part_lo);
    ferry_status st;
    p->acc.transfer_h2d_bytes += (double)bytes;
    p->acc.comm_bytes += (double)(d->world - 1) * (double)bytes;
    backend_comm_set_tag(d->weights_comm, gi);
    if ((also_wait && (st = backend_stream_wait_event(c->h2d, also_wait)) != FERRY_OK) ||
        (st = c->window ? engine_window_upload_span(c->window, c, g->name, g->master, g->part_cap, slot)
                        : backend_memcpy_async(c->h2d, slot, g->host_weights, bytes, BACKEND_COPY_H2D)) != FERRY_OK ||
        (st = backend_event_record(d->staged[gi], c->h2d)) != FERRY_OK ||
        (st = backend_stream_wait_event(d->weights_stream, d->staged[gi])) != FERRY_OK ||
        (st = ops_all_gather(d->weights_stream, d->weights_comm, slot, g->dev_weights, g->part_cap, c->act)) !=
            FERRY_OK)
        return st;
    return backend_event_record(g->uploaded, d->weights_stream);
}

/* ---- the step ---- */

ferry_status dp_wait_reduced(engine_dp *d, const engine_ctx *c, const engine_groups *gs)
{
    ferry_status st = backend_event_record(d->wait_begin, c->compute);
    for (int i = 0; i < gs->n && st == FERRY_OK; i++)
        st = backend_stream_wait_event(c->compute, d->reduced[i]);
    if (st == FERRY_OK)
        st = backend_event_record(d->wait_end, c->compute);
    d->wait_recorded = st == FERRY_OK;
    return st;
}

/* The tiles of group g that rank p owns: [*t0, *t0 + *nt). */
static void owned_tiles(const engine_group *g, int p, size_t *t0, size_t *nt)
{
    size_t lo = (size_t)p * g->part_cap, n = lo >= g->numel ? 0 : g->numel - lo;
    n = n < g->part_cap ? n : g->part_cap;
    *t0 = lo / NUMERICS_TILE;
    *nt = (n + NUMERICS_TILE - 1) / NUMERICS_TILE;
}

ferry_status dp_sum_norms(engine_dp *d, const engine_groups *gs, engine_norm *const *norms, double *sumsq,
                          bool *bad_out)
{
    int W = d->world;
    size_t total = 0;
    for (int i = 0; i < gs->n; i++)
        total += norms[i]->ntiles;
    /* Every rank sends the partials and flags of the tiles it owns (about
     * 1/N of them), gathered rank after rank, group after group. */
    size_t need = 2 * total + 3 * (size_t)W;
    if (need > d->norm_cap) {
        double *grown = realloc(d->norm_buf, need * sizeof *grown);
        if (!grown)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "the gradient norm of %zu tiles: out of host memory", total);
        d->norm_buf = grown;
        d->norm_cap = need;
    }
    double *all = d->norm_buf;
    size_t *at = (size_t *)(all + 2 * total), *bytes = at + W, *cursor = bytes + W;
    size_t off = 0;
    for (int p = 0; p < W; p++) {
        size_t count = 0;
        for (int i = 0; i < gs->n; i++) {
            size_t t0, nt;
            owned_tiles(&gs->g[i], p, &t0, &nt);
            count += nt;
        }
        at[p] = off * sizeof(double);
        bytes[p] = 2 * count * sizeof(double);
        off += 2 * count;
    }
    double *mine = all + at[d->rank] / sizeof(double);
    size_t k = 0;
    for (int i = 0; i < gs->n; i++) {
        size_t t0, nt;
        owned_tiles(&gs->g[i], d->rank, &t0, &nt);
        for (size_t t = t0; t < t0 + nt; t++) {
            mine[k++] = norms[i]->partial[t];
            mine[k++] = norms[i]->bad[t] ? 1.0 : 0.0;
        }
    }
    ferry_status st = comm_world_all_gather_v(mine, all, at, bytes);
    if (st != FERRY_OK)
        return err_wrap(st, "gathering the gradient norm's tiles from the ranks");
    /* Each group's tiles, in tile order (rank p's come after rank p-1's):
     * the same additions as alone. */
    for (int p = 0; p < W; p++)
        cursor[p] = at[p] / sizeof(double);
    for (int i = 0; i < gs->n; i++) {
        double sum = 0;
        bool bad = false;
        for (int p = 0; p < W; p++) {
            size_t t0, nt;
            owned_tiles(&gs->g[i], p, &t0, &nt);
            for (size_t t = 0; t < nt; t++, cursor[p] += 2) {
                sum += all[cursor[p]];
                bad |= all[cursor[p] + 1] != 0;
            }
        }
        sumsq[i] = sum;
        bad_out[i] = bad;
    }
    return FERRY_OK;
}

ferry_status dp_agree_nonfinite(engine_dp *d, bool *bad, int ngroups)
{
    if (!d)
        return FERRY_OK;
    /* The flags, then the ledger's words: every rank's collectives of the
     * step are compared on the all-reduce the step makes anyway. */
    double *flags = malloc(((size_t)ngroups + COMM_LEDGER_WORDS) * sizeof *flags);
    if (!flags)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "the step's decision: out of host memory");
    for (int i = 0; i < ngroups; i++)
        flags[i] = bad[i] ? 1.0 : 0.0;
    comm_ledger_words(flags + ngroups);
    ferry_status st = comm_world_all_reduce_f64(flags, (size_t)ngroups + COMM_LEDGER_WORDS);
    if (st == FERRY_OK)
        st = comm_ledger_verify(flags + ngroups);
    for (int i = 0; i < ngroups && st == FERRY_OK; i++)
        bad[i] = flags[i] != 0;
    free(flags);
    return st != FERRY_OK ? err_wrap(st, "agreeing on the step's inf/NaN check across the ranks") : FERRY_OK;
}

ferry_status dp_synchronize(engine_dp *d)
{
    if (!d)
        return FERRY_OK;
    ferry_status st = d->grads_stream ? backend_stream_synchronize(d->grads_stream) : FERRY_OK;
    if (st == FERRY_OK && d->weights_stream)
        st = backend_stream_synchronize(d->weights_stream);
    return st;
}

ferry_status dp_check(engine_dp *d)
{
    if (!d)
        return FERRY_OK;
    ferry_status st = dp_synchronize(d);
    if (st == FERRY_OK)
        st = comm_world_check();
    return st;
}

void dp_close_timing(engine_dp *d, ferry_step_timing *t)
{
    t->world_size = d ? d->world : 1;
    if (!d || !d->wait_recorded)
        return;
    float ms = 0;
    if (backend_event_synchronize(d->wait_end) == FERRY_OK &&
        backend_event_elapsed_ms(d->wait_begin, d->wait_end, &ms) == FERRY_OK && ms > 0)
        t->compute_wait_comm_ms += ms;
    d->wait_recorded = false;
}

/* ---- master weights in and out ---- */

/* Rank p's part of a group: [lo, lo + n). */
static void part_of(const engine_group *g, int p, size_t *lo, size_t *n)
{
    *lo = (size_t)p * g->part_cap;
    *n = *lo >= g->numel ? 0 : (g->numel - *lo < g->part_cap ? g->numel - *lo : g->part_cap);
}

ferry_status dp_get_master(engine_dp *d, engine_group *g, float *out)
{
    ferry_status st = FERRY_OK;
    for (int p = 0; p < d->world && st == FERRY_OK; p++) {
        size_t lo, n;
        part_of(g, p, &lo, &n);
        if (p == d->rank)
            memcpy(out + lo, g->master, n * sizeof(float));
        if (n)
            st = comm_world_broadcast(out + lo, n * sizeof(float), p);
    }
    return st != FERRY_OK ? err_wrap(st, "gathering the weights of '%s' from the ranks", g->name) : FERRY_OK;
}

ferry_status dp_set_master(engine_dp *d, engine_group *g, const float *values)
{
    (void)d;
    memcpy(g->master, values + g->part_lo, g->part_n * sizeof(float));
    return FERRY_OK;
}

/* ---- checkpoints ---- */

bool dp_writes_files(const engine_dp *d) { return !d || d->rank == 0; }

/* Rank p's elements of a run: [*lo, *lo + *n). */
static void run_part(const dp_run *r, int p, size_t *lo, size_t *n)
{
    *lo = (size_t)p * r->cap;
    *n = *lo >= r->len ? 0 : (r->len - *lo < r->cap ? r->len - *lo : r->cap);
}

ferry_status dp_gather_run(engine_dp *d, const dp_run *r, size_t at, size_t n, void *buf)
{
    ferry_status st = FERRY_OK;
    size_t es = r->esize;
    for (int p = 0; p < d->world && st == FERRY_OK; p++) {
        size_t lo, pn;
        run_part(r, p, &lo, &pn);
        size_t a = at > lo ? at : lo, b = at + n < lo + pn ? at + n : lo + pn;
        if (a >= b)
            continue;
        const char *mine = (const char *)r->local + (a - lo) * es;
        if (p == d->rank && d->rank == 0)
            memcpy((char *)buf + (a - at) * es, mine, (b - a) * es);
        else if (p == d->rank)
            st = comm_world_send(0, mine, (b - a) * es);
        else if (d->rank == 0)
            st = comm_world_recv(p, (char *)buf + (a - at) * es, (b - a) * es);
    }
    return st;
}

void dp_take_run(const engine_dp *d, const dp_run *r, size_t at, size_t n, const void *buf)
{
    size_t lo, pn;
    run_part(r, d->rank, &lo, &pn);
    size_t a = at > lo ? at : lo, b = at + n < lo + pn ? at + n : lo + pn;
    if (a < b)
        memcpy((char *)r->local + (a - lo) * r->esize, (const char *)buf + (a - at) * r->esize, (b - a) * r->esize);
}

ferry_status dp_save_begin(engine_dp *d, const char *path)
{
    if (!d)
        return FERRY_OK;
    char where[300];
    snprintf(where, sizeof where, "before saving '%s'", path ? path : "the checkpoint");
    ferry_status st = comm_ledger_check(where);
    return st == FERRY_OK ? comm_world_save_begin(0) : st;
}

void dp_save_progress(engine_dp *d, uint64_t bytes_done)
{
    if (d)
        comm_world_save_progress(bytes_done);
}

void dp_save_end(engine_dp *d)
{
    if (d)
        comm_world_save_end();
}

ferry_status dp_agree_status(engine_dp *d, ferry_status st, const char *what)
{
    if (!d)
        return st;
    /* {status, message} from rank 0 */
    struct {
        int32_t status;
        char message[ERR_MESSAGE_MAX];
    } word = {(int32_t)st, ""};
    if (d->rank == 0 && st != FERRY_OK)
        snprintf(word.message, sizeof word.message, "%s", ferry_last_error());
    ferry_status sent = comm_world_broadcast(&word, sizeof word, 0);
    if (sent != FERRY_OK)
        return err_wrap(sent, "%s", what);
    if (d->rank == 0 || word.status == FERRY_OK)
        return st;
    return err_set((ferry_status)word.status, "%s on rank 0: %s", what, word.message);
}
