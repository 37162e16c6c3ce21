/* The names of the memory categories (ferry.h's ferry_mem_category), which
 * the span heap's allocations carry and the pinned host pool, the device
 * arena and the engine print. Depends on nothing but ferry.h, so every
 * allocator of offload/ can name a category without reaching into another. */
#include "ferry.h"

const char *ferry_mem_category_name(ferry_mem_category category)
{
    switch (category) {
    case FERRY_MEM_PARAMS: return "params";
    case FERRY_MEM_GRADS: return "grads";
    case FERRY_MEM_OPTIMIZER: return "optimizer";
    case FERRY_MEM_ACTIVATIONS: return "activations";
    case FERRY_MEM_STAGING: return "staging";
    case FERRY_MEM_WORKSPACE: return "workspace";
    case FERRY_MEM_OTHER: return "other";
    case FERRY_MEM_NVME: return "nvme window";
    case FERRY_MEM_CATEGORY_COUNT: break;
    }
    return "unknown";
}
