/* OpenBLAS's need for address space, met or refused before it can hang.
 *
 * What OpenBLAS (Debian's 0.3.21, pthreads, DYNAMIC_ARCH) does: each thread
 * that multiplies takes a 128 MiB buffer (BUFFER_SIZE, 32 << 22) from mmap,
 * and when the mapping fails it retries forever, at 100% CPU: under
 * `ulimit -v` a cblas_sgemm hangs instead of failing. Its constructor, which
 * runs before main(), starts one worker thread per extra core (8 MiB of
 * stack each), and under a tight limit the workers' start hangs or fails
 * the same way (pthread_create fails with EAGAIN and OpenBLAS prints its
 * RLIMIT_NPROC message and exits). Nothing in the process runs before that
 * constructor, so only OPENBLAS_NUM_THREADS=1 in the environment (one thread:
 * no workers, one buffer at the first multiply) lets a program linked with
 * OpenBLAS start under a few hundred MiB.
 *
 * blas_prepare() checks, under a finite RLIMIT_AS, that the address space
 * has room for every OpenBLAS thread's buffer and then has OpenBLAS map them
 * at once (a warm-up multiply), so later allocations cannot starve it.
 * Without a limit it does nothing. The host backend's ops_init calls it, so
 * an engine on the host backend fails at setup, with the sentence, instead
 * of hanging in its first multiply. Owns no state beyond "prepared".
 *
 * blas_sgemm() is the one multiply of the host ops, in an order of additions
 * that does not depend on how many threads OpenBLAS runs (below). */
#ifndef FERRY_KERNELS_BLAS_H
#define FERRY_KERNELS_BLAS_H

#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"

#define BLAS_BUFFER_BYTES ((uint64_t)128 << 20) /* OpenBLAS's per-thread buffer */

/* FERRY_OK when OpenBLAS can multiply without hanging: no address-space
 * limit, or room for BLAS_BUFFER_BYTES per OpenBLAS thread, which are then
 * mapped by a small multiply. FERRY_ERR_OUT_OF_MEMORY otherwise, saying the
 * limit, what is in use, what is needed and what to do. Thread-safe; after
 * the first success it returns at once. */
ferry_status blas_prepare(void);

/* Row-major C = alpha op(A) op(B) + beta C, as cblas_sgemm, with the same
 * bits whatever OpenBLAS's thread count. OpenBLAS sums the K dimension in
 * cache blocks of GEMM_Q; a remainder between one and two blocks is halved,
 * and its single-threaded driver rounds the half up to its kernel's step
 * where the multi-threaded one does not, so for a K that is not a multiple
 * of twice that step the two add in different groupings and differ in the
 * last bit (GPT-2's classifier reduces over the 50257 tokens of the
 * vocabulary, a weight gradient over B x T rows). A rank its launcher binds
 * to one core runs OpenBLAS on one thread, a single process on all of them:
 * N ranks would not train as one process with N micro-batches. Here K goes
 * as a head of a multiple of BLAS_K_STEP (every x86 kernel's GEMM_Q and
 * twice its step divide it, so both drivers cut it alike) and the tail
 * below it (one block in either), two calls at most. */
#define BLAS_K_STEP 64
void blas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc);

#endif
