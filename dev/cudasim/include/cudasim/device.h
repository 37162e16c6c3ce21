/* The simulated device as CUDA C++ sees it: forced into every source the
 * simulator compiles (gen_cu.py's output), after the real toolkit headers,
 * which give the types (dim3, uint3, cudaError_t...) and the host bf16/fp16
 * conversions. This header gives what only a device has: the thread and
 * block indices of the running thread, barriers (__syncthreads and its
 * reductions, __syncwarp with its exact warp scope), warp shuffles and
 * votes, atomics, the math intrinsics, shared memory (static and dynamic),
 * and the launch (the rewrite of <<<...>>>). Each is a call into the
 * simulator (dev/cudasim/sim.h), which runs one fiber per CUDA thread.
 *
 * What a GPU does differently is said at each function; docs/cudasim.md has
 * the whole list (speed, tensor-core summation order, fast-math, weak memory
 * ordering). Not for product code: only gen_cu.py's output includes it. */
#ifndef CUDASIM_DEVICE_H
#define CUDASIM_DEVICE_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ptx.h" /* inline PTX: tensor-core loads and products, asynchronous copies */

/* Annotations nvcc reads; here they have been used by gen_cu.py already. */
#define __launch_bounds__(...)

namespace cudasim {

/* The running CUDA thread, as its fiber sees it. */
struct thread_ctx {
    uint3 thread_idx;
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
};

/* The current thread of this OS thread (a fiber of the block it runs), or
 * the probe context while a launch is being checked. Constant-initialized:
 * read straight from the thread's TLS, without C++'s wrapper call. */
#if defined(__GNUC__) && !defined(__clang__)
#define CUDASIM_CONSTINIT __constinit
#else
#define CUDASIM_CONSTINIT
#endif
extern thread_local CUDASIM_CONSTINIT thread_ctx *tl_cur;
[[noreturn]] void fatal_no_thread(const char *what);

inline const thread_ctx &cur(const char *what)
{
    thread_ctx *t = tl_cur;
    if (__builtin_expect(t == nullptr, 0))
        fatal_no_thread(what);
    return *t;
}

/* ---- barriers, warp collectives (sim.h's block scheduler) ---- */
void syncthreads(const char *file, int line);
int syncthreads_reduce(int op, int pred, const char *file, int line); /* op: 0 or, 1 and, 2 count */
void syncwarp(unsigned mask, const char *file, int line);
uint64_t warp_shfl(int kind, unsigned mask, uint64_t value, int arg, int width, const char *file, int line);
unsigned warp_vote(int kind, unsigned mask, int pred, const char *file, int line);
unsigned active_mask();
[[noreturn]] void trap(const char *file, int line, const char *what);

enum { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR };
enum { VOTE_BALLOT, VOTE_ALL, VOTE_ANY };

/* ---- shared memory ---- */
void *shared_alloc(unsigned key, size_t bytes, size_t align, const char *name);
void *dynamic_shared_base(size_t align);

/* A static __shared__ variable of the running block (placed when a thread
 * first reaches it; `name` is the declaration's, for the access checks'
 * messages). */
template <class T> T &shared_var(unsigned key, size_t align, const char *name)
{
    size_t a = align > alignof(T) ? align : alignof(T);
    return *static_cast<T *>(shared_alloc(key, sizeof(T), a, name));
}

template <class T> T *dynamic_shared(size_t align)
{
    return static_cast<T *>(dynamic_shared_base(align > alignof(T) ? align : alignof(T)));
}

/* Static shared memory of a kernel: each variable rounded up to 16 bytes, in
 * any order (shared_alloc lays them out the same way). */
constexpr unsigned long smem_round(unsigned long b) { return (b + 15ul) / 16ul * 16ul; }
template <class... T> constexpr unsigned long smem_bytes() { return (0ul + ... + smem_round(sizeof(T))); }

/* ---- the launch ---- */
struct launch_site {
    const char *kernel; /* the kernel expression as written */
    const char *file;
    int line;
};

/* What a kernel's prologue tells the launch before any thread runs. */
struct kernel_info {
    const void *fn;
    const char *name;
    unsigned long static_smem;
    int max_threads; /* __launch_bounds__, 0 when none */
};

/* The prologue gen_cu.py puts first in every kernel body: while a launch is
 * being checked it records the kernel's facts and returns true (the body
 * then returns at once); in a running thread it returns false. */
bool kernel_entry(const void *fn, const char *name, unsigned long static_smem, int max_threads);
kernel_info probe_begin();
bool probe_end(kernel_info *out);

/* Hands a checked launch to its stream; `run` runs one thread's body from
 * `payload`, `destroy` frees it after the grid. Sets the launching thread's
 * last error as a card would when the launch is refused. */
void submit_launch(const launch_site &site, const kernel_info &k, dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, void *payload, void (*run)(void *), void (*destroy)(void *));
void refuse_unprobed_launch(const launch_site &site);

template <class F, class Tuple> struct payload {
    F fn;
    Tuple args;
    static void run(void *p)
    {
        payload *self = static_cast<payload *>(p);
        std::apply(self->fn, self->args);
    }
    static void destroy(void *p) { delete static_cast<payload *>(p); }
};

template <class F> struct launcher {
    launch_site site;
    F fn;
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;

    template <class... A> void operator()(A &&...a)
    {
        using tuple = std::tuple<std::decay_t<A>...>;
        using P = payload<F, tuple>;
        P *p = new P{fn, tuple(std::forward<A>(a)...)};
        /* Which kernel (and which instantiation) this launch site runs is
         * fixed by the argument types: learn its facts once. */
        static const std::pair<bool, kernel_info> facts = [p] {
            kernel_info k = probe_begin();
            P::run(p);
            bool ok = probe_end(&k);
            return std::make_pair(ok, k);
        }();
        if (!facts.first) {
            delete p;
            refuse_unprobed_launch(site);
            return;
        }
        submit_launch(site, facts.second, grid, block, smem, stream, p, &P::run, &P::destroy);
    }
};

template <class F>
launcher<F> launch(launch_site site, F fn, dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0)
{
    return launcher<F>{site, fn, grid, block, smem, stream};
}

template <class T> T from_bits(uint64_t b)
{
    T v;
    memcpy(static_cast<void *>(&v), &b, sizeof v); /* a shuffle moves bits, as on a GPU */
    return v;
}

template <class T> uint64_t to_bits(const T &v)
{
    static_assert(sizeof(T) <= 8, "a warp shuffle moves at most 8 bytes");
    uint64_t b = 0;
    memcpy(&b, static_cast<const void *>(&v), sizeof v);
    return b;
}

} // namespace cudasim

/* ---- the runtime's C++ API for symbols and kernels, which the toolkit's
 * cuda_runtime.h declares only for nvcc: a __device__ variable is an
 * ordinary global here, and its size bounds the copy ---- */
namespace cudasim {
cudaError_t symbol_range_error(const char *call, size_t count, size_t offset, size_t size);
}
template <class T>
inline cudaError_t cudaMemcpyToSymbol(const T &symbol, const void *src, size_t count, size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyHostToDevice)
{
    if (offset > sizeof(T) || count > sizeof(T) - offset)
        return ::cudasim::symbol_range_error("cudaMemcpyToSymbol", count, offset, sizeof(T));
    return ::cudaMemcpyToSymbol(static_cast<const void *>(&symbol), src, count, offset, kind);
}
template <class T>
inline cudaError_t cudaMemcpyToSymbolAsync(const T &symbol, const void *src, size_t count, size_t offset = 0,
                                           cudaMemcpyKind kind = cudaMemcpyHostToDevice, cudaStream_t stream = 0)
{
    if (offset > sizeof(T) || count > sizeof(T) - offset)
        return ::cudasim::symbol_range_error("cudaMemcpyToSymbolAsync", count, offset, sizeof(T));
    return ::cudaMemcpyToSymbolAsync(static_cast<const void *>(&symbol), src, count, offset, kind, stream);
}
template <class T>
inline cudaError_t cudaMemcpyFromSymbol(void *dst, const T &symbol, size_t count, size_t offset = 0,
                                        cudaMemcpyKind kind = cudaMemcpyDeviceToHost)
{
    if (offset > sizeof(T) || count > sizeof(T) - offset)
        return ::cudasim::symbol_range_error("cudaMemcpyFromSymbol", count, offset, sizeof(T));
    return ::cudaMemcpyFromSymbol(dst, static_cast<const void *>(&symbol), count, offset, kind);
}
template <class T>
inline cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const T &symbol, size_t count, size_t offset = 0,
                                             cudaMemcpyKind kind = cudaMemcpyDeviceToHost, cudaStream_t stream = 0)
{
    if (offset > sizeof(T) || count > sizeof(T) - offset)
        return ::cudasim::symbol_range_error("cudaMemcpyFromSymbolAsync", count, offset, sizeof(T));
    return ::cudaMemcpyFromSymbolAsync(dst, static_cast<const void *>(&symbol), count, offset, kind, stream);
}
template <class T> inline cudaError_t cudaGetSymbolAddress(void **out, const T &symbol)
{
    *out = const_cast<void *>(static_cast<const void *>(&symbol));
    return cudaSuccess;
}
template <class T> inline cudaError_t cudaGetSymbolSize(size_t *out, const T &)
{
    *out = sizeof(T);
    return cudaSuccess;
}
template <class T> inline cudaError_t cudaFuncSetAttribute(T *entry, cudaFuncAttribute attr, int value)
{
    return ::cudaFuncSetAttribute(reinterpret_cast<const void *>(entry), attr, value);
}

/* ---- built-in variables ---- */
#define threadIdx (::cudasim::cur("threadIdx").thread_idx)
#define blockIdx (::cudasim::cur("blockIdx").block_idx)
#define blockDim (::cudasim::cur("blockDim").block_dim)
#define gridDim (::cudasim::cur("gridDim").grid_dim)
constexpr int warpSize = 32;

/* ---- barriers and warp-level primitives ---- */
inline void __syncthreads(const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    ::cudasim::syncthreads(file, line);
}
inline int __syncthreads_or(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return ::cudasim::syncthreads_reduce(0, pred, file, line);
}
inline int __syncthreads_and(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return ::cudasim::syncthreads_reduce(1, pred, file, line);
}
inline int __syncthreads_count(int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return ::cudasim::syncthreads_reduce(2, pred, file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    ::cudasim::syncwarp(mask, file, line);
}

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, const char *file = __builtin_FILE(),
                     int line = __builtin_LINE())
{
    return ::cudasim::from_bits<T>(
        ::cudasim::warp_shfl(::cudasim::SHFL_IDX, mask, ::cudasim::to_bits(v), src, width, file, line));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, const char *file = __builtin_FILE(),
                        int line = __builtin_LINE())
{
    return ::cudasim::from_bits<T>(
        ::cudasim::warp_shfl(::cudasim::SHFL_UP, mask, ::cudasim::to_bits(v), (int)delta, width, file, line));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, const char *file = __builtin_FILE(),
                          int line = __builtin_LINE())
{
    return ::cudasim::from_bits<T>(
        ::cudasim::warp_shfl(::cudasim::SHFL_DOWN, mask, ::cudasim::to_bits(v), (int)delta, width, file, line));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, const char *file = __builtin_FILE(),
                         int line = __builtin_LINE())
{
    return ::cudasim::from_bits<T>(
        ::cudasim::warp_shfl(::cudasim::SHFL_XOR, mask, ::cudasim::to_bits(v), lane_mask, width, file, line));
}
inline unsigned __ballot_sync(unsigned mask, int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return ::cudasim::warp_vote(::cudasim::VOTE_BALLOT, mask, pred, file, line);
}
inline int __all_sync(unsigned mask, int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return (int)::cudasim::warp_vote(::cudasim::VOTE_ALL, mask, pred, file, line);
}
inline int __any_sync(unsigned mask, int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return (int)::cudasim::warp_vote(::cudasim::VOTE_ANY, mask, pred, file, line);
}
inline unsigned __activemask() { return ::cudasim::active_mask(); }
inline void __trap(const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    ::cudasim::trap(file, line, "__trap()");
}

/* Memory fences. The simulator runs a block's threads on one OS thread, one
 * at a time, so within a block every write is seen at once (a GPU is weaker:
 * docs/cudasim.md); between blocks, on several OS threads, these are real. */
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* ---- atomics: real ones, since blocks run on several OS threads; the
 * shared-memory race check does not see them (no access hooks here), as
 * atomics never race ---- */
#define CUDASIM_ATOMIC inline __attribute__((no_sanitize_address))
#define CUDASIM_ATOMIC_INT(T)                                                                              \
    CUDASIM_ATOMIC T atomicAdd(T *a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }          \
    CUDASIM_ATOMIC T atomicSub(T *a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }          \
    CUDASIM_ATOMIC T atomicAnd(T *a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }          \
    CUDASIM_ATOMIC T atomicOr(T *a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }            \
    CUDASIM_ATOMIC T atomicXor(T *a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }          \
    CUDASIM_ATOMIC T atomicExch(T *a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }        \
    CUDASIM_ATOMIC T atomicCAS(T *a, T cmp, T v)                                                           \
    {                                                                                                      \
        __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);               \
        return cmp;                                                                                        \
    }                                                                                                      \
    CUDASIM_ATOMIC T atomicMax(T *a, T v)                                                                  \
    {                                                                                                      \
        T old = __atomic_load_n(a, __ATOMIC_RELAXED);                                                      \
        while (old < v && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
            ;                                                                                              \
        return old;                                                                                        \
    }                                                                                                      \
    CUDASIM_ATOMIC T atomicMin(T *a, T v)                                                                  \
    {                                                                                                      \
        T old = __atomic_load_n(a, __ATOMIC_RELAXED);                                                      \
        while (old > v && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
            ;                                                                                              \
        return old;                                                                                        \
    }
CUDASIM_ATOMIC_INT(int)
CUDASIM_ATOMIC_INT(unsigned int)
CUDASIM_ATOMIC_INT(unsigned long long)
CUDASIM_ATOMIC_INT(long long)
#undef CUDASIM_ATOMIC_INT

template <class F, class U> CUDASIM_ATOMIC F cudasim_atomic_float_op(F *a, F v, bool add)
{
    static_assert(sizeof(F) == sizeof(U), "bits");
    U *p = reinterpret_cast<U *>(a);
    U old = __atomic_load_n(p, __ATOMIC_RELAXED), next;
    F was;
    do {
        memcpy(&was, &old, sizeof was);
        F now = add ? (F)(was + v) : (v > was ? v : was);
        memcpy(&next, &now, sizeof next);
    } while (!__atomic_compare_exchange_n(p, &old, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return was;
}
inline float atomicAdd(float *a, float v) { return cudasim_atomic_float_op<float, uint32_t>(a, v, true); }
inline double atomicAdd(double *a, double v) { return cudasim_atomic_float_op<double, uint64_t>(a, v, true); }
CUDASIM_ATOMIC float atomicExch(float *a, float v)
{
    uint32_t b, o;
    memcpy(&b, &v, 4);
    o = __atomic_exchange_n(reinterpret_cast<uint32_t *>(a), b, __ATOMIC_RELAXED);
    float r;
    memcpy(&r, &o, 4);
    return r;
}

/* ---- integer intrinsics ---- */
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x)
{
    unsigned r = 0;
    for (int i = 0; i < 32; i++)
        r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline int __mul24(int a, int b) { return ((a << 8) >> 8) * ((b << 8) >> 8); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }

/* ---- min/max as CUDA's math headers overload them ---- */
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

/* ---- float intrinsics: computed exactly (correctly rounded where the host
 * library is), where a GPU's fast versions are approximations; the
 * difference is below every tolerance ferry's tests hold ops to ---- */
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float *s, float *c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline int __float_as_int(float x) { int r; memcpy(&r, &x, 4); return r; }
inline unsigned __float_as_uint(float x) { unsigned r; memcpy(&r, &x, 4); return r; }
inline float __int_as_float(int x) { float r; memcpy(&r, &x, 4); return r; }
inline float __uint_as_float(unsigned x) { float r; memcpy(&r, &x, 4); return r; }
inline long long __double_as_longlong(double x) { long long r; memcpy(&r, &x, 8); return r; }
inline double __longlong_as_double(long long x) { double r; memcpy(&r, &x, 8); return r; }

/* ---- 16-bit float intrinsics the toolkit defines for the device only:
 * computed in fp32 and rounded once to nearest even (a GPU's fused
 * instructions round once from the exact result; the difference is at most
 * a double rounding, below every tolerance of the tests) ---- */
#define CUDASIM_HALF_FUNCS(T, TO, FROM, PFX)                                                              \
    inline T __##PFX##fma(T a, T b, T c) { return TO(fmaf(FROM(a), FROM(b), FROM(c))); }                  \
    inline T PFX##exp(T a) { return TO(expf(FROM(a))); }                                                  \
    inline T PFX##exp2(T a) { return TO(exp2f(FROM(a))); }                                                \
    inline T PFX##log(T a) { return TO(logf(FROM(a))); }                                                  \
    inline T PFX##log2(T a) { return TO(log2f(FROM(a))); }                                                \
    inline T PFX##sqrt(T a) { return TO(sqrtf(FROM(a))); }                                                \
    inline T PFX##rsqrt(T a) { return TO(1.0f / sqrtf(FROM(a))); }                                        \
    inline T PFX##rcp(T a) { return TO(1.0f / FROM(a)); }                                                 \
    inline T PFX##tanh(T a) { return TO(tanhf(FROM(a))); }
CUDASIM_HALF_FUNCS(__half, __float2half_rn, __half2float, h)
#undef CUDASIM_HALF_FUNCS
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c)
{
    return __float2bfloat16_rn(fmaf(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
inline __nv_bfloat16 hexp(__nv_bfloat16 a) { return __float2bfloat16_rn(expf(__bfloat162float(a))); }
inline __nv_bfloat16 hlog(__nv_bfloat16 a) { return __float2bfloat16_rn(logf(__bfloat162float(a))); }
inline __nv_bfloat16 hsqrt(__nv_bfloat16 a) { return __float2bfloat16_rn(sqrtf(__bfloat162float(a))); }
inline __nv_bfloat16 hrsqrt(__nv_bfloat16 a) { return __float2bfloat16_rn(1.0f / sqrtf(__bfloat162float(a))); }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c)
{
    float2 x = __half22float2(a), y = __half22float2(b), z = __half22float2(c);
    return __floats2half2_rn(fmaf(x.x, y.x, z.x), fmaf(x.y, y.y, z.y));
}
inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c)
{
    float2 x = __bfloat1622float2(a), y = __bfloat1622float2(b), z = __bfloat1622float2(c);
    return __floats2bfloat162_rn(fmaf(x.x, y.x, z.x), fmaf(x.y, y.y, z.y));
}
inline __half2 h2exp(__half2 a)
{
    float2 x = __half22float2(a);
    return __floats2half2_rn(expf(x.x), expf(x.y));
}

/* 16- and 32-bit atomics on types without a native one: compare-and-swap
 * loops of that width, as x86 has them. */
template <class T, class Op> CUDASIM_ATOMIC T cudasim_atomic16(T *a, Op op)
{
    static_assert(sizeof(T) == 2, "16-bit");
    uint16_t *word = reinterpret_cast<uint16_t *>(a);
    uint16_t old = __atomic_load_n(word, __ATOMIC_RELAXED), next;
    T was;
    do {
        memcpy(static_cast<void *>(&was), &old, 2);
        T now = op(was);
        memcpy(&next, static_cast<const void *>(&now), 2);
    } while (!__atomic_compare_exchange_n(word, &old, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return was;
}
template <class T, class Op> CUDASIM_ATOMIC T cudasim_atomic32(T *a, Op op)
{
    static_assert(sizeof(T) == 4, "32-bit");
    uint32_t *word = reinterpret_cast<uint32_t *>(a);
    uint32_t old = __atomic_load_n(word, __ATOMIC_RELAXED), next;
    T was;
    do {
        memcpy(static_cast<void *>(&was), &old, 4);
        T now = op(was);
        memcpy(&next, static_cast<const void *>(&now), 4);
    } while (!__atomic_compare_exchange_n(word, &old, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return was;
}
inline __half atomicAdd(__half *a, __half v)
{
    return cudasim_atomic16(a, [v](__half x) { return __float2half_rn(__half2float(x) + __half2float(v)); });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16 *a, __nv_bfloat16 v)
{
    return cudasim_atomic16(a, [v](__nv_bfloat16 x) { return __float2bfloat16_rn(__bfloat162float(x) + __bfloat162float(v)); });
}
inline __half2 atomicAdd(__half2 *a, __half2 v)
{
    return cudasim_atomic32(a, [v](__half2 x) {
        float2 p = __half22float2(x), q = __half22float2(v);
        return __floats2half2_rn(p.x + q.x, p.y + q.y);
    });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162 *a, __nv_bfloat162 v)
{
    return cudasim_atomic32(a, [v](__nv_bfloat162 x) {
        float2 p = __bfloat1622float2(x), q = __bfloat1622float2(v);
        return __floats2bfloat162_rn(p.x + q.x, p.y + q.y);
    });
}

/* Loads through the read-only cache: plain loads here. */
template <class T> inline T __ldg(const T *p) { return *p; }
template <class T> inline T __ldcg(const T *p) { return *p; }
template <class T> inline T __ldcs(const T *p) { return *p; }
template <class T> inline void __stcg(T *p, T v) { *p = v; }
template <class T> inline void __stcs(T *p, T v) { *p = v; }

#endif
