/* Internal error reporting: the thread-local message behind ferry_last_error()
 * and the helpers every layer uses to set it. Owns nothing else. */
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

#ifdef __cplusplus
}
#endif

#endif
