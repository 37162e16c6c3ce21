/* ferry-info: prints what ferry finds on this machine — the backend it would
 * use, the GPU, and the CPU/NUMA topology — and runs a small smoke test of
 * the chosen backend (a round trip through device memory on two streams).
 * Exit status: 0 when the smoke test passed; 1 when it failed; 2 on a bad
 * FERRY_BACKEND; 77 when FERRY_BACKEND=cuda asks for a GPU and there is none
 * (no driver, no device) — a GPU that is there but cannot start is 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/units.h"
#include "ferry.h"
#include "backend/backend.h"

static int smoke_test(ferry_backend_kind kind)
{
    backend *be = NULL;
    backend_stream *up = NULL, *down = NULL;
    backend_event *landed = NULL;
    enum { N = 1 << 20 };
    static float src[N], dst[N];
    for (int i = 0; i < N; i++)
        src[i] = (float)i * 0.5f;
    void *dev = NULL;
    ferry_status st = backend_open(kind, &be);
    if (st == FERRY_ERR_UNSUPPORTED && kind == FERRY_BACKEND_CUDA) {
        fprintf(stderr, "ferry-info: FERRY_BACKEND=cuda: %s\n", ferry_last_error());
        return 77;
    }
    if (st == FERRY_OK) st = backend_alloc(be, sizeof src, &dev);
    if (st == FERRY_OK) st = backend_stream_create(be, "h2d", &up);
    if (st == FERRY_OK) st = backend_stream_create(be, "d2h", &down);
    if (st == FERRY_OK) st = backend_event_create(be, &landed);
    if (st == FERRY_OK) st = backend_memcpy_async(up, dev, src, sizeof src, BACKEND_COPY_H2D);
    if (st == FERRY_OK) st = backend_event_record(landed, up);
    if (st == FERRY_OK) st = backend_stream_wait_event(down, landed);
    if (st == FERRY_OK) st = backend_memcpy_async(down, dst, dev, sizeof dst, BACKEND_COPY_D2H);
    if (st == FERRY_OK) st = backend_stream_synchronize(down);
    int ok = st == FERRY_OK && memcmp(src, dst, sizeof src) == 0;
    if (st != FERRY_OK)
        fprintf(stderr, "ferry-info: backend smoke test failed: %s\n", ferry_last_error());
    else
        printf("  smoke test   : %s (4 MiB host -> device -> host across two streams)\n",
               ok ? "passed" : "FAILED: data differs");
    backend_event_destroy(landed);
    backend_stream_destroy(down);
    backend_stream_destroy(up);
    if (dev)
        backend_free(be, dev);
    backend_close(be);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    fileio_check_stdout_at_exit("ferry-info"); /* a full disk or /dev/full on stdout is exit 1 */
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: ferry-info\n  Prints the backend, GPU and topology ferry finds here.\n"
               "  FERRY_BACKEND=host|cuda overrides the backend choice; with cuda and no GPU the exit\n"
               "  status is 77.\n");
        return 0;
    }
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    if (ferry_system_probe(&info) != FERRY_OK) {
        fprintf(stderr, "ferry-info: %s\n", ferry_last_error());
        return 1;
    }
    char mem[32], gmem[32];
    printf("ferry %s\n", ferry_version());
    printf("  built with   : %s\n", info.cuda_compiled ? "CUDA" : "host backend only (no CUDA)");
    if (info.gpu_count > 0)
        printf("  GPU          : %d x %s, %s, nearest NUMA node %d\n", info.gpu_count, info.gpu_name,
               units_fmt_bytes(gmem, sizeof gmem, info.gpu_memory_bytes), info.gpu_numa_node);
    else
        printf("  GPU          : none found\n");
    printf("  host         : %d NUMA node(s), %d cores, %d hardware threads, %s, SIMD %s\n",
           info.numa_nodes, info.cores, info.pus,
           units_fmt_bytes(mem, sizeof mem, info.host_memory_bytes), info.simd);
    ferry_world_info world = FERRY_WORLD_INFO_INIT;
    if (ferry_world_probe(&world) == FERRY_OK)
        printf("  ranks        : %s; rank %d of %d, local rank %d (launcher: %s)\n",
               world.mpi_compiled ? (world.nccl_compiled ? "MPI and NCCL built in" : "MPI built in, no NCCL")
                                  : "no MPI: one rank only",
               world.rank, world.world_size, world.local_rank, world.launcher);
    ferry_backend_kind kind = FERRY_BACKEND_AUTO;
    const char *env = getenv("FERRY_BACKEND");
    if (env && *env && ferry_backend_parse(env, &kind) != FERRY_OK) {
        fprintf(stderr, "ferry-info: %s\n", ferry_last_error());
        return 2;
    }
    printf("  backend      : %s%s\n", ferry_backend_name(kind == FERRY_BACKEND_AUTO ? info.backend : kind),
           env && *env ? " (from FERRY_BACKEND)" : " (auto)");
    return smoke_test(kind);
}
