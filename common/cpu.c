/* Run-time SIMD detection through the compiler's CPUID builtins. */
#include "common/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char env_problem[160];

cpu_simd cpu_simd_detect(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return CPU_SIMD_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return CPU_SIMD_AVX2;
#endif
    return CPU_SIMD_SCALAR;
}

const char *cpu_simd_name(cpu_simd level)
{
    switch (level) {
    case CPU_SIMD_AVX512: return "avx512";
    case CPU_SIMD_AVX2: return "avx2";
    case CPU_SIMD_SCALAR: return "scalar";
    }
    return "scalar";
}

cpu_simd cpu_simd_active(void)
{
    cpu_simd best = cpu_simd_detect();
    const char *want = getenv("FERRY_SIMD");
    env_problem[0] = '\0';
    if (!want || !*want)
        return best;
    for (int l = CPU_SIMD_SCALAR; l <= CPU_SIMD_AVX512; l++) {
        if (strcmp(want, cpu_simd_name((cpu_simd)l)) != 0)
            continue;
        if (l <= (int)best)
            return (cpu_simd)l;
        snprintf(env_problem, sizeof env_problem,
                 "FERRY_SIMD=%s is not supported by this CPU; using %s", want, cpu_simd_name(best));
        return best;
    }
    snprintf(env_problem, sizeof env_problem,
             "FERRY_SIMD=%s is not one of scalar, avx2, avx512; using %s", want, cpu_simd_name(best));
    return best;
}

const char *cpu_simd_env_problem(void) { return env_problem; }
