/* Tensor-core building blocks of the CUDA ops that go below WMMA (the
 * attention kernels): warp-wide matrix loads from shared memory (ldmatrix),
 * the m16n8k16 product with fp32 accumulators (mma.sync), and asynchronous
 * global-to-shared copies (cp.async), each one inline PTX instruction with
 * the register layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16
 * with floating point type"; ldmatrix's thread-to-row mapping), which the
 * simulated device implements (dev/cudasim/ptx.cpp) and checks.
 *
 * Fragments, for a warp, groupID g = lane / 4, t = lane % 4:
 *   A (16 x 16, row-major, 4 registers of two 16-bit values): a0 row g,
 *     columns 2t, 2t+1; a1 row g+8; a2 row g, columns 2t+8, 2t+9; a3 row g+8,
 *     columns 2t+8, 2t+9;
 *   B (16 x 8, k x n, 2 registers): b0 rows 2t, 2t+1 of column g; b1 rows
 *     2t+8, 2t+9;
 *   C (16 x 8 fp32, 4 values): c0, c1 row g, columns 2t, 2t+1; c2, c3 row g+8.
 * So the C fragments of two adjacent 16 x 8 products are, packed in pairs,
 * the A fragment of their 16 x 16 (attention's P @ V straight from the
 * registers of S = Q K^T).
 *
 * Each function takes the architecture the kernel was written for as a
 * template argument, chosen at launch from the card: ARCH 80 (sm_80 and
 * newer: m16n8k16 in one instruction, cp.async), ARCH 75 (Turing: fp16
 * only, m16n8k16 as two m16n8k8, copies through registers). Machine code
 * compiled for a card older than the instruction traps instead (that
 * kernel is never launched there). Owns no state; included by .cu files. */
#ifndef FERRY_BACKEND_OPS_MMA_CUH
#define FERRY_BACKEND_OPS_MMA_CUH

#include <string.h>

#include <type_traits>

#include "backend/ops/cuda_util.cuh"

/* Whether the machine code being compiled has the instructions of ARCH
 * (the host pass and the simulated device have every one). */
#if defined(__CUDA_ARCH__)
#define CU_MMA_HAS(arch) (__CUDA_ARCH__ >= (arch))
#else
#define CU_MMA_HAS(arch) 1
#endif

/* The 32-bit shared-memory address ldmatrix and cp.async take. */
static __device__ __forceinline__ uint32_t cu_smem(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* Four 8 x 8 matrices of 16-bit values: lane 8i + r gives the address of
 * row r of matrix i (16 bytes, 16-byte aligned); register i receives row
 * lane / 4, elements 2 (lane % 4) and + 1, of matrix i (the transpose of
 * each matrix with TRANS). */
template <bool TRANS> static __device__ __forceinline__ void cu_ldsm4(uint32_t (&r)[4], uint32_t addr)
{
#if CU_MMA_HAS(750)
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
#else
    (void)r, (void)addr;
    __trap();
#endif
}

/* d (16 x 8 fp32, in place) += a (16 x 16) b (16 x 8), T bf16 or f16. */
template <typename T, int ARCH>
static __device__ __forceinline__ void cu_mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t b0,
                                                   const uint32_t b1)
{
    if constexpr (ARCH >= 80) {
#if CU_MMA_HAS(800)
        if constexpr (std::is_same<T, bf16>::value)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                         "{%8, %9}, {%0, %1, %2, %3};\n"
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
        else
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                         "{%8, %9}, {%0, %1, %2, %3};\n"
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
        (void)d, (void)a, (void)b0, (void)b1;
        __trap();
#endif
    } else {
        static_assert(std::is_same<T, f16>::value, "Turing's tensor cores multiply fp16 only");
#if CU_MMA_HAS(750)
        /* k 0..7 (a0, a1, b0), then k 8..15 (a2, a3, b1): the m16n8k8
         * fragments are the halves of the m16n8k16 ones. */
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                     "{%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(b0));
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                     "{%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[2]), "r"(a[3]), "r"(b1));
#else
        (void)d, (void)a, (void)b0, (void)b1;
        __trap();
#endif
    }
}

/* Two fp32 values as one register of two T, the first in the low half. */
template <typename T> static __device__ __forceinline__ uint32_t cu_pack2(float lo, float hi)
{
    typename cu_type<T>::pair p = cu_type<T>::round2(lo, hi);
    uint32_t r;
    memcpy(&r, &p, 4);
    return r;
}

/* 16 bytes from global `src` (when `valid`; else zeros) to shared `dst`:
 * with ARCH 80 an asynchronous copy (cu_cp_commit / cu_cp_wait complete
 * it), with ARCH 75 a load and a store. */
template <int ARCH> static __device__ __forceinline__ void cu_cp16(void *dst, const void *src, bool valid)
{
    if constexpr (ARCH >= 80) {
#if CU_MMA_HAS(800)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(cu_smem(dst)), "l"(src),
                     "r"(valid ? 16 : 0));
#else
        (void)dst, (void)src, (void)valid;
        __trap();
#endif
    } else {
        *static_cast<uint4 *>(dst) = valid ? *static_cast<const uint4 *>(src) : make_uint4(0, 0, 0, 0);
    }
}

/* Closes the group of copies issued since the last commit. */
template <int ARCH> static __device__ __forceinline__ void cu_cp_commit()
{
    if constexpr (ARCH >= 80) {
#if CU_MMA_HAS(800)
        asm volatile("cp.async.commit_group;\n" ::);
#else
        __trap();
#endif
    }
}

/* Waits until at most the N newest groups of this thread's copies are
 * still in flight (a barrier then shows them to the other threads). */
template <int ARCH, int N> static __device__ __forceinline__ void cu_cp_wait()
{
    if constexpr (ARCH >= 80) {
#if CU_MMA_HAS(800)
        asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#else
        __trap();
#endif
    }
}

#endif
