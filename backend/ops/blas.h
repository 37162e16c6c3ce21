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
#ifndef FERRY_BACKEND_OPS_BLAS_H
#define FERRY_BACKEND_OPS_BLAS_H

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
 * bits whatever OpenBLAS's thread count was set to. OpenBLAS's
 * multi-threaded driver does not add as its single-threaded one does: it
 * halves a K remainder between one and two cache blocks differently, and
 * on some kernels (Zen's) the tiles at the edges of each thread's share of
 * M and N sum in another grouping, so the last bit of a product depended
 * on the thread count, and N ranks (one core each) did not train as one
 * process with N micro-batches. So every product here runs on one OpenBLAS
 * thread (the host backend's streams are its parallelism; a program run
 * with OPENBLAS_NUM_THREADS=1, as the tests are, loses nothing), and K goes
 * in blocks of BLAS_K_BLOCK, below every x86 kernel's GEMM_Q, added into C
 * in order: each call is one block whatever the driver. */
#define BLAS_K_BLOCK 128
void blas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc);

#endif
