/* Sizes and names of the element types (see dtype.h), and the public
 * ferry_dtype_name / ferry_dtype_parse. */
#include "common/dtype.h"

#include "common/error.h"

size_t dtype_size(ferry_dtype t)
{
    switch (t) {
    case FERRY_DTYPE_F32: return 4;
    case FERRY_DTYPE_BF16: return 2;
    case FERRY_DTYPE_F16: return 2;
    case FERRY_DTYPE_I32: return 4;
    case FERRY_DTYPE_I64: return 8;
    case FERRY_DTYPE_AUTO: break;
    }
    return 0;
}

const char *dtype_name(ferry_dtype t)
{
    switch (t) {
    case FERRY_DTYPE_F32: return "f32";
    case FERRY_DTYPE_BF16: return "bf16";
    case FERRY_DTYPE_F16: return "f16";
    case FERRY_DTYPE_I32: return "i32";
    case FERRY_DTYPE_I64: return "i64";
    case FERRY_DTYPE_AUTO: return "auto";
    }
    return "?";
}

FERRY_API const char *ferry_dtype_name(ferry_dtype dtype)
{
    const char *n = dtype_name(dtype);
    return n[0] == '?' ? "unknown" : n;
}

FERRY_API ferry_status ferry_dtype_parse(const char *name, ferry_dtype *out)
{
    if (!name || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_dtype_parse: NULL argument");
    for (int t = FERRY_DTYPE_AUTO; t <= FERRY_DTYPE_I64; t++)
        if (strcmp(name, dtype_name((ferry_dtype)t)) == 0) {
            *out = (ferry_dtype)t;
            return FERRY_OK;
        }
    return err_set(FERRY_ERR_INVALID_ARGUMENT, "unknown element type '%s': use auto, f32, bf16, f16, i32 or i64", name);
}
