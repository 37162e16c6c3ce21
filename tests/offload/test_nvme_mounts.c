/* The NVMe store on file systems mounted for the test (it needs the right
 * to mount: root, or CAP_SYS_ADMIN; without it the test is skipped):
 * - a 1 MiB tmpfs under a state of several: setup fails, naming the folder,
 *   the bytes the state needs and the bytes free (both computed here), for
 *   the store and for an engine in offload nvme, and leaves no file;
 * - ramfs, which refuses O_DIRECT: the store falls back to buffered I/O
 *   with one warning on stderr (once per process), says so, and every
 *   byte comes back. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "offload/nvme.h"
#include "offload/pool.h"
#include "tap.h"

static char dir[] = "/tmp/ferry-test-nvme-mounts-XXXXXX";
static char small[4200], ram[4200];
static pool *P;

static const char *const names[2] = {"adam m", "adam v"};
static const ferry_mem_category cats[2] = {FERRY_MEM_OPTIMIZER, FERRY_MEM_OPTIMIZER};
enum { N = 600000 }; /* 2 x 2.4 MB */

static ferry_status open_store(const char *where, nvme_store **s)
{
    nvme_config c = NVME_CONFIG_INIT;
    c.dir = where;
    c.window_bytes = 256 << 10;
    c.block_bytes = 16384;
    c.pool = P;
    ferry_status st = nvme_create(&c, s);
    if (st == FERRY_OK) st = nvme_add_region(*s, "block 0", N, 2, names, cats, NULL);
    if (st == FERRY_OK) st = nvme_open(*s);
    return st;
}

static bool empty_folder(const char *path)
{
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", path);
    return system(cmd) == 0;
}

static void test_small_tmpfs(void)
{
    struct statvfs vs;
    tap_ok(statvfs(small, &vs) == 0, "a 1 MiB tmpfs at %s", small);
    unsigned long long free_bytes = (unsigned long long)vs.f_bavail * vs.f_frsize;
    unsigned long long need = nvme_region_bytes(N, 2, nvme_tile_elems_for(256 << 10, 16384, 2));
    nvme_store *s = NULL;
    ferry_status st = open_store(small, &s);
    TAP_IS_STATUS(st, FERRY_ERR_IO, "a state of %llu bytes does not fit: the store refuses at setup", need);
    char want_need[64], want_free[64];
    snprintf(want_need, sizeof want_need, "(%llu bytes)", need);
    snprintf(want_free, sizeof want_free, "(%llu bytes) free", free_bytes);
    const char *msg = ferry_last_error();
    tap_ok(strstr(msg, small) && strstr(msg, want_need) && strstr(msg, want_free),
           "naming the folder, the bytes needed %s and free %s: %s", want_need, want_free, msg);
    nvme_destroy(s);
    tap_ok(empty_folder(small), "and leaving nothing in the folder");

    /* The same through an engine. */
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = FERRY_BACKEND_HOST;
    c.offload = FERRY_OFFLOAD_NVME;
    c.nvme_path = small;
    c.optimizer_threads = 1;
    ferry_engine *e = NULL;
    float *init = calloc(N, sizeof(float));
    st = ferry_engine_create(&c, &e);
    if (st == FERRY_OK) st = ferry_engine_add_group(e, "block 0", N, init, NULL, NULL);
    if (st == FERRY_OK) st = ferry_engine_setup(e);
    TAP_IS_STATUS(st, FERRY_ERR_IO, "an engine in offload nvme on it fails at setup");
    msg = ferry_last_error();
    tap_ok(strstr(msg, small) && strstr(msg, "too small") && strstr(msg, "bytes) free"),
           "saying why: %s", msg);
    ferry_engine_destroy(e);
    free(init);
    tap_ok(empty_folder(small), "and leaving nothing in the folder");
}

static void test_ramfs(void)
{
    /* stderr into a file while the stores open, to read the warning. */
    char log[4300];
    snprintf(log, sizeof log, "%s/stderr.log", dir);
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(log, "w+");
    if (!f || saved < 0 || dup2(fileno(f), 2) < 0) {
        tap_ok(0, "capture stderr");
        return;
    }
    nvme_store *a = NULL, *b = NULL;
    ferry_status sa = open_store(ram, &a), sb = open_store(ram, &b);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[2048] = "";
    rewind(f);
    size_t got = fread(text, 1, sizeof text - 1, f);
    text[got] = '\0';
    fclose(f);
    TAP_IS_STATUS(sa, FERRY_OK, "a store opens on ramfs (%s)", sa ? ferry_last_error() : nvme_describe(a));
    TAP_IS_STATUS(sb, FERRY_OK, "and a second one");
    tap_ok(strstr(nvme_describe(a), "buffered") != NULL, "buffered I/O, it says: %s", nvme_describe(a));
    const char *w = strstr(text, "O_DIRECT");
    tap_ok(w && strstr(text, ram) && !strstr(w + 1, "O_DIRECT"), "one warning for both, naming the folder: %s", text);
    nvme_span span = {0, 3};
    ferry_status st = sa;
    if (st == FERRY_OK) st = nvme_sweep_begin(a, NVME_WRITE, &span, 1);
    for (bool done = false; st == FERRY_OK;) {
        nvme_tile t;
        if ((st = nvme_sweep_next(a, &t, &done)) != FERRY_OK || done)
            break;
        for (size_t i = 0; i < t.n; i++)
            t.array[0][i] = (float)(t.first + i), t.array[1][i] = -(float)(t.first + i);
        st = nvme_sweep_put(a, &t);
    }
    if (sa == FERRY_OK && nvme_sweep_end(a) != FERRY_OK && st == FERRY_OK)
        st = FERRY_ERR_IO;
    bool right = true;
    if (st == FERRY_OK) st = nvme_sweep_begin(a, NVME_READ, &span, 1);
    for (bool done = false; st == FERRY_OK;) {
        nvme_tile t;
        if ((st = nvme_sweep_next(a, &t, &done)) != FERRY_OK || done)
            break;
        for (size_t i = 0; i < t.n; i++)
            right &= t.array[0][i] == (float)(t.first + i) && t.array[1][i] == -(float)(t.first + i);
        st = nvme_sweep_put(a, &t);
    }
    if (sa == FERRY_OK && nvme_sweep_end(a) != FERRY_OK && st == FERRY_OK)
        st = FERRY_ERR_IO;
    TAP_IS_STATUS(st, FERRY_OK, "a write and a read sweep through the page cache");
    tap_ok(right, "every value comes back");
    nvme_destroy(a);
    nvme_destroy(b);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    snprintf(small, sizeof small, "%s/small", dir);
    snprintf(ram, sizeof ram, "%s/ram", dir);
    mkdir(small, 0700);
    mkdir(ram, 0700);
    if (mount("tmpfs", small, "tmpfs", 0, "size=1m") != 0) {
        int e = errno;
        rmdir(small);
        rmdir(ram);
        rmdir(dir);
        char why[200];
        snprintf(why, sizeof why, "cannot mount a tmpfs here (%s): mounting needs root or CAP_SYS_ADMIN", strerror(e));
        tap_plan_skip(why);
    }
    if (mount("ramfs", ram, "ramfs", 0, NULL) != 0) {
        printf("Bail out! a tmpfs mounted, ramfs not: %s\n", strerror(errno));
        umount2(small, MNT_DETACH);
        return 1;
    }
    pool_config pc = POOL_CONFIG_INIT;
    pc.pin = POOL_PIN_NEVER;
    if (pool_create(&pc, &P) != FERRY_OK)
        return 1;
    test_small_tmpfs();
    test_ramfs();
    pool_destroy(P);
    /* Lazily: a closed ring may hold its file a moment longer. */
    umount2(small, MNT_DETACH);
    umount2(ram, MNT_DETACH);
    rmdir(small);
    rmdir(ram);
    char log[4300];
    snprintf(log, sizeof log, "%s/stderr.log", dir);
    unlink(log);
    rmdir(dir);
    return tap_done();
}
