/* Checking and reserving OpenBLAS's address space, and the host ops'
 * multiply, whose sums do not depend on OpenBLAS's threads (see blas.h). */
#include "backend/ops/blas.h"

#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "common/error.h"
#include "common/units.h"

/* OpenBLAS's own: how many threads it multiplies with. */
int openblas_get_num_threads(void);
void openblas_set_num_threads(int num_threads);

/* One OpenBLAS thread for every product (see blas.h). Idempotent, and only
 * a store once it holds. */
static void one_thread(void)
{
    if (openblas_get_num_threads() != 1)
        openblas_set_num_threads(1);
}

#define WARMUP_N 256 /* large enough that OpenBLAS splits it over all its threads */

static pthread_mutex_t prepare_lock = PTHREAD_MUTEX_INITIALIZER;
static int prepared; /* read without the lock: set once, never cleared */

/* Bytes of address space this process holds now (VmSize). */
static uint64_t address_space_in_use(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (f) {
        if (fscanf(f, "%llu", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return (uint64_t)pages * 4096u;
}

/* Maps what OpenBLAS will need with a multiply that every thread joins. */
static ferry_status warm_up(void)
{
    float *a = calloc((size_t)3 * WARMUP_N * WARMUP_N, sizeof *a);
    if (!a)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate the %d x %d matrices that prepare OpenBLAS",
                       WARMUP_N, WARMUP_N);
    float *b = a + WARMUP_N * WARMUP_N, *c = b + WARMUP_N * WARMUP_N;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, WARMUP_N, WARMUP_N, WARMUP_N, 1.0f, a, WARMUP_N, b,
                WARMUP_N, 0.0f, c, WARMUP_N);
    free(a);
    return FERRY_OK;
}

/* Under a finite limit: is there room for `need` more bytes? A PROT_NONE
 * reservation counts against RLIMIT_AS exactly as OpenBLAS's buffers will. */
static ferry_status check_room(const struct rlimit *rl, uint64_t need, int threads)
{
    void *p = mmap(NULL, (size_t)need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
        munmap(p, (size_t)need);
        return FERRY_OK;
    }
    int e = errno;
    char lim[32], used[32], want[32], total[32];
    uint64_t in_use = address_space_in_use();
    return err_set(FERRY_ERR_OUT_OF_MEMORY,
                   "the address-space limit (ulimit -v) is %s and this process uses %s of it, but OpenBLAS needs "
                   "%s more for its matrix multiplies (%d thread%s x 128 MiB buffer; %s), and without it OpenBLAS "
                   "retries forever instead of failing: raise ulimit -v to at least %s or lift it%s",
                   units_fmt_bytes(lim, sizeof lim, (uint64_t)rl->rlim_cur),
                   units_fmt_bytes(used, sizeof used, in_use), units_fmt_bytes(want, sizeof want, need), threads,
                   threads == 1 ? "" : "s", strerror(e), units_fmt_bytes(total, sizeof total, in_use + need),
                   threads == 1 ? "" : ", or run with OPENBLAS_NUM_THREADS=1 (one buffer)");
}

ferry_status blas_prepare(void)
{
    if (__atomic_load_n(&prepared, __ATOMIC_ACQUIRE))
        return FERRY_OK;
    pthread_mutex_lock(&prepare_lock);
    ferry_status st = FERRY_OK;
    struct rlimit rl;
    if (!prepared && getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        int threads = openblas_get_num_threads();
        if (threads < 1)
            threads = 1;
        st = check_room(&rl, (uint64_t)threads * BLAS_BUFFER_BYTES, threads);
        if (st == FERRY_OK)
            st = warm_up();
    }
    if (st == FERRY_OK) {
        one_thread();
        __atomic_store_n(&prepared, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&prepare_lock);
    return st;
}

void blas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc)
{
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    one_thread();
    if (K == 0) { /* K = 0 still scales C by beta, as sgemm does */
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, 0, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* K in blocks of BLAS_K_BLOCK, each one block for either driver, added
     * into C in order: columns of A (rows when transposed), rows of B
     * (columns when transposed). */
    for (int k = 0; k < K; k += BLAS_K_BLOCK) {
        int kb = K - k < BLAS_K_BLOCK ? K - k : BLAS_K_BLOCK;
        const float *a = trans_a ? A + (size_t)k * lda : A + k;
        const float *b = trans_b ? B + k : B + (size_t)k * ldb;
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, kb, alpha, a, lda, b, ldb, k == 0 ? beta : 1.0f, C, ldc);
    }
}
