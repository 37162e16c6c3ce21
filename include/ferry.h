/* ferry: the public C API of the ZeRO-style CPU-offload training engine.
 *
 * Conventions, for every function in this header:
 * - Every call that can fail returns a ferry_status; FERRY_OK (0) is success.
 *   On failure, ferry_last_error() returns a sentence for a person: what was
 *   wrong, the value seen, and what to do. The message is thread-local.
 * - Handles are opaque. Whoever creates a handle destroys it with the matching
 *   _destroy function; destroy functions accept NULL.
 * - Configuration structs start with `size` and are initialised by their
 *   _INIT macro, so fields added later get defaults and old callers still work.
 * - The library never calls exit() or abort() on a caller's error. */
#ifndef FERRY_H
#define FERRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the library's exported symbols; everything else is hidden. */
#if defined(FERRY_BUILDING_LIBRARY)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif

#define FERRY_VERSION_MAJOR 0
#define FERRY_VERSION_MINOR 1
#define FERRY_VERSION_PATCH 0
#define FERRY_VERSION_STRING "0.1.0"

/* Status of every call that can fail. */
typedef enum ferry_status {
    FERRY_OK = 0,
    FERRY_ERR_INVALID_ARGUMENT, /* a value outside its documented range */
    FERRY_ERR_OUT_OF_MEMORY,    /* device budget or host memory exhausted */
    FERRY_ERR_IO,               /* a file could not be read or written */
    FERRY_ERR_FORMAT,           /* a file is not what its header claims */
    FERRY_ERR_BACKEND,          /* CUDA, cuBLAS, NCCL or the host backend failed */
    FERRY_ERR_STATE,            /* a call out of order (e.g. step before grads) */
    FERRY_ERR_UNSUPPORTED,      /* asked for something this build or machine lacks */
} ferry_status;

/* A constant name for a status ("FERRY_ERR_IO"); never NULL. Any thread. */
FERRY_API const char *ferry_status_string(ferry_status status);

/* The message of the last failed call on this thread, or "" if none. The
 * string is owned by the library and valid until the next ferry_ call on this
 * thread. Any thread. */
FERRY_API const char *ferry_last_error(void);

/* The library's version as "MAJOR.MINOR.PATCH"; compare with
 * FERRY_VERSION_STRING to detect a header/library mismatch. Any thread. */
FERRY_API const char *ferry_version(void);

/* Which implementation of the backend runs the work. */
typedef enum ferry_backend_kind {
    FERRY_BACKEND_AUTO = 0, /* $FERRY_BACKEND if set, else cuda if a GPU is present, else host */
    FERRY_BACKEND_HOST,     /* CPU threads emulate device streams; plain memory */
    FERRY_BACKEND_CUDA,     /* CUDA streams, cuBLASLt, hand-written kernels */
} ferry_backend_kind;

/* "auto", "host" or "cuda"; never NULL. */
FERRY_API const char *ferry_backend_name(ferry_backend_kind kind);

/* Parses "host", "cuda" or "auto". FERRY_ERR_INVALID_ARGUMENT on anything else. */
FERRY_API ferry_status ferry_backend_parse(const char *name, ferry_backend_kind *out);

/* What the library found on this machine. Initialise with
 * FERRY_SYSTEM_INFO_INIT before calling ferry_system_probe(). */
typedef struct ferry_system_info {
    size_t size;                  /* sizeof(ferry_system_info), stamped by the macro */
    ferry_backend_kind backend;   /* what FERRY_BACKEND_AUTO resolves to here */
    int cuda_compiled;            /* 1 if this library was built with CUDA */
    int gpu_count;                /* CUDA devices visible (0 without a driver) */
    char gpu_name[128];           /* device 0's name, or "" */
    uint64_t gpu_memory_bytes;    /* device 0's total memory, or 0 */
    int gpu_numa_node;            /* NUMA node nearest device 0, or -1 if unknown */
    int numa_nodes;               /* NUMA nodes (1 on a machine without NUMA) */
    int cores;                    /* physical cores */
    int pus;                      /* hardware threads */
    uint64_t host_memory_bytes;   /* total host memory */
    char simd[16];                /* best CPU SIMD level: "avx512", "avx2" or "scalar" */
} ferry_system_info;

#define FERRY_SYSTEM_INFO_INIT { sizeof(ferry_system_info), FERRY_BACKEND_AUTO, 0, 0, "", 0, -1, 0, 0, 0, 0, "" }

/* Fills *info with the backend, GPU and topology this machine offers. A
 * missing GPU or driver is not an error (gpu_count = 0). Any thread. */
FERRY_API ferry_status ferry_system_probe(ferry_system_info *info);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_H */
