/* The simulated device's NCCL (dev/cudasim/nccl.cpp), on its own, under
 *   mpirun --allow-run-as-root --oversubscribe -np N test_nccl_sim
 * with N = 2 and 3: every collective of the subset ferry calls, for fp32,
 * bf16 and fp16, out of place and in place, against the sums each rank can
 * compute itself; stream order (the copy before and after a collective on
 * its stream, under random stream delays); groups; the checks a collective
 * makes (buffers outside device memory, an unknown type or reduction, ranks
 * that disagree); versions and error strings; abort and destroy; a start
 * through ncclCommInitRankConfig, blocking and not (ncclInProgress until
 * the asynchronous error says it is up), and configs it refuses. Every rank
 * checks; rank 0 prints TAP, each line true only when it held on all ranks.
 * `test_nccl_sim serialized` initialises MPI with MPI_THREAD_SERIALIZED: the
 * collectives then run on the calling thread (no proxy), with the same
 * results. */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dev/ops/opcheck.h"

static int rank, nranks, tap_n, tap_failed;
static cudaStream_t stream;

/* One TAP line for the claim of every rank. */
static int check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int check(int ok, const char *fmt, ...)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    tap_n++;
    tap_failed += !all;
    if (rank == 0) {
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        printf("%s %d - %s (%d ranks)\n", all ? "ok" : "not ok", tap_n, buf, nranks);
        fflush(stdout);
    }
    return all;
}

static int is(ncclResult_t got, ncclResult_t want, const char *what)
{
    if (got != want)
        fprintf(stderr, "rank %d: %s: got %s (%d)\n", rank, what, ncclGetErrorString(got), (int)got);
    return check(got == want, "%s: %s", what, ncclGetErrorString(want));
}

/* Value i of rank r's buffer: small integers and halves, so every sum of a
 * few of them is exact in fp32, bf16 and fp16. */
static float value(int r, size_t i) { return (float)((int)(i % 13) - 6) * 0.5f + (float)r; }

static size_t esize(ncclDataType_t t) { return t == ncclFloat32 ? 4 : 2; }

static uint16_t half_bits(float f)
{
    /* Exact for the small values used here (normal fp16 numbers, few bits). */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) == 0)
        return (uint16_t)(u >> 16);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    int exp = (int)((u >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(sign | (uint16_t)(exp << 10) | (uint16_t)((u & 0x7fffffu) >> 13));
}

static float half_value(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
    uint32_t u = exp == 0 ? sign : sign | ((exp - 15 + 127) << 23) | (mant << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void put(void *h, ncclDataType_t t, size_t i, float v)
{
    if (t == ncclFloat32)
        ((float *)h)[i] = v;
    else if (t == ncclBfloat16)
        ((uint16_t *)h)[i] = opcheck_bf16_bits(v);
    else
        ((uint16_t *)h)[i] = half_bits(v);
}

static float get(const void *h, ncclDataType_t t, size_t i)
{
    if (t == ncclFloat32)
        return ((const float *)h)[i];
    if (t == ncclBfloat16)
        return opcheck_bf16_value(((const uint16_t *)h)[i]);
    return half_value(((const uint16_t *)h)[i]);
}

static const char *tname(ncclDataType_t t) { return t == ncclFloat32 ? "fp32" : t == ncclBfloat16 ? "bf16" : "fp16"; }

/* A device buffer of n elements holding rank r's values from element `from` on. */
static void *upload(ncclDataType_t t, size_t n, int r)
{
    void *h = malloc(n * esize(t)), *d = NULL;
    for (size_t i = 0; i < n; i++)
        put(h, t, i, value(r, i));
    cudaMalloc(&d, n * esize(t));
    cudaMemcpyAsync(d, h, n * esize(t), cudaMemcpyHostToDevice, stream);
    cudaStreamSynchronize(stream);
    free(h);
    return d;
}

static void *download(const void *d, ncclDataType_t t, size_t n)
{
    void *h = malloc(n * esize(t));
    cudaMemcpyAsync(h, d, n * esize(t), cudaMemcpyDeviceToHost, stream); /* in order after the collective */
    cudaStreamSynchronize(stream);
    return h;
}

static void collectives(ncclComm_t comm, ncclDataType_t t, size_t n)
{
    /* All-reduce: out of place, then in place. */
    void *s = upload(t, n, rank), *r = NULL;
    cudaMalloc(&r, n * esize(t));
    is(ncclAllReduce(s, r, n, t, ncclSum, comm, stream), ncclSuccess, "ncclAllReduce");
    void *h = download(r, t, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < nranks; q++)
            want += value(q, i);
        bad += get(h, t, i) != want;
    }
    check(bad == 0, "all-reduce %s of %zu: every element the sum over ranks (%zu wrong)", tname(t), n, bad);
    free(h);
    is(ncclAllReduce(s, s, n, t, ncclSum, comm, stream), ncclSuccess, "ncclAllReduce in place");
    h = download(s, t, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < nranks; q++)
            want += value(q, i);
        bad += get(h, t, i) != want;
    }
    check(bad == 0, "all-reduce %s in place (%zu wrong)", tname(t), bad);
    free(h);
    cudaFree(s);
    cudaFree(r);

    /* Reduce-scatter: rank r gets block r of the sum; then in place. */
    s = upload(t, n * nranks, rank);
    cudaMalloc(&r, n * esize(t));
    is(ncclReduceScatter(s, r, n, t, ncclSum, comm, stream), ncclSuccess, "ncclReduceScatter");
    h = download(r, t, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < nranks; q++)
            want += value(q, (size_t)rank * n + i);
        bad += get(h, t, i) != want;
    }
    check(bad == 0, "reduce-scatter %s: each rank its block of the sum (%zu wrong)", tname(t), bad);
    free(h);
    char *own = (char *)s + (size_t)rank * n * esize(t);
    is(ncclReduceScatter(s, own, n, t, ncclSum, comm, stream), ncclSuccess, "ncclReduceScatter in place");
    h = download(own, t, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < nranks; q++)
            want += value(q, (size_t)rank * n + i);
        bad += get(h, t, i) != want;
    }
    check(bad == 0, "reduce-scatter %s in place (%zu wrong)", tname(t), bad);
    free(h);
    cudaFree(s);
    cudaFree(r);

    /* All-gather: every rank gets every rank's block; then in place. */
    s = upload(t, n, rank);
    cudaMalloc(&r, n * nranks * esize(t));
    is(ncclAllGather(s, r, n, t, comm, stream), ncclSuccess, "ncclAllGather");
    h = download(r, t, n * nranks);
    bad = 0;
    for (int q = 0; q < nranks; q++)
        for (size_t i = 0; i < n; i++)
            bad += get(h, t, (size_t)q * n + i) != value(q, i);
    check(bad == 0, "all-gather %s: every rank's block in rank order (%zu wrong)", tname(t), bad);
    free(h);
    cudaMemcpyAsync((char *)r + (size_t)rank * n * esize(t), s, n * esize(t), cudaMemcpyDeviceToDevice, stream);
    cudaMemsetAsync(s, 0, n * esize(t), stream);
    is(ncclAllGather((char *)r + (size_t)rank * n * esize(t), r, n, t, comm, stream), ncclSuccess,
       "ncclAllGather in place");
    h = download(r, t, n * nranks);
    bad = 0;
    for (int q = 0; q < nranks; q++)
        for (size_t i = 0; i < n; i++)
            bad += get(h, t, (size_t)q * n + i) != value(q, i);
    check(bad == 0, "all-gather %s in place (%zu wrong)", tname(t), bad);
    free(h);
    cudaFree(s);
    cudaFree(r);

    /* Broadcast from the last rank, out of place and in place. */
    const int root = nranks - 1;
    s = upload(t, n, rank);
    cudaMalloc(&r, n * esize(t));
    is(ncclBroadcast(s, r, n, t, root, comm, stream), ncclSuccess, "ncclBroadcast");
    h = download(r, t, n);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += get(h, t, i) != value(root, i);
    check(bad == 0, "broadcast %s from rank %d (%zu wrong)", tname(t), root, bad);
    free(h);
    is(ncclBroadcast(s, s, n, t, root, comm, stream), ncclSuccess, "ncclBroadcast in place");
    h = download(s, t, n);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += get(h, t, i) != value(root, i);
    check(bad == 0, "broadcast %s in place (%zu wrong)", tname(t), bad);
    free(h);
    cudaFree(s);
    cudaFree(r);
}

static void misuse(ncclComm_t comm)
{
    float *d = NULL, host[16];
    cudaMalloc((void **)&d, 64 * sizeof(float));
    is(ncclAllReduce(d, d, 65, ncclFloat32, ncclSum, comm, stream), ncclInvalidArgument,
       "an all-reduce of 65 floats over a 64-float buffer");
    is(ncclAllReduce(host, host, 16, ncclFloat32, ncclSum, comm, stream), ncclInvalidArgument,
       "an all-reduce of host memory");
    is(ncclAllReduce(d, d, 16, ncclFloat32, ncclMax, comm, stream), ncclInvalidArgument, "ncclMax (not in the subset)");
    is(ncclAllReduce(d, d, 16, ncclInt8, ncclSum, comm, stream), ncclInvalidArgument, "ncclInt8 (not in the subset)");
    is(ncclAllReduce(d, d + 8, 16, ncclFloat32, ncclSum, comm, stream), ncclInvalidArgument,
       "overlapping buffers that are not in place");
    is(ncclBroadcast(d, d, 16, ncclFloat32, nranks, comm, stream), ncclInvalidArgument, "a root beyond the ranks");
    is(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    cudaFree(d);
}

/* A fresh unique id from rank 0, on every rank. */
static ncclUniqueId fresh_id(void)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0)
        ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    return id;
}

/* ncclCommInitRankConfig: blocking, non-blocking (polled until up: no
 * collective of MPI_COMM_WORLD may run meanwhile), and refused configs. */
static void configured(void)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t comm = NULL;
    ncclUniqueId id = fresh_id();
    config.blocking = 1;
    is(ncclCommInitRankConfig(&comm, nranks, id, rank, &config), ncclSuccess, "a blocking ncclCommInitRankConfig");
    ncclResult_t async = ncclInternalError;
    ncclCommGetAsyncError(comm, &async);
    check(async == ncclSuccess, "... is up when it returns (%s)", ncclGetErrorString(async));
    is(ncclCommDestroy(comm), ncclSuccess, "... and destroyed");

    id = fresh_id();
    config.blocking = 0;
    ncclResult_t started = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    int polls = 0;
    async = ncclInProgress;
    while (comm && ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclInProgress && polls < 100000) {
        polls++;
        struct timespec nap = {0, 100000};
        nanosleep(&nap, NULL);
    }
    check(started == ncclInProgress && comm != NULL, "a non-blocking start returns ncclInProgress at once, with the "
          "communicator (%s)", ncclGetErrorString(started));
    check(async == ncclSuccess, "... whose asynchronous error becomes ncclSuccess (%s, after %d polls)",
          ncclGetErrorString(async), polls);
    float *a = upload(ncclFloat32, 10, rank);
    is(ncclAllReduce(a, a, 10, ncclFloat32, ncclSum, comm, stream), ncclInProgress,
       "its first all-reduce (NCCL connects meanwhile)");
    ncclCommGetAsyncError(comm, &async);
    ncclResult_t after = ncclInternalError;
    ncclCommGetAsyncError(comm, &after);
    check(async == ncclInProgress && after == ncclSuccess, "... is in progress for one poll, then done (%s, %s)",
          ncclGetErrorString(async), ncclGetErrorString(after));
    is(ncclAllReduce(a, a, 10, ncclFloat32, ncclSum, comm, stream), ncclSuccess, "a second all-reduce on it");
    float *ha = download(a, ncclFloat32, 10);
    float want = 0;
    for (int q = 0; q < nranks; q++)
        want += value(q, 4);
    want *= (float)nranks; /* summed twice: the first sum went round again */
    check(ha[4] == want, "... both sum (%g, want %g)", (double)ha[4], (double)want);
    free(ha);
    cudaFree(a);
    is(ncclCommDestroy(comm), ncclSuccess, "... and it is destroyed");

    ncclConfig_t raw;
    memset(&raw, 0, sizeof raw);
    is(ncclCommInitRankConfig(&comm, nranks, id, rank, &raw), ncclInvalidArgument,
       "a config not made with NCCL_CONFIG_INITIALIZER is refused");
    config.blocking = 5;
    is(ncclCommInitRankConfig(&comm, nranks, id, rank, &config), ncclInvalidArgument, "config.blocking 5 is refused");
}

int main(int argc, char **argv)
{
    int provided = 0;
    const bool serialized = argc > 1 && strcmp(argv[1], "serialized") == 0;
    MPI_Init_thread(&argc, &argv, serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    cudaSetDevice(0);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (rank == 0)
        printf("# %d ranks, MPI thread level %d of %d\n", nranks, provided, MPI_THREAD_MULTIPLE);
    int v = 0;
    is(ncclGetVersion(&v), ncclSuccess, "ncclGetVersion");
    check(v == NCCL_VERSION_CODE, "the version is the header's, %d", v);
    check(strlen(ncclGetErrorString(ncclInvalidUsage)) > 0, "ncclGetErrorString says something");
    ncclUniqueId id;
    if (rank == 0)
        is(ncclGetUniqueId(&id), ncclSuccess, "ncclGetUniqueId");
    else
        check(1, "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm = NULL;
    if (!is(ncclCommInitRank(&comm, nranks, id, rank), ncclSuccess, "ncclCommInitRank")) {
        MPI_Finalize();
        return 1;
    }
    /* Odd sizes (not a multiple of anything), a large one (several MPI chunks). */
    const ncclDataType_t types[3] = {ncclFloat32, ncclBfloat16, ncclFloat16};
    for (int k = 0; k < 3; k++)
        collectives(comm, types[k], 1001);
    collectives(comm, ncclFloat32, (size_t)5 << 20);

    /* A group: two all-reduces launched together at its end. */
    void *a = upload(ncclFloat32, 300, rank), *b = upload(ncclBfloat16, 200, rank);
    is(ncclGroupStart(), ncclSuccess, "ncclGroupStart");
    is(ncclAllReduce(a, a, 300, ncclFloat32, ncclSum, comm, stream), ncclSuccess, "an all-reduce in a group");
    is(ncclAllReduce(b, b, 200, ncclBfloat16, ncclSum, comm, stream), ncclSuccess, "another in the group");
    is(ncclGroupEnd(), ncclSuccess, "ncclGroupEnd");
    float *ha = download(a, ncclFloat32, 300);
    uint16_t *hb = download(b, ncclBfloat16, 200);
    size_t bad = 0;
    for (size_t i = 0; i < 300; i++) {
        float want = 0;
        for (int q = 0; q < nranks; q++)
            want += value(q, i);
        bad += ha[i] != want || (i < 200 && get(hb, ncclBfloat16, i) != want);
    }
    check(bad == 0, "both collectives of the group ran (%zu wrong)", bad);
    free(ha), free(hb);
    cudaFree(a), cudaFree(b);

    misuse(comm);
    ncclResult_t async = ncclInternalError;
    is(ncclCommGetAsyncError(comm, &async), ncclSuccess, "ncclCommGetAsyncError");
    check(async == ncclSuccess, "no asynchronous error so far (%s)", ncclGetErrorString(async));
    /* Ranks that disagree: rank 0 reduces 8 elements, the others 16. */
    float *d = NULL;
    cudaMalloc((void **)&d, 64 * sizeof(float));
    cudaMemsetAsync(d, 0, 64 * sizeof(float), stream);
    is(ncclAllReduce(d, d, rank == 0 ? 8 : 16, ncclFloat32, ncclSum, comm, stream), ncclSuccess,
       "an all-reduce whose count differs between ranks is accepted locally");
    cudaStreamSynchronize(stream);
    ncclCommGetAsyncError(comm, &async);
    check(async == ncclInvalidUsage, "... and every rank's communicator reports ncclInvalidUsage (%s)",
          ncclGetErrorString(async));
    cudaFree(d);
    is(ncclCommAbort(comm), ncclSuccess, "ncclCommAbort of the failed communicator");

    /* A fresh communicator, destroyed normally. */
    if (rank == 0)
        ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    is(ncclCommInitRank(&comm, nranks, id, rank), ncclSuccess, "a second ncclCommInitRank");
    a = upload(ncclFloat32, 10, rank);
    is(ncclAllReduce(a, a, 10, ncclFloat32, ncclSum, comm, stream), ncclSuccess, "an all-reduce before destroy");
    is(ncclCommDestroy(comm), ncclSuccess, "ncclCommDestroy waits for it");
    ha = download(a, ncclFloat32, 10);
    float want = 0;
    for (int q = 0; q < nranks; q++)
        want += value(q, 3);
    check(ha[3] == want, "and its result is there (%g, want %g)", (double)ha[3], (double)want);
    free(ha);
    cudaFree(a);
    is(ncclCommDestroy(comm), ncclInvalidArgument, "destroying it twice");
    configured();
    cudaStreamDestroy(stream);
    if (rank == 0) {
        printf("1..%d\n", tap_n);
        fflush(stdout);
    }
    MPI_Finalize();
    return tap_failed ? 1 : 0;
}
