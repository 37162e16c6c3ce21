/* What a test may ask of the simulated device beyond the CUDA runtime API:
 * counters of what happened, the diagnostic of the last kernel failure, and
 * the knobs a test turns between its cases (the card, the schedule, faults
 * to inject, a fresh device after a sticky error, which a real process could
 * only get by exiting). Plain C; only programs linked with the simulator
 * (dev/cudasim) have these symbols. */
#ifndef CUDASIM_CUDASIM_H
#define CUDASIM_CUDASIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cudasim_stats {
    uint64_t launches;       /* kernels accepted */
    uint64_t launch_refusals; /* kernels refused at launch */
    uint64_t blocks;         /* blocks run */
    uint64_t host_waits;     /* cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize */
    uint64_t spin_waits;     /* ... of which a card would spin a CPU core for (no blocking sync) */
    uint64_t host_funcs;     /* host functions run */
    uint64_t matmuls;        /* cublasLtMatmul calls run */
    uint64_t device_bytes;   /* device memory in use */
    uint64_t device_peak;    /* its peak */
    uint64_t collectives;    /* NCCL operations run */
} cudasim_stats;

void cudasim_get_stats(cudasim_stats *out);
/* The sentence of the last sticky error (a kernel that failed, an illegal
 * address), or "" when there was none. */
const char *cudasim_last_failure(void);
/* The architecture simulated (70 ... 90) and its change; to be called when
 * no stream has work. Returns 0, or -1 for an architecture not in the table. */
int cudasim_arch(void);
int cudasim_set_arch(int cc);
/* "ascending", "descending", "random" (with `seed`), "warp-ascending" or
 * "warp-descending". Returns 0 or -1. */
int cudasim_set_schedule(const char *kind, uint64_t seed);
/* What each shared-memory access is checked for: "race" (bounds and the race
 * check), "bounds" or "off". Returns 0, or -1 for a name not known or a
 * check this build cannot make (an ASan build has no access hooks). */
int cudasim_set_shared_check(const char *kind);
/* Up to `max_us` microseconds of seeded random delay before each stream
 * operation (0: none). */
void cudasim_set_delay(unsigned max_us, uint64_t seed);
/* Makes calls of `function` (a runtime, cuBLASLt or NCCL function name)
 * fail: the `nth` next one (1 = the next), and every one after it when
 * `repeat` is nonzero, with error code `code` (cudaError_t, cublasStatus_t
 * or ncclResult_t as the function returns). `function` NULL clears all. */
void cudasim_fail(const char *function, int nth, int repeat, int code);
/* Forgets a sticky error and the calling thread's last error, waits for
 * every stream: a test's way to go on after provoking a kernel failure. */
void cudasim_reset_errors(void);

#ifdef __cplusplus
}
#endif
#endif
