/* The one error check for CUDA and cuBLAS(Lt) calls (NCCL's are C, in
 * comm_nccl.c, with its own check): a failure becomes
 * FERRY_ERR_BACKEND with a message naming the call, the library's own error
 * text, the file and the line. Use inside functions returning ferry_status:
 *     CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
 * A failed CUDA call is also the thread's last error, which the next launch
 * check (cudaGetLastError) would report as its own: CUDA_CHECK takes it, so a
 * recovered error blames no later kernel (a sticky one stays: every later
 * call returns it anyway). Only .cu files include this header. */
#ifndef FERRY_BACKEND_CUDA_CHECK_H
#define FERRY_BACKEND_CUDA_CHECK_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "common/error.h"

/* Library-specific names and text for an error code. */
static inline const char *cuda_check_text(cudaError_t e) { return cudaGetErrorString(e); }
static inline const char *cuda_check_text(cublasStatus_t e) { return cublasGetStatusString(e); }
static inline bool cuda_check_failed(cudaError_t e) { return e != cudaSuccess; }
static inline bool cuda_check_failed(cublasStatus_t e) { return e != CUBLAS_STATUS_SUCCESS; }
static inline int cuda_check_code(cudaError_t e) { return (int)e; }
static inline int cuda_check_code(cublasStatus_t e) { return (int)e; }
static inline void cuda_check_take(cudaError_t) { (void)cudaGetLastError(); }
static inline void cuda_check_take(cublasStatus_t) {}

#define CUDA_CHECK(call)                                                                       \
    do {                                                                                       \
        auto cuda_check_rc_ = (call);                                                          \
        if (cuda_check_failed(cuda_check_rc_)) {                                               \
            cuda_check_take(cuda_check_rc_);                                                   \
            return err_set(FERRY_ERR_BACKEND, "%s failed: %s (code %d) at %s:%d", #call,       \
                           cuda_check_text(cuda_check_rc_), cuda_check_code(cuda_check_rc_),   \
                           __FILE__, __LINE__);                                                \
        }                                                                                      \
    } while (0)

/* After a kernel launch: reports a bad launch configuration at once. */
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#endif
