/* tools/bench/nvme/bench_nvme.c: the NVMe tier against the disk's own
 * one-way rates, measured in the same run, on a file of the same size on
 * the same disk, at the tier's block size and queue depth, with fio
 * (Debian's, --ioengine=io_uring --direct=1) as the peer.
 *
 * The floor. A step reads its state once and writes it once, so it cannot
 * take less than max(bytes read / the read-only rate, bytes written / the
 * write-only rate): that is the disk floor. With the update's arithmetic it
 * cannot take less than max(disk floor, AdamW alone over the same
 * parameters on the same threads): the overlap floor. Both rates are
 * measured right after each step, on a sibling file written whole once
 * before the first round (fio reads of a file only reserved come back from
 * the file system without touching the disk, at several times its rate), so
 * the step and its floor see the same disk within seconds. A ratio below
 * 1.0 is then a measurement error (the disk changed its pace between the
 * step and the floor: on a virtual disk the host's cache makes the rate
 * move severalfold within a minute), flagged as such and left out of the
 * medians, never reported as a result. fio's mixed --rw=rw is no floor:
 * its one job interleaves reads and writes at random, which this disk
 * serves slower than the tier's two streams. Beside the floors, the step
 * is also set against its peer doing the same traffic: fio with a reading
 * job and a writing job at once over the sibling (a disk whose reads and
 * writes share one bandwidth cannot reach max(read, write), and neither
 * can fio).
 *
 *   bench_nvme io --dir DIR [--size 2GiB] [--block 1MiB] [--queue-depth 16]
 *                 [--window 256MiB] [--rounds 5] [--io uring|threads]
 *     The store alone (offload/nvme.h): one region of two fp32 arrays of
 *     --size bytes together, swept in update mode (every tile read,
 *     verified, handed over, checksummed and written back: the I/O of an
 *     optimizer step with no arithmetic), then fio read-only and
 *     write-only over a sibling file of the same size. Prints each round,
 *     then the medians of the sweep's ratio to its disk floor.
 *
 *   bench_nvme step --dir DIR [--params 100M] [--host-mem 512MiB]
 *                   [--window 64MiB] [--block 1MiB] [--queue-depth 16]
 *                   [--group 8M] [--steps 5]
 *     The optimizer step of an engine on the host backend (bf16 storage,
 *     offload nvme, master weights on disk) whose state on disk is at least
 *     twice --host-mem, the engine's hard host budget: ferry_engine_step and
 *     ferry_engine_synchronize timed after each (untimed) micro-batch of
 *     gradients, each followed by the floors' measurements. Prints each
 *     round and the medians of the step's ratios to its disk floor (goal
 *     <= 1.15) and to its overlap floor (goal <= 1.10).
 *
 *   bench_nvme crc [--size 1MiB] [--rounds 5]
 *     CRC-32C (common/crc32c.h) on one core, every form this CPU has, over
 *     a buffer of --size (the store's block) checksummed again and again,
 *     against a plain read of the same bytes in the same run.
 *
 * Exit status: 0 when it measured; 1 when something failed (fio missing
 * included); 2 on a bad command line. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/units.h"
#include "ferry.h"
#include "offload/nvme.h"
#include "offload/pool.h"
#include "optim/adamw.h"
#include "optim/threadpool.h"

#define MAX_ROUNDS 64

typedef struct opts {
    const char *dir;
    uint64_t size, block, window, host_mem, params, group;
    int qd, rounds;
    nvme_io_path io;
} opts;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- fio ---- */

/* Runs fio over `path` (its first `bytes`), `rw` "read" or "write",
 * sequential, moving `bytes` one way; "both": a reading job and a writing
 * job at once, each with the queue depth, the step's own traffic. Returns
 * bytes moved per second (both jobs' bytes over the longer one's time), 0
 * on a failure (said on stderr). */
static double run_fio(const char *path, uint64_t bytes, uint64_t block, int qd, const char *rw)
{
    char cmd[8192], job[1024];
    bool both = !strcmp(rw, "both");
    snprintf(job, sizeof job,
             "--filename='%s' --ioengine=io_uring --direct=1 --fixedbufs --registerfiles --bs=%llu --iodepth=%d "
             "--size=%llu --io_size=%llu",
             path, (unsigned long long)block, qd, (unsigned long long)bytes, (unsigned long long)bytes);
    if (both)
        snprintf(cmd, sizeof cmd, "fio --output-format=json --name=r %s --rw=read --name=w %s --rw=write 2>&1", job,
                 job);
    else
        snprintf(cmd, sizeof cmd, "fio --output-format=json --name=ferry %s --rw=%s 2>&1", job, rw);
    FILE *p = popen(cmd, "r");
    if (!p) {
        fprintf(stderr, "bench_nvme: cannot run fio: %s\n", strerror(errno));
        return 0;
    }
    size_t cap = 1 << 20, len = 0;
    char *out = malloc(cap);
    for (size_t got; out && (got = fread(out + len, 1, cap - 1 - len, p)) > 0;)
        len += got;
    int rc = pclose(p);
    if (!out)
        return 0;
    out[len] = '\0';
    const char *json = strchr(out, '{');
    cJSON *o = json && rc == 0 ? cJSON_Parse(json) : NULL;
    double moved = 0, longest = 0;
    for (int i = 0; i < (both ? 2 : 1); i++) {
        cJSON *jb = o ? cJSON_GetArrayItem(cJSON_GetObjectItem(o, "jobs"), i) : NULL;
        cJSON *rd = jb ? cJSON_GetObjectItem(jb, "read") : NULL, *wr = jb ? cJSON_GetObjectItem(jb, "write") : NULL;
        cJSON *ms = jb ? cJSON_GetObjectItem(jb, "job_runtime") : NULL;
        if (!rd || !wr || !ms)
            continue;
        moved += cJSON_GetObjectItem(rd, "io_bytes")->valuedouble + cJSON_GetObjectItem(wr, "io_bytes")->valuedouble;
        longest = ms->valuedouble > longest ? ms->valuedouble : longest;
    }
    double bw = longest > 0 ? moved / (longest / 1e3) : 0;
    if (bw <= 0)
        fprintf(stderr, "bench_nvme: fio failed (exit %d; is Debian's fio installed?):\n%.2000s\n", rc, out);
    cJSON_Delete(o);
    free(out);
    return bw;
}

/* ---- io: the store alone ---- */

static ferry_status sweep(nvme_store *s, nvme_mode mode, double *ms)
{
    nvme_span span = {0, 3};
    double t0 = clock_now_ms();
    ferry_status st = nvme_sweep_begin(s, mode, &span, 1);
    for (bool done = false; st == FERRY_OK;) {
        nvme_tile t;
        if ((st = nvme_sweep_next(s, &t, &done)) != FERRY_OK || done)
            break;
        if (mode == NVME_WRITE)
            for (int a = 0; a < 2; a++)
                for (size_t i = 0; i < t.n; i++)
                    t.array[a][i] = (float)(t.first + i) * (a ? -1.0f : 1.0f);
        st = nvme_sweep_put(s, &t);
    }
    ferry_status end = nvme_sweep_end(s);
    *ms = clock_now_ms() - t0;
    return st != FERRY_OK ? st : end;
}

/* A sibling file of `bytes` beside the state, written whole once (untimed),
 * for fio: the state's own file would be overwritten. */
static bool make_sibling(char *path, size_t cap, const char *dir, uint64_t bytes, uint64_t block, int qd)
{
    snprintf(path, cap, "%s/bench-nvme-fio.dat", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    bool ok = fd >= 0 && fallocate(fd, 0, 0, (off_t)bytes) == 0;
    if (fd >= 0)
        close(fd);
    if (!ok) {
        fprintf(stderr, "bench_nvme: cannot make fio's file '%s': %s\n", path, strerror(errno));
        return false;
    }
    return run_fio(path, bytes, block, qd, "write") > 0;
}

/* One round's floor: fio read-only then write-only over the sibling. */
static bool one_way_rates(const char *path, uint64_t bytes, uint64_t block, int qd, double *rd, double *wr)
{
    *rd = run_fio(path, bytes, block, qd, "read");
    *wr = *rd > 0 ? run_fio(path, bytes, block, qd, "write") : 0;
    return *wr > 0;
}

/* The medians of the rounds whose ratio is a result (>= 1.0), and how
 * many were not. */
static double median_valid(const double *ratio, int n, int *flagged)
{
    double keep[MAX_ROUNDS];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (ratio[i] >= 1.0)
            keep[k++] = ratio[i];
    *flagged = n - k;
    return k ? median(keep, k) : 0;
}

static void spread(const double *v, int n, double *lo, double *hi)
{
    *lo = *hi = n ? v[0] : 0;
    for (int i = 1; i < n; i++) {
        *lo = v[i] < *lo ? v[i] : *lo;
        *hi = v[i] > *hi ? v[i] : *hi;
    }
}

static int bench_io(const opts *o)
{
    pool *p = NULL;
    nvme_store *s = NULL;
    pool_config pc = POOL_CONFIG_INIT;
    nvme_config c = NVME_CONFIG_INIT;
    c.dir = o->dir;
    c.window_bytes = o->window;
    c.block_bytes = (size_t)o->block;
    c.queue_depth = o->qd;
    c.io = o->io;
    static const char *const names[2] = {"adam m", "adam v"};
    static const ferry_mem_category cats[2] = {FERRY_MEM_OPTIMIZER, FERRY_MEM_OPTIMIZER};
    ferry_status st = pool_create(&pc, &p);
    c.pool = p;
    if (st == FERRY_OK) st = nvme_create(&c, &s);
    if (st == FERRY_OK) st = nvme_add_region(s, "bench", (size_t)(o->size / 8), 2, names, cats, NULL);
    if (st == FERRY_OK) st = nvme_open(s);
    double fill_ms = 0;
    if (st == FERRY_OK) st = sweep(s, NVME_WRITE, &fill_ms);
    if (st != FERRY_OK) {
        fprintf(stderr, "bench_nvme io: %s\n", ferry_last_error());
        nvme_destroy(s);
        pool_destroy(p);
        return 1;
    }
    uint64_t bytes = nvme_file_bytes(s);
    char b[32], w[32], peer[4200];
    printf("store %s\n", nvme_describe(s));
    printf("fill (write only): %.3f GB/s\n", (double)bytes / (fill_ms / 1e3) / 1e9);
    printf("a sweep reads %s and writes it back; blocks of %s, queue depth %d\n", units_fmt_bytes(b, sizeof b, bytes),
           units_fmt_bytes(w, sizeof w, o->block), o->qd);
    int rc = make_sibling(peer, sizeof peer, o->dir, bytes, o->block, o->qd) ? 0 : 1;
    double tier[MAX_ROUNDS], rd[MAX_ROUNDS], wr[MAX_ROUNDS], ratio[MAX_ROUNDS];
    for (int r = 0; r < o->rounds && rc == 0; r++) {
        double ms = 0;
        if ((st = sweep(s, NVME_UPDATE, &ms)) != FERRY_OK) {
            fprintf(stderr, "bench_nvme io: %s\n", ferry_last_error());
            rc = 1;
            break;
        }
        if (!one_way_rates(peer, bytes, o->block, o->qd, &rd[r], &wr[r])) {
            rc = 1;
            break;
        }
        double floor_ms = 1e3 * fmax((double)bytes / rd[r], (double)bytes / wr[r]);
        tier[r] = 2.0 * (double)bytes / (ms / 1e3);
        ratio[r] = ms / floor_ms;
        printf("round %d: sweep %.0f ms (%.3f GB/s read + write); fio read only %.3f, write only %.3f GB/s: floor "
               "%.0f ms; %.2fx the floor%s\n",
               r + 1, ms, tier[r] / 1e9, rd[r] / 1e9, wr[r] / 1e9, floor_ms, ratio[r],
               ratio[r] < 1.0 ? "  MEASUREMENT ERROR: below the floor, not a result" : "");
        fflush(stdout);
    }
    unlink(peer);
    if (rc == 0) {
        int flagged;
        double m = median_valid(ratio, o->rounds, &flagged), lo, hi;
        spread(ratio, o->rounds, &lo, &hi);
        printf("sweep %.3f GB/s read + write (median of %d rounds); %.2fx its disk floor (median of the %d rounds "
               "at or above it; all rounds %.2f..%.2f; %d flagged as measurement errors)\n",
               median(tier, o->rounds) / 1e9, o->rounds, m, o->rounds - flagged, lo, hi, flagged);
    }
    nvme_destroy(s);
    pool_destroy(p);
    return rc;
}

/* ---- crc: CRC-32C on one core ---- */

static int bench_crc(const opts *o)
{
    size_t n = (size_t)o->size;
    unsigned char *buf = malloc(n);
    if (!buf)
        return 1;
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    size_t reps = ((size_t)4 << 30) / n; /* 4 GiB a round */
    if (reps < 1)
        reps = 1;
    double read_gbs[MAX_ROUNDS];
    volatile uint64_t sink = 0;
    for (int r = 0; r < o->rounds; r++) {
        double t0 = clock_now_ms();
        uint64_t acc = 0;
        for (size_t k = 0; k < reps; k++) {
            for (size_t i = 0; i + 8 <= n; i += 8) {
                uint64_t v;
                memcpy(&v, buf + i, 8);
                acc += v;
            }
            sink += acc;
        }
        read_gbs[r] = (double)n * (double)reps / ((clock_now_ms() - t0) / 1e3) / 1e9;
    }
    double ceiling = median(read_gbs, o->rounds);
    char b[32];
    printf("CRC-32C on one core over a %s buffer, %zu times a round, %d rounds; a plain 8-byte read of the same "
           "bytes: %.2f GB/s (median); this CPU's form: %s\n",
           units_fmt_bytes(b, sizeof b, n), reps, o->rounds, ceiling, crc32c_name(crc32c_active()));
    for (int f = 0; f < CRC32C_IMPLS; f++) {
        if (!crc32c_supported((crc32c_impl)f))
            continue;
        size_t r_reps = f == CRC32C_TABLE ? reps / 8 + 1 : reps;
        double gbs[MAX_ROUNDS];
        for (int r = 0; r < o->rounds; r++) {
            double t0 = clock_now_ms();
            uint32_t c = 0;
            for (size_t k = 0; k < r_reps; k++)
                c = crc32c_with((crc32c_impl)f, c, buf, n);
            sink += c;
            gbs[r] = (double)n * (double)r_reps / ((clock_now_ms() - t0) / 1e3) / 1e9;
        }
        double m = median(gbs, o->rounds);
        printf("%-16s %6.2f GB/s a core (median of %d; %.2f of a plain read)\n", crc32c_name((crc32c_impl)f), m,
               o->rounds, m / ceiling);
    }
    free(buf);
    return sink == 42 ? 0 : 0;
}

/* ---- step: an engine's optimizer step ---- */

static ferry_status micro_batch(ferry_engine *e, int groups, const size_t *numel)
{
    ferry_status st = ferry_engine_begin_micro_batch(e, 0, 1);
    for (int g = 0; g < groups && st == FERRY_OK; g++) {
        void *w, *dw;
        st = ferry_engine_fetch(e, g, FERRY_PHASE_BACKWARD, &w);
        if (st == FERRY_OK) st = ferry_engine_grads(e, g, &dw);
        if (st == FERRY_OK) st = ferry_engine_synchronize(e);
        if (st == FERRY_OK) memset(dw, 0x3c, numel[g] * 2); /* bf16 1.16: finite, the same each step */
        if (st == FERRY_OK) st = ferry_engine_release(e, g, FERRY_PHASE_BACKWARD);
    }
    return st;
}

static int bench_step(const opts *o)
{
    int groups = (int)((o->params + o->group - 1) / o->group);
    size_t *numel = calloc((size_t)groups, sizeof *numel);
    float *init = calloc((size_t)o->group, sizeof *init);
    if (!numel || !init)
        return 1;
    for (size_t i = 0; i < o->group; i++)
        init[i] = 0.01f * (float)(i % 101) - 0.5f;
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = FERRY_BACKEND_HOST;
    c.dtype = FERRY_DTYPE_BF16;
    c.offload = FERRY_OFFLOAD_NVME;
    c.host_budget_bytes = o->host_mem;
    c.nvme_path = o->dir;
    c.nvme_master = 1;
    c.nvme_window_bytes = o->window;
    c.nvme_block_bytes = o->block;
    c.nvme_queue_depth = o->qd;
    ferry_engine *e = NULL;
    double t0 = clock_now_ms();
    ferry_status st = ferry_engine_create(&c, &e);
    for (int g = 0; g < groups && st == FERRY_OK; g++) {
        uint64_t left = o->params - (uint64_t)g * o->group;
        numel[g] = (size_t)(left < o->group ? left : o->group);
        char name[32];
        snprintf(name, sizeof name, "block %d", g);
        st = ferry_engine_add_group(e, name, numel[g], init, NULL, NULL);
    }
    if (st == FERRY_OK) st = ferry_engine_setup(e);
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    if (st == FERRY_OK) st = ferry_engine_memory_stats(e, &ms);
    char a[32], b[32], d[32];
    if (st == FERRY_OK) {
        printf("%s\nset up in %.1f s\n", ferry_engine_describe(e), (clock_now_ms() - t0) / 1e3);
        printf("state on disk %s, host pool %s of a %s cap (--host-mem): the state is %.2fx the cap\n",
               units_fmt_bytes(a, sizeof a, ms.disk_bytes), units_fmt_bytes(b, sizeof b, ms.host_reserved_bytes),
               units_fmt_bytes(d, sizeof d, o->host_mem), (double)ms.disk_bytes / (double)o->host_mem);
        if (ms.disk_bytes < 2 * o->host_mem)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "the state (%s) is less than twice --host-mem (%s): give more "
                         "--params or a smaller --host-mem", a, d);
    }
    /* fio's file: the engine's own would be overwritten by fio, so a
     * sibling of the same size on the same disk, written whole once. */
    char peer[4200];
    if (st == FERRY_OK && !make_sibling(peer, sizeof peer, o->dir, ms.disk_bytes, o->block, o->qd))
        st = err_set(FERRY_ERR_IO, "fio failed on '%s'", peer);
    /* AdamW alone, the overlap floor's other side: the same element update
     * on the same number of threads over a slice, scaled to the parameters
     * (it is memory-bound, linear in the elements past the caches). */
    tp_pool *threads = NULL;
    size_t slice = o->params < 16000000 ? (size_t)o->params : 16000000;
    float *am = NULL, *av = NULL, *ap = NULL;
    uint16_t *ag = NULL, *aw = NULL;
    if (st == FERRY_OK && (st = tp_pool_create(0, -1, &threads)) == FERRY_OK &&
        (st = tp_alloc(threads, slice * 12, (void **)&am)) == FERRY_OK &&
        (st = tp_alloc(threads, slice * 4, (void **)&ag)) == FERRY_OK) {
        av = am + slice;
        ap = av + slice;
        aw = ag + slice;
        for (size_t i = 0; i < slice; i++)
            ag[i] = 0x3c00, ap[i] = 0.01f * (float)(i % 101) - 0.5f;
    }
    double step[MAX_ROUNDS], rd[MAX_ROUNDS], wr[MAX_ROUNDS], adam[MAX_ROUNDS], disk_ratio[MAX_ROUNDS],
        lap_ratio[MAX_ROUNDS], peer_ratio[MAX_ROUNDS];
    double D = (double)ms.disk_bytes;
    ferry_step_options so = FERRY_STEP_OPTIONS_INIT;
    so.weight_decay = 0.01f;
    /* Each round: a step, then its floors, so the disk's moods fall on both. */
    for (int r = 0; r <= o->rounds && st == FERRY_OK; r++) { /* round 0 warms up */
        if ((st = micro_batch(e, groups, numel)) != FERRY_OK)
            break;
        double s0 = clock_now_ms();
        st = ferry_engine_step(e, &so, NULL);
        if (st == FERRY_OK) st = ferry_engine_synchronize(e);
        double ms_step = clock_now_ms() - s0;
        if (st != FERRY_OK)
            break;
        if (r == 0) {
            printf("step 0 (warm-up): %.0f ms\n", ms_step);
            continue;
        }
        int k = r - 1;
        step[k] = ms_step;
        if (!one_way_rates(peer, ms.disk_bytes, o->block, o->qd, &rd[k], &wr[k])) {
            st = err_set(FERRY_ERR_IO, "fio failed");
            break;
        }
        /* The peer: fio reading and writing the same bytes at once, as a step does. */
        double both = run_fio(peer, ms.disk_bytes, o->block, o->qd, "both");
        if (both <= 0) {
            st = err_set(FERRY_ERR_IO, "fio failed");
            break;
        }
        double peer_ms = 1e3 * 2.0 * D / both;
        peer_ratio[k] = ms_step / peer_ms;
        adamw_hparams hp = {1e-3, 0.9, 0.999, 1e-8, 0.01};
        adamw_job j = {ap, am, av, ag, FERRY_DTYPE_BF16, slice, r, hp, 1.0f, aw, FERRY_DTYPE_BF16, .moments = FERRY_MOMENTS_F32};
        double a0 = clock_now_ms();
        if ((st = adamw_run(threads, &j)) != FERRY_OK)
            break;
        adam[k] = (clock_now_ms() - a0) * (double)o->params / (double)slice;
        double disk_ms = 1e3 * fmax(D / rd[k], D / wr[k]), lap_ms = fmax(disk_ms, adam[k]);
        disk_ratio[k] = ms_step / disk_ms;
        lap_ratio[k] = ms_step / lap_ms;
        printf("round %d: step %.0f ms; fio read only %.3f GB/s, write only %.3f GB/s: disk floor %.0f ms; AdamW alone "
               "%.0f ms; fio reading and writing at once %.0f ms; %.2fx the disk floor, %.2fx the overlap floor, "
               "%.2fx fio's same traffic%s\n",
               r, ms_step, rd[k] / 1e9, wr[k] / 1e9, disk_ms, adam[k], peer_ms, disk_ratio[k], lap_ratio[k],
               peer_ratio[k],
               disk_ratio[k] < 1.0 || lap_ratio[k] < 1.0 ? "  MEASUREMENT ERROR: below a floor, not a result" : "");
        fflush(stdout);
    }
    if (am)
        tp_free(am, slice * 12);
    if (ag)
        tp_free(ag, slice * 4);
    tp_pool_destroy(threads);
    unlink(peer);
    int rc = st == FERRY_OK ? 0 : 1;
    if (st != FERRY_OK) {
        fprintf(stderr, "bench_nvme step: %s\n", ferry_last_error());
    } else {
        int fd_, fl_;
        double md = median_valid(disk_ratio, o->rounds, &fd_), ml = median_valid(lap_ratio, o->rounds, &fl_);
        double dlo, dhi, llo, lhi, slo, shi;
        spread(disk_ratio, o->rounds, &dlo, &dhi);
        spread(lap_ratio, o->rounds, &llo, &lhi);
        spread(step, o->rounds, &slo, &shi);
        double plo, phi;
        spread(peer_ratio, o->rounds, &plo, &phi);
        printf("optimizer step %.0f ms (median of %d; %.0f..%.0f), %s read and written: %.2fx the disk floor "
               "(goal <= 1.15; rounds %.2f..%.2f, %d flagged), %.2fx the overlap floor (goal <= 1.10; rounds "
               "%.2f..%.2f, %d flagged); medians of the rounds at or above their floors; %.2fx fio reading and "
               "writing the same bytes at once (rounds %.2f..%.2f)\n",
               median(step, o->rounds), o->rounds, slo, shi, units_fmt_bytes(a, sizeof a, ms.disk_bytes), md, dlo,
               dhi, fd_, ml, llo, lhi, fl_, median(peer_ratio, o->rounds), plo, phi);
    }
    ferry_engine_destroy(e);
    free(numel);
    free(init);
    return rc;
}

/* ---- the command line ---- */

static int usage(FILE *f, int rc)
{
    fputs("usage: bench_nvme io --dir DIR [--size 2GiB] [--block 1MiB] [--queue-depth 16] [--window 256MiB]\n"
          "                     [--rounds 5] [--io uring|threads]\n"
          "       bench_nvme step --dir DIR [--params 100M] [--host-mem 512MiB] [--window 64MiB] [--block 1MiB]\n"
          "                     [--queue-depth 16] [--group 8M] [--steps 5]\n"
          "       bench_nvme crc [--size 1MiB] [--rounds 5]\n"
          "Measures the NVMe tier against the disk's one-way rates (fio, same size, block size and queue depth,\n"
          "in the same run), and CRC-32C on one core (see the file's first comment). DIR is a folder on the disk\n"
          "to measure.\n",
          f);
    return rc;
}

/* "100M" elements: K, M, G as powers of 1000. */
static int parse_count(const char *text, uint64_t *out)
{
    char *end;
    double v = strtod(text, &end);
    double mul = *end == 'K' ? 1e3 : *end == 'M' ? 1e6 : *end == 'G' ? 1e9 : 1;
    if (end == text || v <= 0 || (mul > 1 && end[1]) || (mul == 1 && *end))
        return 2;
    *out = (uint64_t)(v * mul);
    return 0;
}

int main(int argc, char **argv)
{
    bool help = argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
    if (argc < 2 || (strcmp(argv[1], "io") && strcmp(argv[1], "step") && strcmp(argv[1], "crc")))
        return usage(help ? stdout : stderr, help ? 0 : 2);
    bool io = !strcmp(argv[1], "io"), crc = !strcmp(argv[1], "crc");
    opts o = {NULL, crc ? (uint64_t)1 << 20 : (uint64_t)2 << 30, 1 << 20, io ? (uint64_t)256 << 20 : (uint64_t)64 << 20,
              (uint64_t)512 << 20, 100000000, 8000000, 16, 5, NVME_IO_AUTO};
    for (int i = 2; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = !v;
        if (!v)
            bad = 1;
        else if (!strcmp(f, "--dir"))
            o.dir = v;
        else if (!strcmp(f, "--size"))
            bad = units_parse_bytes(v, &o.size) != FERRY_OK;
        else if (!strcmp(f, "--block"))
            bad = units_parse_bytes(v, &o.block) != FERRY_OK;
        else if (!strcmp(f, "--window"))
            bad = units_parse_bytes(v, &o.window) != FERRY_OK;
        else if (!strcmp(f, "--host-mem"))
            bad = units_parse_bytes(v, &o.host_mem) != FERRY_OK;
        else if (!strcmp(f, "--params"))
            bad = parse_count(v, &o.params);
        else if (!strcmp(f, "--group"))
            bad = parse_count(v, &o.group);
        else if (!strcmp(f, "--queue-depth"))
            bad = (o.qd = atoi(v)) < 1 || o.qd > 1024;
        else if (!strcmp(f, "--io") && (!strcmp(v, "uring") || !strcmp(v, "threads")))
            o.io = !strcmp(v, "uring") ? NVME_IO_URING : NVME_IO_THREADS;
        else if (!strcmp(f, "--rounds") || !strcmp(f, "--steps"))
            bad = (o.rounds = atoi(v)) < 1 || o.rounds > MAX_ROUNDS;
        else
            bad = 1;
        if (bad) {
            fprintf(stderr, "bench_nvme: bad option '%s'%s%s\n", f, v ? " " : "", v ? v : "");
            return usage(stderr, 2);
        }
        i++;
    }
    if (crc)
        return bench_crc(&o);
    if (!o.dir) {
        fprintf(stderr, "bench_nvme: --dir is required: a folder on the disk to measure\n");
        return usage(stderr, 2);
    }
    return io ? bench_io(&o) : bench_step(&o);
}
