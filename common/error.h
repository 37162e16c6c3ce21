/* Internal error reporting: the thread-local message behind ferry_last_error(),
 * the helpers every layer uses to set it, and the words for a refusal every
 * layer that starts threads can meet. Owns nothing else. */
#ifndef FERRY_COMMON_ERROR_H
#define FERRY_COMMON_ERROR_H

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ERR_MESSAGE_MAX 1024

/* Sets this thread's message and returns `status`, so a failing path reads
 * `return err_set(FERRY_ERR_IO, "cannot open '%s': %s", path, strerror(errno));` */
ferry_status err_set(ferry_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefixes the current message with context: "loading checkpoint: <old>". */
ferry_status err_wrap(ferry_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears this thread's message (called at the start of public calls where a
 * stale message would mislead). */
void err_clear(void);

/* Why pthread_create refused with `rc`, in words, into buf: for EAGAIN the
 * address-space limit that left no room for the thread's stack, or the limit
 * on processes and threads, each with its value; else strerror(rc). */
void err_thread_refusal(int rc, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
