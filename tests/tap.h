/* A tiny TAP producer for meson test: plan, ok, and comparisons that print
 * both values when they fail. Header-only; each test program includes it once.
 * Exit code: 0 when every assertion passed, 1 otherwise, 77 for a skip. */
#ifndef FERRY_TESTS_TAP_H
#define FERRY_TESTS_TAP_H

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int tap_count;
static int tap_failed;

static inline void tap_plan_skip(const char *why)
{
    printf("1..0 # SKIP %s\n", why);
    fflush(stdout);
    exit(77);
}

/* Prints fmt's text; each newline in it becomes `newline` (a description
 * must stay on one line, a diagnostic's lines each need "# "), so that an
 * error message quoted with its trailing newline is still valid TAP. */
static inline void tap_vprint_lines(const char *newline, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    char *text = n >= 0 ? (char *)malloc((size_t)n + 1) : NULL; /* the cast: C++ tests include this too */
    if (!text) {
        vprintf(fmt, ap);
        return;
    }
    vsnprintf(text, (size_t)n + 1, fmt, ap);
    while (n > 0 && text[n - 1] == '\n')
        text[--n] = '\0';
    for (const char *c = text; *c; c++) {
        if (*c == '\n')
            fputs(newline, stdout);
        else
            putchar(*c);
    }
    free(text);
}

static inline int tap_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int tap_ok(int cond, const char *fmt, ...)
{
    va_list ap;
    tap_count++;
    printf("%s %d - ", cond ? "ok" : "not ok", tap_count);
    va_start(ap, fmt);
    tap_vprint_lines(" ", fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!cond)
        tap_failed++;
    return cond;
}

/* One assertion that cannot be made here (a GPU lacking what it checks),
 * counted as TAP's "ok N # SKIP reason". Only for a real absence. */
static inline void tap_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tap_skip(const char *fmt, ...)
{
    va_list ap;
    tap_count++;
    printf("ok %d # SKIP ", tap_count);
    va_start(ap, fmt);
    tap_vprint_lines(" ", fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static inline void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tap_diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    tap_vprint_lines("\n# ", fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* Ends the run: prints the plan (TAP allows it last) and returns the exit code. */
static inline int tap_done(void)
{
    printf("1..%d\n", tap_count);
    if (tap_failed)
        printf("# %d of %d failed\n", tap_failed, tap_count);
    fflush(stdout);
    return tap_failed ? 1 : 0;
}

#define TAP_IS_INT(got, want, ...)                                                              \
    do {                                                                                        \
        long long g_ = (long long)(got), w_ = (long long)(want);                                \
        if (!tap_ok(g_ == w_, __VA_ARGS__))                                                     \
            tap_diag("  got %lld, want %lld (%s:%d)", g_, w_, __FILE__, __LINE__);              \
    } while (0)

/* |got - want| <= tol_abs + tol_rel * |want| */
#define TAP_IS_CLOSE(got, want, tol_abs, tol_rel, ...)                                          \
    do {                                                                                        \
        double g_ = (double)(got), w_ = (double)(want);                                         \
        double lim_ = (tol_abs) + (tol_rel)*fabs(w_);                                           \
        if (!tap_ok(fabs(g_ - w_) <= lim_, __VA_ARGS__))                                        \
            tap_diag("  got %.9g, want %.9g, diff %.3g > %.3g (%s:%d)", g_, w_, fabs(g_ - w_),  \
                     lim_, __FILE__, __LINE__);                                                 \
    } while (0)

#define TAP_IS_STATUS(got, want, ...)                                                           \
    do {                                                                                        \
        int g_ = (int)(got), w_ = (int)(want);                                                  \
        if (!tap_ok(g_ == w_, __VA_ARGS__))                                                     \
            tap_diag("  got status %d, want %d; last error: %s (%s:%d)", g_, w_,                \
                     ferry_last_error(), __FILE__, __LINE__);                                   \
    } while (0)

#ifdef FERRY_H
/* TAP_IS_STATUS as a function, so that its outcome can steer the test. */
static inline int tap_is_status(ferry_status got, ferry_status want, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int tap_is_status(ferry_status got, ferry_status want, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!tap_ok(got == want, "%s", what))
        tap_diag("  got %s, want %s; last error: %s", ferry_status_string(got), ferry_status_string(want),
                 ferry_last_error());
    return got == want;
}
#endif

/* A seeded generator for test inputs (splitmix64): the seed is printed by the
 * test so a failure can be replayed. */
static inline uint64_t tap_rand_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* Uniform in [0, 1). */
static inline double tap_rand_unit(uint64_t *state) { return (double)(tap_rand_u64(state) >> 11) * 0x1.0p-53; }

#endif
