/* The simulated device's WMMA (nvcuda::wmma), found before the toolkit's
 * <mma.h> on the simulator's include path: the 16x16x16 shape with bf16
 * (sm_80 and newer) or fp16 (sm_70 and newer) operands and fp32 or fp16
 * accumulators, the subset ferry's kernels use.
 *
 * A fragment is spread over the 32 lanes of a warp as on a GPU: each lane
 * holds 8 of the 256 elements (x[0..7]; lane l holds row-major elements
 * 8l..8l+7 of the logical 16x16 matrix, a layout of the simulator's own:
 * code must not depend on which lane holds what, and this layout differs
 * from any card's). load_matrix_sync and store_matrix_sync move each lane's
 * own elements when that lane runs them, so a lane that loads before another
 * lane has written the tile (a missing __syncwarp) reads stale data, as on a
 * GPU; mma_sync is a warp rendezvous of all 32 lanes. The pointer must be
 * 32-byte aligned and ldm a multiple of 16 bytes, as the CUDA programming
 * guide requires; a violation stops the kernel with cudaErrorMisalignedAddress.
 * The product of an mma is summed in fp32 in k order; a tensor core's order
 * and internal precision differ (docs/cudasim.md). */
#ifndef CUDASIM_MMA_H
#define CUDASIM_MMA_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stddef.h>
#include <stdint.h>

#include <type_traits>

namespace cudasim {
/* Checks one lane's load/store (alignment of ptr, ldm in elements of
 * `elem_bytes`); stops the kernel on a violation. */
void wmma_check(const void *ptr, unsigned ldm, size_t elem_bytes, const char *what, const char *file, int line);
/* The rendezvous of mma_sync: every lane passes its four fragments' element
 * arrays (a, b as floats already widened, c as floats); when the last lane
 * arrives, D = A B + C is computed and each lane's 8 results are written to
 * its `d_out`. `a_kind`/`b_kind` name the operand type for the arch check:
 * 0 fp16, 1 bf16. */
void wmma_mma(const float *a, const float *b, const float *c, float *d_out, int operand_kind,
              const char *file, int line);
int lane_id();
} // namespace cudasim

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
template <class T> inline float widen(T v) { return (float)v; }
inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float widen(__half v) { return __half2float(v); }
template <class T> inline T narrow(float v) { return (T)v; }
template <> inline __nv_bfloat16 narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> inline __half narrow<__half>(float v) { return __float2half_rn(v); }
template <class T> struct is_operand : std::integral_constant<bool, std::is_same<T, __nv_bfloat16>::value ||
                                                                      std::is_same<T, __half>::value> {};
} // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void> class fragment {
    static_assert(M == 16 && N == 16 && K == 16,
                  "the simulated device implements the 16x16x16 WMMA shape only");
    static_assert(std::is_same<Use, accumulator>::value ? (std::is_same<T, float>::value || std::is_same<T, __half>::value)
                                                        : detail::is_operand<T>::value,
                  "WMMA operands are __nv_bfloat16 or __half, accumulators float or __half");

public:
    typedef T element_type;
    static constexpr int num_elements = 8;
    T x[num_elements];
};

/* Logical (row, col) of a lane's element e. */
inline int elem_row(int lane, int e) { return (lane * 8 + e) / 16; }
inline int elem_col(int lane, int e) { return (lane * 8 + e) % 16; }

template <class Use, class T, class Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, const T &v)
{
    for (int e = 0; e < 8; e++)
        f.x[e] = v;
}

/* Operand tiles: the layout is the fragment's. */
template <class Use, class T, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm,
                             const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load names its layout");
    ::cudasim::wmma_check(p, ldm, sizeof(T), "load_matrix_sync", file, line);
    const int lane = ::cudasim::lane_id();
    for (int e = 0; e < 8; e++) {
        int r = elem_row(lane, e), c = elem_col(lane, e);
        f.x[e] = std::is_same<Layout, row_major>::value ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    }
}

template <class T>
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T> &f, const T *p, unsigned ldm, layout_t layout,
                             const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    ::cudasim::wmma_check(p, ldm, sizeof(T), "load_matrix_sync", file, line);
    const int lane = ::cudasim::lane_id();
    for (int e = 0; e < 8; e++) {
        int r = elem_row(lane, e), c = elem_col(lane, e);
        f.x[e] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    }
}

template <class T>
inline void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ldm, layout_t layout,
                              const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    ::cudasim::wmma_check(p, ldm, sizeof(T), "store_matrix_sync", file, line);
    const int lane = ::cudasim::lane_id();
    for (int e = 0; e < 8; e++) {
        int r = elem_row(lane, e), c = elem_col(lane, e);
        (layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[e];
    }
}

template <class TA, class LA, class TB, class LB, class TC, class TD>
inline void mma_sync(fragment<accumulator, 16, 16, 16, TD> &d, const fragment<matrix_a, 16, 16, 16, TA, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, TB, LB> &b, const fragment<accumulator, 16, 16, 16, TC> &c,
                     const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    static_assert(std::is_same<TA, TB>::value, "WMMA operands A and B have one element type");
    float fa[8], fb[8], fc[8], fd[8];
    for (int e = 0; e < 8; e++) {
        fa[e] = detail::widen(a.x[e]);
        fb[e] = detail::widen(b.x[e]);
        fc[e] = detail::widen(c.x[e]);
    }
    ::cudasim::wmma_mma(fa, fb, fc, fd, std::is_same<TA, __nv_bfloat16>::value ? 1 : 0, file, line);
    for (int e = 0; e < 8; e++)
        d.x[e] = detail::narrow<TD>(fd[e]);
}

} // namespace wmma
} // namespace nvcuda

#endif
