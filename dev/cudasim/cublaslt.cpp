/* The cuBLASLt subset of the simulated device: handles, matmul descriptors,
 * matrix layouts, preferences, the heuristic and the matmul, checked as
 * strictly as the library's documentation allows and computed through
 * OpenBLAS in fp32.
 *
 * What is checked, with the status cuBLASLt gives:
 *   - every handle and descriptor is live (CUBLAS_STATUS_NOT_INITIALIZED for
 *     a handle, INVALID_VALUE for a descriptor), every attribute is one this
 *     subset knows with the size cuBLASLt stores it in (INVALID_VALUE);
 *   - the types: A and B bf16, fp16 or fp32 alike, C like D, D like A or
 *     fp32, compute and scale fp32; column-major layouts (NOT_SUPPORTED
 *     otherwise); strided batches (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT and
 *     _STRIDED_BATCH_OFFSET), the same count in all four layouts and no
 *     negative stride (INVALID_VALUE otherwise);
 *   - the shapes: op(A) m x k, op(B) k x n, C and D m x n, every leading
 *     dimension at least its rows (INVALID_VALUE);
 *   - the bias epilogue: a bias pointer, a bias type that is D's (the
 *     documented default), m elements (INVALID_VALUE);
 *   - at cublasLtMatmul: the algorithm was chosen by the heuristic for these
 *     same descriptors (INVALID_VALUE otherwise: a stale plan), each pointer
 *     is aligned as the preference promised when it was chosen
 *     (NOT_SUPPORTED), the workspace holds what the algorithm needs
 *     (INVALID_VALUE), the stream is live;
 *   - when it runs: A, B, C (read only when beta != 0, so an uninitialised
 *     C with beta = 0 is fine, as documented), D and the bias lie wholly in
 *     live device buffers; two matmuls never use one workspace at the same
 *     time. A failure there is a sticky cudaErrorIllegalAddress, as a
 *     kernel's stray access would be.
 * D = alpha op(A) op(B) + beta C [+ bias per row], batch by batch, summed in fp32 by
 * OpenBLAS (cuBLASLt's kernels sum in another order) and rounded to
 * nearest even where D is 16-bit. An algorithm that needs a workspace finds
 * it overwritten with garbage while it runs. */
#include <cblas.h>
#include <cublasLt.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <set>

#include "sim.h"

namespace cudasim {

namespace {

struct lt_handle {
    int unused;
};

struct lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    int32_t bias_type = -1;
    int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
};

struct lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t order = CUBLASLT_ORDER_COL;
    int32_t batch = 1;
    int64_t batch_stride = 0; /* elements from one batch's matrix to the next */
};

struct lt_pref {
    uint64_t max_ws = 0;
    uint32_t align[4] = {256, 256, 256, 256}; /* A, B, C, D: cuBLASLt's defaults */
};

/* What the heuristic puts in cublasLtMatmulAlgo_t: a signature of the
 * descriptors it was chosen for and what it assumes. */
struct algo_data {
    uint64_t magic;
    uint64_t signature;
    uint32_t need_align[4];
    uint64_t workspace;
};
static_assert(sizeof(algo_data) <= sizeof(cublasLtMatmulAlgo_t), "algo fits");
constexpr uint64_t ALGO_MAGIC = 0xc0da5133a160ull;

struct registry {
    std::mutex mu;
    std::set<const void *> live;
    std::vector<std::pair<uintptr_t, uintptr_t>> ws_busy; /* workspaces in use by running matmuls */
};
registry &R()
{
    static registry *r = new registry; /* never destroyed: reachable to the end */
    return *r;
}
#define g_mu (R().mu)
#define g_live (R().live)
#define g_ws_busy (R().ws_busy)

bool live(const void *p)
{
    std::lock_guard<std::mutex> g(g_mu);
    return g_live.count(p) != 0;
}

void add_live(const void *p)
{
    std::lock_guard<std::mutex> g(g_mu);
    g_live.insert(p);
}

bool drop_live(const void *p)
{
    std::lock_guard<std::mutex> g(g_mu);
    return g_live.erase(p) != 0;
}

cublasStatus_t refuse(cublasStatus_t st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cublasStatus_t refuse(cublasStatus_t st, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    diag("cuBLASLt: %s (%s)", buf, cublasGetStatusName(st));
    return st;
}

size_t type_size(cudaDataType_t t)
{
    switch (t) {
    case CUDA_R_16BF:
    case CUDA_R_16F: return 2;
    case CUDA_R_32F: return 4;
    default: return 0;
    }
}

const char *type_name(int t)
{
    switch (t) {
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_32F: return "CUDA_R_32F";
    default: return "an unsupported type";
    }
}

float load(const void *p, cudaDataType_t t, size_t i)
{
    switch (t) {
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    case CUDA_R_16F: return __half2float(static_cast<const __half *>(p)[i]);
    default: return static_cast<const float *>(p)[i];
    }
}

void store(void *p, cudaDataType_t t, size_t i, float v)
{
    switch (t) {
    case CUDA_R_16BF: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); break;
    case CUDA_R_16F: static_cast<__half *>(p)[i] = __float2half_rn(v); break;
    default: static_cast<float *>(p)[i] = v; break;
    }
}

struct shape {
    uint64_t m, n, k;
    cudaDataType_t bias_type;
};

uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h;
}

uint64_t signature(const lt_desc &d, const lt_layout &a, const lt_layout &b, const lt_layout &c, const lt_layout &o)
{
    uint64_t h = 0;
    for (uint64_t v : {(uint64_t)d.compute, (uint64_t)d.scale, (uint64_t)d.transa, (uint64_t)d.transb,
                       (uint64_t)d.epilogue, (uint64_t)(uint32_t)d.bias_type})
        h = mix(h, v);
    for (const lt_layout *l : {&a, &b, &c, &o})
        for (uint64_t v : {(uint64_t)l->type, l->rows, l->cols, (uint64_t)l->ld, (uint64_t)l->batch,
                           (uint64_t)l->batch_stride})
            h = mix(h, v);
    return h;
}

cublasStatus_t check_layout(const char *name, const lt_layout &l)
{
    if (!type_size(l.type))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s is of type %d; this subset has bf16, fp16 and fp32",
                      name, (int)l.type);
    if (l.order != CUBLASLT_ORDER_COL)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %s: only column-major layouts are simulated", name);
    if (l.batch < 1 || l.batch_stride < 0)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matrix %s: batch count %d and stride %lld; a count of 1 or more "
                      "and a stride of 0 or more", name, l.batch, (long long)l.batch_stride);
    if (l.ld < (int64_t)l.rows || l.ld < 1)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matrix %s: leading dimension %lld is below its %llu rows", name,
                      (long long)l.ld, (unsigned long long)l.rows);
    return CUBLAS_STATUS_SUCCESS;
}

/* The descriptors together: types, shapes, epilogue. */
cublasStatus_t validate(const lt_desc &d, const lt_layout &a, const lt_layout &b, const lt_layout &c,
                        const lt_layout &o, shape *s)
{
    cublasStatus_t st;
    if ((st = check_layout("A", a)) || (st = check_layout("B", b)) || (st = check_layout("C", c)) ||
        (st = check_layout("D", o)))
        return st;
    if (a.batch != b.batch || a.batch != c.batch || a.batch != o.batch)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "batch counts A %d, B %d, C %d, D %d: one count for all four",
                      a.batch, b.batch, c.batch, o.batch);
    if (d.compute != CUBLAS_COMPUTE_32F || d.scale != CUDA_R_32F)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "compute type %d with scale type %d: this subset computes in "
                      "CUBLAS_COMPUTE_32F with CUDA_R_32F scalars", (int)d.compute, (int)d.scale);
    if (a.type != b.type)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "A is %s but B is %s", type_name(a.type), type_name(b.type));
    if (c.type != o.type)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "C is %s but D is %s", type_name(c.type), type_name(o.type));
    if (o.type != a.type && o.type != CUDA_R_32F)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "D is %s with %s operands (D is the operands' type or fp32)",
                      type_name(o.type), type_name(a.type));
    if (d.transc != CUBLAS_OP_N || (d.transa != CUBLAS_OP_N && d.transa != CUBLAS_OP_T) ||
        (d.transb != CUBLAS_OP_N && d.transb != CUBLAS_OP_T))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "transposes A %d, B %d, C %d: A and B N or T, C N", d.transa,
                      d.transb, d.transc);
    s->m = o.rows;
    s->n = o.cols;
    const uint64_t am = d.transa == CUBLAS_OP_T ? a.cols : a.rows, ak = d.transa == CUBLAS_OP_T ? a.rows : a.cols;
    const uint64_t bk = d.transb == CUBLAS_OP_T ? b.cols : b.rows, bn = d.transb == CUBLAS_OP_T ? b.rows : b.cols;
    s->k = ak;
    if (am != s->m || bn != s->n || bk != ak)
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      "shapes disagree: op(A) is %llu x %llu (A %llu x %llu, %s), op(B) %llu x %llu (B %llu x %llu, "
                      "%s), D %llu x %llu", (unsigned long long)am, (unsigned long long)ak,
                      (unsigned long long)a.rows, (unsigned long long)a.cols, d.transa == CUBLAS_OP_T ? "T" : "N",
                      (unsigned long long)bk, (unsigned long long)bn, (unsigned long long)b.rows,
                      (unsigned long long)b.cols, d.transb == CUBLAS_OP_T ? "T" : "N", (unsigned long long)s->m,
                      (unsigned long long)s->n);
    if (c.rows != o.rows || c.cols != o.cols)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "C is %llu x %llu but D %llu x %llu", (unsigned long long)c.rows,
                      (unsigned long long)c.cols, (unsigned long long)o.rows, (unsigned long long)o.cols);
    s->bias_type = o.type;
    if (d.epilogue == CUBLASLT_EPILOGUE_BIAS) {
        if (d.bias_type != -1 && d.bias_type != (int32_t)o.type)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "the bias is %s but D is %s: the bias epilogue takes D's type",
                          type_name(d.bias_type), type_name(o.type));
    } else if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u: this subset has DEFAULT and BIAS", d.epilogue);
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* Bytes from a matrix's first element past its last one's, every batch. */
size_t extent(const lt_layout &l)
{
    return (size_t)((uint64_t)l.ld * (l.cols - 1) + l.rows + (uint64_t)(l.batch - 1) * (uint64_t)l.batch_stride) *
           type_size(l.type);
}

/* Whole ranges in live device buffers, when the matmul runs. */
bool operand_ok(const char *name, const void *p, size_t bytes, std::string *why)
{
    std::string w;
    if (device_range_ok(p, bytes, &w))
        return true;
    *why = std::string("matrix ") + name + " (" + std::to_string(bytes) + " bytes as its layout says): " + w;
    return false;
}

/* A column-major copy in fp32 with leading dimension rows. */
std::vector<float> widen(const void *p, const lt_layout &l)
{
    std::vector<float> out((size_t)(l.rows * l.cols));
    for (uint64_t j = 0; j < l.cols; j++)
        for (uint64_t i = 0; i < l.rows; i++)
            out[(size_t)(j * l.rows + i)] = load(p, l.type, (size_t)(j * (uint64_t)l.ld + i));
    return out;
}

struct matmul_job {
    lt_desc d;
    lt_layout a, b, c, o;
    shape s;
    float alpha, beta;
    const void *A, *B, *C;
    void *D;
    void *ws;
    size_t ws_need;
};

/* One batch's product: D = alpha op(A) op(B) + beta C [+ bias]. */
void one_matmul(const matmul_job &j, const void *A, const void *B, const void *C, void *D)
{
    const bool read_c = j.beta != 0.0f;
    const int m = (int)j.s.m, n = (int)j.s.n, k = (int)j.s.k;
    std::vector<float> af = widen(A, j.a), bf = widen(B, j.b);
    const CBLAS_TRANSPOSE ta = j.d.transa == CUBLAS_OP_T ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = j.d.transb == CUBLAS_OP_T ? CblasTrans : CblasNoTrans;
    const bool bias = j.d.epilogue == CUBLASLT_EPILOGUE_BIAS;
    if (j.o.type == CUDA_R_32F && !bias && (!read_c || (C == D && j.c.ld == j.o.ld))) {
        /* fp32 D accumulated in place: straight into D. */
        cblas_sgemm(CblasColMajor, ta, tb, m, n, k, j.alpha, af.data(), (int)j.a.rows, bf.data(), (int)j.b.rows,
                    j.beta, static_cast<float *>(D), (int)j.o.ld);
        return;
    }
    std::vector<float> df((size_t)m * n);
    cblas_sgemm(CblasColMajor, ta, tb, m, n, k, j.alpha, af.data(), (int)j.a.rows, bf.data(), (int)j.b.rows, 0.0f,
                df.data(), m);
    for (int col = 0; col < n; col++)
        for (int row = 0; row < m; row++) {
            float v = df[(size_t)col * m + row];
            if (read_c)
                v += j.beta * load(C, j.c.type, (size_t)col * (size_t)j.c.ld + row);
            if (bias)
                v += load(j.d.bias, j.s.bias_type, (size_t)row);
            store(D, j.o.type, (size_t)col * (size_t)j.o.ld + row, v);
        }
}

void run_matmul(const matmul_job &j)
{
    std::string why;
    const bool read_c = j.beta != 0.0f;
    bool ok = operand_ok("A", j.A, extent(j.a), &why) && operand_ok("B", j.B, extent(j.b), &why) &&
              (!read_c || operand_ok("C", j.C, extent(j.c), &why)) && operand_ok("D", j.D, extent(j.o), &why);
    if (ok && j.d.epilogue == CUBLASLT_EPILOGUE_BIAS)
        ok = operand_ok("bias", j.d.bias, (size_t)j.s.m * type_size(j.s.bias_type), &why);
    if (ok && j.ws_need)
        ok = operand_ok("workspace", j.ws, j.ws_need, &why);
    if (!ok) {
        set_sticky(cudaErrorIllegalAddress, "cublasLtMatmul (m=%llu n=%llu k=%llu): %s", (unsigned long long)j.s.m,
                   (unsigned long long)j.s.n, (unsigned long long)j.s.k, why.c_str());
        return;
    }
    const uintptr_t wlo = (uintptr_t)j.ws, whi = wlo + j.ws_need;
    if (j.ws_need) {
        std::lock_guard<std::mutex> g(g_mu);
        for (auto &r : g_ws_busy)
            if (wlo < r.second && r.first < whi) {
                set_sticky(cudaErrorIllegalAddress, "two cuBLASLt matmuls ran at the same time with the same "
                           "workspace (%p, %zu bytes): their scratch data overwrite each other", j.ws, j.ws_need);
                return;
            }
        g_ws_busy.emplace_back(wlo, whi);
        memset(j.ws, 0xab, j.ws_need);
    }
    stat_add(STAT_MATMULS);
    for (int32_t b = 0; b < j.o.batch; b++) {
        const char *A = static_cast<const char *>(j.A) + (size_t)b * j.a.batch_stride * type_size(j.a.type);
        const char *B = static_cast<const char *>(j.B) + (size_t)b * j.b.batch_stride * type_size(j.b.type);
        const char *C = j.C ? static_cast<const char *>(j.C) + (size_t)b * j.c.batch_stride * type_size(j.c.type)
                            : nullptr;
        char *D = static_cast<char *>(j.D) + (size_t)b * j.o.batch_stride * type_size(j.o.type);
        one_matmul(j, A, B, C, D);
    }
    if (j.ws_need) {
        std::lock_guard<std::mutex> g(g_mu);
        for (size_t i = 0; i < g_ws_busy.size(); i++)
            if (g_ws_busy[i].first == wlo) {
                g_ws_busy.erase(g_ws_busy.begin() + (long)i);
                break;
            }
    }
}

template <class T> cublasStatus_t set_attr(T *field, const void *buf, size_t size, const char *what)
{
    if (!buf || size != sizeof(T))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s takes %zu bytes, was given %zu", what, sizeof(T), size);
    memcpy(field, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

lt_desc *desc_of(cublasLtMatmulDesc_t d) { return reinterpret_cast<lt_desc *>(d); }
lt_layout *layout_of(cublasLtMatrixLayout_t l) { return reinterpret_cast<lt_layout *>(l); }
lt_pref *pref_of(cublasLtMatmulPreference_t p) { return reinterpret_cast<lt_pref *>(p); }

unsigned alignment_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && a % al)
        al /= 2;
    return al;
}

cublasStatus_t enter(const char *name)
{
    if (on_callback_thread())
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s called from a host function", name);
    int f = injected_fault(name);
    return (cublasStatus_t)f;
}

} // namespace
} // namespace cudasim

using namespace cudasim;

extern "C" {

const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "<unknown>";
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
    }
    return "unknown error";
}

const char *cublasLtGetStatusName(cublasStatus_t s) { return cublasGetStatusName(s); }
const char *cublasLtGetStatusString(cublasStatus_t s) { return cublasGetStatusString(s); }

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    cublasStatus_t st = enter("cublasLtCreate");
    if (st)
        return st;
    if (!h)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate(NULL)");
    if (settings().no_device)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    lt_handle *p = new lt_handle();
    add_live(p);
    note_library_bytes((int64_t)LIBRARY_HANDLE_BYTES);
    *h = reinterpret_cast<cublasLtHandle_t>(p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    if (!drop_live(h))
        return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy(%p): not a live handle", (void *)h);
    delete reinterpret_cast<lt_handle *>(h);
    note_library_bytes(-(int64_t)LIBRARY_HANDLE_BYTES);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute, cudaDataType_t scale)
{
    cublasStatus_t st = enter("cublasLtMatmulDescCreate");
    if (st)
        return st;
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_desc *d = new lt_desc();
    d->compute = compute;
    d->scale = scale;
    add_live(d);
    *out = reinterpret_cast<cublasLtMatmulDesc_t>(d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    if (!drop_live(d))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescDestroy(%p): not a live descriptor", (void *)d);
    delete desc_of(d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size)
{
    if (!live(desc))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: %p is not a live descriptor",
                      (void *)desc);
    lt_desc *d = desc_of(desc);
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_attr(&d->transa, buf, size, "CUBLASLT_MATMUL_DESC_TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_attr(&d->transb, buf, size, "CUBLASLT_MATMUL_DESC_TRANSB");
    case CUBLASLT_MATMUL_DESC_TRANSC: return set_attr(&d->transc, buf, size, "CUBLASLT_MATMUL_DESC_TRANSC");
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_attr(&d->epilogue, buf, size, "CUBLASLT_MATMUL_DESC_EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_attr(&d->bias, buf, size, "CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        return set_attr(&d->bias_type, buf, size, "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE");
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
        return set_attr(&d->pointer_mode, buf, size, "CUBLASLT_MATMUL_DESC_POINTER_MODE");
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return set_attr(&d->compute, buf, size, "CUBLASLT_MATMUL_DESC_COMPUTE_TYPE");
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return set_attr(&d->scale, buf, size, "CUBLASLT_MATMUL_DESC_SCALE_TYPE");
    default:
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul descriptor attribute %d is not simulated", (int)attr);
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld)
{
    cublasStatus_t st = enter("cublasLtMatrixLayoutCreate");
    if (st)
        return st;
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (rows == 0 || cols == 0 || ld <= 0)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate(%llu x %llu, ld %lld): sizes must be "
                      "positive", (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
    lt_layout *l = new lt_layout();
    l->type = type;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    add_live(l);
    *out = reinterpret_cast<cublasLtMatrixLayout_t>(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    if (!drop_live(l))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutDestroy(%p): not a live layout", (void *)l);
    delete layout_of(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size)
{
    if (!live(layout))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute: %p is not a live layout",
                      (void *)layout);
    lt_layout *l = layout_of(layout);
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return set_attr(&l->order, buf, size, "CUBLASLT_MATRIX_LAYOUT_ORDER");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set_attr(&l->batch, buf, size, "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
        return set_attr(&l->batch_stride, buf, size, "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET");
    default: return refuse(CUBLAS_STATUS_INVALID_VALUE, "layout attribute %d is not simulated", (int)attr);
    }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out)
{
    cublasStatus_t st = enter("cublasLtMatmulPreferenceCreate");
    if (st)
        return st;
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_pref *p = new lt_pref();
    add_live(p);
    *out = reinterpret_cast<cublasLtMatmulPreference_t>(p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    if (!drop_live(p))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceDestroy(%p): not a live preference",
                      (void *)p);
    delete pref_of(p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size)
{
    if (!live(pref))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: %p is not a live preference",
                      (void *)pref);
    lt_pref *p = pref_of(pref);
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        return set_attr(&p->max_ws, buf, size, "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
        return set_attr(&p->align[0], buf, size, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
        return set_attr(&p->align[1], buf, size, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
        return set_attr(&p->align[2], buf, size, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        return set_attr(&p->align[3], buf, size, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES");
    default: return refuse(CUBLAS_STATUS_INVALID_VALUE, "preference attribute %d is not simulated", (int)attr);
    }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                              cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned)
{
    cublasStatus_t st = enter("cublasLtMatmulAlgoGetHeuristic");
    if (st)
        return st;
    if (!live(h))
        return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmulAlgoGetHeuristic: %p is not a live handle", (void *)h);
    if (!live(desc) || !live(A) || !live(B) || !live(C) || !live(D) || !live(pref))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: a descriptor, layout or "
                      "preference is not live");
    if (requested <= 0 || !results || !returned)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: %d results asked", requested);
    const lt_desc &d = *desc_of(desc);
    const lt_layout &a = *layout_of(A), &b = *layout_of(B), &c = *layout_of(C), &o = *layout_of(D);
    const lt_pref &p = *pref_of(pref);
    shape s;
    *returned = 0;
    if ((st = validate(d, a, b, c, o, &s)) != CUBLAS_STATUS_SUCCESS)
        return st;
    for (int i = 0; i < 4; i++)
        if (p.align[i] == 0 || (p.align[i] & (p.align[i] - 1)))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "minimum alignment %u of %c is not a power of two", p.align[i],
                          "ABCD"[i]);
    memset(&results[0], 0, sizeof results[0]);
    algo_data ad;
    memset(&ad, 0, sizeof ad);
    ad.magic = ALGO_MAGIC;
    ad.signature = signature(d, a, b, c, o);
    for (int i = 0; i < 4; i++) /* the kernels load 16 bytes at a time where the promise allows */
        ad.need_align[i] = p.align[i] < 16 ? p.align[i] : 16;
    /* A split-k algorithm when k is long and a workspace is offered. */
    ad.workspace = s.k >= 256 && p.max_ws >= 4096 ? (p.max_ws < (1u << 20) ? p.max_ws : (1u << 20)) : 0;
    memcpy(&results[0].algo, &ad, sizeof ad);
    results[0].workspaceSize = ad.workspace;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream)
{
    cublasStatus_t st = enter("cublasLtMatmul");
    if (st)
        return st;
    if (!live(h))
        return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmul: %p is not a live handle", (void *)h);
    if (!live(desc) || !live(Adesc) || !live(Bdesc) || !live(Cdesc) || !live(Ddesc))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: a descriptor or layout is not live");
    if (!alpha || !beta || !A || !B || !D)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: alpha, beta, A, B and D must not be NULL");
    matmul_job j;
    j.d = *desc_of(desc);
    j.a = *layout_of(Adesc);
    j.b = *layout_of(Bdesc);
    j.c = *layout_of(Cdesc);
    j.o = *layout_of(Ddesc);
    if ((st = validate(j.d, j.a, j.b, j.c, j.o, &j.s)) != CUBLAS_STATUS_SUCCESS)
        return st;
    if (j.d.pointer_mode != CUBLASLT_POINTER_MODE_HOST)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: only host alpha and beta are simulated");
    memcpy(&j.alpha, alpha, sizeof j.alpha);
    memcpy(&j.beta, beta, sizeof j.beta);
    if (j.beta != 0.0f && !C)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: beta is %g but C is NULL", (double)j.beta);
    if (j.d.epilogue == CUBLASLT_EPILOGUE_BIAS && !j.d.bias)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: the bias epilogue without "
                      "CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    j.A = A;
    j.B = B;
    j.C = C;
    j.D = D;
    j.ws = workspace;
    j.ws_need = 0;
    if (algo) {
        algo_data ad;
        memcpy(&ad, algo, sizeof ad);
        if (ad.magic != ALGO_MAGIC || ad.signature != signature(j.d, j.a, j.b, j.c, j.o))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: the algorithm was not chosen by "
                          "cublasLtMatmulAlgoGetHeuristic for these descriptors (m=%llu n=%llu k=%llu): a stale plan?",
                          (unsigned long long)j.s.m, (unsigned long long)j.s.n, (unsigned long long)j.s.k);
        const void *ptrs[4] = {A, B, C ? C : D, D};
        for (int i = 0; i < 4; i++)
            if (alignment_of(ptrs[i]) < ad.need_align[i])
                return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: %c at %p is %u-byte aligned, but its "
                              "algorithm was chosen for %u-byte alignment (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)",
                              "ABCD"[i], ptrs[i], alignment_of(ptrs[i]), ad.need_align[i], "ABCD"[i]);
        if (workspace_bytes < ad.workspace || (ad.workspace && !workspace))
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: the algorithm needs %llu bytes of workspace, "
                          "given %zu", (unsigned long long)ad.workspace, workspace_bytes);
        j.ws_need = ad.workspace;
    }
    if (sticky() != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    cudaError_t e = cudaSuccess;
    sim_stream *s = stream_of(stream, &e);
    if (!s)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: the stream is not live");
    stream_enqueue(s, stream_op{"cublasLtMatmul", [j] { run_matmul(j); }});
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
