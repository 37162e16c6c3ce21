/* The one clock ferry measures time with: CLOCK_MONOTONIC (never steps back,
 * unaffected by changes to the wall clock), in milliseconds as a double.
 * Owns nothing; any thread. */
#ifndef FERRY_COMMON_CLOCK_H
#define FERRY_COMMON_CLOCK_H

#include <time.h>

static inline double clock_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

#endif
