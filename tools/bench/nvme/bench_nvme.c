/* tools/bench/nvme/bench_nvme.c: the NVMe tier against the disk, with fio
 * (Debian's, --ioengine=io_uring --direct=1) as the peer, measured in the
 * same run on the same file, block size and queue depth.
 *
 *   bench_nvme io --dir DIR [--size 2GiB] [--block 1MiB] [--queue-depth 16]
 *                 [--window 256MiB] [--rounds 5]
 *     The store alone (offload/nvme.h): one region of two fp32 arrays of
 *     --size bytes together, swept in update mode (every tile read,
 *     verified, handed over, checksummed and written back: the I/O of an
 *     optimizer step with no arithmetic) against fio --rw=rw over the same
 *     file, moving the same bytes (each byte read once and written once).
 *     Rounds alternate tier, fio, tier, ...; after each fio round the store
 *     writes its file again (fio leaves other bytes there), untimed. Prints
 *     each round, then the medians and the tier's ratio to fio (read +
 *     write, GB/s; the goal is >= 0.9).
 *
 *   bench_nvme step --dir DIR [--params 100M] [--host-mem 512MiB]
 *                   [--window 64MiB] [--block 1MiB] [--queue-depth 16]
 *                   [--group 8M] [--steps 5]
 *     The optimizer step of an engine on the host backend (bf16 storage,
 *     offload nvme, master weights on disk) whose state on disk is at least
 *     twice --host-mem, the engine's hard host budget: ferry_engine_step and
 *     ferry_engine_synchronize timed after each (untimed) micro-batch of
 *     gradients, each step followed by fio on a file of the same size beside
 *     the engine's (fio would overwrite the engine's own), same block size
 *     and queue depth. The floor is the bytes one step moves (its state read
 *     and written) over fio's --rw=rw bandwidth; prints each round and the
 *     median ratio of the step to the floor (the goal is <= 1.15), and to
 *     the tighter overlap floor (reads at fio's read-only rate and writes at
 *     its write-only rate, fully overlapped).
 *
 * Exit status: 0 when it measured; 1 when something failed (fio missing
 * included); 2 on a bad command line. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/units.h"
#include "ferry.h"
#include "offload/nvme.h"
#include "offload/pool.h"

#define MAX_ROUNDS 64

typedef struct opts {
    const char *dir;
    uint64_t size, block, window, host_mem, params, group;
    int qd, rounds;
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

/* Runs fio over `path` (its first `bytes`): `rw` "rw" mixes sequential
 * reads and writes half and half, moving 2 x bytes; "read" and "write" move
 * `bytes` one way. Returns bytes moved per second, 0 on a failure (said on
 * stderr). */
static double run_fio(const char *path, uint64_t bytes, uint64_t block, int qd, const char *rw)
{
    char cmd[8192];
    bool mixed = !strcmp(rw, "rw");
    snprintf(cmd, sizeof cmd,
             "fio --name=ferry --filename='%s' --ioengine=io_uring --direct=1 --fixedbufs --registerfiles "
             "--rw=%s%s --bs=%llu --iodepth=%d --size=%llu --io_size=%llu --output-format=json 2>&1",
             path, rw, mixed ? " --rwmixread=50" : "", (unsigned long long)block, qd, (unsigned long long)bytes,
             (unsigned long long)(mixed ? 2 * bytes : bytes));
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
    cJSON *job = o ? cJSON_GetArrayItem(cJSON_GetObjectItem(o, "jobs"), 0) : NULL;
    cJSON *rd = job ? cJSON_GetObjectItem(job, "read") : NULL, *wr = job ? cJSON_GetObjectItem(job, "write") : NULL;
    cJSON *ms = job ? cJSON_GetObjectItem(job, "job_runtime") : NULL;
    double moved = rd && wr ? cJSON_GetObjectItem(rd, "io_bytes")->valuedouble +
                                  cJSON_GetObjectItem(wr, "io_bytes")->valuedouble
                            : 0;
    double bw = ms && ms->valuedouble > 0 ? moved / (ms->valuedouble / 1e3) : 0;
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
    char b[32], w[32];
    printf("store %s\n", nvme_describe(s));
    printf("fill (write only): %.3f GB/s\n", (double)bytes / (fill_ms / 1e3) / 1e9);
    printf("both move %s per round (each byte read once, written once), blocks of %s, queue depth %d\n",
           units_fmt_bytes(b, sizeof b, 2 * bytes), units_fmt_bytes(w, sizeof w, o->block), o->qd);
    double tier[MAX_ROUNDS], peer[MAX_ROUNDS], rd[MAX_ROUNDS], wr[MAX_ROUNDS], ratio[MAX_ROUNDS], tight[MAX_ROUNDS];
    int rc = 0;
    for (int r = 0; r < o->rounds && rc == 0; r++) {
        double ms = 0, refill = 0;
        if ((st = sweep(s, NVME_UPDATE, &ms)) != FERRY_OK) {
            fprintf(stderr, "bench_nvme io: %s\n", ferry_last_error());
            rc = 1;
            break;
        }
        tier[r] = 2.0 * (double)bytes / (ms / 1e3);
        peer[r] = run_fio(nvme_path(s), bytes, o->block, o->qd, "rw");
        rd[r] = peer[r] > 0 ? run_fio(nvme_path(s), bytes, o->block, o->qd, "read") : 0;
        wr[r] = rd[r] > 0 ? run_fio(nvme_path(s), bytes, o->block, o->qd, "write") : 0;
        if (wr[r] <= 0 || sweep(s, NVME_WRITE, &refill) != FERRY_OK) {
            rc = 1;
            break;
        }
        /* The tighter floor: the reads and the writes each at fio's one-way
         * rate, perfectly overlapped. */
        double overlap_s = (double)bytes / rd[r] > (double)bytes / wr[r] ? (double)bytes / rd[r] : (double)bytes / wr[r];
        ratio[r] = tier[r] / peer[r];
        tight[r] = tier[r] / (2.0 * (double)bytes / overlap_s);
        printf("round %d: tier %.3f GB/s; fio --rw=rw %.3f GB/s (read only %.3f, write only %.3f): %.3f of fio, "
               "%.3f of the overlap floor\n",
               r + 1, tier[r] / 1e9, peer[r] / 1e9, rd[r] / 1e9, wr[r] / 1e9, ratio[r], tight[r]);
        fflush(stdout);
    }
    if (rc == 0) {
        double mt = median(tier, o->rounds), mp = median(peer, o->rounds), mo = median(tight, o->rounds);
        double mr = median(ratio, o->rounds);
        printf("tier %.3f GB/s read+write vs fio --rw=rw %.3f GB/s (medians of %d rounds): %.2f of fio (goal >= 0.9); "
               "%.2f of max(reads at fio's read-only rate, writes at its write-only rate)\n",
               mt / 1e9, mp / 1e9, o->rounds, mr, mo);
    }
    nvme_destroy(s);
    pool_destroy(p);
    return rc;
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
     * sibling of the same size on the same disk, reserved the same way. */
    char peer[4200];
    snprintf(peer, sizeof peer, "%s/bench-nvme-fio.dat", o->dir);
    int fd = st == FERRY_OK ? open(peer, O_RDWR | O_CREAT | O_TRUNC, 0600) : -1;
    if (st == FERRY_OK && (fd < 0 || fallocate(fd, 0, 0, (off_t)ms.disk_bytes) != 0))
        st = err_set(FERRY_ERR_IO, "cannot make fio's file '%s': %s", peer, strerror(errno));
    if (fd >= 0)
        close(fd);
    double step[MAX_ROUNDS], bw[MAX_ROUNDS], rd[MAX_ROUNDS], wr[MAX_ROUNDS], ratio[MAX_ROUNDS], tight[MAX_ROUNDS];
    double D = (double)ms.disk_bytes;
    ferry_step_options so = FERRY_STEP_OPTIONS_INIT;
    so.weight_decay = 0.01f;
    /* Rounds alternate a step and fio, so that the disk's moods fall on both. */
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
        bw[k] = run_fio(peer, ms.disk_bytes, o->block, o->qd, "rw");
        rd[k] = bw[k] > 0 ? run_fio(peer, ms.disk_bytes, o->block, o->qd, "read") : 0;
        wr[k] = rd[k] > 0 ? run_fio(peer, ms.disk_bytes, o->block, o->qd, "write") : 0;
        if (wr[k] <= 0) {
            st = err_set(FERRY_ERR_IO, "fio failed");
            break;
        }
        ratio[k] = ms_step / (2.0 * D / bw[k] * 1e3);
        tight[k] = ms_step / (1e3 * (D / rd[k] > D / wr[k] ? D / rd[k] : D / wr[k]));
        printf("round %d: step %.0f ms; fio --rw=rw %.3f GB/s (read only %.3f, write only %.3f): %.2fx the floor, "
               "%.2fx the overlap floor\n",
               r, ms_step, bw[k] / 1e9, rd[k] / 1e9, wr[k] / 1e9, ratio[k], tight[k]);
        fflush(stdout);
    }
    unlink(peer);
    int rc = st == FERRY_OK ? 0 : 1;
    if (st != FERRY_OK) {
        fprintf(stderr, "bench_nvme step: %s\n", ferry_last_error());
    } else {
        double m = median(step, o->rounds), f = median(bw, o->rounds), mr = median(ratio, o->rounds);
        double mt = median(tight, o->rounds);
        printf("optimizer step %.0f ms (median of %d) vs the disk-bound floor (%s read and written at fio --rw=rw's "
               "%.3f GB/s, median): %.2fx the floor (goal <= 1.15); %.2fx the overlap floor (reads at fio's read-only "
               "rate, writes at its write-only rate, fully overlapped); medians of the per-round ratios\n",
               m, o->rounds, units_fmt_bytes(a, sizeof a, ms.disk_bytes), f / 1e9, mr, mt);
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
          "                     [--rounds 5]\n"
          "       bench_nvme step --dir DIR [--params 100M] [--host-mem 512MiB] [--window 64MiB] [--block 1MiB]\n"
          "                     [--queue-depth 16] [--group 8M] [--steps 5]\n"
          "Measures the NVMe tier against fio on the same file, block size and queue depth (see the file's\n"
          "first comment). DIR is a folder on the disk to measure.\n",
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
    if (argc < 2 || (strcmp(argv[1], "io") && strcmp(argv[1], "step")))
        return usage(help ? stdout : stderr, help ? 0 : 2);
    bool io = !strcmp(argv[1], "io");
    opts o = {NULL, (uint64_t)2 << 30, 1 << 20, io ? (uint64_t)256 << 20 : (uint64_t)64 << 20, (uint64_t)512 << 20,
              100000000, 8000000, 16, 5};
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
    if (!o.dir) {
        fprintf(stderr, "bench_nvme: --dir is required: a folder on the disk to measure\n");
        return usage(stderr, 2);
    }
    return io ? bench_io(&o) : bench_step(&o);
}
