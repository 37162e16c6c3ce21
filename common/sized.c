/* Reading and writing versioned public structs (see sized.h). */
#include "common/sized.h"

#include <string.h>

#include "common/error.h"

static ferry_status check_size(size_t caller, size_t known, const char *what)
{
    if (caller <= sizeof(size_t))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: size is %zu, which leaves no field after the size itself; initialise the "
                       "struct with its _INIT macro",
                       what, caller);
    if (caller > known)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: size is %zu, but this libferry (%s) knows %zu bytes of it: the program "
                       "was compiled against a newer ferry.h (or the struct was not initialised "
                       "with its _INIT macro); rebuild against this library's header",
                       what, caller, FERRY_VERSION_STRING, known);
    return FERRY_OK;
}

ferry_status sized_read(void *dst, size_t dst_size, const void *src, const size_t *field_ends,
                        size_t nfields, const char *what)
{
    size_t caller;
    memcpy(&caller, src, sizeof caller);
    ferry_status st = check_size(caller, dst_size, what);
    if (st != FERRY_OK)
        return st;
    size_t end = 0; /* a version's sizeof: a field's end, and whole size_t words */
    for (size_t i = 0; i < nfields && !end && caller % sizeof(size_t) == 0; i++)
        end = field_ends[i] == caller ? caller : 0;
    if (!end)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: size is %zu, which is not the size of any version of it (the struct was not "
                       "initialised with its _INIT macro, or its memory was overwritten)",
                       what, caller);
    memcpy((char *)dst + sizeof(size_t), (const char *)src + sizeof(size_t), end - sizeof(size_t));
    memcpy(dst, &dst_size, sizeof dst_size);
    return FERRY_OK;
}

ferry_status sized_write(void *dst, const void *src, size_t src_size, const char *what)
{
    size_t caller;
    memcpy(&caller, dst, sizeof caller);
    ferry_status st = check_size(caller, src_size, what);
    if (st != FERRY_OK)
        return st;
    memcpy((char *)dst + sizeof(size_t), (const char *)src + sizeof(size_t), caller - sizeof(size_t));
    return FERRY_OK;
}
