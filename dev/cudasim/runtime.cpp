/* The CUDA runtime API of the simulated device, the subset ferry calls plus
 * its close neighbours: the device and its properties (from the limits
 * table, arch.cpp), errors with CUDA's two kinds (the calling thread's last
 * error, which cudaGetLastError returns and clears; sticky errors, which a
 * kernel fault sets for the whole process and which every later call
 * returns), copies and memsets checked against what each pointer is
 * (memory.cpp) and the direction asked, symbol copies, function attributes,
 * and fault injection (FERRY_CUDASIM_FAIL=name:N[*][:code],... or
 * cudasim_fail()). Streams, events and host functions are stream.cpp's,
 * launches launch.cpp's. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>

#include "cudasim.h"
#include "sim.h"

namespace cudasim {

namespace {

std::mutex g_err_mu;
cudaError_t g_sticky = cudaSuccess;
std::string g_sticky_msg;
thread_local cudaError_t tl_last = cudaSuccess;
int g_device_flags = 0;
thread_local int tl_device = 0;

struct fault {
    std::string fn;
    long countdown; /* calls left before the first failure */
    bool repeat;
    int code;
};
std::mutex g_fault_mu;
std::vector<fault> g_faults;
bool g_faults_read = false;

int default_fault_code(const std::string &fn)
{
    if (fn == "cudaEventQuery" || fn == "cudaStreamQuery")
        return cudaErrorNotReady;
    if (fn == "cudaMalloc" || fn == "cudaHostAlloc" || fn == "cudaMallocHost" || fn == "cudaHostRegister")
        return cudaErrorMemoryAllocation;
    if (fn.compare(0, 6, "cublas") == 0)
        return 3; /* CUBLAS_STATUS_ALLOC_FAILED */
    if (fn.compare(0, 4, "nccl") == 0)
        return 2; /* ncclSystemError */
    return cudaErrorUnknown;
}

void read_fault_env()
{
    if (g_faults_read)
        return;
    g_faults_read = true;
    const char *v = getenv("FERRY_CUDASIM_FAIL");
    if (!v || !*v)
        return;
    std::string s(v);
    size_t at = 0;
    while (at < s.size()) {
        size_t end = s.find(',', at);
        std::string item = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
        at = end == std::string::npos ? s.size() : end + 1;
        size_t c1 = item.find(':');
        if (c1 == std::string::npos) {
            fprintf(stderr, "cudasim: FERRY_CUDASIM_FAIL item '%s' is not name:N[*][:code]\n", item.c_str());
            exit(2);
        }
        fault f;
        f.fn = item.substr(0, c1);
        std::string rest = item.substr(c1 + 1);
        char *e = nullptr;
        long n = strtol(rest.c_str(), &e, 10);
        if (n < 1) {
            fprintf(stderr, "cudasim: FERRY_CUDASIM_FAIL item '%s': N counts from 1\n", item.c_str());
            exit(2);
        }
        f.repeat = *e == '*';
        if (f.repeat)
            e++;
        f.code = *e == ':' ? atoi(e + 1) : default_fault_code(f.fn);
        f.countdown = n - 1;
        g_faults.push_back(f);
    }
}

const struct {
    cudaError_t e;
    const char *name, *text;
} error_table[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidSymbol, "cudaErrorInvalidSymbol", "invalid device symbol"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorNoKernelImageForDevice, "cudaErrorNoKernelImageForDevice",
     "no kernel image is available for execution on the device"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorMisalignedAddress, "cudaErrorMisalignedAddress", "misaligned address"},
    {cudaErrorIllegalInstruction, "cudaErrorIllegalInstruction", "an illegal instruction was encountered"},
    {cudaErrorAssert, "cudaErrorAssert", "device-side assert triggered"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

bool is_sticky(cudaError_t e)
{
    return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure || e == cudaErrorMisalignedAddress ||
           e == cudaErrorIllegalInstruction || e == cudaErrorAssert || e == cudaErrorNoKernelImageForDevice;
}

std::atomic<uint64_t> g_host_waits{0}, g_spin_waits{0};

} // namespace

cudaError_t fail(cudaError_t e)
{
    tl_last = e;
    return e;
}

cudaError_t fail_msg(cudaError_t e, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    diag("%s (%s)", buf, cudaGetErrorName(e));
    return fail(e);
}

void set_sticky(cudaError_t e, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::lock_guard<std::mutex> g(g_err_mu);
    if (g_sticky != cudaSuccess)
        return;
    g_sticky = is_sticky(e) ? e : cudaErrorLaunchFailure;
    g_sticky_msg = buf;
    diag("%s: %s; every CUDA call from now on returns %s", cudaGetErrorName(g_sticky), buf,
         cudaGetErrorName(g_sticky));
}

cudaError_t sticky()
{
    std::lock_guard<std::mutex> g(g_err_mu);
    return g_sticky;
}

cudaError_t api_enter(const char *name)
{
    if (on_callback_thread())
        return fail_msg(cudaErrorNotPermitted,
                        "%s was called from a host function (cudaLaunchHostFunc), where CUDA forbids API calls",
                        name);
    if (settings().no_device)
        return fail(cudaErrorInsufficientDriver);
    cudaError_t s = sticky();
    if (s != cudaSuccess)
        return fail(s);
    {
        std::lock_guard<std::mutex> g(g_fault_mu);
        read_fault_env();
        for (fault &f : g_faults) {
            if (f.fn != name)
                continue;
            if (f.countdown > 0) {
                f.countdown--;
                continue;
            }
            int code = f.code;
            if (!f.repeat)
                f.fn.clear();
            diag("%s fails as injected (code %d)", name, code);
            return fail((cudaError_t)code); /* a failing call is the thread's last error, as on CUDA */
        }
    }
    return cudaSuccess;
}

/* The same for cuBLASLt and NCCL, whose errors are their own. */
int injected_fault(const char *name)
{
    std::lock_guard<std::mutex> g(g_fault_mu);
    read_fault_env();
    for (fault &f : g_faults) {
        if (f.fn != name)
            continue;
        if (f.countdown > 0) {
            f.countdown--;
            continue;
        }
        int code = f.code;
        if (!f.repeat)
            f.fn.clear();
        diag("%s fails as injected (code %d)", name, code);
        return code;
    }
    return 0;
}

void note_host_wait(bool blocking)
{
    g_host_waits++;
    if (!blocking && !(g_device_flags & cudaDeviceScheduleBlockingSync))
        g_spin_waits++;
}

} // namespace cudasim

using namespace cudasim;

extern "C" {

const char *cudaGetErrorString(cudaError_t e)
{
    for (const auto &x : error_table)
        if (x.e == e)
            return x.text;
    return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t e)
{
    for (const auto &x : error_table)
        if (x.e == e)
            return x.name;
    return "cudaErrorUnknown";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t s = sticky();
    if (s != cudaSuccess)
        return s;
    cudaError_t e = tl_last;
    tl_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    cudaError_t s = sticky();
    return s != cudaSuccess ? s : tl_last;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v)
        return fail(cudaErrorInvalidValue);
    *v = settings().no_device ? 0 : CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v)
        return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    if (!n)
        return fail(cudaErrorInvalidValue);
    *n = 0;
    cudaError_t e = api_enter("cudaGetDeviceCount");
    if (e != cudaSuccess)
        return e;
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    cudaError_t e = api_enter("cudaSetDevice");
    if (e != cudaSuccess)
        return e;
    if (d != 0)
        return fail_msg(cudaErrorInvalidDevice, "cudaSetDevice(%d): the simulated machine has one device, 0", d);
    tl_device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    cudaError_t e = api_enter("cudaGetDevice");
    if (e != cudaSuccess)
        return e;
    if (!d)
        return fail(cudaErrorInvalidValue);
    *d = tl_device;
    return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned flags)
{
    cudaError_t e = api_enter("cudaSetDeviceFlags");
    if (e != cudaSuccess)
        return e;
    g_device_flags = (int)flags;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceFlags(unsigned *flags)
{
    cudaError_t e = api_enter("cudaGetDeviceFlags");
    if (e != cudaSuccess)
        return e;
    if (!flags)
        return fail(cudaErrorInvalidValue);
    *flags = (unsigned)g_device_flags;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    cudaError_t e = api_enter("cudaGetDeviceProperties");
    if (e != cudaSuccess)
        return e;
    if (!p)
        return fail(cudaErrorInvalidValue);
    if (d != 0)
        return fail(cudaErrorInvalidDevice);
    const arch_limits &a = arch();
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cudasim sm_%d (%s limits)", a.cc, a.card);
    p->totalGlobalMem = settings().memory_bytes;
    p->sharedMemPerBlock = a.smem_per_block;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->memPitch = 2147483647;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = a.cc / 10;
    p->minor = a.cc % 10;
    p->textureAlignment = 512;
    p->multiProcessorCount = a.sms;
    p->integrated = 0;
    p->canMapHostMemory = 1;
    p->concurrentKernels = 1;
    p->pciBusID = 1;
    p->asyncEngineCount = 2;
    p->unifiedAddressing = 1;
    p->l2CacheSize = 40 << 20;
    p->maxThreadsPerMultiProcessor = a.max_threads_per_sm;
    p->sharedMemPerMultiprocessor = a.smem_per_sm;
    p->regsPerMultiprocessor = 65536;
    p->managedMemory = 1;
    p->sharedMemPerBlockOptin = a.smem_per_block_optin;
    p->maxBlocksPerMultiProcessor = 32;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int d)
{
    cudaError_t e = api_enter("cudaDeviceGetAttribute");
    if (e != cudaSuccess)
        return e;
    if (!value)
        return fail(cudaErrorInvalidValue);
    if (d != 0)
        return fail(cudaErrorInvalidDevice);
    const arch_limits &a = arch();
    switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)a.smem_per_block_optin; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)a.smem_per_block; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = (int)a.smem_per_sm; break;
    case cudaDevAttrMultiProcessorCount: *value = a.sms; break;
    case cudaDevAttrComputeCapabilityMajor: *value = a.cc / 10; break;
    case cudaDevAttrComputeCapabilityMinor: *value = a.cc % 10; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxBlockDimX: *value = 1024; break;
    case cudaDevAttrMaxBlockDimY: *value = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *value = 64; break;
    case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
    case cudaDevAttrMaxGridDimY: *value = 65535; break;
    case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = a.max_threads_per_sm; break;
    default:
        return fail_msg(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute %d is not simulated", (int)attr);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int d)
{
    cudaError_t e = api_enter("cudaDeviceGetPCIBusId");
    if (e != cudaSuccess)
        return e;
    if (!id || len <= 0)
        return fail(cudaErrorInvalidValue);
    if (d != 0)
        return fail(cudaErrorInvalidDevice);
    snprintf(id, (size_t)len, "0000:01:00.0");
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    cudaError_t e = api_enter("cudaMemGetInfo");
    if (e != cudaSuccess)
        return e;
    if (!free_bytes || !total)
        return fail(cudaErrorInvalidValue);
    uint64_t used = device_bytes_in_use(nullptr) + software_bytes();
    *total = settings().memory_bytes;
    *free_bytes = used < *total ? *total - used : 0;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    cudaError_t e = api_enter("cudaFuncSetAttribute");
    if (e != cudaSuccess)
        return e;
    if (!func)
        return fail(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout)
        return value >= -1 && value <= 100 ? cudaSuccess : fail(cudaErrorInvalidValue);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return fail_msg(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute %d is not simulated", (int)attr);
    return func_set_max_dynamic_smem(func, value);
}

/* ---- the simulator's own controls (cudasim.h) ---- */

void cudasim_get_stats(cudasim_stats *out)
{
    memset(out, 0, sizeof *out);
    out->launches = stat_counter(0);
    out->launch_refusals = stat_counter(1);
    out->blocks = stat_counter(2);
    out->host_funcs = stat_counter(3);
    out->matmuls = stat_counter(4);
    out->collectives = stat_counter(5);
    out->host_waits = g_host_waits.load();
    out->spin_waits = g_spin_waits.load();
    out->device_bytes = device_bytes_in_use(&out->device_peak);
}

const char *cudasim_last_failure(void)
{
    static thread_local std::string copy;
    std::lock_guard<std::mutex> g(g_err_mu);
    copy = g_sticky_msg;
    return copy.c_str();
}

int cudasim_arch(void) { return settings().arch; }

int cudasim_set_arch(int cc)
{
    const arch_limits *a = arch_find(cc);
    if (!a)
        return -1;
    wait_all_streams();
    bool default_memory = settings().memory_bytes == arch().memory_bytes;
    settings().arch = cc;
    if (default_memory)
        settings().memory_bytes = a->memory_bytes;
    return 0;
}

int cudasim_set_schedule(const char *kind, uint64_t seed)
{
    schedule_kind k;
    if (!kind || !parse_schedule(kind, &k))
        return -1;
    wait_all_streams();
    settings().schedule = k;
    settings().seed = seed;
    return 0;
}

int cudasim_set_shared_check(const char *kind)
{
    shared_check_kind k;
    if (!kind || !parse_shared_check(kind, &k))
        return -1;
    wait_all_streams();
    settings().shared_check = k;
    return 0;
}

void cudasim_set_delay(unsigned max_us, uint64_t seed)
{
    wait_all_streams();
    settings().delay_us = max_us;
    settings().seed = seed;
}

void cudasim_fail(const char *function, int nth, int repeat, int code)
{
    std::lock_guard<std::mutex> g(g_fault_mu);
    read_fault_env();
    if (!function) {
        g_faults.clear();
        return;
    }
    g_faults.push_back(fault{function, nth > 1 ? nth - 1 : 0, repeat != 0, code});
}

void cudasim_reset_errors(void)
{
    {
        std::lock_guard<std::mutex> g(g_err_mu);
        g_sticky = cudaSuccess;
        g_sticky_msg.clear();
    }
    wait_all_streams();
    tl_last = cudaSuccess;
}

} /* extern "C" */
