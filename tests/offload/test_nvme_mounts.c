/* The NVMe store on file systems mounted for the test (it needs the right
 * to mount: root, or CAP_SYS_ADMIN; without it the test is skipped):
 * - tmpfs and ramfs, file systems in memory: the store and an engine in
 *   offload nvme refuse them at once with a sentence naming the folder and
 *   the file system, and leave no file;
 * - a 2 MiB ext2 image on a loop device (skipped where no loop device can
 *   be had) under a state of several MiB: setup fails, naming the folder,
 *   the bytes the state needs and the bytes free (both computed here), for
 *   the store and for an engine, whose advice names the master weights
 *   only when it put them on disk (nvme_master), and leaves no file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/error.h"
#include "offload/nvme.h"
#include "offload/pool.h"
#include "tap.h"

static char dir[] = "/tmp/ferry-test-nvme-mounts-XXXXXX";
static char small[600], ram[600], tmp[600], image[600];
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
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s' | grep -v lost+found)\"", path);
    return system(cmd) == 0;
}

/* An engine in offload nvme with its folder at `where`; its status. */
static ferry_status engine_at(const char *where, bool master)
{
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = FERRY_BACKEND_HOST;
    c.offload = FERRY_OFFLOAD_NVME;
    c.nvme_path = where;
    c.nvme_master = master;
    c.nvme_window_bytes = 256 << 10;
    c.nvme_block_bytes = 16384;
    c.optimizer_threads = 1;
    ferry_engine *e = NULL;
    float *init = calloc(N, sizeof(float));
    ferry_status st = ferry_engine_create(&c, &e);
    if (st == FERRY_OK) st = ferry_engine_add_group(e, "block 0", N, init, NULL, NULL);
    if (st == FERRY_OK) st = ferry_engine_setup(e);
    char keep[1200];
    snprintf(keep, sizeof keep, "%s", ferry_last_error());
    ferry_engine_destroy(e);
    free(init);
    if (st != FERRY_OK)
        err_set(st, "%s", keep);
    return st;
}

static void test_memory_file_systems(void)
{
    const char *where[2] = {tmp, ram}, *fs[2] = {"tmpfs", "ramfs"};
    for (int k = 0; k < 2; k++) {
        nvme_store *s = NULL;
        ferry_status st = open_store(where[k], &s);
        TAP_IS_STATUS(st, FERRY_ERR_INVALID_ARGUMENT, "%s: the store refuses it", fs[k]);
        const char *msg = ferry_last_error();
        tap_ok(strstr(msg, where[k]) && strstr(msg, fs[k]) && strstr(msg, "memory") && strstr(msg, "disk"),
               "%s: naming the folder, the file system, memory and what to do: %s", fs[k], msg);
        nvme_destroy(s);
        st = engine_at(where[k], false);
        TAP_IS_STATUS(st, FERRY_ERR_INVALID_ARGUMENT, "%s: an engine in offload nvme on it fails at setup", fs[k]);
        tap_ok(strstr(ferry_last_error(), fs[k]) != NULL, "%s: saying why: %s", fs[k], ferry_last_error());
        tap_ok(empty_folder(where[k]), "%s: nothing left in the folder", fs[k]);
    }
}

static void test_small_disk(void)
{
    struct statvfs vs;
    tap_ok(statvfs(small, &vs) == 0, "a 2 MiB ext2 on a loop device at %s", small);
    unsigned long long free_bytes = (unsigned long long)vs.f_bavail * vs.f_frsize;
    unsigned long long need = nvme_region_bytes(N, 2, nvme_tile_elems_for(256 << 10, 16384, 2));
    nvme_store *s = NULL;
    ferry_status st = open_store(small, &s);
    TAP_IS_STATUS(st, FERRY_ERR_IO, "a state of %llu bytes does not fit: the store refuses at setup", need);
    char want_need[64], want_free[64];
    snprintf(want_need, sizeof want_need, "(%llu bytes)", need);
    snprintf(want_free, sizeof want_free, "(%llu bytes) free", free_bytes);
    const char *msg = ferry_last_error();
    tap_ok(strstr(msg, small) && strstr(msg, want_need) && strstr(msg, want_free) && !strstr(msg, "master"),
           "naming the folder, the bytes needed %s and free %s, not the master weights the store knows nothing of: "
           "%s", want_need, want_free, msg);
    nvme_destroy(s);
    tap_ok(empty_folder(small), "and leaving nothing in the folder");

    st = engine_at(small, false);
    TAP_IS_STATUS(st, FERRY_ERR_IO, "an engine with the moments alone on disk fails at setup");
    msg = ferry_last_error();
    tap_ok(strstr(msg, small) && strstr(msg, "too small") && strstr(msg, "bytes) free") && !strstr(msg, "master"),
           "saying why, with no advice about master weights it never put there: %s", msg);
    st = engine_at(small, true);
    TAP_IS_STATUS(st, FERRY_ERR_IO, "an engine with the master weights on disk too (nvme_master) fails at setup");
    msg = ferry_last_error();
    tap_ok(strstr(msg, "too small") && strstr(msg, "master weights in host memory") && strstr(msg, "nvme_master"),
           "and there the advice to keep the master weights in host memory is true: %s", msg);
    tap_ok(empty_folder(small), "and leaving nothing in the folder");
}

static void cleanup(void)
{
    /* Lazily: a closed ring may hold its file a moment longer. */
    umount2(small, MNT_DETACH);
    umount2(tmp, MNT_DETACH);
    umount2(ram, MNT_DETACH);
    rmdir(small);
    rmdir(tmp);
    rmdir(ram);
    unlink(image);
    rmdir(dir);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    snprintf(small, sizeof small, "%s/small", dir);
    snprintf(tmp, sizeof tmp, "%s/tmp", dir);
    snprintf(ram, sizeof ram, "%s/ram", dir);
    snprintf(image, sizeof image, "%s/disk.img", dir);
    mkdir(small, 0700);
    mkdir(tmp, 0700);
    mkdir(ram, 0700);
    if (mount("tmpfs", tmp, "tmpfs", 0, "size=8m") != 0) {
        int e = errno;
        cleanup();
        char why[200];
        snprintf(why, sizeof why, "cannot mount a tmpfs here (%s): mounting needs root or CAP_SYS_ADMIN", strerror(e));
        tap_plan_skip(why);
    }
    if (mount("ramfs", ram, "ramfs", 0, NULL) != 0) {
        printf("Bail out! a tmpfs mounted, ramfs not: %s\n", strerror(errno));
        cleanup();
        return 1;
    }
    pool_config pc = POOL_CONFIG_INIT;
    pc.pin = POOL_PIN_NEVER;
    if (pool_create(&pc, &P) != FERRY_OK)
        return 1;
    test_memory_file_systems();
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "truncate -s 2M '%s' && mkfs.ext2 -q -F -b 4096 -m 0 '%s' >/dev/null 2>&1 && "
             "mount -o loop '%s' '%s' 2>/dev/null", image, image, image, small);
    if (system(cmd) == 0)
        test_small_disk();
    else
        tap_skip("a 2 MiB ext2 on a loop device: no mkfs.ext2 or no loop device here");
    pool_destroy(P);
    cleanup();
    return tap_done();
}
