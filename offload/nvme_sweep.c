/* The NVMe store's window and sweeps: the window's slots taken from the
 * pool, each tile of a sweep given a slot, its blocks queued for reading
 * ahead or writing back, handed to the caller once checked, and put back.
 * It decides which I/Os are queued and when a slot is free; the I/O paths
 * (nvme_io.c) move the bytes, and the checksums are nvme_format.c's. */
#include "offload/nvme_impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* ---- the window ---- */

/* The window from the pool, cut into slots, each with its I/O list; the
 * queue sized for every slot's blocks. */
ferry_status nvme_take_window(nvme_store *s)
{
    void *w = NULL;
    ferry_status st = pool_alloc(s->pool, (size_t)s->window_bytes, s->align, FERRY_MEM_NVME, "nvme window", &w);
    if (st != FERRY_OK)
        return err_wrap(st, "the NVMe window (%d tiles of %d arrays of %zu bytes)", s->nslots, s->max_arrays,
                        s->seg_bytes);
    s->window = w;
    size_t slot_bytes = (size_t)s->max_arrays * s->seg_bytes;
    int per_slot = s->max_arrays * (int)s->bps;
    for (int i = 0; i < s->nslots; i++) {
        s->slots[i].buf = s->window + (size_t)i * slot_bytes;
        s->slots[i].ios = calloc((size_t)per_slot, sizeof(nvme_io));
        s->slots[i].crc = calloc((size_t)per_slot, sizeof(uint32_t));
        if (!s->slots[i].ios || !s->slots[i].crc)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "nvme store: out of host memory for its I/O list");
    }
    s->q.cap = (size_t)s->nslots * (size_t)per_slot;
    s->q.ios = calloc(s->q.cap, sizeof *s->q.ios);
    if (!s->q.ios)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "nvme store: out of host memory for its I/O queue");
    return FERRY_OK;
}

/* ---- sweeps ---- */

/* Queues the reads or writes of a slot's arrays, block by block. */
static void queue_tile(nvme_store *s, nvme_slot *slot, bool write)
{
    nvme_region *r = &s->regions[slot->region];
    size_t first = slot->tile * s->tile_elems;
    slot->nios = 0;
    for (int a = 0; a < r->narrays; a++) {
        if (!(slot->arrays & (1u << a)))
            continue;
        uint64_t seg = nvme_seg_bytes(s, r, slot->tile, a), off = nvme_seg_offset(s, r, slot->tile, a);
        size_t nb = (size_t)((seg + s->block - 1) / s->block);
        for (size_t j = 0; j < nb; j++) {
            nvme_io *io = &slot->ios[slot->nios++];
            uint32_t len = nvme_block_len(s, seg, j);
            size_t e0 = nvme_elem_at(s, r, slot->tile, a, (uint64_t)j * s->block);
            size_t e1 = nvme_elem_at(s, r, slot->tile, a, (uint64_t)j * s->block + len);
            *io = (nvme_io){(int)(slot - s->slots), write, slot->buf + (size_t)a * s->seg_bytes + j * s->block,
                            off + (uint64_t)j * s->block, len, off + (uint64_t)j * s->block, len,
                            r->first_block + nvme_crc_index(s, r, slot->tile, a, j), slot->region, a,
                            first + e0, e1 - e0, false, 0};
            nvme_queue_push(s, io);
        }
    }
    slot->pending = slot->nios;
    slot->state = write ? SLOT_WRITING : SLOT_READING;
    if (slot->pending == 0)
        slot->state = write ? SLOT_FREE : SLOT_READING;
}

static nvme_slot *free_slot(nvme_store *s)
{
    for (int i = 0; i < s->nslots; i++)
        if (s->slots[i].state == SLOT_FREE)
            return &s->slots[i];
    return NULL;
}

/* Gives the next tile of the sweep a slot; false when none is free or none is left. */
static bool assign_next(nvme_store *s, nvme_slot **out)
{
    if (s->sweep.issued == s->sweep.total)
        return false;
    nvme_slot *slot = free_slot(s);
    if (!slot)
        return false;
    while (s->sweep.cur_tile >= s->regions[s->sweep.spans[s->sweep.cur_span].region].ntiles) {
        s->sweep.cur_span++;
        s->sweep.cur_tile = 0;
    }
    slot->region = s->sweep.spans[s->sweep.cur_span].region;
    slot->arrays = s->sweep.spans[s->sweep.cur_span].arrays;
    slot->tile = s->sweep.cur_tile++;
    slot->seq = s->sweep.issued++;
    *out = slot;
    return true;
}

/* Reads ahead into every free slot, and submits. */
void nvme_read_ahead(nvme_store *s)
{
    nvme_slot *slot;
    while (s->failed == FERRY_OK && s->sweep.mode != NVME_WRITE && assign_next(s, &slot))
        queue_tile(s, slot, false);
    nvme_pump(s);
}

static ferry_status all_held(void)
{
    return err_set(FERRY_ERR_STATE, "nvme_sweep_next: the caller holds every window slot; put tiles back before "
                                    "asking for more");
}

static nvme_slot *slot_of_seq(nvme_store *s, size_t seq)
{
    for (int i = 0; i < s->nslots; i++)
        if (s->slots[i].state == SLOT_READING && s->slots[i].seq == seq)
            return &s->slots[i];
    return NULL;
}

/* Unlocks s->mu and returns st (the failure repeated when st is the store's). */
static ferry_status unlock_with(nvme_store *s, ferry_status st)
{
    if (st != FERRY_OK && st == s->failed)
        nvme_repeat_failure(s);
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* The spans name regions and arrays of the store, and a sweep that reads
 * reads only arrays written before; their tiles into *total. */
static ferry_status check_spans(const nvme_store *s, nvme_mode mode, const nvme_span *spans, int nspans,
                                size_t *total)
{
    for (int i = 0; i < nspans; i++) {
        const nvme_span *sp = &spans[i];
        if (sp->region < 0 || sp->region >= s->nregions || sp->arrays == 0 ||
            sp->arrays >= (1u << s->regions[sp->region].narrays))
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_begin: span %d (region %d, arrays 0x%x)", i,
                           sp->region, sp->arrays);
        for (int a = 0; mode != NVME_WRITE && a < s->regions[sp->region].narrays; a++)
            if ((sp->arrays & (1u << a)) && !s->regions[sp->region].written[a])
                return err_set(FERRY_ERR_STATE, "nvme_sweep_begin: '%s' %s is read before it was ever written",
                               s->regions[sp->region].name, s->regions[sp->region].array_names[a]);
        *total += s->regions[sp->region].ntiles;
    }
    return FERRY_OK;
}

/* A sweep that writes marks its arrays as written. */
static void mark_written(nvme_store *s, nvme_mode mode, const nvme_span *spans, int nspans)
{
    for (int i = 0; mode != NVME_READ && i < nspans; i++)
        for (int a = 0; a < s->regions[spans[i].region].narrays; a++)
            if (spans[i].arrays & (1u << a))
                s->regions[spans[i].region].written[a] = true;
}

ferry_status nvme_sweep_begin(nvme_store *s, nvme_mode mode, const nvme_span *spans, int nspans)
{
    if (!s || (nspans > 0 && !spans) || nspans < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_begin: NULL store or spans");
    if (!s->opened)
        return err_set(FERRY_ERR_STATE, "nvme_sweep_begin: the store is not open");
    pthread_mutex_lock(&s->mu);
    if (s->failed != FERRY_OK)
        return unlock_with(s, s->failed);
    if (s->sweep.open)
        return unlock_with(s, err_set(FERRY_ERR_STATE, "nvme_sweep_begin: another sweep is open"));
    pthread_mutex_unlock(&s->mu);
    if (mode != NVME_READ && mode != NVME_WRITE && mode != NVME_UPDATE)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_begin: mode %d", (int)mode);
    size_t total = 0;
    ferry_status st = check_spans(s, mode, spans, nspans, &total);
    if (st != FERRY_OK)
        return st;
    pthread_mutex_lock(&s->mu);
    st = nvme_check_file(s);
    if (st != FERRY_OK)
        return unlock_with(s, st);
    pthread_mutex_unlock(&s->mu);
    nvme_span *copy = malloc((size_t)(nspans ? nspans : 1) * sizeof *copy);
    if (!copy)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "nvme sweep: out of host memory");
    memcpy(copy, spans, (size_t)nspans * sizeof *copy);
    mark_written(s, mode, spans, nspans);
    pthread_mutex_lock(&s->mu);
    s->sweep.spans = copy;
    s->sweep.nspans = nspans;
    s->sweep.mode = mode;
    s->sweep.total = total;
    s->sweep.issued = s->sweep.handed = 0;
    s->sweep.cur_span = 0;
    s->sweep.cur_tile = 0;
    s->sweep.open = true;
    nvme_read_ahead(s);
    pthread_mutex_unlock(&s->mu);
    return FERRY_OK;
}

static void hand_over(nvme_store *s, nvme_slot *slot, nvme_tile *t)
{
    nvme_region *r = &s->regions[slot->region];
    slot->state = SLOT_HELD;
    s->sweep.handed++;
    memset(t, 0, sizeof *t);
    t->region = slot->region;
    t->index = slot->tile;
    t->first = slot->tile * s->tile_elems;
    t->n = nvme_tile_len(s, r, slot->tile);
    t->slot_ = (int)(slot - s->slots);
    for (int a = 0; a < r->narrays; a++)
        if (slot->arrays & (1u << a))
            t->array[a] = (float *)(slot->buf + (size_t)a * s->seg_bytes);
}

/* A WRITE sweep's next tile (under s->mu, which it unlocks): an empty
 * slot, once one is free. */
static ferry_status next_empty(nvme_store *s, nvme_tile *t)
{
    nvme_slot *slot = NULL;
    while (s->failed == FERRY_OK && !assign_next(s, &slot)) {
        if (!nvme_busy(s))
            return unlock_with(s, all_held());
        nvme_wait_progress(s);
    }
    if (s->failed != FERRY_OK)
        return unlock_with(s, s->failed);
    hand_over(s, slot, t);
    pthread_mutex_unlock(&s->mu);
    /* The padding of a short last tile is written too: make it zeros. */
    nvme_region *r = &s->regions[slot->region];
    for (int a = 0; a < r->narrays; a++) {
        size_t used = (size_t)nvme_used_bytes(s, r, slot->tile, a);
        memset(slot->buf + (size_t)a * s->seg_bytes + used, 0, (size_t)nvme_seg_bytes(s, r, slot->tile, a) - used);
    }
    return FERRY_OK;
}

/* A READ or UPDATE sweep's next tile (under s->mu, which it unlocks): the
 * next in order, once its reads landed, verified. */
static ferry_status next_read(nvme_store *s, nvme_tile *t)
{
    nvme_slot *slot = NULL;
    nvme_read_ahead(s);
    while (s->failed == FERRY_OK && (!(slot = slot_of_seq(s, s->sweep.handed)) || slot->pending > 0)) {
        if (!nvme_busy(s))
            return unlock_with(s, all_held());
        nvme_wait_progress(s);
    }
    if (s->failed != FERRY_OK)
        return unlock_with(s, s->failed);
    nvme_tile got;
    hand_over(s, slot, &got);
    pthread_mutex_unlock(&s->mu);
    ferry_status st = nvme_verify_tile(s, slot); /* the slot is the caller's now: no I/O touches it */
    if (st == FERRY_OK)
        *t = got;
    return st;
}

ferry_status nvme_sweep_next(nvme_store *s, nvme_tile *t, bool *done)
{
    if (!s || !t || !done)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_next: NULL argument");
    pthread_mutex_lock(&s->mu);
    if (!s->sweep.open)
        return unlock_with(s, err_set(FERRY_ERR_STATE, "nvme_sweep_next: no sweep is open"));
    *done = false;
    if (s->failed != FERRY_OK)
        return unlock_with(s, s->failed);
    if (s->sweep.handed == s->sweep.total) {
        *done = true;
        return unlock_with(s, FERRY_OK);
    }
    return s->sweep.mode == NVME_WRITE ? next_empty(s, t) : next_read(s, t);
}

ferry_status nvme_sweep_put(nvme_store *s, nvme_tile *t)
{
    if (!s || !t)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_put: not a tile this store handed out");
    pthread_mutex_lock(&s->mu);
    if (t->slot_ < 0 || t->slot_ >= s->nslots || s->slots[t->slot_].state != SLOT_HELD)
        return unlock_with(s, err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_put: not a tile this store handed out"));
    nvme_slot *slot = &s->slots[t->slot_];
    t->slot_ = -1;
    if (s->failed != FERRY_OK || s->sweep.mode == NVME_READ) {
        slot->state = SLOT_FREE;
        nvme_read_ahead(s);
        return unlock_with(s, s->failed);
    }
    pthread_mutex_unlock(&s->mu);
    ferry_status st = nvme_checksum_tile(s, slot);
    pthread_mutex_lock(&s->mu);
    if (st != FERRY_OK) {
        slot->state = SLOT_FREE;
        return unlock_with(s, st);
    }
    queue_tile(s, slot, true);
    nvme_read_ahead(s); /* pumps the writes too */
    return unlock_with(s, s->failed);
}

/* Waits (under s->mu) until no I/O is queued or in flight: the writes
 * land, the reads ahead queued are dropped, and after a failure nothing
 * more is submitted. */
static void drain(nvme_store *s)
{
    for (;;) {
        bool writing = false;
        for (int i = 0; i < s->nslots && !writing; i++)
            writing = s->slots[i].state == SLOT_WRITING && s->slots[i].pending > 0;
        if (s->failed != FERRY_OK)
            s->q.len = 0;
        if (!writing && s->q.len > 0) {
            /* Only reads ahead are queued: drop them, and wait for those in flight. */
            s->q.len = 0;
        }
        if (s->q.inflight == 0 && s->q.prepared == 0 && s->q.len == 0)
            break;
        nvme_wait_progress(s);
    }
}

ferry_status nvme_sweep_end(nvme_store *s)
{
    if (!s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_end: store is NULL");
    pthread_mutex_lock(&s->mu);
    if (!s->sweep.open)
        return unlock_with(s, err_set(FERRY_ERR_STATE, "nvme_sweep_end: no sweep is open"));
    /* Tiles read ahead but never asked for are dropped; every write is
     * waited for; after a failure nothing more is submitted, what is in
     * flight still lands before the window may be reused. */
    for (int i = 0; i < s->nslots; i++)
        if (s->slots[i].state == SLOT_HELD)
            s->slots[i].state = SLOT_FREE;
    s->sweep.issued = s->sweep.total; /* no more reads ahead */
    drain(s);
    s->q.head = 0;
    for (int i = 0; i < s->nslots; i++) {
        s->slots[i].state = SLOT_FREE;
        s->slots[i].pending = 0;
    }
    free(s->sweep.spans);
    s->sweep.spans = NULL;
    s->sweep.open = false;
    return unlock_with(s, s->failed);
}

