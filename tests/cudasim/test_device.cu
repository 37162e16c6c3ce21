/* The simulated device itself (dev/cudasim), checked against what CUDA
 * specifies: written in CUDA and compiled through the same rewrite as
 * ferry's kernels.
 *   - barriers: a kernel missing its __syncthreads computes wrong results
 *     under every schedule, the correct one right under all of them; the
 *     reductions of __syncthreads_or/and/count; a barrier that protects an
 *     overwrite from reads two warp collectives earlier, removed: wrong
 *     under the warp-serial schedules, where the thread-serial ones keep the
 *     warps in step and cannot show it;
 *   - the shared-memory access checks: a read or write past a static
 *     variable into the red zone before the next, or past the dynamic part,
 *     stops the kernel naming the variable and the source line; the race
 *     check reports each hazard (read-after-write across warps,
 *     write-after-read, write-after-write, lanes of one warp that only a
 *     shuffle separates) with both threads and both lines, and stays quiet
 *     for __syncwarp-ordered lanes, atomics and broadcast reads;
 *   - warp scope: __syncwarp waits for its mask's lanes only; shuffles of
 *     every kind and width, votes, against a host reference; a mask that
 *     does not name the caller, names an exited lane, lanes that call
 *     different intrinsics, and a deadlock each stop the kernel with a
 *     sticky error and a diagnostic;
 *   - launch checks on every card of the table, with the error a card gives;
 *   - shared memory: one copy per block, NaN until written, an overrun past
 *     its end caught; device memory NaN until written, an overrun caught;
 *   - WMMA bf16 and fp16 against a reference, alignment and ldm checked;
 *   - atomics across blocks on several OS threads;
 *   - the runtime: copies checked against their direction, pageable copies'
 *     timing, events, cross-stream waits, host functions on one thread,
 *     last versus sticky errors, fault injection.
 * Each case that provokes a kernel failure resets the device after it
 * (cudasim_reset_errors), as a real process would have to exit. */
#include <mma.h>
#include <pthread.h>
#include <unistd.h>

#include <vector>

#include "dev/cudasim/cudasim.h"
#include "tests/tap.h"

using namespace nvcuda;

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static const char *schedules[] = {"ascending", "descending", "random", "warp-ascending", "warp-descending"};

/* The race check off (bounds only) for a case about what a schedule
 * computes, not what the check reports; back on after it. */
static void race_check(bool on) { cudasim_set_shared_check(on ? "race" : "bounds"); }
static bool have_access_checks() { return cudasim_set_shared_check("race") == 0; }

static int is_err(cudaError_t got, cudaError_t want, const char *what)
{
    if (!tap_ok(got == want, "%s: %s", what, cudaGetErrorName(want)))
        tap_diag("  got %s (%d): %s", cudaGetErrorName(got), (int)got, cudasim_last_failure());
    return got == want;
}

/* After a case that must end in a sticky error: the error is there, the
 * diagnostic names `word`, and the device is reset for the next case. */
static void expect_fault(cudaError_t want, const char *word, const char *what)
{
    cudaError_t got = cudaDeviceSynchronize();
    is_err(got, want, what);
    const char *msg = cudasim_last_failure();
    if (!tap_ok(strstr(msg, word) != nullptr, "%s: the diagnostic says '%s'", what, word))
        tap_diag("  diagnostic: %s", msg);
    tap_ok(cudaGetLastError() == want && cudaGetLastError() == want,
           "%s: the error is sticky (cudaGetLastError does not clear it)", what);
    cudasim_reset_errors();
}

/* ---- barriers ---- */

__global__ void neighbour_kernel(int *out, int sync)
{
    __shared__ int s[256];
    s[threadIdx.x] = (int)threadIdx.x * 3 + 1;
    if (sync)
        __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

static void test_barriers(void)
{
    int *d = nullptr;
    cudaMalloc(&d, 4 * 256 * sizeof(int));
    std::vector<int> h(4 * 256);
    for (const char *sched : schedules) {
        cudasim_set_schedule(sched, 17);
        for (int sync = 1; sync >= 0; sync--) {
            race_check(sync);
            neighbour_kernel<<<4, 256>>>(d, sync);
            cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost);
            int wrong = 0;
            for (int b = 0; b < 4; b++)
                for (int t = 0; t < 256; t++)
                    wrong += h[(size_t)(b * 256 + t)] != ((t + 1) % 256) * 3 + 1;
            if (sync)
                tap_ok(wrong == 0, "barrier (%s schedule): every thread reads its neighbour's write (%d wrong)", sched,
                       wrong);
            else
                tap_ok(wrong > 0, "barrier removed (%s schedule): some thread reads before its neighbour wrote (%d "
                       "of 1024 wrong)", sched, wrong);
        }
    }
    race_check(true);
    cudasim_set_schedule("ascending", 1);
    cudaFree(d);
}

/* Two warps: each reads the other's half, takes a warp sum through two
 * rounds of shuffles, then overwrites its own half. Without the barrier
 * before the overwrite, a warp that runs ahead overwrites what the other has
 * not read yet. */
__global__ void overwrite_kernel(int *out, int protect)
{
    __shared__ int buf[64];
    const int t = (int)threadIdx.x;
    buf[t] = t;
    __syncthreads();
    int v = buf[63 - t];
    v += __shfl_xor_sync(0xffffffffu, v, 1) * 0;
    v += __shfl_xor_sync(0xffffffffu, v, 2) * 0;
    if (protect)
        __syncthreads();
    buf[t] = 1000 + t;
    __syncthreads();
    out[t] = v;
}

static int overwrite_wrong(int *d, int protect)
{
    std::vector<int> h(64);
    overwrite_kernel<<<1, 64>>>(d, protect);
    cudaMemcpy(h.data(), d, 64 * sizeof(int), cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (int t = 0; t < 64; t++)
        wrong += h[(size_t)t] != 63 - t;
    return wrong;
}

static void test_warp_serial(void)
{
    int *d = nullptr;
    cudaMalloc(&d, 64 * sizeof(int));
    race_check(false);
    for (const char *sched : schedules) {
        cudasim_set_schedule(sched, 23);
        const int right = overwrite_wrong(d, 1), wrong = overwrite_wrong(d, 0);
        tap_ok(right == 0, "overwrite after a barrier (%s schedule): every thread reads what was there (%d wrong)",
               sched, right);
        if (!strncmp(sched, "warp-", 5))
            tap_ok(wrong > 0, "barrier before the overwrite removed (%s schedule): one warp overwrites what the "
                   "other has not read (%d of 64 wrong)", sched, wrong);
        else if (strcmp(sched, "random") != 0)
            tap_ok(wrong == 0, "barrier before the overwrite removed (%s schedule): the warps advance in step "
                   "through the shuffles, so this schedule cannot show it (%d wrong)", sched, wrong);
    }
    race_check(true);
    cudasim_set_schedule("ascending", 1);
    cudaFree(d);
}

__global__ void reduce_kernel(int *out)
{
    const int t = (int)threadIdx.x;
    out[0 * 192 + t] = __syncthreads_or(t == 77);
    out[1 * 192 + t] = __syncthreads_and(t < 1000);
    out[2 * 192 + t] = __syncthreads_and(t != 5);
    out[3 * 192 + t] = __syncthreads_count(t % 3 == 0);
    out[4 * 192 + t] = __syncthreads_or(0);
}

static void test_barrier_reductions(void)
{
    int *d = nullptr;
    cudaMalloc(&d, 5 * 192 * sizeof(int));
    reduce_kernel<<<1, 192>>>(d);
    std::vector<int> h(5 * 192);
    cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost);
    const int want[5] = {1, 1, 0, 64, 0};
    int bad = 0;
    for (int k = 0; k < 5; k++)
        for (int t = 0; t < 192; t++)
            bad += h[(size_t)(k * 192 + t)] != want[k];
    tap_ok(bad == 0, "__syncthreads_or/and/count give every thread the block's result (%d wrong)", bad);
    cudaFree(d);
}

/* ---- warps ---- */

/* Warp 0 syncs its own lanes while warp 1 waits at the block barrier: a
 * __syncwarp of wider scope would deadlock. Lanes 0-15 and 16-31 of warp 2
 * sync in two halves. */
__global__ void warp_scope_kernel(int *out)
{
    __shared__ int s[96];
    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    if (warp == 0) {
        s[lane] = lane * 5;
        __syncwarp();
        out[lane] = s[31 - lane];
    } else if (warp == 2) {
        s[64 + lane] = lane + 100;
        __syncwarp(lane < 16 ? 0x0000ffffu : 0xffff0000u);
        out[64 + lane] = s[64 + (lane < 16 ? 15 - lane : 47 - lane)];
    }
    __syncthreads();
    if (warp == 1)
        out[32 + lane] = s[lane];
}

/* Each lane fills `per` results: shuffles of every kind and width, votes. */
constexpr int PER = 16;
__global__ void shuffle_kernel(float *out, double *dout, unsigned *uout)
{
    const int lane = (int)threadIdx.x;
    const float v = 10.0f * lane + 0.5f;
    float *o = out + lane * PER;
    o[0] = __shfl_sync(0xffffffffu, v, (lane * 7 + 3) % 32);
    o[1] = __shfl_sync(0xffffffffu, v, 5, 8);
    o[2] = __shfl_up_sync(0xffffffffu, v, 3);
    o[3] = __shfl_up_sync(0xffffffffu, v, 3, 8);
    o[4] = __shfl_down_sync(0xffffffffu, v, 5);
    o[5] = __shfl_down_sync(0xffffffffu, v, 5, 16);
    o[6] = __shfl_xor_sync(0xffffffffu, v, 1);
    o[7] = __shfl_xor_sync(0xffffffffu, v, 16);
    o[8] = __shfl_xor_sync(0xffffffffu, v, 12, 8);
    __nv_bfloat16 b = __shfl_xor_sync(0xffffffffu, __float2bfloat16_rn(v), 3);
    o[9] = __bfloat162float(b);
    dout[lane] = __shfl_xor_sync(0xffffffffu, (double)lane * 1e10 + 0.25, 7);
    unsigned *u = uout + lane * 4;
    u[0] = __ballot_sync(0xffffffffu, lane % 3 == 0);
    u[1] = (unsigned)__all_sync(0xffffffffu, lane < 32);
    u[2] = (unsigned)__any_sync(0xffffffffu, lane == 31);
    u[3] = (unsigned)__popc(__ballot_sync(0xffffffffu, lane & 1));
}

static void test_warps(void)
{
    int *d = nullptr;
    cudaMalloc(&d, 96 * sizeof(int));
    for (const char *sched : schedules) {
        cudasim_set_schedule(sched, 5);
        cudaMemset(d, 0, 96 * sizeof(int));
        warp_scope_kernel<<<1, 96>>>(d);
        std::vector<int> h(96);
        is_err(cudaMemcpy(h.data(), d, 96 * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess,
               "__syncwarp of warp 0 while warp 1 waits at __syncthreads: no deadlock");
        int bad = 0;
        for (int l = 0; l < 32; l++) {
            bad += h[(size_t)l] != (31 - l) * 5;
            bad += h[(size_t)(32 + l)] != l * 5;
            bad += h[(size_t)(64 + l)] != (l < 16 ? 15 - l : 47 - l) + 100;
        }
        tap_ok(bad == 0, "__syncwarp orders exactly its mask's lanes (%s schedule, %d wrong)", sched, bad);
    }
    cudasim_set_schedule("ascending", 1);
    cudaFree(d);

    float *f = nullptr;
    double *df = nullptr;
    unsigned *u = nullptr;
    cudaMalloc(&f, 32 * PER * sizeof(float));
    cudaMalloc(&df, 32 * sizeof(double));
    cudaMalloc(&u, 32 * 4 * sizeof(unsigned));
    shuffle_kernel<<<1, 32>>>(f, df, u);
    std::vector<float> hf(32 * PER);
    std::vector<double> hd(32);
    std::vector<unsigned> hu(32 * 4);
    cudaMemcpy(hf.data(), f, hf.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(hd.data(), df, hd.size() * sizeof(double), cudaMemcpyDeviceToHost);
    cudaMemcpy(hu.data(), u, hu.size() * sizeof(unsigned), cudaMemcpyDeviceToHost);
    auto val = [](int l) { return 10.0f * l + 0.5f; };
    const char *names[10] = {"__shfl_sync", "__shfl_sync width 8", "__shfl_up_sync", "__shfl_up_sync width 8",
                             "__shfl_down_sync", "__shfl_down_sync width 16", "__shfl_xor_sync 1",
                             "__shfl_xor_sync 16", "__shfl_xor_sync 12 width 8", "__shfl_xor_sync of bf16"};
    for (int k = 0; k < 10; k++) {
        int bad = 0;
        for (int l = 0; l < 32; l++) {
            int src = l;
            switch (k) {
            case 0: src = (l * 7 + 3) % 32; break;
            case 1: src = (l & ~7) + 5; break;
            case 2: src = l >= 3 ? l - 3 : l; break;
            case 3: src = (l & 7) >= 3 ? l - 3 : l; break;
            case 4: src = l + 5 < 32 ? l + 5 : l; break;
            case 5: src = (l & 15) + 5 < 16 ? l + 5 : l; break;
            case 6: src = l ^ 1; break;
            case 7: src = l ^ 16; break;
            case 8: src = l; break; /* 12 leaves an 8-lane segment: own value */
            case 9: src = l ^ 3; break;
            }
            float want = k == 9 ? __bfloat162float(__float2bfloat16_rn(val(src))) : val(src);
            bad += hf[(size_t)(l * PER + k)] != want;
        }
        tap_ok(bad == 0, "%s gives each lane its source lane's value (%d wrong)", names[k], bad);
    }
    int bad = 0;
    for (int l = 0; l < 32; l++)
        bad += hd[(size_t)l] != (double)(l ^ 7) * 1e10 + 0.25;
    tap_ok(bad == 0, "__shfl_xor_sync moves a double whole (%d wrong)", bad);
    unsigned ballot = 0;
    for (int l = 0; l < 32; l += 3)
        ballot |= 1u << l;
    bad = 0;
    for (int l = 0; l < 32; l++)
        bad += hu[(size_t)(l * 4)] != ballot || hu[(size_t)(l * 4 + 1)] != 1 || hu[(size_t)(l * 4 + 2)] != 1 ||
               hu[(size_t)(l * 4 + 3)] != 16;
    tap_ok(bad == 0, "__ballot_sync, __all_sync, __any_sync and __popc agree with the host (%d wrong)", bad);
    cudaFree(f);
    cudaFree(df);
    cudaFree(u);
}

__global__ void mask_not_mine_kernel(int *out)
{
    if (threadIdx.x == 3)
        __syncwarp(0x1u);
    out[threadIdx.x] = 1;
}

__global__ void exited_lane_kernel(float *out)
{
    if (threadIdx.x >= 16)
        return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

__global__ void mixed_intrinsics_kernel(float *out)
{
    if (threadIdx.x < 16)
        out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
    else
        __syncwarp();
}

__global__ void deadlock_kernel(int *out)
{
    if (threadIdx.x % 32 < 16)
        __syncwarp();
    else
        __syncthreads();
    out[threadIdx.x] = 1;
}

static void test_warp_misuse(void)
{
    int *d = nullptr;
    cudaMalloc(&d, 64 * sizeof(int));
    mask_not_mine_kernel<<<1, 32>>>(d);
    expect_fault(cudaErrorIllegalInstruction, "does not name the calling", "__syncwarp with a mask without the caller");
    cudaMalloc(&d, 64 * sizeof(int));
    exited_lane_kernel<<<1, 32>>>(reinterpret_cast<float *>(d));
    expect_fault(cudaErrorIllegalInstruction, "exited", "a full-mask shuffle after half the warp returned");
    cudaMalloc(&d, 64 * sizeof(int));
    mixed_intrinsics_kernel<<<1, 32>>>(reinterpret_cast<float *>(d));
    expect_fault(cudaErrorIllegalInstruction, "same intrinsic", "lanes of one mask in different intrinsics");
    cudaMalloc(&d, 64 * sizeof(int));
    deadlock_kernel<<<1, 64>>>(d);
    expect_fault(cudaErrorLaunchFailure, "deadlock", "half a warp at __syncwarp, half at __syncthreads");
}

/* ---- launch checks ---- */

__global__ void noop_kernel(int *p)
{
    if (p)
        p[0] = 1;
}

__global__ void static_smem_kernel(int *p)
{
    __shared__ int s[1024]; /* 4 KiB of static shared memory */
    extern __shared__ int dyn[];
    s[threadIdx.x] = (int)threadIdx.x;
    if (threadIdx.x == 0)
        dyn[0] = 1;
    if (p)
        p[threadIdx.x] = s[threadIdx.x];
}

__global__ void __launch_bounds__(128) bounded_kernel(int *p)
{
    if (p)
        p[threadIdx.x] = 1;
}

static void refused(cudaError_t want, const char *what)
{
    cudaError_t got = cudaGetLastError();
    if (!tap_ok(got == want, "sm_%d: %s is refused with %s", cudasim_arch(), what, cudaGetErrorName(want)))
        tap_diag("  got %s", cudaGetErrorName(got));
}

static void accepted(const char *what)
{
    cudaError_t got = cudaGetLastError();
    if (got == cudaSuccess)
        got = cudaDeviceSynchronize();
    if (!tap_ok(got == cudaSuccess, "sm_%d: %s is accepted", cudasim_arch(), what))
        tap_diag("  got %s", cudaGetErrorName(got));
}

static void test_launch_limits(void)
{
    const int archs[] = {70, 75, 80, 86, 89, 90};
    const size_t optin[] = {96 << 10, 64 << 10, 163 << 10, 99 << 10, 99 << 10, 227 << 10};
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    for (int i = 0; i < 6; i++) {
        tap_ok(cudasim_set_arch(archs[i]) == 0, "the card is now sm_%d", archs[i]);
        cudaDeviceProp p;
        cudaGetDeviceProperties(&p, 0);
        int attr = 0;
        cudaDeviceGetAttribute(&attr, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
        tap_ok(p.major * 10 + p.minor == archs[i] && p.sharedMemPerBlockOptin == optin[i] && (size_t)attr == optin[i] &&
                   p.sharedMemPerBlock == 48 << 10 && p.maxThreadsPerBlock == 1024 && p.maxGridSize[1] == 65535,
               "sm_%d: properties %d.%d, %zu bytes of opt-in shared memory (%d by attribute), 48 KiB without",
               archs[i], p.major, p.minor, p.sharedMemPerBlockOptin, attr);
        cudaFuncSetAttribute(reinterpret_cast<const void *>(static_smem_kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, 0);
        noop_kernel<<<1, 1025, 0, s>>>(nullptr);
        refused(cudaErrorInvalidConfiguration, "a block of 1025 threads");
        tap_ok(cudaGetLastError() == cudaSuccess, "sm_%d: ... and cudaGetLastError cleared it", archs[i]);
        noop_kernel<<<1, dim3(1, 1, 65), 0, s>>>(nullptr);
        refused(cudaErrorInvalidConfiguration, "block.z = 65");
        noop_kernel<<<dim3(1, 65536), 1, 0, s>>>(nullptr);
        refused(cudaErrorInvalidConfiguration, "grid.y = 65536");
        noop_kernel<<<dim3(1, 1, 65536), 1, 0, s>>>(nullptr);
        refused(cudaErrorInvalidConfiguration, "grid.z = 65536");
        noop_kernel<<<0, 32, 0, s>>>(nullptr);
        refused(cudaErrorInvalidConfiguration, "an empty grid");
        noop_kernel<<<dim3(1, 65535, 1), 1, 0, s>>>(nullptr);
        accepted("grid.y = 65535");
        noop_kernel<<<1, dim3(32, 32), 0, s>>>(nullptr);
        accepted("a block of 1024 threads");
        bounded_kernel<<<1, 256, 0, s>>>(nullptr);
        refused(cudaErrorLaunchOutOfResources, "256 threads for __launch_bounds__(128)");
        bounded_kernel<<<1, 128, 0, s>>>(nullptr);
        accepted("128 threads for __launch_bounds__(128)");
        noop_kernel<<<1, 32, 48 << 10, s>>>(nullptr);
        accepted("48 KiB of dynamic shared memory");
        noop_kernel<<<1, 32, (48 << 10) + 1, s>>>(nullptr);
        refused(cudaErrorInvalidValue, "48 KiB + 1 of dynamic shared memory without the opt-in");
        static_smem_kernel<<<1, 32, (44 << 10), s>>>(nullptr);
        accepted("44 KiB dynamic with 4 KiB static");
        static_smem_kernel<<<1, 32, (44 << 10) + 4, s>>>(nullptr);
        refused(cudaErrorInvalidValue, "44 KiB + 4 dynamic with 4 KiB static (the static part counts)");
        const int most = (int)optin[i] - 4096;
        is_err(cudaFuncSetAttribute(reinterpret_cast<const void *>(static_smem_kernel),
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, most), cudaSuccess,
               "the opt-in to the card's limit less the static part");
        static_smem_kernel<<<1, 32, (size_t)most, s>>>(nullptr);
        accepted("the most dynamic shared memory the opt-in allows");
        static_smem_kernel<<<1, 32, (size_t)most + 16, s>>>(nullptr);
        refused(cudaErrorInvalidValue, "more than the opt-in");
        is_err(cudaFuncSetAttribute(reinterpret_cast<const void *>(static_smem_kernel),
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, most + 1), cudaErrorInvalidValue,
               "an opt-in beyond the card's limit with the static part");
        cudaGetLastError();
    }
    cudaStreamDestroy(s);
    cudasim_set_arch(90);
}

/* ---- shared and device memory ---- */

__global__ void per_block_kernel(int *out, float *uninit)
{
    __shared__ int tag;
    __shared__ float never_written[64];
    if (threadIdx.x == 0)
        tag = (int)blockIdx.x * 1000 + 7;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = tag;
    if (blockIdx.x == 0)
        uninit[threadIdx.x] = never_written[threadIdx.x];
}

__global__ void smem_overrun_kernel(int n)
{
    extern __shared__ float dyn[];
    dyn[threadIdx.x + n] = 1.0f; /* the last thread writes one float past the end */
}

__global__ void read_kernel(const float *in, float *out) { out[threadIdx.x] = in[threadIdx.x]; }

__global__ void overrun_kernel(float *p, int n) { p[n + (int)threadIdx.x] = 2.0f; }

static void test_memory(void)
{
    int *out = nullptr;
    float *uninit = nullptr;
    cudaMalloc(&out, 8 * 64 * sizeof(int));
    cudaMalloc(&uninit, 64 * sizeof(float));
    cudasim_set_schedule("random", 3);
    per_block_kernel<<<8, 64>>>(out, uninit);
    std::vector<int> h(8 * 64);
    std::vector<float> u(64);
    cudaMemcpy(h.data(), out, h.size() * sizeof(int), cudaMemcpyDeviceToHost);
    cudaMemcpy(u.data(), uninit, u.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudasim_set_schedule("ascending", 1);
    int bad = 0, nans = 0;
    for (int b = 0; b < 8; b++)
        for (int t = 0; t < 64; t++)
            bad += h[(size_t)(b * 64 + t)] != b * 1000 + 7;
    for (float x : u)
        nans += x != x;
    tap_ok(bad == 0, "a __shared__ variable is one per block, shared by its threads (%d wrong)", bad);
    tap_ok(nans == 64, "shared memory nobody wrote reads as NaN (%d of 64)", nans);

    float *fresh = nullptr, *copy = nullptr;
    cudaMalloc(&fresh, 64 * sizeof(float));
    cudaMalloc(&copy, 64 * sizeof(float));
    read_kernel<<<1, 64>>>(fresh, copy);
    cudaMemcpy(u.data(), copy, 64 * sizeof(float), cudaMemcpyDeviceToHost);
    nans = 0;
    for (float x : u)
        nans += x != x;
    tap_ok(nans == 64, "device memory nobody wrote reads as NaN (%d of 64)", nans);

#ifndef UNDER_ASAN
    smem_overrun_kernel<<<1, 32, 32 * sizeof(float)>>>(1);
    expect_fault(cudaErrorIllegalAddress, "0 bytes past the end of the dynamic shared memory",
                 "a write past dynamic shared memory");
    float *small = nullptr;
    cudaMalloc(&small, 100 * sizeof(float));
    overrun_kernel<<<1, 1>>>(small, 100);
    expect_fault(cudaErrorIllegalAddress, "outside the device buffer", "a kernel writing past its buffer");
#else
    tap_diag("a kernel writing past its buffer or past shared memory: under AddressSanitizer the guard and red "
             "zones are poisoned and ASan itself stops the write, so these cases are left to the plain build");
#endif
    cudaFree(out);
    cudaFree(uninit);
    cudaFree(fresh);
    cudaFree(copy);
}

/* ---- the shared-memory access checks ---- */

__global__ void static_overrun_kernel(int *out, int mode)
{
    __shared__ int first[32];
    __shared__ int second[32];
    const int t = (int)threadIdx.x;
    first[t] = t;
    second[t] = -t;
    __syncthreads();
    if (mode == 0)
        first[t + 1] = 7; /* thread 31 writes one int past first */
    else
        out[t] = second[t - 1]; /* thread 0 reads the int before second */
}

__global__ void dyn_overread_kernel(float *out)
{
    extern __shared__ float dyn[];
    dyn[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = dyn[threadIdx.x + 1]; /* the last thread reads past the end */
}

/* mode 0: threads read a value another warp writes in the same interval;
 * 1: lanes of one warp write and read each other's slot with only a shuffle
 * between; 2: every lane writes one slot; 3: as 1 with a __syncwarp (no
 * race); 4: atomics and broadcast reads (no race). */
__global__ void race_kernel(int *out, int mode)
{
    __shared__ int s[64];
    __shared__ int counter;
    const int t = (int)threadIdx.x, lane = t % 32;
    if (t == 0)
        counter = 0;
    s[t] = t;
    __syncthreads();
    int v = 0;
    if (mode == 0) {
        if (t >= 32)
            s[t - 32] = 100 + t;
        else
            v = s[t];
    } else if (mode == 1 || mode == 3) {
        s[t] = 200 + t;
        v = __shfl_xor_sync(0xffffffffu, t, 1);
        if (mode == 3)
            __syncwarp();
        v += s[(t & ~31) + (lane ^ 1)];
    } else if (mode == 2) {
        s[0] = t;
    } else {
        atomicAdd(&counter, 1);
        v = s[0] + s[63];
    }
    __syncthreads();
    out[t] = v + (mode == 4 ? counter : 0);
}

static void test_access_checks(void)
{
    if (!have_access_checks()) {
        tap_diag("the shared-memory access checks need the access hooks, which an ASan build has not (its "
                 "poisoned red zones bound shared memory there): these cases are left to the plain build");
        return;
    }
    int *d = nullptr;
    cudaMalloc(&d, 64 * sizeof(int));
    static_overrun_kernel<<<1, 32>>>(d, 0);
    expect_fault(cudaErrorIllegalAddress, "write", "a write one int past a static __shared__ array");
    static_overrun_kernel<<<1, 32>>>(d, 0);
    cudaDeviceSynchronize();
    const char *msg = cudasim_last_failure();
    if (!tap_ok(strstr(msg, "0 bytes past the end of __shared__ first (128 bytes)") && strstr(msg, "test_device.cu:"),
                "... the diagnostic names the variable, the offset past its end and the source line"))
        tap_diag("  diagnostic: %s", msg);
    cudasim_reset_errors();
    static_overrun_kernel<<<1, 32>>>(d, 1);
    expect_fault(cudaErrorIllegalAddress, "thread (0,0,0) [warp 0 lane 0] of block (0,0,0) reads 4 bytes",
                 "a read of the int before a static __shared__ array (in the red zone)");
    dyn_overread_kernel<<<1, 32, 32 * sizeof(float)>>>(reinterpret_cast<float *>(d));
    expect_fault(cudaErrorIllegalAddress, "reads 4 bytes at", "a read one float past the dynamic shared memory");

    /* Which access comes second, and so the hazard's name, is the schedule's:
     * under ascending warp 0 reads before warp 1 writes, under
     * warp-descending warp 1 runs first. */
    static const struct {
        int mode;
        const char *sched, *hazard;
    } races[] = {{0, "ascending", "write-after-read"},        {0, "warp-descending", "read-after-write"},
                 {1, "ascending", "read-after-write"},        {1, "warp-descending", "read-after-write"},
                 {2, "ascending", "write-after-write"},       {2, "warp-descending", "write-after-write"}};
    for (const auto &r : races) {
        {
            const char *sched = r.sched;
            cudasim_set_schedule(sched, 1);
            race_kernel<<<1, 64>>>(d, r.mode);
            char what[160];
            snprintf(what, sizeof what, "race mode %d (%s schedule): a %s hazard is reported", r.mode, sched,
                     r.hazard);
            expect_fault(cudaErrorLaunchFailure, r.hazard, what);
        }
    }
    cudasim_set_schedule("ascending", 1);
    race_kernel<<<1, 64>>>(d, 0);
    cudaDeviceSynchronize();
    msg = cudasim_last_failure();
    if (!tap_ok(strstr(msg, "on byte 0 of __shared__ s (256 bytes)") && strstr(msg, "another warp") &&
                    strstr(msg, "[warp 1 lane 0]") && strstr(msg, "[warp 0 lane 0]"),
                "the race report names the byte, the variable and both threads"))
        tap_diag("  diagnostic: %s", msg);
    const char *at1 = strstr(msg, "writes it at "), *at2 = at1 ? strstr(at1, "read it at ") : nullptr;
    const char *line1 = at1 ? strstr(at1, "test_device.cu:") : nullptr;
    const char *line2 = at2 ? strstr(at2, "test_device.cu:") : nullptr;
    if (!tap_ok(line1 && line2 && atoi(line1 + 15) != atoi(line2 + 15), "... and both source lines (%d and %d)",
                line1 ? atoi(line1 + 15) : 0, line2 ? atoi(line2 + 15) : 0))
        tap_diag("  diagnostic: %s", msg);
    cudasim_reset_errors();
    overwrite_kernel<<<1, 64>>>(d, 0);
    expect_fault(cudaErrorLaunchFailure, "write-after-read",
                 "the overwrite without its barrier: a write-after-read hazard under the ascending schedule too");
    for (int mode : {3, 4}) {
        race_kernel<<<1, 64>>>(d, mode);
        std::vector<int> h(64);
        cudaError_t e = cudaMemcpy(h.data(), d, 64 * sizeof(int), cudaMemcpyDeviceToHost);
        int wrong = 0;
        for (int t = 0; t < 64; t++)
            wrong += h[(size_t)t] != (mode == 3 ? (t ^ 1) + 200 + (t ^ 1) : 0 + 63 + 64);
        if (!tap_ok(e == cudaSuccess && wrong == 0, "race mode %d (%s): no report, right results (%d wrong)", mode,
                    mode == 3 ? "lanes ordered by __syncwarp" : "shared atomics and broadcast reads", wrong))
            tap_diag("  %s: %s", cudaGetErrorName(e), cudasim_last_failure());
        cudasim_reset_errors();
    }
    cudaFree(d);
}

/* ---- WMMA ---- */

template <class T>
__global__ void wmma_kernel(const T *a, const T *b, const float *c, float *d, int offset, unsigned ldm)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::load_matrix_sync(fa, a + offset, ldm);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}

template <class T> static void wmma_case(const char *type, T (*narrow)(float), float (*widen)(T))
{
    std::vector<T> a(16 * 24), b(256);
    std::vector<float> c(256), want(256), got(256);
    uint64_t rng = 99;
    for (auto &x : a)
        x = narrow((float)tap_rand_unit(&rng) - 0.5f);
    for (auto &x : b)
        x = narrow((float)tap_rand_unit(&rng) - 0.5f);
    for (auto &x : c)
        x = (float)tap_rand_unit(&rng);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double s = c[(size_t)(i * 16 + j)];
            for (int k = 0; k < 16; k++)
                s += (double)widen(a[(size_t)(i * 16 + k)]) * widen(b[(size_t)(j * 16 + k)]); /* B col-major */
            want[(size_t)(i * 16 + j)] = (float)s;
        }
    T *da = nullptr, *db = nullptr;
    float *dc = nullptr, *dd = nullptr;
    cudaMalloc(&da, a.size() * sizeof(T));
    cudaMalloc(&db, b.size() * sizeof(T));
    cudaMalloc(&dc, 256 * sizeof(float));
    cudaMalloc(&dd, 256 * sizeof(float));
    cudaMemcpy(da, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(dc, c.data(), 256 * sizeof(float), cudaMemcpyHostToDevice);
    wmma_kernel<T><<<1, 32>>>(da, db, dc, dd, 0, 16);
    cudaMemcpy(got.data(), dd, 256 * sizeof(float), cudaMemcpyDeviceToHost);
    double worst = 0;
    for (int i = 0; i < 256; i++)
        worst = fmax(worst, fabs((double)got[(size_t)i] - want[(size_t)i]));
    tap_ok(worst < 1e-5, "wmma %s 16x16x16: D = A B + C within 1e-5 of a double reference (%.2g)", type, worst);
    wmma_kernel<T><<<1, 32>>>(da, db, dc, dd, 1, 16);
    expect_fault(cudaErrorMisalignedAddress, "32-byte aligned", "a WMMA load from a pointer off by one element");
    cudaMalloc(&dd, 256 * sizeof(float));
    wmma_kernel<T><<<1, 32>>>(da, db, dc, dd, 0, 12);
    expect_fault(cudaErrorMisalignedAddress, "multiple of 16 bytes", "a WMMA load with ldm 12 (24 bytes)");
}

static __nv_bfloat16 to_bf16(float x) { return __float2bfloat16_rn(x); }
static float from_bf16(__nv_bfloat16 x) { return __bfloat162float(x); }
static __half to_half(float x) { return __float2half_rn(x); }
static float from_half(__half x) { return __half2float(x); }

static void test_wmma(void)
{
    wmma_case<__nv_bfloat16>("bf16", to_bf16, from_bf16);
    wmma_case<__half>("fp16", to_half, from_half);
    cudasim_set_arch(75);
    __nv_bfloat16 *a = nullptr;
    float *c = nullptr;
    cudaMalloc(&a, 512 * sizeof(__nv_bfloat16));
    cudaMalloc(&c, 512 * sizeof(float));
    cudaMemset(a, 0, 512 * sizeof(__nv_bfloat16));
    cudaMemset(c, 0, 512 * sizeof(float));
    wmma_kernel<__nv_bfloat16><<<1, 32>>>(a, a, c, c + 256, 0, 16);
    expect_fault(cudaErrorNoKernelImageForDevice, "sm_80", "bf16 WMMA on sm_75");
    cudasim_set_arch(90);
}

/* ---- atomics ---- */

__global__ void atomic_kernel(unsigned *count, int *max_seen, float *sum)
{
    atomicAdd(count, 1u);
    atomicMax(max_seen, (int)(blockIdx.x * blockDim.x + threadIdx.x));
    atomicAdd(sum, 0.5f);
}

static void test_atomics(void)
{
    unsigned *count = nullptr;
    int *mx = nullptr;
    float *sum = nullptr;
    cudaMalloc(&count, 4);
    cudaMalloc(&mx, 4);
    cudaMalloc(&sum, 4);
    cudaMemset(count, 0, 4);
    cudaMemset(mx, 0, 4);
    cudaMemset(sum, 0, 4);
    atomic_kernel<<<300, 128>>>(count, mx, sum);
    unsigned hc = 0;
    int hm = 0;
    float hs = 0;
    cudaMemcpy(&hc, count, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hm, mx, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hs, sum, 4, cudaMemcpyDeviceToHost);
    tap_ok(hc == 38400 && hm == 38399 && hs == 19200.0f,
           "atomics over 300 blocks on several OS threads: count %u (38400), max %d (38399), sum %g (19200)", hc, hm,
           (double)hs);
    cudaFree(count);
    cudaFree(mx);
    cudaFree(sum);
}

/* ---- fp16 and bf16 on the device ---- */

__global__ void half_kernel(__half *h, __half2 *h2, __nv_bfloat16 *b, float *out)
{
    const int t = (int)threadIdx.x;
    const __half x = __float2half_rn(0.25f * (float)t);
    if (blockIdx.x == 0) {
        out[t] = __half2float(__hfma(x, x, __float2half_rn(1.0f)));
        out[32 + t] = __half2float(__shfl_xor_sync(0xffffffffu, x, 1));
        out[64 + t] = __bfloat162float(hsqrt(__float2bfloat16_rn((float)(t * t))));
    }
    atomicAdd(&h[1], __float2half_rn(1.0f)); /* the upper half of a 32-bit word */
    atomicAdd(h2, __floats2half2_rn(1.0f, 2.0f));
    atomicAdd(b, __float2bfloat16_rn(1.0f));
}

static void test_half(void)
{
    __half *h = nullptr;
    __half2 *h2 = nullptr;
    __nv_bfloat16 *b = nullptr;
    float *out = nullptr;
    cudaMalloc(&h, 4);
    cudaMalloc(&h2, 4);
    cudaMalloc(&b, 2);
    cudaMalloc(&out, 96 * sizeof(float));
    cudaMemset(h, 0, 4);
    cudaMemset(h2, 0, 4);
    cudaMemset(b, 0, 2);
    half_kernel<<<4, 32>>>(h, h2, b, out);
    std::vector<float> o(96);
    __half hh[2];
    __half2 hh2;
    __nv_bfloat16 hb;
    cudaMemcpy(o.data(), out, 96 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(hh, h, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hh2, h2, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hb, b, 2, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int t = 0; t < 32; t++) {
        bad += o[(size_t)t] != 1.0f + 0.0625f * (float)(t * t);
        bad += o[(size_t)(32 + t)] != 0.25f * (float)(t ^ 1);
        bad += o[(size_t)(64 + t)] != (float)t;
    }
    tap_ok(bad == 0, "__hfma, a shuffle of __half and hsqrt of bf16 give the exact results (%d wrong)", bad);
    const float2 v2 = __half22float2(hh2);
    tap_ok(__half2float(hh[1]) == 128.0f && __half2float(hh[0]) == 0.0f && v2.x == 128.0f && v2.y == 256.0f &&
               __bfloat162float(hb) == 128.0f,
           "16-bit atomics over 4 blocks: __half %g (128; its neighbour %g), __half2 (%g, %g), bf16 %g",
           (double)__half2float(hh[1]), (double)__half2float(hh[0]), (double)v2.x, (double)v2.y,
           (double)__bfloat162float(hb));
    cudaFree(h);
    cudaFree(h2);
    cudaFree(b);
    cudaFree(out);
}

/* ---- the runtime ---- */

static void test_copies(void)
{
    float *d = nullptr, *d2 = nullptr;
    cudaMalloc(&d, 1024);
    cudaMalloc(&d2, 1024);
    std::vector<char> h(2048, 1);
    is_err(cudaMemcpyAsync(d, d2, 512, cudaMemcpyHostToDevice, 0), cudaErrorInvalidValue,
           "HostToDevice from a device pointer");
    is_err(cudaGetLastError(), cudaErrorInvalidValue, "... and it is the last error");
    is_err(cudaGetLastError(), cudaSuccess, "... which cudaGetLastError cleared");
    is_err(cudaMemcpyAsync(h.data(), h.data() + 1024, 512, cudaMemcpyDeviceToHost, 0), cudaErrorInvalidValue,
           "DeviceToHost from a host pointer");
    is_err(cudaMemcpyAsync(d, h.data(), 512, cudaMemcpyDeviceToDevice, 0), cudaErrorInvalidValue,
           "DeviceToDevice from a host pointer");
    is_err(cudaMemcpyAsync(d, h.data(), 1025, cudaMemcpyHostToDevice, 0), cudaErrorInvalidValue,
           "1025 bytes into a 1024-byte buffer");
    is_err(cudaMemcpyAsync(reinterpret_cast<char *>(d) + 1000, h.data(), 100, cudaMemcpyHostToDevice, 0),
           cudaErrorInvalidValue, "a copy running past the end of its buffer");
    is_err(cudaMemsetAsync(h.data(), 0, 16, 0), cudaErrorInvalidValue, "cudaMemsetAsync on host memory");
    is_err(cudaMemcpyAsync(d, h.data(), 16, (cudaMemcpyKind)7, 0), cudaErrorInvalidMemcpyDirection,
           "a direction that is not one");
    cudaGetLastError();
    /* Pageable host memory: the source is read before the call returns; a
     * copy back into pageable memory is done when the call returns. */
    std::vector<float> src(256, 3.0f), dst(256, 0.0f);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudasim_set_delay(2000, 1);
    is_err(cudaMemcpyAsync(d, src.data(), 1024, cudaMemcpyHostToDevice, s), cudaSuccess, "a pageable upload");
    std::fill(src.begin(), src.end(), -1.0f);
    is_err(cudaMemcpyAsync(dst.data(), d, 1024, cudaMemcpyDeviceToHost, s), cudaSuccess, "a pageable download");
    tap_ok(dst[0] == 3.0f && dst[255] == 3.0f,
           "pageable copies: the upload took the source as it was at the call, the download was done at return (%g)",
           (double)dst[0]);
    cudasim_set_delay(0, 1);
    cudaStreamDestroy(s);
    cudaFree(d2);
    is_err(cudaMemcpy(h.data(), d2, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue,
           "a copy from a freed device buffer");
    cudaGetLastError();
    cudaFree(d);
    /* Registered and pinned memory. */
    void *pinned = nullptr;
    is_err(cudaHostAlloc(&pinned, 4096, cudaHostAllocPortable), cudaSuccess, "cudaHostAlloc");
    is_err(cudaHostRegister(pinned, 4096, 0), cudaErrorHostMemoryAlreadyRegistered,
           "registering pinned memory again");
    cudaGetLastError();
    std::vector<char> big(8192);
    is_err(cudaHostRegister(big.data(), big.size(), 0), cudaSuccess, "cudaHostRegister");
    is_err(cudaHostUnregister(big.data()), cudaSuccess, "cudaHostUnregister");
    is_err(cudaHostUnregister(big.data()), cudaErrorHostMemoryNotRegistered, "unregistering twice");
    cudaGetLastError();
    cudaFreeHost(pinned);
}

struct host_fn_args {
    pthread_t *who;
    int *flag;
    int want;
    int *seen;
    cudaError_t *inner;
};

static void CUDART_CB host_fn(void *p)
{
    host_fn_args *a = static_cast<host_fn_args *>(p);
    *a->who = pthread_self();
    if (a->seen)
        *a->seen = *a->flag;
    else
        usleep(20000), *a->flag = a->want;
    if (a->inner) {
        void *x = nullptr;
        *a->inner = cudaMalloc(&x, 16);
    }
}

static void test_streams(void)
{
    cudaStream_t a, b;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaEvent_t e, never, t0, t1;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync);
    cudaEventCreate(&never);
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    pthread_t who_a = 0, who_b = 0;
    int flag = 0, seen = -1;
    cudaError_t inner = cudaSuccess;
    host_fn_args fa = {&who_a, &flag, 42, nullptr, &inner}, fb = {&who_b, &flag, 0, &seen, nullptr};
    cudaEventRecord(t0, a);
    cudaLaunchHostFunc(a, host_fn, &fa);
    cudaEventRecord(e, a);
    cudaEventRecord(t1, a);
    is_err(cudaEventQuery(e), cudaErrorNotReady, "an event behind a sleeping host function is not ready");
    is_err(cudaGetLastError(), cudaErrorNotReady, "... and, as on CUDA, that is the last error");
    cudaStreamWaitEvent(b, e, 0);
    cudaLaunchHostFunc(b, host_fn, &fb);
    is_err(cudaStreamSynchronize(b), cudaSuccess, "stream b waits for the event of stream a");
    tap_ok(seen == 42, "stream b's host function ran after stream a's (saw %d, want 42)", seen);
    tap_ok(pthread_equal(who_a, who_b) && !pthread_equal(who_a, pthread_self()),
           "host functions of two streams run on one callback thread, not the caller's");
    tap_ok(inner == cudaErrorNotPermitted, "a CUDA call inside a host function is refused (%s)", cudaGetErrorName(inner));
    is_err(cudaEventQuery(never), cudaSuccess, "an event never recorded is complete");
    float ms = -1;
    cudaEventSynchronize(t1);
    is_err(cudaEventElapsedTime(&ms, t0, t1), cudaSuccess, "elapsed time between two timed events");
    tap_ok(ms >= 15.0f, "... which covers the 20 ms host function (%.1f ms)", (double)ms);
    is_err(cudaEventElapsedTime(&ms, t0, e), cudaErrorInvalidResourceHandle,
           "elapsed time of an event made with cudaEventDisableTiming");
    cudaGetLastError();
    cudasim_stats before, after;
    cudasim_get_stats(&before);
    cudaEventSynchronize(e);
    cudaEventSynchronize(t0);
    cudaStreamSynchronize(a);
    cudasim_get_stats(&after);
    tap_ok(after.host_waits - before.host_waits == 3 && after.spin_waits - before.spin_waits == 2,
           "host waits counted: 3, of which 2 would spin a core (all but the blocking-sync event's)");
    cudaEventDestroy(e);
    cudaEventDestroy(never);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    is_err(cudaEventRecord(e, a), cudaErrorInvalidResourceHandle, "recording a destroyed event");
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    is_err(cudaStreamSynchronize(a), cudaErrorInvalidResourceHandle, "a destroyed stream");
    cudaGetLastError();
}

__global__ void trap_kernel(int *p)
{
    if (threadIdx.x == 7)
        __trap();
    p[threadIdx.x] = 1;
}

static void test_errors(void)
{
    int *d = nullptr;
    cudaMalloc(&d, 256);
    trap_kernel<<<1, 32>>>(d);
    cudaError_t sync = cudaDeviceSynchronize();
    is_err(sync, cudaErrorLaunchFailure, "its fault comes back from the next synchronize");
    void *p = nullptr;
    is_err(cudaMalloc(&p, 16), cudaErrorLaunchFailure, "after a fault every call returns it (cudaMalloc)");
    tap_ok(strstr(cudasim_last_failure(), "__trap") && strstr(cudasim_last_failure(), "trap_kernel"),
           "the diagnostic names the kernel and the trap: %s", cudasim_last_failure());
    cudasim_reset_errors();
    is_err(cudaMalloc(&p, 16), cudaSuccess, "after cudasim_reset_errors the device works again");
    cudaFree(p);

    cudasim_fail("cudaMalloc", 2, 0, cudaErrorMemoryAllocation);
    void *x = nullptr, *y = nullptr, *z = nullptr;
    cudaError_t r1 = cudaMalloc(&x, 16), r2 = cudaMalloc(&y, 16), r3 = cudaMalloc(&z, 16);
    tap_ok(r1 == cudaSuccess && r2 == cudaErrorMemoryAllocation && r3 == cudaSuccess,
           "an injected failure of the second cudaMalloc (%s, %s, %s)", cudaGetErrorName(r1), cudaGetErrorName(r2),
           cudaGetErrorName(r3));
    cudaGetLastError();
    cudaFree(x);
    cudaFree(z);
    cudasim_fail("cudaHostRegister", 1, 0, cudaErrorMemoryAllocation);
    std::vector<char> h(4096);
    is_err(cudaHostRegister(h.data(), h.size(), 0), cudaErrorMemoryAllocation, "an injected refusal of cudaHostRegister");
    cudaEvent_t e;
    cudaEventCreate(&e);
    cudasim_fail("cudaEventQuery", 1, 0, cudaErrorNotReady);
    is_err(cudaEventQuery(e), cudaErrorNotReady, "an injected cudaErrorNotReady");
    is_err(cudaEventQuery(e), cudaSuccess, "... once");
    cudaEventDestroy(e);
    cudasim_fail(nullptr, 0, 0, 0);
    cudaGetLastError();
    cudaFree(d);
}

int main(void)
{
    tap_diag("simulated card sm_%d", cudasim_arch());
    test_barriers();
    test_warp_serial();
    test_barrier_reductions();
    test_warps();
    test_warp_misuse();
    test_launch_limits();
    test_memory();
    test_access_checks();
    test_wmma();
    test_atomics();
    test_half();
    test_copies();
    test_streams();
    test_errors();
    return tap_done();
}
