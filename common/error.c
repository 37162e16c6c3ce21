/* The thread-local error message behind ferry_last_error(), the status
 * names, and the words for a refused thread. Every layer reports failures
 * through err_set(). */
#include "common/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "common/units.h"

static _Thread_local char err_message[ERR_MESSAGE_MAX];

ferry_status err_set(ferry_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_message, sizeof err_message, fmt, ap);
    va_end(ap);
    return status;
}

ferry_status err_wrap(ferry_status status, const char *fmt, ...)
{
    char prefix[ERR_MESSAGE_MAX];
    char old[ERR_MESSAGE_MAX];
    char joined[2 * ERR_MESSAGE_MAX + 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_message, sizeof old);
    snprintf(joined, sizeof joined, "%s: %s", prefix, old);
    memcpy(err_message, joined, sizeof err_message - 1);
    err_message[sizeof err_message - 1] = '\0';
    return status;
}

void err_clear(void) { err_message[0] = '\0'; }

void err_thread_refusal(int rc, char *buf, size_t cap)
{
    struct rlimit as, nproc;
    size_t stack = 0;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) == 0) {
        pthread_attr_getstacksize(&attr, &stack);
        pthread_attr_destroy(&attr);
    }
    char limit[32], need[32];
    if (rc == EAGAIN && getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
        snprintf(buf, cap, "the address-space limit (ulimit -v, %s) leaves no room for its %s stack",
                 units_fmt_bytes(limit, sizeof limit, (uint64_t)as.rlim_cur),
                 units_fmt_bytes(need, sizeof need, (uint64_t)stack));
    else if (rc == EAGAIN && getrlimit(RLIMIT_NPROC, &nproc) == 0 && nproc.rlim_cur != RLIM_INFINITY)
        snprintf(buf, cap, "the limit on processes and threads (ulimit -u, %llu) is reached",
                 (unsigned long long)nproc.rlim_cur);
    else
        snprintf(buf, cap, "%s", strerror(rc));
}

const char *ferry_last_error(void) { return err_message; }

const char *ferry_status_string(ferry_status status)
{
    switch (status) {
    case FERRY_OK: return "FERRY_OK";
    case FERRY_ERR_INVALID_ARGUMENT: return "FERRY_ERR_INVALID_ARGUMENT";
    case FERRY_ERR_OUT_OF_MEMORY: return "FERRY_ERR_OUT_OF_MEMORY";
    case FERRY_ERR_IO: return "FERRY_ERR_IO";
    case FERRY_ERR_FORMAT: return "FERRY_ERR_FORMAT";
    case FERRY_ERR_BACKEND: return "FERRY_ERR_BACKEND";
    case FERRY_ERR_STATE: return "FERRY_ERR_STATE";
    case FERRY_ERR_UNSUPPORTED: return "FERRY_ERR_UNSUPPORTED";
    }
    return "FERRY_ERR_UNKNOWN";
}

const char *ferry_version(void) { return FERRY_VERSION_STRING; }
