/* The NVMe store (offload/nvme.h) on a folder of /tmp: its arithmetic
 * against hand-computed layouts; every byte written comes back through a
 * window far smaller than the state, with one and several blocks per
 * segment, at queue depth 1 and 8, in write, update and read sweeps, whole
 * and one array at a time, through io_uring and through the threads of
 * pread/pwrite (forced by the config and by $FERRY_NVME_IO), whose files
 * hold the same bytes after the same sweeps; the checksums run through a
 * caller's `parallel` (which hands the blocks out in reverse order); a
 * folder on tmpfs (/dev/shm) refused; a flipped byte on disk, a file removed and a
 * file truncated underneath (before and during a sweep) each end with an
 * error naming the file (and the block and its bytes, computed here from the
 * layout), kept for every later sweep; misuse; the stale files of a crashed
 * run. Seeded data; the seed is printed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "offload/nvme.h"
#include "offload/pool.h"
#include "tap.h"

static pool *P;
static char dir[] = "/tmp/ferry-test-nvme-XXXXXX";
static nvme_io_path IO = NVME_IO_AUTO; /* the path world_open asks for */
static size_t parallel_calls;          /* tasks run through reverse_parallel */

/* A caller's workers, as the store sees them: every task, last first. */
static ferry_status reverse_parallel(void *ctx, size_t n, void (*task)(void *arg, size_t i, int worker), void *arg)
{
    (void)ctx;
    for (size_t i = n; i-- > 0;)
        task(arg, i, 0);
    parallel_calls += n;
    return FERRY_OK;
}
static const uint64_t SEED = 20261207;

#define MAXR 4
typedef struct world {
    nvme_store *s;
    int nregions;
    size_t numel[MAXR];
    int narrays[MAXR];
    float *ref[MAXR][NVME_MAX_ARRAYS]; /* what the disk should hold */
} world;

static const char *const names[NVME_MAX_ARRAYS] = {"m", "v", "master", "extra"};
static const ferry_mem_category cats[NVME_MAX_ARRAYS] = {FERRY_MEM_OPTIMIZER, FERRY_MEM_OPTIMIZER, FERRY_MEM_PARAMS,
                                                         FERRY_MEM_OTHER};

static ferry_status world_open(world *w, uint64_t window, size_t block, int qd, int n, const size_t *numel,
                               const int *narrays)
{
    memset(w, 0, sizeof *w);
    nvme_config c = NVME_CONFIG_INIT;
    c.dir = dir;
    c.window_bytes = window;
    c.block_bytes = block;
    c.queue_depth = qd;
    c.pool = P;
    c.io = IO;
    ferry_status st = nvme_create(&c, &w->s);
    w->nregions = n;
    uint64_t rng = SEED;
    for (int r = 0; r < n && st == FERRY_OK; r++) {
        char rn[16];
        snprintf(rn, sizeof rn, "r%d", r);
        w->numel[r] = numel[r];
        w->narrays[r] = narrays[r];
        st = nvme_add_region(w->s, rn, numel[r], narrays[r], names, cats, NULL);
        for (int a = 0; a < narrays[r]; a++) {
            w->ref[r][a] = malloc(numel[r] * sizeof(float));
            for (size_t i = 0; i < numel[r]; i++)
                w->ref[r][a][i] = (float)(tap_rand_unit(&rng) * 2.0 - 1.0);
        }
    }
    if (st == FERRY_OK)
        st = nvme_open(w->s);
    return st;
}

static void world_close(world *w)
{
    nvme_destroy(w->s);
    for (int r = 0; r < w->nregions; r++)
        for (int a = 0; a < w->narrays[r]; a++)
            free(w->ref[r][a]);
    memset(w, 0, sizeof *w);
}

static nvme_span all_of(const world *w, int r) { return (nvme_span){r, (1u << w->narrays[r]) - 1}; }

/* Fills every tile of every region from ref. */
static ferry_status write_all(world *w)
{
    nvme_span spans[MAXR];
    for (int r = 0; r < w->nregions; r++)
        spans[r] = all_of(w, r);
    ferry_status st = nvme_sweep_begin(w->s, NVME_WRITE, spans, w->nregions);
    if (st != FERRY_OK)
        return st;
    for (;;) {
        nvme_tile t;
        bool done;
        if ((st = nvme_sweep_next(w->s, &t, &done)) != FERRY_OK || done)
            break;
        for (int a = 0; a < w->narrays[t.region]; a++)
            memcpy(t.array[a], w->ref[t.region][a] + t.first, t.n * sizeof(float));
        if ((st = nvme_sweep_put(w->s, &t)) != FERRY_OK)
            break;
    }
    ferry_status end = nvme_sweep_end(w->s);
    return st != FERRY_OK ? st : end;
}

/* Reads `arrays` of every region and compares with ref; *same false on the first difference. */
static ferry_status read_check(world *w, unsigned arrays, bool *same, size_t *tiles)
{
    nvme_span spans[MAXR];
    for (int r = 0; r < w->nregions; r++)
        spans[r] = (nvme_span){r, arrays & ((1u << w->narrays[r]) - 1)};
    *same = true;
    *tiles = 0;
    ferry_status st = nvme_sweep_begin(w->s, NVME_READ, spans, w->nregions);
    if (st != FERRY_OK)
        return st;
    size_t next_first[MAXR] = {0};
    for (;;) {
        nvme_tile t;
        bool done;
        if ((st = nvme_sweep_next(w->s, &t, &done)) != FERRY_OK || done)
            break;
        (*tiles)++;
        if (t.first != next_first[t.region])
            *same = false; /* tiles come in order, none skipped */
        next_first[t.region] = t.first + t.n;
        for (int a = 0; a < NVME_MAX_ARRAYS; a++) {
            bool asked = a < w->narrays[t.region] && (spans[t.region].arrays & (1u << a));
            if (asked != (t.array[a] != NULL))
                *same = false;
            if (asked && memcmp(t.array[a], w->ref[t.region][a] + t.first, t.n * sizeof(float)) != 0)
                *same = false;
        }
        if ((st = nvme_sweep_put(w->s, &t)) != FERRY_OK)
            break;
    }
    ferry_status end = nvme_sweep_end(w->s);
    for (int r = 0; r < w->nregions; r++)
        if (next_first[r] != w->numel[r])
            *same = false;
    return st != FERRY_OK ? st : end;
}

/* m += 1, v *= 2, master -= 0.5 on disk and in ref. */
static ferry_status update_all(world *w)
{
    nvme_span spans[MAXR];
    for (int r = 0; r < w->nregions; r++)
        spans[r] = all_of(w, r);
    ferry_status st = nvme_sweep_begin(w->s, NVME_UPDATE, spans, w->nregions);
    if (st != FERRY_OK)
        return st;
    for (;;) {
        nvme_tile t;
        bool done;
        if ((st = nvme_sweep_next(w->s, &t, &done)) != FERRY_OK || done)
            break;
        for (size_t i = 0; i < t.n; i++) {
            float d[3] = {1.0f, 0.0f, -0.5f};
            for (int a = 0; a < w->narrays[t.region] && a < 3; a++)
                t.array[a][i] = a == 1 ? t.array[a][i] * 2.0f : t.array[a][i] + d[a];
        }
        if ((st = nvme_sweep_put(w->s, &t)) != FERRY_OK)
            break;
    }
    ferry_status end = nvme_sweep_end(w->s);
    for (int r = 0; r < w->nregions; r++)
        for (size_t i = 0; i < w->numel[r]; i++) {
            float d[3] = {1.0f, 0.0f, -0.5f};
            for (int a = 0; a < w->narrays[r] && a < 3; a++)
                w->ref[r][a][i] = a == 1 ? w->ref[r][a][i] * 2.0f : w->ref[r][a][i] + d[a];
        }
    return st != FERRY_OK ? st : end;
}

static void test_arithmetic(void)
{
    /* 96 KiB over 3 arrays and 8 slots: 4 KiB a segment, 1024 elements. */
    TAP_IS_INT(nvme_tile_elems_for(96 << 10, 4096, 3), 1024, "96 KiB window, 4 KiB blocks, 3 arrays: 1024-element tiles");
    /* The default 256 MiB over 2 arrays and 8 slots: 16 MiB a segment. */
    TAP_IS_INT(nvme_tile_elems_for(0, 0, 2), 4u << 20, "the default window and block, 2 arrays: 4M-element tiles");
    /* 100 KiB / 24 = 4266: below the 1 MiB block, so whole 4 KiB. */
    TAP_IS_INT(nvme_tile_elems_for(100 << 10, 1 << 20, 3), 1024, "a window smaller than a block: 4 KiB segments");
    TAP_IS_INT(nvme_tile_elems_for(3 * 3 * 4096 - 1, 4096, 3), 0, "a window below 3 tiles of 4 KiB gives no tiling");
    TAP_IS_INT(nvme_tile_elems_for(3 * 3 * 4096, 4096, 3), 1024, "exactly 3 tiles of 4 KiB is enough");
    /* 2500 elements, 1024 a tile: 2 full tiles of 3 x 4 KiB, the last (452
     * elements, 1808 bytes) padded to 4 KiB per array. */
    TAP_IS_INT(nvme_region_bytes(2500, 3, 1024), 2 * 3 * 4096 + 3 * 4096, "a region's bytes, its last tile padded");
    TAP_IS_INT(nvme_region_bytes(2048, 2, 1024), 2 * 2 * 4096, "a region of whole tiles");
    TAP_IS_INT(nvme_window_charge(96 << 10, 4096, 3, 1 << 20), 96 << 10, "the window charged: 8 slots of 12 KiB");
    /* A state of 30000 bytes fills 3 slots of 12 KiB: the window shrinks to them. */
    TAP_IS_INT(nvme_window_charge(96 << 10, 4096, 3, 30000), 3 * 12288, "no more slots than the state fills");
    TAP_IS_INT(nvme_window_charge(96 << 10, 4096, 3, 100), 3 * 12288, "and never fewer than 3");
}

static void test_round_trips(void)
{
    static const struct {
        uint64_t window;
        size_t block;
        int qd;
        const char *what;
    } cfgs[] = {
        {96 << 10, 4096, 8, "one block a segment, queue depth 8"},
        {96 << 10, 4096, 1, "one block a segment, queue depth 1"},
        {768 << 10, 8192, 8, "4 blocks a segment (the last tile's shorter), queue depth 8"},
        {768 << 10, 12288, 3, "blocks that do not divide the segment, queue depth 3"},
    };
    size_t numel[3] = {2500, 600000, 7};
    int narrays[3] = {3, 2, 3};
    tap_diag("seed %llu", (unsigned long long)SEED);
    for (size_t k = 0; k < 2 * sizeof cfgs / sizeof cfgs[0]; k++) {
        IO = k % 2 ? NVME_IO_THREADS : NVME_IO_URING;
        char what[160];
        snprintf(what, sizeof what, "%s, %s", cfgs[k / 2].what, IO == NVME_IO_URING ? "io_uring" : "threads");
        world w;
        ferry_status st = world_open(&w, cfgs[k / 2].window, cfgs[k / 2].block, cfgs[k / 2].qd, 3, numel, narrays);
        TAP_IS_STATUS(st, FERRY_OK, "%s: the store opens (%s)", what, st ? ferry_last_error() : nvme_describe(w.s));
        if (st != FERRY_OK) {
            world_close(&w);
            continue;
        }
        TAP_IS_INT(nvme_io_path_of(w.s), IO, "%s: the path asked for is taken", what);
        uint64_t want = 0;
        for (int r = 0; r < 3; r++)
            want += nvme_region_bytes(numel[r], narrays[r], nvme_tile_elems(w.s));
        struct stat sb;
        tap_ok(stat(nvme_path(w.s), &sb) == 0 && (uint64_t)sb.st_size == want && nvme_file_bytes(w.s) == want,
               "%s: the file is the regions' bytes (%llu)", what, (unsigned long long)want);
        tap_ok(nvme_window_bytes(w.s) * 4 < want, "%s: the window (%llu) is far smaller than the state",
               what, (unsigned long long)nvme_window_bytes(w.s));
        bool same = false;
        size_t tiles = 0, expect_tiles = 0;
        for (int r = 0; r < 3; r++)
            expect_tiles += nvme_region_tiles(w.s, r);
        TAP_IS_STATUS(write_all(&w), FERRY_OK, "%s: a write sweep", what);
        TAP_IS_STATUS(read_check(&w, 0xF, &same, &tiles), FERRY_OK, "%s: a read sweep", what);
        tap_ok(same && tiles == expect_tiles, "%s: every byte comes back, every tile once, in order (%zu tiles)",
               what, tiles);
        TAP_IS_STATUS(update_all(&w), FERRY_OK, "%s: an update sweep", what);
        TAP_IS_STATUS(update_all(&w), FERRY_OK, "%s: a second update sweep", what);
        TAP_IS_STATUS(read_check(&w, 0xF, &same, &tiles), FERRY_OK, "%s: read after the updates", what);
        tap_ok(same, "%s: both updates landed on every element", what);
        TAP_IS_STATUS(read_check(&w, 0x2, &same, &tiles), FERRY_OK, "%s: a read of array 1 alone", what);
        tap_ok(same, "%s: only array 1 is handed over, and it is right", what);
        uint64_t rd, wr;
        nvme_io_bytes(w.s, &rd, &wr);
        tap_ok(wr == 3 * want && rd >= 3 * want, "%s: the sweeps moved %llu bytes in, %llu out", what,
               (unsigned long long)rd, (unsigned long long)wr);
        world_close(&w);
    }
    IO = NVME_IO_AUTO;
}

/* The raw bytes of the store's file. */
static unsigned char *file_bytes(const nvme_store *s, size_t *n)
{
    *n = (size_t)nvme_file_bytes(s);
    unsigned char *b = malloc(*n);
    int fd = open(nvme_path(s), O_RDONLY);
    bool ok = b && fd >= 0 && pread(fd, b, *n, 0) == (ssize_t)*n;
    if (fd >= 0)
        close(fd);
    if (!ok) {
        free(b);
        return NULL;
    }
    return b;
}

/* The same sweeps through each path leave the same bytes on disk, and the
 * checksums through a caller's workers are the store's own. */
static void test_paths_agree(void)
{
    size_t numel[2] = {70000, 5000};
    int narrays[2] = {3, 2};
    world w[2];
    unsigned char *bytes[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        IO = k ? NVME_IO_THREADS : NVME_IO_URING;
        ferry_status st = world_open(&w[k], 192 << 10, 8192, 4, 2, numel, narrays);
        if (st == FERRY_OK) st = write_all(&w[k]);
        if (st == FERRY_OK) st = update_all(&w[k]);
        if (st == FERRY_OK) st = update_all(&w[k]);
        TAP_IS_STATUS(st, FERRY_OK, "%s: a write and two update sweeps", k ? "threads" : "io_uring");
        bytes[k] = file_bytes(w[k].s, &n[k]);
    }
    IO = NVME_IO_AUTO;
    tap_ok(bytes[0] && bytes[1] && n[0] == n[1] && memcmp(bytes[0], bytes[1], n[0]) == 0,
           "io_uring's file and the threads' hold the same %zu bytes", n[0]);
    for (int k = 0; k < 2; k++) {
        free(bytes[k]);
        world_close(&w[k]);
    }

    /* The checksums through a caller's `parallel`, every block a task. */
    nvme_config c = NVME_CONFIG_INIT;
    c.dir = dir;
    c.window_bytes = 192 << 10;
    c.block_bytes = 4096;
    c.queue_depth = 4;
    c.pool = P;
    c.parallel = reverse_parallel;
    world p;
    memset(&p, 0, sizeof p);
    ferry_status st = nvme_create(&c, &p.s);
    p.nregions = 1;
    p.numel[0] = 30000;
    p.narrays[0] = 3;
    uint64_t rng = SEED;
    for (int a = 0; a < 3; a++) {
        p.ref[0][a] = malloc(p.numel[0] * sizeof(float));
        for (size_t i = 0; i < p.numel[0]; i++)
            p.ref[0][a][i] = (float)tap_rand_unit(&rng);
    }
    if (st == FERRY_OK) st = nvme_add_region(p.s, "r0", p.numel[0], 3, names, cats, NULL);
    if (st == FERRY_OK) st = nvme_open(p.s);
    parallel_calls = 0;
    bool same = false;
    size_t tiles = 0;
    if (st == FERRY_OK) st = write_all(&p);
    if (st == FERRY_OK) st = update_all(&p);
    if (st == FERRY_OK) st = read_check(&p, 0x7, &same, &tiles);
    TAP_IS_STATUS(st, FERRY_OK, "a store whose checksums run through the caller's workers: write, update, read");
    /* 30000 elements x 3 arrays = 88 blocks of 4 KiB (the last tile's
     * padded), each checksummed twice (write, update) and verified twice
     * (update, read). */
    size_t blocks = (size_t)(nvme_file_bytes(p.s) / 4096);
    tap_ok(same && parallel_calls == 4 * blocks, "every value right, and all %zu checksum tasks (4 x %zu blocks) ran "
           "there: %zu", 4 * blocks, blocks, parallel_calls);
    world_close(&p);
}

/* A folder on a file system in memory is refused (no root needed: /dev/shm
 * is tmpfs wherever glibc's POSIX shared memory lives); $FERRY_NVME_IO. */
static void test_folders_and_env(void)
{
    struct statfs fs;
    nvme_config c = NVME_CONFIG_INIT;
    nvme_store *s = NULL;
    c.pool = P;
    if (statfs("/dev/shm", &fs) == 0 && fs.f_type == 0x01021994) {
        c.dir = "/dev/shm";
        TAP_IS_STATUS(nvme_create(&c, &s), FERRY_ERR_INVALID_ARGUMENT, "a folder on tmpfs (/dev/shm) is refused");
        tap_ok(strstr(ferry_last_error(), "/dev/shm") && strstr(ferry_last_error(), "tmpfs") &&
                   strstr(ferry_last_error(), "memory"),
               "naming the folder, tmpfs and memory: %s", ferry_last_error());
    } else {
        tap_skip("/dev/shm is not a tmpfs here");
    }
    c.dir = dir;
    setenv("FERRY_NVME_IO", "threads", 1);
    size_t numel[1] = {3000};
    int narrays[1] = {2};
    world w;
    bool same = false;
    size_t tiles;
    ferry_status st = world_open(&w, 64 << 10, 4096, 2, 1, numel, narrays);
    if (st == FERRY_OK) st = write_all(&w);
    if (st == FERRY_OK) st = read_check(&w, 0x3, &same, &tiles);
    TAP_IS_STATUS(st, FERRY_OK, "FERRY_NVME_IO=threads: the store works");
    tap_ok(nvme_io_path_of(w.s) == NVME_IO_THREADS && strstr(nvme_describe(w.s), "threads of pread/pwrite, as asked") &&
               same,
           "through the threads, as it says: %s", nvme_describe(w.s));
    tap_ok(nvme_align(w.s) == 4096 && strstr(nvme_describe(w.s), "aligned to 4.0 KiB"),
           "O_DIRECT aligned to 4 KiB on this disk (the file system says 512 or 4096; never less than 4 KiB)");
    world_close(&w);
    setenv("FERRY_NVME_IO", "carrier-pigeon", 1);
    TAP_IS_STATUS(nvme_create(&c, &s), FERRY_ERR_INVALID_ARGUMENT, "FERRY_NVME_IO=carrier-pigeon is refused");
    tap_ok(strstr(ferry_last_error(), "carrier-pigeon") != NULL, "naming it: %s", ferry_last_error());
    unsetenv("FERRY_NVME_IO");
}

/* A write of one array leaves the others as they were. */
static void test_partial_write(void)
{
    size_t numel[1] = {5000};
    int narrays[1] = {3};
    world w;
    ferry_status st = world_open(&w, 96 << 10, 4096, 4, 1, numel, narrays);
    if (st == FERRY_OK)
        st = write_all(&w);
    TAP_IS_STATUS(st, FERRY_OK, "a store written whole");
    for (size_t i = 0; i < numel[0]; i++)
        w.ref[0][2][i] = (float)i;
    nvme_span span = {0, 1u << 2};
    st = nvme_sweep_begin(w.s, NVME_WRITE, &span, 1);
    for (bool done = false; st == FERRY_OK;) {
        nvme_tile t;
        if ((st = nvme_sweep_next(w.s, &t, &done)) != FERRY_OK || done)
            break;
        tap_ok(t.array[0] == NULL && t.array[1] == NULL && t.array[2] != NULL, "tile %zu: only array 2 is handed over",
               t.index);
        memcpy(t.array[2], w.ref[0][2] + t.first, t.n * sizeof(float));
        st = nvme_sweep_put(w.s, &t);
    }
    ferry_status end = nvme_sweep_end(w.s);
    TAP_IS_STATUS(st ? st : end, FERRY_OK, "array 2 rewritten alone");
    bool same;
    size_t tiles;
    TAP_IS_STATUS(read_check(&w, 0x7, &same, &tiles), FERRY_OK, "read back");
    tap_ok(same, "array 2 holds the new values, arrays 0 and 1 the old");
    world_close(&w);
}

/* The layout the tests below damage: r0 2500 elements, r1 5000, both 3
 * arrays, 1024-element tiles of one 4 KiB block per segment. */
static ferry_status damage_world(world *w)
{
    size_t numel[2] = {2500, 5000};
    int narrays[2] = {3, 3};
    ferry_status st = world_open(w, 96 << 10, 4096, 4, 2, numel, narrays);
    if (st == FERRY_OK)
        st = write_all(w);
    return st;
}

static void test_flipped_byte(void)
{
    world w;
    ferry_status st = damage_world(&w);
    TAP_IS_STATUS(st, FERRY_OK, "a store written whole");
    /* r1 starts after r0's 36864 bytes; its tile 2 (elements 2048..3072) at
     * + 2 x 3 x 4096, array 1 (v) one segment further: byte 65536. Blocks:
     * r0 has 3 tiles x 3 arrays = 9, so r1's tile 2 array 1 is 9 + 7 = 16. */
    int fd = open(nvme_path(w.s), O_RDWR);
    unsigned char b = 0;
    bool flipped = fd >= 0 && pread(fd, &b, 1, 65536 + 100) == 1 && (b ^= 0x10, pwrite(fd, &b, 1, 65536 + 100) == 1);
    if (fd >= 0)
        close(fd);
    tap_ok(flipped, "one bit of byte 65636 of the file flipped from outside");
    bool same;
    size_t tiles;
    st = read_check(&w, 0x7, &same, &tiles);
    TAP_IS_STATUS(st, FERRY_ERR_FORMAT, "the next read sweep fails");
    const char *msg = ferry_last_error();
    tap_ok(strstr(msg, nvme_path(w.s)) && strstr(msg, "block 16 ") && strstr(msg, "bytes 65536..69632") &&
               strstr(msg, "'r1' v") && strstr(msg, "elements 2048..3072") && strstr(msg, "checksum"),
           "naming the file, block 16, its bytes, the region, the array and the elements: %s", msg);
    tap_ok(tiles == 3 + 2, "the tiles before the damaged one were handed over, not it (%zu)", tiles);
    TAP_IS_STATUS(read_check(&w, 0x1, &same, &tiles), FERRY_ERR_FORMAT,
                  "a later sweep, even of an undamaged array, is refused with the same failure");
    tap_ok(strstr(ferry_last_error(), "block 16 ") != NULL, "the same sentence: %s", ferry_last_error());
    TAP_IS_STATUS(nvme_failure(w.s), FERRY_ERR_FORMAT, "the failure is kept");
    world_close(&w);
}

static void test_removed(void)
{
    world w;
    ferry_status st = damage_world(&w);
    TAP_IS_STATUS(st, FERRY_OK, "a store written whole");
    char path[4096];
    snprintf(path, sizeof path, "%s", nvme_path(w.s));
    tap_ok(unlink(path) == 0, "its file removed from outside");
    bool same;
    size_t tiles;
    TAP_IS_STATUS(update_all(&w), FERRY_ERR_IO, "the next sweep fails");
    tap_ok(strstr(ferry_last_error(), path) && strstr(ferry_last_error(), "removed"),
           "saying the file was removed: %s", ferry_last_error());
    TAP_IS_STATUS(read_check(&w, 0x7, &same, &tiles), FERRY_ERR_IO, "and so does every later one");
    world_close(&w);
}

static void test_truncated(void)
{
    world w;
    ferry_status st = damage_world(&w);
    TAP_IS_STATUS(st, FERRY_OK, "a store written whole");
    tap_ok(truncate(nvme_path(w.s), 36864) == 0, "its file truncated from outside to region r0's 36864 bytes");
    bool same;
    size_t tiles;
    TAP_IS_STATUS(read_check(&w, 0x7, &same, &tiles), FERRY_ERR_IO, "the next sweep fails");
    tap_ok(strstr(ferry_last_error(), nvme_path(w.s)) && strstr(ferry_last_error(), "truncated") &&
               strstr(ferry_last_error(), "36864"),
           "saying the file was truncated, and to what: %s", ferry_last_error());
    world_close(&w);

    /* Truncated while a sweep runs: the reads past the end find nothing. */
    size_t numel[1] = {40 * 1024};
    int narrays[1] = {2};
    st = world_open(&w, 64 << 10, 4096, 2, 1, numel, narrays);
    if (st == FERRY_OK)
        st = write_all(&w);
    TAP_IS_STATUS(st, FERRY_OK, "a store of 40 tiles written whole");
    nvme_span span = all_of(&w, 0);
    st = nvme_sweep_begin(w.s, NVME_READ, &span, 1);
    tap_ok(st == FERRY_OK && truncate(nvme_path(w.s), 8192) == 0, "a read sweep begun, then the file truncated to 8 KiB");
    size_t handed = 0;
    for (bool done = false; st == FERRY_OK;) {
        nvme_tile t;
        if ((st = nvme_sweep_next(w.s, &t, &done)) != FERRY_OK || done)
            break;
        handed++;
        st = nvme_sweep_put(w.s, &t);
    }
    TAP_IS_STATUS(st, FERRY_ERR_IO, "the sweep fails at the first read past the end");
    tap_ok(strstr(ferry_last_error(), "truncated") != NULL, "saying so: %s", ferry_last_error());
    tap_ok(handed < 40, "after %zu of 40 tiles", handed);
    TAP_IS_STATUS(nvme_sweep_end(w.s), FERRY_ERR_IO, "its end waits for what was in flight and repeats the failure");
    world_close(&w);
}

static void test_misuse(void)
{
    nvme_config c = NVME_CONFIG_INIT;
    nvme_store *s = NULL;
    c.dir = dir;
    c.pool = P;
    c.block_bytes = 5000;
    TAP_IS_STATUS(nvme_create(&c, &s), FERRY_ERR_INVALID_ARGUMENT, "a block size not a multiple of 4 KiB is refused");
    tap_ok(strstr(ferry_last_error(), "5000") != NULL, "naming it: %s", ferry_last_error());
    c.block_bytes = 0;
    c.queue_depth = 5000;
    TAP_IS_STATUS(nvme_create(&c, &s), FERRY_ERR_INVALID_ARGUMENT, "a queue depth of 5000 is refused");
    c.queue_depth = 0;
    c.dir = "/nonexistent-ferry-folder";
    TAP_IS_STATUS(nvme_create(&c, &s), FERRY_ERR_IO, "a folder that does not exist is refused at once");
    tap_ok(strstr(ferry_last_error(), "/nonexistent-ferry-folder") != NULL, "naming it: %s", ferry_last_error());
    c.dir = dir;
    c.window_bytes = 12000;
    const char *nm[1] = {"x"};
    ferry_mem_category ct[1] = {FERRY_MEM_OPTIMIZER};
    ferry_status st = nvme_create(&c, &s);
    if (st == FERRY_OK)
        st = nvme_add_region(s, "x", 100, 1, nm, ct, NULL);
    if (st == FERRY_OK)
        st = nvme_open(s);
    TAP_IS_STATUS(st, FERRY_ERR_INVALID_ARGUMENT, "a window below 3 tiles of 4 KiB is refused at open");
    tap_ok(strstr(ferry_last_error(), "too small") && strstr(ferry_last_error(), "12.0 KiB"),
           "saying the least it takes: %s", ferry_last_error());
    nvme_destroy(s);

    size_t numel[1] = {20000};
    int narrays[1] = {2};
    world w;
    st = world_open(&w, 64 << 10, 4096, 4, 1, numel, narrays);
    TAP_IS_STATUS(st, FERRY_OK, "a store");
    nvme_span span = all_of(&w, 0);
    TAP_IS_STATUS(nvme_sweep_begin(w.s, NVME_READ, &span, 1), FERRY_ERR_STATE, "reading what was never written is refused");
    TAP_IS_STATUS(write_all(&w), FERRY_OK, "written");
    TAP_IS_STATUS(nvme_sweep_begin(w.s, NVME_READ, &span, 1), FERRY_OK, "a sweep begins");
    TAP_IS_STATUS(nvme_sweep_begin(w.s, NVME_READ, &span, 1), FERRY_ERR_STATE, "a second at the same time is refused");
    nvme_tile held[NVME_MAX_SLOTS + 1];
    int n = nvme_slots(w.s);
    bool done = false;
    st = FERRY_OK;
    for (int i = 0; i < n && st == FERRY_OK; i++)
        st = nvme_sweep_next(w.s, &held[i], &done);
    TAP_IS_STATUS(st, FERRY_OK, "every one of the %d slots handed over without a put", n);
    TAP_IS_STATUS(nvme_sweep_next(w.s, &held[n], &done), FERRY_ERR_STATE,
                  "one more is refused (no hang): %s", ferry_last_error());
    TAP_IS_STATUS(nvme_sweep_end(w.s), FERRY_OK, "the sweep ends with tiles left unasked");
    nvme_span bad = {3, 1};
    TAP_IS_STATUS(nvme_sweep_begin(w.s, NVME_READ, &bad, 1), FERRY_ERR_INVALID_ARGUMENT, "a region that does not exist");
    bool same;
    size_t tiles;
    TAP_IS_STATUS(read_check(&w, 0x3, &same, &tiles), FERRY_OK, "the store still reads");
    tap_ok(same, "and holds what was written");
    world_close(&w);
}

static void test_stale_files(void)
{
    char stale[4200], live[4200];
    snprintf(stale, sizeof stale, "%s/ferry-state-999999-0.swap", dir);
    snprintf(live, sizeof live, "%s/ferry-state-999998-0.swap", dir);
    int a = open(stale, O_CREAT | O_WRONLY, 0600), b = open(live, O_CREAT | O_WRONLY, 0600);
    tap_ok(a >= 0 && b >= 0 && flock(b, LOCK_EX | LOCK_NB) == 0, "a stale state file, and one a live run holds locked");
    if (a >= 0)
        close(a);
    size_t numel[1] = {100};
    int narrays[1] = {1};
    world w;
    TAP_IS_STATUS(world_open(&w, 64 << 10, 4096, 4, 1, numel, narrays), FERRY_OK, "a store opens in that folder");
    tap_ok(access(stale, F_OK) != 0 && errno == ENOENT, "the stale file is gone");
    tap_ok(access(live, F_OK) == 0, "the locked one is kept");
    char path[4096];
    snprintf(path, sizeof path, "%s", nvme_path(w.s));
    world_close(&w);
    tap_ok(access(path, F_OK) != 0, "the store's own file is removed when it closes");
    if (b >= 0)
        close(b);
    unlink(live);
}

/* ---- arrays in other forms than fp32 ---- */

static const nvme_form BF16 = {2, 0, 0}, Q8 = {1, 256, 4};

static void test_form_arithmetic(void)
{
    TAP_IS_INT(nvme_form_bytes(NVME_FORM_F32, 1000), 4000, "fp32: 4 bytes an element");
    TAP_IS_INT(nvme_form_bytes(BF16, 1001), 2002, "bf16: 2 bytes an element, unpadded");
    /* 1001 codes padded to 1004, then 4 scales of 4 bytes (256, 256, 256, 233) */
    TAP_IS_INT(nvme_form_bytes(Q8, 1001), 1004 + 16, "8-bit: the codes padded to 4, then a scale per 256 begun");
    TAP_IS_INT(nvme_form_bytes(Q8, 4096), 4096 + 64, "8-bit: a whole tile of 4096");
    /* 10000 elements, 4096 a tile: two whole tiles, bf16 8 KiB, 8-bit 4160 ->
     * 8 KiB, fp32 16 KiB a tile; the last 1808: bf16 3616 -> 4 KiB, 8-bit
     * 1808 + 32 -> 4 KiB, fp32 7232 -> 8 KiB. */
    nvme_form forms[3] = {BF16, Q8, NVME_FORM_F32};
    TAP_IS_INT(nvme_region_bytes_as(10000, 3, forms, 4096), 2 * (8192 + 8192 + 16384) + 4096 + 4096 + 8192,
               "a region of bf16, 8-bit and fp32 arrays: each array's segments padded alone");
    TAP_IS_INT(nvme_region_bytes_as(10000, 3, NULL, 4096), nvme_region_bytes(10000, 3, 4096),
               "no forms: fp32, as nvme_region_bytes");
}

/* A store of one region (bf16 m, 8-bit v, fp32 master) of 10000 elements in
 * tiles of 4096: every array's bytes written, read back, and a flipped byte
 * in v's scales of tile 1 found by its block's checksum. */
static ferry_status forms_store(nvme_store **s, const nvme_form *forms)
{
    nvme_config c = NVME_CONFIG_INIT;
    c.dir = dir;
    c.window_bytes = 384 << 10; /* 8 slots of 3 x 16 KiB: 4096 elements */
    c.block_bytes = 4096;
    c.pool = P;
    ferry_status st = nvme_create(&c, s);
    if (st == FERRY_OK)
        st = nvme_add_region_as(*s, "r", 10000, 3, names, cats, forms, NULL);
    return st == FERRY_OK ? nvme_open(*s) : st;
}

/* Writes (fill) or checks (!fill) every tile's bytes: byte k of array a of
 * the tile at element e is (e * 7 + k * 3 + a) & 255. *bad counts misses. */
static ferry_status forms_sweep(nvme_store *s, const nvme_form *forms, bool fill, size_t *bad)
{
    nvme_span span = {0, 7};
    ferry_status st = nvme_sweep_begin(s, fill ? NVME_WRITE : NVME_READ, &span, 1);
    for (bool done = false; st == FERRY_OK && !done;) {
        nvme_tile t;
        if ((st = nvme_sweep_next(s, &t, &done)) != FERRY_OK || done)
            break;
        for (int a = 0; a < 3; a++) {
            unsigned char *b = (unsigned char *)t.array[a];
            for (size_t k = 0; k < nvme_form_bytes(forms[a], t.n); k++) {
                unsigned char want = (unsigned char)((t.first * 7 + k * 3 + (size_t)a) & 255);
                if (fill)
                    b[k] = want;
                else
                    *bad += b[k] != want;
            }
        }
        st = nvme_sweep_put(s, &t);
    }
    ferry_status end = nvme_sweep_end(s);
    return st != FERRY_OK ? st : end;
}

static void test_forms(void)
{
    nvme_form forms[3] = {BF16, Q8, NVME_FORM_F32};
    nvme_store *s = NULL;
    ferry_status st = forms_store(&s, forms);
    TAP_IS_STATUS(st, FERRY_OK, "a store of bf16, 8-bit and fp32 arrays opens (%s)", st ? ferry_last_error() : "ok");
    TAP_IS_INT(nvme_tile_elems(s), 4096, "tiles of 4096 elements");
    struct stat sb;
    uint64_t want = 2 * (8192 + 8192 + 16384) + 4096 + 4096 + 8192;
    tap_ok(st == FERRY_OK && stat(nvme_path(s), &sb) == 0 && (uint64_t)sb.st_size == want &&
               nvme_file_bytes(s) == want,
           "the file is the forms' bytes, by hand %llu", (unsigned long long)want);
    size_t bad = 0;
    TAP_IS_STATUS(forms_sweep(s, forms, true, &bad), FERRY_OK, "every array written in its form");
    st = forms_sweep(s, forms, false, &bad);
    tap_ok(st == FERRY_OK && bad == 0, "and read back, every checksum right, every byte as written (%zu differ)", bad);
    /* tile 1 starts at 32 KiB; its v segment after m's 8 KiB; v's scales after its 4096 codes */
    off_t where = 32768 + 8192 + 4096 + 5;
    int fd = open(nvme_path(s), O_RDWR);
    unsigned char b = 0;
    bool flipped = fd >= 0 && pread(fd, &b, 1, where) == 1 && (b ^= 0x10, pwrite(fd, &b, 1, where) == 1);
    if (fd >= 0)
        close(fd);
    st = flipped ? forms_sweep(s, forms, false, &bad) : FERRY_ERR_STATE;
    const char *msg = ferry_last_error();
    tap_ok(flipped && st == FERRY_ERR_FORMAT && strstr(msg, "checksum mismatch") && strstr(msg, "'r' v") &&
               strstr(msg, "bytes 45056..49152"),
           "a flipped byte in the 8-bit scales is found in its block: %s", msg);
    nvme_destroy(s);
    nvme_form wide[3] = {{8, 0, 0}, Q8, NVME_FORM_F32}, odd[3] = {{1, 300, 4}, Q8, NVME_FORM_F32};
    nvme_store *t = NULL;
    nvme_config c = NVME_CONFIG_INIT;
    c.dir = dir;
    c.pool = P;
    st = nvme_create(&c, &t);
    ferry_status w = st == FERRY_OK ? nvme_add_region_as(t, "w", 100, 3, names, cats, wide, NULL) : st;
    ferry_status o = st == FERRY_OK ? nvme_add_region_as(t, "o", 100, 3, names, cats, odd, NULL) : st;
    tap_ok(w == FERRY_ERR_INVALID_ARGUMENT && o == FERRY_ERR_INVALID_ARGUMENT,
           "a form of 8 bytes an element, or groups of 300, is refused: %s", ferry_last_error());
    nvme_destroy(t);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    pool_config pc = POOL_CONFIG_INIT;
    pc.pin = POOL_PIN_NEVER;
    if (pool_create(&pc, &P) != FERRY_OK) {
        fprintf(stderr, "%s\n", ferry_last_error());
        return 1;
    }
    test_arithmetic();
    test_round_trips();
    test_paths_agree();
    test_folders_and_env();
    test_partial_write();
    test_flipped_byte();
    test_removed();
    test_truncated();
    test_misuse();
    test_stale_files();
    test_form_arithmetic();
    test_forms();
    tap_ok(pool_category_bytes(P, FERRY_MEM_NVME) == 0, "every window went back to the pool");
    pool_destroy(P);
    rmdir(dir);
    return tap_done();
}
