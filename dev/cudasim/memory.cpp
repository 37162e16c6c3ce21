/* Memory of the simulated device: a registry of device buffers, pinned and
 * registered host memory, and the copies between them.
 *
 * A device buffer (cudaMalloc) is 256-byte aligned, as a card's are, and sits
 * between two guard zones of 512 bytes or more; its bytes start as 0xff (an
 * fp32, bf16 or fp16 NaN), so a kernel that reads what nobody wrote computes
 * NaN. The guards hold a NaN pattern checked after every kernel and at cudaFree
 * (under AddressSanitizer they are poisoned instead, so the access itself is
 * caught). A freed buffer is filled with 0xff again and kept out of reuse
 * for a while, so a late read finds NaN and a late copy is refused as a use
 * after free. cudaFree waits for the device first, as CUDA's does.
 *
 * Copies check each pointer against the direction asked (cudaErrorInvalidValue
 * for a host pointer where the direction says device, and the reverse), the
 * whole range against its buffer, and follow CUDA's rules for pageable host
 * memory: a host-to-device copy reads the source before the call returns, a
 * device-to-host copy into pageable memory returns when it is done; with
 * pinned or registered memory both are asynchronous. */
#include <sys/mman.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <map>

#include "sim.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUDASIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDASIM_ASAN 1
#endif
#endif
#ifdef CUDASIM_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace cudasim {

namespace {

constexpr size_t GUARD = 512;
/* The guards hold the bytes a5 ff a5 ff ...: a NaN read as fp32, bf16, fp16
 * or fp64 at any even offset, so a stray read computes NaN, and a stray
 * read-modify-write (x += ...) stores a canonical NaN, not this pattern. */
constexpr unsigned char GUARD_BYTE_EVEN = 0xa5, GUARD_BYTE_ODD = 0xff;

inline unsigned char guard_byte(uintptr_t addr) { return addr % 2 ? GUARD_BYTE_ODD : GUARD_BYTE_EVEN; }

void fill_guard(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = guard_byte((uintptr_t)(p + i));
}
constexpr size_t QUARANTINE_BYTES = (size_t)256 << 20;

struct region {
    uintptr_t base;
    size_t bytes;       /* as asked */
    size_t padded;      /* rounded up to 256: the tail is guard too */
    mem_kind kind;
    bool freed;
    char *raw;          /* device buffers: the mapping with the guards */
    size_t raw_bytes;
    bool mapped;        /* raw came from mmap */
};

/* Never destroyed: what it holds stays reachable until the process ends, and
 * stream threads may still use it during exit. */
struct registry {
    std::mutex mu;
    std::map<uintptr_t, region> regions; /* by base */
    std::deque<uintptr_t> quarantine;
    size_t quarantine_bytes = 0;
    uint64_t device_bytes = 0, device_peak = 0;
};
registry &R()
{
    static registry *r = new registry;
    return *r;
}
#define g_mu (R().mu)
#define g_regions (R().regions)
#define g_quarantine (R().quarantine)
#define g_quarantine_bytes (R().quarantine_bytes)
#define g_device_bytes (R().device_bytes)
#define g_device_peak (R().device_peak)

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The region holding p, if any (device guards count as part of it). */
region *find(uintptr_t p)
{
    auto it = g_regions.upper_bound(p);
    while (it != g_regions.begin()) {
        --it;
        region &r = it->second;
        uintptr_t lo = r.kind == MEM_DEVICE ? r.base - GUARD : r.base;
        uintptr_t hi = r.kind == MEM_DEVICE ? r.base + r.padded + GUARD : r.base + r.bytes;
        if (p >= lo && p < hi)
            return &r;
        if (r.kind != MEM_DEVICE || p >= hi)
            return nullptr;
    }
    return nullptr;
}

void release(region &r)
{
#ifdef CUDASIM_ASAN
    ASAN_UNPOISON_MEMORY_REGION(r.raw, r.raw_bytes);
#endif
    if (r.mapped)
        munmap(r.raw, r.raw_bytes);
    else
        free(r.raw);
}

bool guards_intact(const region &r, std::string *where)
{
#ifdef CUDASIM_ASAN
    (void)r;
    (void)where;
    return true; /* ASan watches the poisoned guards itself */
#else
    const unsigned char *lo = reinterpret_cast<const unsigned char *>(r.base) - GUARD;
    const unsigned char *tail = reinterpret_cast<const unsigned char *>(r.base) + r.bytes;
    const size_t tail_bytes = r.padded - r.bytes + GUARD;
    for (size_t i = 0; i < GUARD; i++)
        if (lo[i] != guard_byte((uintptr_t)(lo + i))) {
            char b[160];
            snprintf(b, sizeof b, "%zu bytes before the start", GUARD - i);
            *where = b;
            return false;
        }
    for (size_t i = 0; i < tail_bytes; i++)
        if (tail[i] != guard_byte((uintptr_t)(tail + i))) {
            char b[160];
            snprintf(b, sizeof b, "%zu bytes after the end", i);
            *where = b;
            return false;
        }
    return true;
#endif
}

void poison_guards(region &r)
{
    fill_guard(reinterpret_cast<unsigned char *>(r.base) - GUARD, GUARD);
    fill_guard(reinterpret_cast<unsigned char *>(r.base) + r.bytes, r.padded - r.bytes + GUARD);
#ifdef CUDASIM_ASAN
    ASAN_POISON_MEMORY_REGION(reinterpret_cast<char *>(r.base) - GUARD, GUARD);
    ASAN_POISON_MEMORY_REGION(reinterpret_cast<char *>(r.base) + r.bytes, r.padded - r.bytes + GUARD);
#endif
}

} // namespace

const char *mem_kind_name(mem_kind k)
{
    switch (k) {
    case MEM_DEVICE: return "device memory";
    case MEM_PINNED: return "pinned host memory";
    case MEM_REGISTERED: return "registered host memory";
    case MEM_SYMBOL: return "a __device__ variable";
    default: return "pageable host memory";
    }
}

mem_kind classify(const void *ptr, size_t n, std::string *why)
{
    std::lock_guard<std::mutex> g(g_mu);
    uintptr_t p = (uintptr_t)ptr;
    region *r = find(p);
    if (!r)
        return MEM_PAGEABLE;
    char b[256];
    if (r->kind == MEM_DEVICE) {
        if (r->freed) {
            snprintf(b, sizeof b, "%p lies in a device buffer of %zu bytes that was freed", ptr, r->bytes);
            *why = b;
            return MEM_DEVICE;
        }
        if (p < r->base || p >= r->base + r->bytes) {
            snprintf(b, sizeof b, "%p is outside the device buffer of %zu bytes at %p (%s by %zu bytes)", ptr,
                     r->bytes, (void *)r->base, p < r->base ? "before it" : "past its end",
                     p < r->base ? (size_t)(r->base - p) : (size_t)(p - r->base - r->bytes));
            *why = b;
            return MEM_DEVICE;
        }
        if (n > r->base + r->bytes - p) {
            snprintf(b, sizeof b, "%zu bytes at %p run %zu bytes past the end of the device buffer of %zu bytes "
                     "at %p", n, ptr, (size_t)(p + n - r->base - r->bytes), r->bytes, (void *)r->base);
            *why = b;
        }
        return MEM_DEVICE;
    }
    if (n <= r->base + r->bytes - p)
        return r->kind;
    return MEM_PAGEABLE; /* only partly pinned: CUDA stages it */
}

bool device_range_ok(const void *p, size_t n, std::string *why)
{
    why->clear();
    mem_kind k = classify(p, n, why);
    if (k != MEM_DEVICE && why->empty()) {
        char b[160];
        snprintf(b, sizeof b, "%p is %s, not device memory", p, mem_kind_name(k));
        *why = b;
    }
    return why->empty();
}

void check_guards(const char *after)
{
    std::lock_guard<std::mutex> g(g_mu);
    for (auto &kv : g_regions) {
        region &r = kv.second;
        if (r.kind != MEM_DEVICE || r.freed)
            continue;
        std::string where;
        if (!guards_intact(r, &where)) {
            set_sticky(cudaErrorIllegalAddress, "%s wrote outside the device buffer of %zu bytes at %p (%s)", after,
                       r.bytes, (void *)r.base, where.c_str());
            poison_guards(r); /* report each overrun once */
        }
    }
}

void register_symbol(const void *p, size_t n)
{
    (void)p;
    (void)n;
}

namespace {
std::atomic<uint64_t> g_library_bytes{0};
}

void note_library_bytes(int64_t delta) { g_library_bytes += (uint64_t)delta; }

uint64_t software_bytes() { return settings().context_bytes + g_library_bytes.load(); }

uint64_t device_bytes_in_use(uint64_t *peak)
{
    std::lock_guard<std::mutex> g(g_mu);
    if (peak)
        *peak = g_device_peak;
    return g_device_bytes;
}

} // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaMalloc(void **out, size_t bytes)
{
    cudaError_t e = api_enter("cudaMalloc");
    if (e != cudaSuccess)
        return fail(e);
    if (!out)
        return fail(cudaErrorInvalidValue);
    *out = nullptr;
    if (bytes == 0)
        return cudaSuccess;
    std::unique_lock<std::mutex> g(g_mu);
    if (g_device_bytes + software_bytes() + bytes > settings().memory_bytes)
        return fail(cudaErrorMemoryAllocation);
    region r;
    memset(&r, 0, sizeof r);
    r.kind = MEM_DEVICE;
    r.bytes = bytes;
    r.padded = round_up(bytes, 256);
    r.raw_bytes = r.padded + 2 * GUARD;
    r.mapped = r.raw_bytes >= ((size_t)1 << 20);
    if (r.mapped) {
        void *m = mmap(nullptr, r.raw_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        r.raw = m == MAP_FAILED ? nullptr : static_cast<char *>(m);
    } else {
        r.raw = static_cast<char *>(aligned_alloc(4096, round_up(r.raw_bytes, 4096)));
    }
    if (!r.raw)
        return fail_msg(cudaErrorMemoryAllocation, "cudaMalloc(%zu): the simulator has no host memory for it", bytes);
    r.base = (uintptr_t)(r.raw + GUARD);
    memset(r.raw + GUARD, 0xff, bytes); /* NaN until written */
    poison_guards(r);
    g_regions[r.base] = r;
    g_device_bytes += bytes;
    if (g_device_bytes > g_device_peak)
        g_device_peak = g_device_bytes;
    *out = reinterpret_cast<void *>(r.base);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    cudaError_t e = api_enter("cudaFree");
    if (e != cudaSuccess)
        return fail(e);
    wait_all_streams(); /* cudaFree synchronizes the device */
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_regions.find((uintptr_t)p);
    if (it == g_regions.end() || it->second.kind != MEM_DEVICE)
        return fail_msg(cudaErrorInvalidValue, "cudaFree(%p): not the start of a device buffer", p);
    region &r = it->second;
    if (r.freed)
        return fail_msg(cudaErrorInvalidValue, "cudaFree(%p): the buffer was freed already", p);
    std::string where;
    if (!guards_intact(r, &where))
        set_sticky(cudaErrorIllegalAddress, "found at cudaFree: something wrote outside the device buffer of %zu bytes "
                   "at %p (%s)", r.bytes, p, where.c_str());
    r.freed = true;
    g_device_bytes -= r.bytes;
    memset(p, 0xff, r.bytes);
#ifdef CUDASIM_ASAN
    ASAN_POISON_MEMORY_REGION(r.raw, r.raw_bytes);
#endif
    g_quarantine.push_back(r.base);
    g_quarantine_bytes += r.raw_bytes;
    while (g_quarantine_bytes > QUARANTINE_BYTES && !g_quarantine.empty()) {
        auto q = g_regions.find(g_quarantine.front());
        g_quarantine.pop_front();
        g_quarantine_bytes -= q->second.raw_bytes;
        release(q->second);
        g_regions.erase(q);
    }
    return cudaSuccess;
}

static cudaError_t host_alloc(const char *name, void **out, size_t bytes)
{
    cudaError_t e = api_enter(name);
    if (e != cudaSuccess)
        return fail(e);
    if (!out)
        return fail(cudaErrorInvalidValue);
    *out = nullptr;
    if (bytes == 0)
        return cudaSuccess;
    void *p = aligned_alloc(4096, round_up(bytes, 4096));
    if (!p)
        return fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> g(g_mu);
    region r;
    memset(&r, 0, sizeof r);
    r.base = (uintptr_t)p;
    r.bytes = bytes;
    r.kind = MEM_PINNED;
    r.raw = static_cast<char *>(p);
    g_regions[r.base] = r;
    *out = p;
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **out, size_t bytes, unsigned flags)
{
    (void)flags;
    return host_alloc("cudaHostAlloc", out, bytes);
}

cudaError_t cudaMallocHost(void **out, size_t bytes) { return host_alloc("cudaMallocHost", out, bytes); }

cudaError_t cudaFreeHost(void *p)
{
    if (!p)
        return cudaSuccess;
    cudaError_t e = api_enter("cudaFreeHost");
    if (e != cudaSuccess)
        return fail(e);
    wait_all_streams();
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_regions.find((uintptr_t)p);
    if (it == g_regions.end() || it->second.kind != MEM_PINNED)
        return fail_msg(cudaErrorInvalidValue, "cudaFreeHost(%p): not memory from cudaHostAlloc", p);
    free(it->second.raw);
    g_regions.erase(it);
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags)
{
    (void)flags;
    cudaError_t e = api_enter("cudaHostRegister");
    if (e != cudaSuccess)
        return fail(e);
    if (!p || bytes == 0)
        return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(g_mu);
    uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
    for (auto &kv : g_regions) {
        const region &r = kv.second;
        if (r.freed || r.kind == MEM_SYMBOL)
            continue;
        uintptr_t rlo = r.kind == MEM_DEVICE ? r.base - GUARD : r.base;
        uintptr_t rhi = r.kind == MEM_DEVICE ? r.base + r.padded + GUARD : r.base + r.bytes;
        if (lo < rhi && rlo < hi) {
            if (r.kind == MEM_DEVICE)
                return fail_msg(cudaErrorInvalidValue, "cudaHostRegister(%p, %zu): the range is device memory", p,
                                bytes);
            return fail(cudaErrorHostMemoryAlreadyRegistered);
        }
    }
    region r;
    memset(&r, 0, sizeof r);
    r.base = lo;
    r.bytes = bytes;
    r.kind = MEM_REGISTERED;
    g_regions[r.base] = r;
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
    cudaError_t e = api_enter("cudaHostUnregister");
    if (e != cudaSuccess)
        return fail(e);
    wait_all_streams();
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_regions.find((uintptr_t)p);
    if (it == g_regions.end() || it->second.kind != MEM_REGISTERED)
        return fail(cudaErrorHostMemoryNotRegistered);
    g_regions.erase(it);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    cudaError_t e = api_enter("cudaPointerGetAttributes");
    if (e != cudaSuccess)
        return fail(e);
    if (!a)
        return fail(cudaErrorInvalidValue);
    std::string why;
    mem_kind k = classify(p, 1, &why);
    memset(a, 0, sizeof *a);
    a->type = k == MEM_DEVICE ? cudaMemoryTypeDevice : k == MEM_PAGEABLE ? cudaMemoryTypeUnregistered : cudaMemoryTypeHost;
    a->device = 0;
    a->devicePointer = k == MEM_PAGEABLE ? nullptr : const_cast<void *>(p);
    a->hostPointer = k == MEM_DEVICE ? nullptr : const_cast<void *>(p);
    return cudaSuccess;
}

static const char *kind_name(cudaMemcpyKind k)
{
    switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    default: return "cudaMemcpyDefault";
    }
}

/* Checks one side of a copy; `want_device` is what the direction says. */
static cudaError_t check_side(const char *call, cudaMemcpyKind kind, const char *side, const void *p, size_t n,
                              bool want_device, mem_kind *out)
{
    std::string why;
    mem_kind k = classify(p, n, &why);
    *out = k;
    bool is_device = k == MEM_DEVICE;
    if (!why.empty())
        return fail_msg(cudaErrorInvalidValue, "%s(%s): the %s: %s", call, kind_name(kind), side, why.c_str());
    if (is_device != want_device)
        return fail_msg(cudaErrorInvalidValue, "%s(%s): the %s %p is %s, but the direction says %s memory", call,
                        kind_name(kind), side, p, mem_kind_name(k), want_device ? "device" : "host");
    return cudaSuccess;
}

/* The whole copy: direction, pointers, then the stream. `sym`: the device
 * side is a __device__ variable (symbol copies), whose extent is the caller's. */
static cudaError_t copy(const char *call, void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                        cudaStream_t stream, bool sync, int sym_side)
{
    cudaError_t e = api_enter(call);
    if (e != cudaSuccess)
        return fail(e);
    if ((unsigned)kind > (unsigned)cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection);
    sim_stream *s = stream_of(stream, &e);
    if (!s)
        return fail(e);
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src)
        return fail(cudaErrorInvalidValue);
    std::string why;
    if (kind == cudaMemcpyDefault) {
        bool dd = sym_side == 1 || classify(dst, n, &why) == MEM_DEVICE;
        bool sd = sym_side == 2 || classify(src, n, &why) == MEM_DEVICE;
        kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                  : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    }
    const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    mem_kind dk = MEM_DEVICE, sk = MEM_DEVICE;
    if (sym_side != 1 && (e = check_side(call, kind, "destination", dst, n, dst_dev, &dk)) != cudaSuccess)
        return e;
    if (sym_side != 2 && (e = check_side(call, kind, "source", src, n, src_dev, &sk)) != cudaSuccess)
        return e;
    const bool pageable_src = !src_dev && sk == MEM_PAGEABLE;
    const bool pageable_dst = !dst_dev && dk == MEM_PAGEABLE;
    if (sync || pageable_dst || (pageable_src && kind == cudaMemcpyHostToHost))
        return stream_run_sync(s, call, [=] { memcpy(dst, src, n); });
    if (pageable_src) { /* staged now: the caller may reuse its buffer at once */
        std::shared_ptr<std::vector<char>> staged = std::make_shared<std::vector<char>>(
            static_cast<const char *>(src), static_cast<const char *>(src) + n);
        stream_enqueue(s, stream_op{call, [=] { memcpy(dst, staged->data(), n); }});
        return cudaSuccess;
    }
    const unsigned late = kind == cudaMemcpyHostToDevice ? settings().copy_delay_us : 0;
    stream_enqueue(s, stream_op{call, [=] {
                                    if (late) { /* a slow bus: the bytes land late */
                                        struct timespec ts = {(time_t)(late / 1000000), (long)(late % 1000000) * 1000};
                                        nanosleep(&ts, nullptr);
                                    }
                                    memcpy(dst, src, n);
                                }});
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return copy("cudaMemcpyAsync", dst, src, n, kind, stream, false, 0);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return copy("cudaMemcpy", dst, src, n, kind, 0, true, 0);
}

cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t n, size_t offset,
                                    enum cudaMemcpyKind kind, cudaStream_t stream)
{
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection);
    if (!symbol)
        return fail(cudaErrorInvalidSymbol);
    return copy("cudaMemcpyToSymbolAsync", static_cast<char *>(const_cast<void *>(symbol)) + offset, src, n, kind,
                stream, false, 1);
}

cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t n, size_t offset,
                                      enum cudaMemcpyKind kind, cudaStream_t stream)
{
    if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection);
    if (!symbol)
        return fail(cudaErrorInvalidSymbol);
    return copy("cudaMemcpyFromSymbolAsync", dst, static_cast<const char *>(symbol) + offset, n, kind, stream, false,
                2);
}

cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind)
{
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection);
    return copy("cudaMemcpyToSymbol", static_cast<char *>(const_cast<void *>(symbol)) + offset, src, n, kind, 0, true,
                1);
}

cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t n, size_t offset, enum cudaMemcpyKind kind)
{
    if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection);
    return copy("cudaMemcpyFromSymbol", dst, static_cast<const char *>(symbol) + offset, n, kind, 0, true, 2);
}

static cudaError_t set(const char *call, void *dst, int value, size_t n, cudaStream_t stream, bool sync)
{
    cudaError_t e = api_enter(call);
    if (e != cudaSuccess)
        return fail(e);
    sim_stream *s = stream_of(stream, &e);
    if (!s)
        return fail(e);
    if (n == 0)
        return cudaSuccess;
    std::string why;
    if (!device_range_ok(dst, n, &why))
        return fail_msg(cudaErrorInvalidValue, "%s(%p, %d, %zu): %s", call, dst, value, n, why.c_str());
    if (sync)
        return stream_run_sync(s, call, [=] { memset(dst, value, n); });
    stream_enqueue(s, stream_op{call, [=] { memset(dst, value, n); }});
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t stream)
{
    return set("cudaMemsetAsync", dst, value, n, stream, false);
}

cudaError_t cudaMemset(void *dst, int value, size_t n) { return set("cudaMemset", dst, value, n, 0, true); }

} /* extern "C" */

namespace cudasim {

cudaError_t symbol_range_error(const char *call, size_t count, size_t offset, size_t size)
{
    return fail_msg(cudaErrorInvalidValue, "%s: %zu bytes at offset %zu of a __device__ variable of %zu bytes", call,
                    count, offset, size);
}

} // namespace cudasim
