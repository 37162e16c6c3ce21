/* The NVMe store's arithmetic and block format: how a window is cut into
 * tiles and slots (also for planners without a store), where each tile's
 * segments lie in the file, and the CRC-32C of every block, computed when a
 * tile is put and verified when one is handed over. It is computation on
 * the store's layout alone: it does no I/O, and takes the store's lock only
 * to record a checksum mismatch as the store's failure. */
#include "offload/nvme_impl.h"

#include <pthread.h>
#include <stdlib.h>

#include "common/crc32c.h"
#include "common/error.h"
#include "common/units.h"

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* ---- the arithmetic ---- */

uint64_t nvme_window_or_default(uint64_t w) { return w ? w : NVME_DEFAULT_WINDOW; }
size_t nvme_block_or_default(size_t b) { return b ? b : NVME_DEFAULT_BLOCK; }

/* Bytes per array per slot: the window over NVME_TARGET_SLOTS slots, in
 * whole blocks where a block fits, else in units of `align`; 0 if fewer
 * than NVME_MIN_SLOTS slots of one unit fit. */
static uint64_t per_array_bytes(uint64_t window, size_t block, int arrays, size_t align)
{
    window = nvme_window_or_default(window);
    block = nvme_block_or_default(block);
    if (arrays < 1)
        arrays = 1;
    uint64_t per = window / ((uint64_t)arrays * NVME_TARGET_SLOTS);
    per = per >= block ? per / block * block : per / align * align;
    if (per < align)
        per = align;
    if (window / ((uint64_t)arrays * per) < NVME_MIN_SLOTS)
        return 0;
    return per;
}

/* Slots of `arrays` x `per` bytes: what the window holds, at most
 * NVME_MAX_SLOTS, and no more than the state fills. */
static int slots_for(uint64_t window, uint64_t per, int arrays, uint64_t state)
{
    uint64_t slot = (uint64_t)arrays * per;
    uint64_t n = nvme_window_or_default(window) / slot, fill = (state + slot - 1) / slot;
    if (n > fill)
        n = fill < NVME_MIN_SLOTS ? NVME_MIN_SLOTS : fill;
    return n > NVME_MAX_SLOTS ? NVME_MAX_SLOTS : (int)n;
}

size_t nvme_tile_elems_for(uint64_t window_bytes, size_t block_bytes, int max_arrays)
{
    return (size_t)(per_array_bytes(window_bytes, block_bytes, max_arrays, NVME_ALIGN) / sizeof(float));
}

uint64_t nvme_form_bytes(nvme_form f, size_t n)
{
    uint64_t values = (uint64_t)n * f.elem_bytes;
    if (!f.group)
        return values;
    return (values + 3) / 4 * 4 + (uint64_t)((n + f.group - 1) / f.group) * f.group_bytes;
}

static nvme_form form_of(const nvme_form *forms, int a) { return forms ? forms[a] : NVME_FORM_F32; }

/* Bytes of array a's segment of a tile of `len` elements: padded to `align`. */
static uint64_t padded(nvme_form f, size_t len, size_t align) { return round_up(nvme_form_bytes(f, len), align); }

static uint64_t region_bytes(size_t numel, int narrays, const nvme_form *forms, size_t tile_elems, size_t align)
{
    if (!tile_elems || !numel)
        return 0;
    size_t ntiles = (numel + tile_elems - 1) / tile_elems;
    size_t last = numel - (ntiles - 1) * tile_elems;
    uint64_t bytes = 0;
    for (int a = 0; a < narrays; a++)
        bytes += (uint64_t)(ntiles - 1) * padded(form_of(forms, a), tile_elems, align) +
                 padded(form_of(forms, a), last, align);
    return bytes;
}

uint64_t nvme_region_bytes(size_t numel, int narrays, size_t tile_elems)
{
    return region_bytes(numel, narrays, NULL, tile_elems, NVME_ALIGN);
}

uint64_t nvme_region_bytes_as(size_t numel, int narrays, const nvme_form *forms, size_t tile_elems)
{
    return region_bytes(numel, narrays, forms, tile_elems, NVME_ALIGN);
}

uint64_t nvme_window_charge(uint64_t window_bytes, size_t block_bytes, int max_arrays, uint64_t state_bytes)
{
    if (max_arrays < 1)
        max_arrays = 1;
    uint64_t per = per_array_bytes(window_bytes, block_bytes, max_arrays, NVME_ALIGN);
    if (!per)
        return 0;
    int slots = slots_for(window_bytes, per, max_arrays, state_bytes);
    return pool_charge((size_t)((uint64_t)slots * (uint64_t)max_arrays * per));
}

/* ---- the layout ---- */

size_t nvme_tile_len(const nvme_store *s, const nvme_region *r, size_t tile)
{
    size_t first = tile * s->tile_elems;
    return r->numel - first < s->tile_elems ? r->numel - first : s->tile_elems;
}

uint64_t nvme_used_bytes(const nvme_store *s, const nvme_region *r, size_t tile, int a)
{
    return nvme_form_bytes(r->forms[a], nvme_tile_len(s, r, tile));
}

uint64_t nvme_seg_bytes(const nvme_store *s, const nvme_region *r, size_t tile, int a)
{
    return padded(r->forms[a], nvme_tile_len(s, r, tile), s->align);
}

/* File offset of array a of tile `tile` of r: the whole tiles before it,
 * then the segments of the arrays before a. */
uint64_t nvme_seg_offset(const nvme_store *s, const nvme_region *r, size_t tile, int a)
{
    uint64_t off = r->offset + (uint64_t)tile * r->tile_bytes;
    for (int b = 0; b < a; b++)
        off += nvme_seg_bytes(s, r, tile, b);
    return off;
}

size_t nvme_elem_at(const nvme_store *s, const nvme_region *r, size_t tile, int a, uint64_t at)
{
    size_t len = nvme_tile_len(s, r, tile);
    uint64_t e = at / r->forms[a].elem_bytes;
    return e < len ? (size_t)e : len;
}

size_t nvme_crc_index(const nvme_store *s, const nvme_region *r, size_t tile, int a, size_t block)
{
    return (tile * (size_t)r->narrays + (size_t)a) * s->bps + block;
}

ferry_status nvme_lay_out(nvme_store *s)
{
    if (s->nregions == 0)
        return err_set(FERRY_ERR_STATE, "nvme_open: no region was added");
    if (s->block % s->align)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "NVMe block size %zu bytes is not a multiple of the O_DIRECT alignment of '%s' (%zu bytes, as "
                       "the file system says); give a multiple of it",
                       s->block, s->path, s->align);
    s->tile_elems = (size_t)(per_array_bytes(s->window_asked, s->block, s->max_arrays, s->align) / sizeof(float));
    if (!s->tile_elems) {
        char w[32], need[32];
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "NVMe window %s is too small: it must hold %d tiles of %d arrays of %zu bytes, at least %s",
                       units_fmt_bytes(w, sizeof w, s->window_asked), NVME_MIN_SLOTS, s->max_arrays, s->align,
                       units_fmt_bytes(need, sizeof need, (uint64_t)NVME_MIN_SLOTS * (uint64_t)s->max_arrays * s->align));
    }
    s->seg_bytes = s->tile_elems * sizeof(float);
    s->bps = (s->seg_bytes + s->block - 1) / s->block;
    uint64_t at = 0, blocks = 0;
    for (int i = 0; i < s->nregions; i++) {
        nvme_region *r = &s->regions[i];
        r->ntiles = (r->numel + s->tile_elems - 1) / s->tile_elems;
        r->offset = at;
        r->bytes = region_bytes(r->numel, r->narrays, r->forms, s->tile_elems, s->align);
        r->tile_bytes = 0;
        for (int a = 0; a < r->narrays; a++)
            r->tile_bytes += padded(r->forms[a], s->tile_elems, s->align);
        r->first_block = blocks;
        size_t ncrc = r->ntiles * (size_t)r->narrays * s->bps;
        r->crc = calloc(ncrc, sizeof *r->crc);
        if (!r->crc)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "nvme store: out of host memory for the checksums of '%s'",
                           r->name);
        at += r->bytes;
        blocks += ncrc;
    }
    s->file_bytes = at;
    s->blocks = blocks;
    uint64_t per = s->seg_bytes;
    s->nslots = slots_for(s->window_asked, per, s->max_arrays, s->file_bytes);
    s->window_bytes = (uint64_t)s->nslots * (uint64_t)s->max_arrays * per;
    return FERRY_OK;
}

/* ---- checksums, on the caller's workers ---- */

uint32_t nvme_block_len(const nvme_store *s, uint64_t seg, size_t j)
{
    uint64_t at = (uint64_t)j * s->block;
    return (uint32_t)(seg - at < s->block ? seg - at : s->block);
}

/* A slot's blocks as tasks: task i is ios[i]'s block (nvme_sweep.c's
 * queue_tile laid them out array by array, block by block, the order the
 * checks report in). */
typedef struct crc_job {
    const nvme_store *s;
    nvme_slot *slot;
} crc_job;

/* Blocks of array a's segment of the slot's tile, and the segment's bytes. */
static size_t seg_blocks(const nvme_store *s, const nvme_slot *slot, int a, uint64_t *seg)
{
    *seg = nvme_seg_bytes(s, &s->regions[slot->region], slot->tile, a);
    return (size_t)((*seg + s->block - 1) / s->block);
}

static void crc_task(void *arg, size_t i, int worker)
{
    (void)worker;
    crc_job *j = arg;
    const nvme_store *s = j->s;
    nvme_slot *slot = j->slot;
    const nvme_region *r = &s->regions[slot->region];
    size_t blk = i;
    for (int a = 0; a < r->narrays; a++) {
        if (!(slot->arrays & (1u << a)))
            continue;
        uint64_t seg;
        size_t nb = seg_blocks(s, slot, a, &seg);
        if (blk < nb) {
            const char *base = slot->buf + (size_t)a * s->seg_bytes;
            slot->crc[i] = crc32c(0, base + blk * s->block, nvme_block_len(s, seg, blk));
            return;
        }
        blk -= nb;
    }
}

/* The CRC of every block of the slot's arrays into slot->crc. */
static ferry_status crc_slot(nvme_store *s, nvme_slot *slot)
{
    size_t blocks = 0;
    uint64_t seg;
    for (int a = 0; a < s->regions[slot->region].narrays; a++)
        if (slot->arrays & (1u << a))
            blocks += seg_blocks(s, slot, a, &seg);
    crc_job j = {s, slot};
    if (s->parallel)
        return s->parallel(s->parallel_ctx, blocks, crc_task, &j);
    for (size_t i = 0; i < blocks; i++)
        crc_task(&j, i, 0);
    return FERRY_OK;
}

/* The failure for block j of array a of the slot's tile, whose CRC-32C
 * `got` is not the one written; the segment is `seg` bytes. */
static ferry_status mismatch(nvme_store *s, const nvme_slot *slot, int a, size_t j, uint64_t seg, uint32_t got)
{
    const nvme_region *r = &s->regions[slot->region];
    size_t idx = nvme_crc_index(s, r, slot->tile, a, j);
    uint32_t len = nvme_block_len(s, seg, j);
    uint64_t start = nvme_seg_offset(s, r, slot->tile, a) + (uint64_t)j * s->block;
    size_t first = slot->tile * s->tile_elems;
    size_t e0 = first + nvme_elem_at(s, r, slot->tile, a, (uint64_t)j * s->block);
    size_t e1 = first + nvme_elem_at(s, r, slot->tile, a, (uint64_t)j * s->block + len);
    pthread_mutex_lock(&s->mu);
    ferry_status st = nvme_fail(s, FERRY_ERR_FORMAT,
                                "checksum mismatch in the state file '%s' block %llu (bytes %llu..%llu: '%s' %s, "
                                "elements %zu..%zu): CRC-32C 0x%08x read, 0x%08x written; the disk gave back other "
                                "bytes than were written, so the state is damaged and the run stops (checkpoints "
                                "saved before are whole)",
                                s->path, (unsigned long long)(r->first_block + idx), (unsigned long long)start,
                                (unsigned long long)(start + len), r->name, r->array_names[a], e0, e1, got,
                                r->crc[idx]);
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* The CRC-32C of every block of the slot's arrays, then, block by block,
 * kept as its checksum (`keep`) or compared with it. */
static ferry_status crc_tile(nvme_store *s, nvme_slot *slot, bool keep)
{
    size_t i = 0;
    ferry_status st = crc_slot(s, slot);
    if (st != FERRY_OK)
        return st;
    nvme_region *r = &s->regions[slot->region];
    for (int a = 0; a < r->narrays; a++) {
        uint64_t seg;
        size_t nb = seg_blocks(s, slot, a, &seg);
        for (size_t j = 0; (slot->arrays & (1u << a)) && j < nb; j++) {
            size_t idx = nvme_crc_index(s, r, slot->tile, a, j);
            uint32_t got = slot->crc[i++];
            if (keep)
                r->crc[idx] = got;
            else if (got != r->crc[idx])
                return mismatch(s, slot, a, j, seg, got);
        }
    }
    return FERRY_OK;
}

/* Computed for writing: kept as the blocks' checksums. */
ferry_status nvme_checksum_tile(nvme_store *s, nvme_slot *slot) { return crc_tile(s, slot, true); }

/* Computed for reading: compared with the blocks' checksums, the first
 * difference (array by array, block by block) reported. */
ferry_status nvme_verify_tile(nvme_store *s, nvme_slot *slot) { return crc_tile(s, slot, false); }
