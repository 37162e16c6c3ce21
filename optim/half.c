/* optim/half.c: dtype names and sizes, the SIMD-level check shared by optim/,
 * and the bulk converters' dispatch. The conversions themselves live in
 * half.h (scalar) and simd_*.c (vector). */
#include "optim/half.h"

#include <string.h>

#include "common/error.h"
#include "optim/adamw.h"
#include "optim/kernels.h"

ferry_status optim_check_level(cpu_simd level, const char *who)
{
    cpu_simd have = cpu_simd_detect();
    if ((int)level < (int)CPU_SIMD_SCALAR || (int)level > (int)CPU_SIMD_AVX512)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: SIMD level %d is not scalar, avx2 or avx512", who, (int)level);
    if ((int)level > (int)have)
        return err_set(FERRY_ERR_UNSUPPORTED, "%s: SIMD level %s asked, but this CPU offers only %s", who,
                       cpu_simd_name(level), cpu_simd_name(have));
    return FERRY_OK;
}

static ferry_status half_check(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n,
                               cpu_simd level)
{
    if (!dtype_is_float(dt) || !dtype_is_float(st))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "half_convert: unknown element type (dst %d, src %d); "
                       "use f32, bf16 or f16", (int)dt, (int)st);
    if (n > 0 && (!dst || !src))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "half_convert: NULL %s for %zu elements",
                       dst ? "source" : "destination", n);
    return optim_check_level(level, "half_convert");
}

static void half_run(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n, cpu_simd level)
{
    if (n == 0)
        return;
    if (dt == st) {
        memcpy(dst, src, n * dtype_size(dt));
        return;
    }
    switch (level) {
    case CPU_SIMD_AVX512: optim_convert_avx512(dst, dt, src, st, n); break;
    case CPU_SIMD_AVX2: optim_convert_avx2(dst, dt, src, st, n); break;
    case CPU_SIMD_SCALAR: optim_convert_scalar(dst, dt, src, st, n); break;
    }
}

ferry_status half_convert_level(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n,
                                cpu_simd level)
{
    ferry_status s = half_check(dst, dt, src, st, n, level);
    if (s == FERRY_OK)
        half_run(dst, dt, src, st, n, level);
    return s;
}

ferry_status half_convert(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n)
{
    return half_convert_level(dst, dt, src, st, n, cpu_simd_active());
}

typedef struct half_pool_ctx {
    void *dst;
    const void *src;
    ferry_dtype dt, st;
    size_t n;
    cpu_simd level;
} half_pool_ctx;

static void half_convert_tile(void *arg, size_t tile, int worker)
{
    (void)worker;
    const half_pool_ctx *c = arg;
    size_t off = tile * OPTIM_TILE, len = c->n - off < OPTIM_TILE ? c->n - off : OPTIM_TILE;
    half_run((char *)c->dst + off * dtype_size(c->dt), c->dt,
             (const char *)c->src + off * dtype_size(c->st), c->st, len, c->level);
}

ferry_status half_convert_pool(tp_pool *pool, void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n)
{
    cpu_simd level = cpu_simd_active();
    ferry_status s = half_check(dst, dt, src, st, n, level);
    if (s != FERRY_OK || n == 0)
        return s;
    half_pool_ctx c = {dst, src, dt, st, n, level};
    return tp_parallel_for(pool, (n + OPTIM_TILE - 1) / OPTIM_TILE, half_convert_tile, &c);
}
