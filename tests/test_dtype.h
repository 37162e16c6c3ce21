/* The device storage type a test runs in: f32, or bf16 or f16 when the
 * environment says FERRY_TEST_DTYPE=bf16 or f16 (the host backend then
 * stores that type and rounds where the CUDA ops do). meson registers the
 * engine's tests in all three, so the engine's 16-bit paths run in CI
 * without a GPU. Anything else is refused. */
#ifndef FERRY_TESTS_TEST_DTYPE_H
#define FERRY_TESTS_TEST_DTYPE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry.h"

static inline ferry_dtype test_dtype(void)
{
    const char *v = getenv("FERRY_TEST_DTYPE");
    if (!v || !*v || strcmp(v, "f32") == 0)
        return FERRY_DTYPE_F32;
    if (strcmp(v, "bf16") == 0)
        return FERRY_DTYPE_BF16;
    if (strcmp(v, "f16") == 0)
        return FERRY_DTYPE_F16;
    printf("Bail out! FERRY_TEST_DTYPE='%s': use f32, bf16 or f16\n", v);
    exit(1);
}

static inline const char *test_dtype_name(void)
{
    ferry_dtype t = test_dtype();
    return t == FERRY_DTYPE_BF16 ? "bf16" : t == FERRY_DTYPE_F16 ? "f16" : "f32";
}

#endif
