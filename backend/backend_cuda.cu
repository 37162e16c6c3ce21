/* The cuda backend: CUDA streams and events, cudaMemcpyAsync, page-locked
 * host memory, and host functions through cudaLaunchHostFunc. Device memory
 * comes from cudaMalloc in a few large pieces (the engine's arena sub-divides
 * them), so the budget is the engine's, not the CUDA caching allocator's.
 * Opening it tells "no GPU here" (FERRY_ERR_UNSUPPORTED) from a GPU that
 * cannot start (FERRY_ERR_BACKEND), and refuses a card below sm_70 or one
 * this build carries no code for. Tensors are bf16 from sm_80, fp16 on
 * sm_70 and sm_75 (whose tensor cores have no bf16: bf16 is refused there). */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ferry_cuda_build.h" /* FERRY_CUDA_ARCHS, FERRY_CUDA_PTX_ARCH: meson's gpu_archs */
#include "backend/backend_cuda.h"
#include "backend/backend_impl.h"
#include "backend/comm_impl.h"
#include "backend/cuda_check.h"

namespace {

struct cuda_backend {
    int device;
};

struct cuda_stream {
    cudaStream_t stream;
    cudaEvent_t drained; /* blocking-sync: what a host wait for the stream waits on */
    pthread_mutex_t lock; /* guards the error a host function may set */
    ferry_status error;
    char error_message[ERR_MESSAGE_MAX];
};

struct cuda_event {
    cudaEvent_t event;
};

struct host_call {
    backend_host_fn fn;
    cuda_stream *stream;
    size_t args_size;
    /* the caller's arguments follow, 16-byte aligned */
};

int device_of(backend *be) { return static_cast<cuda_backend *>(be->impl)->device; }

ferry_status use_device(backend *be)
{
    CUDA_CHECK(cudaSetDevice(device_of(be)));
    return FERRY_OK;
}

void cuda_close(backend *be) { free(be->impl); }

ferry_status cuda_mem_info(backend *be, uint64_t *free_bytes, uint64_t *total_bytes)
{
    ferry_status st = use_device(be);
    if (st != FERRY_OK)
        return st;
    size_t f = 0, t = 0;
    CUDA_CHECK(cudaMemGetInfo(&f, &t));
    *free_bytes = f;
    *total_bytes = t;
    return FERRY_OK;
}

ferry_status cuda_alloc(backend *be, size_t bytes, void **out)
{
    ferry_status st = use_device(be);
    if (st != FERRY_OK)
        return st;
    cudaError_t rc = cudaMalloc(out, bytes);
    if (rc == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return err_set(FERRY_ERR_OUT_OF_MEMORY,
                       "cudaMalloc of %zu bytes failed: the GPU is out of memory (another process may "
                       "hold it; check nvidia-smi, or lower the device budget)",
                       bytes);
    }
    CUDA_CHECK(rc);
    return FERRY_OK;
}

void cuda_free(backend *be, void *ptr)
{
    (void)be;
    cudaFree(ptr);
}

ferry_status cuda_host_alloc(backend *be, size_t bytes, void **out)
{
    (void)be;
    cudaError_t rc = cudaHostAlloc(out, bytes, cudaHostAllocPortable);
    if (rc == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cudaHostAlloc of %zu bytes of pinned memory failed", bytes);
    }
    CUDA_CHECK(rc);
    return FERRY_OK;
}

void cuda_host_free(backend *be, void *ptr)
{
    (void)be;
    cudaFreeHost(ptr);
}

ferry_status cuda_host_register(backend *be, void *ptr, size_t bytes)
{
    (void)be;
    cudaError_t rc = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable);
    if (rc != cudaSuccess) {
        /* A refusal (memlock limit, a mapping CUDA cannot pin) is reported
         * here; left set, the next launch check would blame a kernel. */
        cudaGetLastError();
        return err_set(FERRY_ERR_BACKEND, "cudaHostRegister of %zu bytes failed: %s (code %d)", bytes,
                       cudaGetErrorString(rc), (int)rc);
    }
    return FERRY_OK;
}

void cuda_host_unregister(backend *be, void *ptr)
{
    (void)be;
    cudaHostUnregister(ptr);
}

ferry_status cuda_stream_create(backend_stream *s)
{
    ferry_status st = use_device(s->be);
    if (st != FERRY_OK)
        return st;
    cuda_stream *cs = static_cast<cuda_stream *>(calloc(1, sizeof *cs));
    if (!cs)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "stream '%s': out of host memory", s->name);
    cudaError_t rc = cudaStreamCreateWithFlags(&cs->stream, cudaStreamNonBlocking);
    if (rc != cudaSuccess) {
        free(cs);
        CUDA_CHECK(rc);
    }
    rc = cudaEventCreateWithFlags(&cs->drained, cudaEventBlockingSync | cudaEventDisableTiming);
    if (rc != cudaSuccess) {
        cudaStreamDestroy(cs->stream);
        free(cs);
        CUDA_CHECK(rc);
    }
    pthread_mutex_init(&cs->lock, NULL);
    s->impl = cs;
    return FERRY_OK;
}

ferry_status take_host_error(backend_stream *s)
{
    cuda_stream *cs = static_cast<cuda_stream *>(s->impl);
    pthread_mutex_lock(&cs->lock);
    ferry_status st = cs->error;
    char message[ERR_MESSAGE_MAX];
    memcpy(message, cs->error_message, sizeof message);
    cs->error = FERRY_OK;
    cs->error_message[0] = '\0';
    pthread_mutex_unlock(&cs->lock);
    if (st != FERRY_OK)
        return err_set(st, "on stream '%s': %s", s->name, message);
    return FERRY_OK;
}

/* cudaStreamSynchronize spins a core unless the whole device was set to
 * blocking sync (a process-wide flag ferry must not impose on an embedder):
 * the wait is on a blocking-sync event recorded at the stream's end. */
cudaError_t wait_stream(cuda_stream *cs)
{
    cudaError_t rc = cudaEventRecord(cs->drained, cs->stream);
    return rc == cudaSuccess ? cudaEventSynchronize(cs->drained) : rc;
}

/* A wait while collectives are open: the GPU may be waiting for a rank
 * that died, so poll, and let the collectives' check end the wait
 * (backend.comm_poll aborts the communicators, which ends their kernels).
 * Work that completed after such an abort holds what the aborted
 * collectives left: the wait returns the failure then too. */
ferry_status poll_until_done(backend *be, cudaError_t (*query)(void *), void *handle)
{
    double t0 = comm_now_s();
    long nap_ns = 10000;
    for (;;) {
        cudaError_t rc = query(handle);
        if (rc != cudaErrorNotReady) {
            CUDA_CHECK(rc);
            ferry_status (*poll)(backend *, double) = be->comm_poll;
            return poll ? poll(be, comm_now_s() - t0) : FERRY_OK;
        }
        cudaGetLastError(); /* "not yet" is no error */
        ferry_status (*poll)(backend *, double) = be->comm_poll;
        ferry_status st = poll ? poll(be, comm_now_s() - t0) : FERRY_OK;
        if (st != FERRY_OK)
            return st;
        struct timespec nap = {0, nap_ns};
        nanosleep(&nap, NULL);
        if (nap_ns < 1000000)
            nap_ns *= 2;
    }
}

cudaError_t query_stream(void *h) { return cudaStreamQuery(static_cast<cudaStream_t>(h)); }
cudaError_t query_event(void *h) { return cudaEventQuery(static_cast<cudaEvent_t>(h)); }

ferry_status cuda_stream_synchronize(backend_stream *s)
{
    cuda_stream *cs = static_cast<cuda_stream *>(s->impl);
    if (s->be->comm_poll) {
        ferry_status st = poll_until_done(s->be, query_stream, cs->stream);
        if (st != FERRY_OK)
            return st;
    }
    CUDA_CHECK(wait_stream(cs));
    return take_host_error(s);
}

void cuda_stream_destroy(backend_stream *s)
{
    cuda_stream *cs = static_cast<cuda_stream *>(s->impl);
    wait_stream(cs);
    cudaEventDestroy(cs->drained);
    cudaStreamDestroy(cs->stream);
    pthread_mutex_destroy(&cs->lock);
    free(cs);
}

void *cuda_stream_native(const backend_stream *s)
{
    return static_cast<cuda_stream *>(s->impl)->stream;
}

ferry_status cuda_event_create(backend_event *e)
{
    ferry_status st = use_device(e->be);
    if (st != FERRY_OK)
        return st;
    cuda_event *ce = static_cast<cuda_event *>(calloc(1, sizeof *ce));
    if (!ce)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "backend_event_create: out of host memory");
    /* Host waits block; only events whose time is read keep one. */
    unsigned flags = cudaEventBlockingSync | (e->timed ? 0u : (unsigned)cudaEventDisableTiming);
    cudaError_t rc = cudaEventCreateWithFlags(&ce->event, flags);
    if (rc != cudaSuccess) {
        free(ce);
        CUDA_CHECK(rc);
    }
    e->impl = ce;
    return FERRY_OK;
}

void cuda_event_destroy(backend_event *e)
{
    cuda_event *ce = static_cast<cuda_event *>(e->impl);
    cudaEventDestroy(ce->event);
    free(ce);
}

cudaEvent_t ev(backend_event *e) { return static_cast<cuda_event *>(e->impl)->event; }
cudaStream_t st_of(backend_stream *s) { return static_cast<cuda_stream *>(s->impl)->stream; }

ferry_status cuda_event_record(backend_event *e, backend_stream *s)
{
    CUDA_CHECK(cudaEventRecord(ev(e), st_of(s)));
    return FERRY_OK;
}

ferry_status cuda_stream_wait_event(backend_stream *s, backend_event *e)
{
    CUDA_CHECK(cudaStreamWaitEvent(st_of(s), ev(e), 0));
    return FERRY_OK;
}

ferry_status cuda_event_synchronize(backend_event *e)
{
    if (e->be->comm_poll) {
        ferry_status st = poll_until_done(e->be, query_event, ev(e));
        if (st != FERRY_OK)
            return st;
    }
    CUDA_CHECK(cudaEventSynchronize(ev(e)));
    return FERRY_OK;
}

ferry_status cuda_event_query(backend_event *e, bool *done)
{
    cudaError_t rc = cudaEventQuery(ev(e));
    if (rc == cudaErrorNotReady) {
        cudaGetLastError(); /* "not yet" is no error: the next launch check must not see it */
        *done = false;
        return FERRY_OK;
    }
    CUDA_CHECK(rc);
    *done = true;
    return FERRY_OK;
}

ferry_status cuda_event_elapsed_ms(backend_event *start, backend_event *end, float *ms)
{
    CUDA_CHECK(cudaEventElapsedTime(ms, ev(start), ev(end)));
    return FERRY_OK;
}

ferry_status cuda_memcpy_async(backend_stream *s, void *dst, const void *src, size_t bytes,
                               backend_copy_kind kind)
{
    cudaMemcpyKind k = kind == BACKEND_COPY_H2D   ? cudaMemcpyHostToDevice
                       : kind == BACKEND_COPY_D2H ? cudaMemcpyDeviceToHost
                                                  : cudaMemcpyDeviceToDevice;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, st_of(s)));
    return FERRY_OK;
}

ferry_status cuda_memset_async(backend_stream *s, void *dst, int value, size_t bytes)
{
    CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, st_of(s)));
    return FERRY_OK;
}

const size_t host_call_header = (sizeof(host_call) + 15) / 16 * 16;

void CUDART_CB run_host_call(void *data)
{
    host_call *call = static_cast<host_call *>(data);
    err_clear();
    ferry_status st = call->fn(static_cast<char *>(data) + host_call_header);
    if (st != FERRY_OK) {
        cuda_stream *cs = call->stream;
        pthread_mutex_lock(&cs->lock);
        if (cs->error == FERRY_OK) {
            cs->error = st;
            strncpy(cs->error_message, ferry_last_error(), sizeof cs->error_message - 1);
        }
        pthread_mutex_unlock(&cs->lock);
    }
    free(data);
}

ferry_status cuda_launch_host(backend_stream *s, backend_host_fn fn, const void *args,
                              size_t args_size)
{
    char *data = static_cast<char *>(malloc(host_call_header + args_size));
    if (!data)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "stream '%s': out of host memory for a host call", s->name);
    host_call *call = reinterpret_cast<host_call *>(data);
    call->fn = fn;
    call->stream = static_cast<cuda_stream *>(s->impl);
    call->args_size = args_size;
    if (args_size)
        memcpy(data + host_call_header, args, args_size);
    cudaError_t rc = cudaLaunchHostFunc(st_of(s), run_host_call, data);
    if (rc != cudaSuccess) {
        free(data);
        CUDA_CHECK(rc);
    }
    return FERRY_OK;
}

backend_vtable make_vtable()
{
    backend_vtable vt = {};
    vt.close = cuda_close;
    vt.mem_info = cuda_mem_info;
    vt.alloc = cuda_alloc;
    vt.free = cuda_free;
    vt.host_alloc = cuda_host_alloc;
    vt.host_free = cuda_host_free;
    vt.host_register = cuda_host_register;
    vt.host_unregister = cuda_host_unregister;
    vt.stream_create = cuda_stream_create;
    vt.stream_destroy = cuda_stream_destroy;
    vt.stream_synchronize = cuda_stream_synchronize;
    vt.stream_native = cuda_stream_native;
    vt.event_create = cuda_event_create;
    vt.event_destroy = cuda_event_destroy;
    vt.event_record = cuda_event_record;
    vt.stream_wait_event = cuda_stream_wait_event;
    vt.event_synchronize = cuda_event_synchronize;
    vt.event_query = cuda_event_query;
    vt.event_elapsed_ms = cuda_event_elapsed_ms;
    vt.memcpy_async = cuda_memcpy_async;
    vt.memset_async = cuda_memset_async;
    vt.launch_host = cuda_launch_host;
    return vt;
}

const backend_vtable cuda_vtable = make_vtable();

/* Why no device can be used, as a status: no driver, or a driver with no
 * device, is "no GPU here" (FERRY_ERR_UNSUPPORTED: a GPU test skips); any
 * other answer is a GPU that is there but cannot start (FERRY_ERR_BACKEND: a
 * failure, never a skip). */
ferry_status explain_no_device(cudaError_t rc)
{
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver); /* 0 when no driver is installed */
    cudaRuntimeGetVersion(&runtime);
    cudaGetLastError();
    if (rc == cudaSuccess || rc == cudaErrorNoDevice || (rc == cudaErrorInsufficientDriver && driver == 0))
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "the cuda backend was asked for, but no GPU is visible (%s); use backend FERRY_BACKEND_HOST, "
                       "or check nvidia-smi",
                       driver == 0 ? "no NVIDIA driver" : "the driver sees no device");
    if (rc == cudaErrorInsufficientDriver)
        return err_set(FERRY_ERR_BACKEND,
                       "the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d runtime this "
                       "build uses; update the driver, or build ferry with the toolkit the driver supports",
                       driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    return err_set(FERRY_ERR_BACKEND,
                   "CUDA cannot start: cudaGetDeviceCount failed with %s (code %d); driver CUDA %d.%d, "
                   "runtime %d.%d; check nvidia-smi",
                   cudaGetErrorString(rc), (int)rc, driver / 1000, driver % 1000 / 10, runtime / 1000,
                   runtime % 1000 / 10);
}

/* What this build carries: machine code for these, PTX for the newest. */
const int built_archs[] = {FERRY_CUDA_ARCHS};

/* True when the build has machine code this card runs (same major, minor at
 * most the card's) or PTX it can compile (the card is at least as new). */
bool build_runs_on(int cc)
{
    for (size_t i = 0; i < sizeof built_archs / sizeof built_archs[0]; i++)
        if (built_archs[i] / 10 == cc / 10 && built_archs[i] <= cc)
            return true;
    return cc >= FERRY_CUDA_PTX_ARCH;
}

void format_archs(char *out, size_t cap)
{
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof built_archs / sizeof built_archs[0] && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%ssm_%d", i ? ", " : "", built_archs[i]);
}

} // namespace

extern "C" int backend_cuda_device_count(void)
{
    int n = 0;
    /* Without a driver this is error 35 (insufficient driver) or 100 (no
     * device): both mean "no GPU here", not a failure. */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

/* The GPU a description names: this rank's (comm_world_device), or, where
 * that is refused (two ranks on one GPU), its local rank's share. */
static int rank_device(int count)
{
    int device = 0;
    if (comm_world_device(count, &device) != FERRY_OK) {
        err_clear();
        device = count > 0 ? comm_world_local_rank() % count : 0;
    }
    return device;
}

extern "C" ferry_status backend_cuda_describe(char *name, size_t name_cap, uint64_t *memory_bytes,
                                              char *pci_bus_id, size_t pci_cap)
{
    int count = backend_cuda_device_count();
    if (count == 0)
        return err_set(FERRY_ERR_UNSUPPORTED, "no CUDA device is present (or no driver)");
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, rank_device(count)));
    snprintf(name, name_cap, "%.255s", prop.name);
    *memory_bytes = prop.totalGlobalMem;
    CUDA_CHECK(cudaDeviceGetPCIBusId(pci_bus_id, (int)pci_cap, rank_device(count)));
    return FERRY_OK;
}

extern "C" ferry_status backend_cuda_check_card(const char *name, int major, int minor)
{
    int cc = major * 10 + minor;
    if (cc < BACKEND_CUDA_MIN_CC)
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "the %s is compute capability %d.%d (sm_%d); ferry needs sm_%d or newer (tensor "
                       "cores: fp16 on V100, T4, RTX 20xx and Titan RTX; bf16 too on A100, RTX 30xx, A10, "
                       "RTX 40xx, L4, H100 and later)",
                       name, major, minor, cc, BACKEND_CUDA_MIN_CC);
    if (!build_runs_on(cc)) {
        char archs[128];
        format_archs(archs, sizeof archs);
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "this build of ferry carries machine code for %s and PTX for compute_%d only; the "
                       "%s is compute capability %d.%d (sm_%d): rebuild with -Dgpu_archs=%d (or add %d "
                       "to the list)%s",
                       archs, FERRY_CUDA_PTX_ARCH, name, major, minor, cc, cc, cc,
                       cc < 75 ? ", with a CUDA 12 toolkit (CUDA 13 builds no code for Volta)" : "");
    }
    return FERRY_OK;
}

extern "C" ferry_dtype backend_cuda_default_dtype(int major, int minor)
{
    return major * 10 + minor >= BACKEND_CUDA_BF16_CC ? FERRY_DTYPE_BF16 : FERRY_DTYPE_F16;
}

namespace {

/* The sentence of backend_cuda_check_dtype's refusal of bf16. */
void bf16_refusal(char *out, size_t cap, const char *name, int major, int minor)
{
    snprintf(out, cap,
             "the %.100s is compute capability %d.%d (sm_%d%d), whose tensor cores have no bf16 (it needs "
             "sm_%d: A100, RTX 30xx and later); use dtype f16 (with dynamic loss scaling) or auto, which "
             "picks f16 on this card",
             name, major, minor, major, minor, BACKEND_CUDA_BF16_CC);
}

} // namespace

extern "C" ferry_status backend_cuda_check_dtype(const char *name, int major, int minor, ferry_dtype act)
{
    if (act == FERRY_DTYPE_BF16 && major * 10 + minor < BACKEND_CUDA_BF16_CC) {
        char why[384];
        bf16_refusal(why, sizeof why, name, major, minor);
        return err_set(FERRY_ERR_UNSUPPORTED, "%s", why);
    }
    if (act != FERRY_DTYPE_BF16 && act != FERRY_DTYPE_F16)
        return err_set(FERRY_ERR_UNSUPPORTED, "the %s stores tensors as bf16 or f16, not %s", name, dtype_name(act));
    return FERRY_OK;
}

extern "C" ferry_status backend_cuda_init(backend *be)
{
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count == 0)
        return explain_no_device(rc);
    int device = 0; /* this rank's: one per rank, unless sharing is asked for */
    ferry_status refused = comm_world_device(count, &device);
    if (refused != FERRY_OK)
        return refused;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    ferry_status st = backend_cuda_check_card(prop.name, prop.major, prop.minor);
    if (st != FERRY_OK)
        return st;
    CUDA_CHECK(cudaSetDevice(device));
    cuda_backend *cb = static_cast<cuda_backend *>(calloc(1, sizeof *cb));
    if (!cb)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "backend_open: out of host memory");
    cb->device = device;
    be->impl = cb;
    be->vt = &cuda_vtable;
    be->ops = &backend_cuda_ops;
    be->act = backend_cuda_default_dtype(prop.major, prop.minor);
    if (prop.major * 10 + prop.minor < BACKEND_CUDA_BF16_CC) {
        be->act_refused = 1u << FERRY_DTYPE_BF16;
        bf16_refusal(be->act_refusal, sizeof be->act_refusal, prop.name, prop.major, prop.minor);
    }
    snprintf(be->device_name, sizeof be->device_name, "%.255s (sm_%d%d, %.1f GiB)", prop.name, prop.major,
             prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return FERRY_OK;
}
