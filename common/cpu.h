/* What the CPU can do: the SIMD level chosen at run time from CPUID, which
 * $FERRY_SIMD may lower (never raise past what the CPU has). */
#ifndef FERRY_COMMON_CPU_H
#define FERRY_COMMON_CPU_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cpu_simd {
    CPU_SIMD_SCALAR = 0,
    CPU_SIMD_AVX2 = 1,   /* AVX2 + FMA + F16C */
    CPU_SIMD_AVX512 = 2, /* AVX-512 F + BW + VL */
} cpu_simd;

/* The best level this CPU supports. */
cpu_simd cpu_simd_detect(void);
/* The level to use: $FERRY_SIMD (scalar|avx2|avx512) if set and supported,
 * else cpu_simd_detect(). An unknown or unsupported $FERRY_SIMD falls back to
 * the detected level; cpu_simd_env_problem() then says why. */
cpu_simd cpu_simd_active(void);
const char *cpu_simd_env_problem(void);
const char *cpu_simd_name(cpu_simd level);

#ifdef __cplusplus
}
#endif

#endif
