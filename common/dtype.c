/* Sizes and names of the element types (see dtype.h). */
#include "common/dtype.h"

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
