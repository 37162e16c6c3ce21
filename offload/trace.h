/* The memory trace: every allocation and free of the device arena and the
 * pinned host pool, phase markers ("step 3", "backward") and per-step timing
 * records, the device's static memory plan (its region, every planned
 * buffer) and which group occupies each of params mode's slots when,
 * written to a compact binary file that tools/memprof reads.
 * Owns the file format (documented in docs/memprof.md) and the writer; it
 * does not own the allocators, which call it, nor the reader (tools/memprof).
 *
 * Off by default: every caller keeps a `trace *` that is NULL when tracing is
 * off, and every function here returns at once on NULL, so an untraced run
 * pays one pointer test. On, a record is 96 bytes copied into a buffer under
 * a mutex and given its CRC-32C; the buffer is written from the calling
 * thread in 384 KiB chunks.
 * Any thread may record; records are ordered by their timestamps.
 * A write failure is remembered and returned by trace_flush()/trace_close(),
 * so the allocators never fail because the trace did. */
#ifndef FERRY_OFFLOAD_TRACE_H
#define FERRY_OFFLOAD_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- file format, version 3 (little-endian) ----
 * header, 32 bytes: magic "FERRYMEM", u32 version, u32 record size (96),
 *                   u64 wall-clock start (ns since the Unix epoch),
 *                   u32 flags, u32 CRC-32C of header bytes 0..27.
 * then records of `record size` bytes, laid out as trace_record.
 * With TRACE_FLAG_CRC (every trace this writer makes), each record's `crc`
 * is the CRC-32C of its index (u64, 0 for the first record) followed by its
 * 96 bytes with `crc` zeroed, so a changed byte, a lost record or two records
 * swapped are all detected. Traces from before the flag existed have
 * flags and header CRC 0 and carry no record checksums.
 * Version 2 ends with an END record, written by trace_close: a trace without
 * one was cut (a killed run, a full disk) even when it ends on a record
 * boundary. Version 1 (no END record) is version 2 otherwise.
 * Version 3 adds the plan's records (REGION, PLANNED, OCCUPY, VACATE) and
 * byte 11 as PLANNED's role; version 2 is version 3 without them. */
#define TRACE_MAGIC "FERRYMEM"
#define TRACE_VERSION 3u
#define TRACE_HEADER_SIZE 32u
#define TRACE_RECORD_SIZE 96u
#define TRACE_NAME_MAX 48u /* bytes of name, NUL included; longer names are cut */
#define TRACE_FLAG_CRC 1u  /* records carry a CRC-32C (header flags bit 0) */

typedef enum trace_kind {
    TRACE_ALLOC = 1,   /* pool, category, bytes, addr, name */
    TRACE_FREE = 2,    /* same fields as the matching alloc */
    TRACE_PHASE = 3,   /* step, name = phase ("forward", "backward", ...) */
    TRACE_TIMING = 4,  /* step, name = key, value = milliseconds */
    TRACE_LIMIT = 5,   /* pool, bytes = its budget (0 = none) */
    TRACE_RESERVE = 6, /* pool, bytes = bytes reserved from the OS/device now */
    TRACE_END = 7,     /* the last record: bytes = the records before it; name "end" */
    /* Version 3: the device's static memory plan and params mode's slots. */
    TRACE_REGION = 8,  /* the planned region: addr = its base, bytes = its size; once, before the planned buffers */
    TRACE_PLANNED = 9, /* a buffer of the plan: addr = its offset in the region, bytes, category, role,
                          step = the first schedule position it lives in, value = the position it dies at
                          (TRACE_FOREVER: it lives to the end of the run), name */
    TRACE_OCCUPY = 10, /* a group takes a slot: addr = the slot's address, bytes = what the group puts there,
                          category (params: weights, grads), step = the group's index, name = the group's */
    TRACE_VACATE = 11, /* the group gives the slot back: the fields of its OCCUPY */
} trace_kind;

/* What a planned buffer is for (a PLANNED record's byte 11). */
typedef enum trace_plan_role {
    TRACE_ROLE_BUFFER = 0, /* one buffer, allocated at its offset with its size */
    TRACE_ROLE_WSLOT = 1,  /* params mode: a weights slot, occupied by one group at a time */
    TRACE_ROLE_GSLOT = 2,  /* params mode: a gradients slot, occupied by one group at a time */
    TRACE_ROLE_RANGE = 3,  /* a range the embedder's allocations fill (its declared activations) */
} trace_plan_role;
#define TRACE_ROLES 4
/* A PLANNED record's `value` for a buffer that lives to the end of the run (INT32_MAX). */
#define TRACE_FOREVER 2147483647.0

typedef enum trace_pool {
    TRACE_POOL_DEVICE = 0, /* the device arena */
    TRACE_POOL_HOST = 1,   /* the pinned host pool */
    TRACE_POOL_DISK = 2,   /* the NVMe tier's state file (offload/nvme.h) */
} trace_pool;

typedef struct trace_record {
    uint64_t t_ns;    /* 0: ns since the trace was opened */
    uint8_t kind;     /* 8: trace_kind */
    uint8_t pool;     /* 9: trace_pool */
    uint8_t category; /* 10: ferry_mem_category */
    uint8_t role;     /* 11: PLANNED: trace_plan_role; 0 in every other record */
    uint32_t crc;     /* 12: CRC-32C (see above); 0 in traces without TRACE_FLAG_CRC */
    uint64_t bytes;   /* 16 */
    uint64_t addr;    /* 24: the allocation's address (its identity until freed); REGION: the base;
                         PLANNED: the offset in the region; OCCUPY, VACATE: the slot's address */
    int64_t step;     /* 32: PHASE, TIMING: the step; PLANNED: the first position; OCCUPY, VACATE: the group;
                         -1 otherwise */
    double value;     /* 40: TIMING: milliseconds; PLANNED: the position it dies at */
    char name[TRACE_NAME_MAX]; /* 48: NUL-terminated, NUL-padded */
} trace_record;

typedef struct trace trace;

/* Creates (truncates) `path` and writes the header; a character device
 * (/dev/null) is written in place. A folder, a FIFO, a socket or a link to
 * nothing is refused without blocking (common/fileio.h). FERRY_ERR_IO with
 * the path and the reason when it cannot. Release with trace_close(). */
ferry_status trace_open(const char *path, trace **out);
/* Adds the END record, writes what is buffered, closes, frees. Returns the
 * first write failure of the trace's life, if any (FERRY_ERR_IO); the END
 * record is written only when every record before it was. NULL is fine.
 * Call it after the allocators that record into the trace are destroyed, or
 * detached. */
ferry_status trace_close(trace *t);
/* Writes what is buffered now; returns the first write failure, if any. */
ferry_status trace_flush(trace *t);

/* Allocator events. `addr` identifies the allocation until it is freed. */
void trace_alloc(trace *t, trace_pool pool, ferry_mem_category category, const char *name,
                 uint64_t bytes, const void *addr);
void trace_free(trace *t, trace_pool pool, ferry_mem_category category, const char *name,
                uint64_t bytes, const void *addr);
/* The pool's budget, and how much it holds from the OS or the device. */
void trace_limit(trace *t, trace_pool pool, uint64_t bytes);
void trace_reserve(trace *t, trace_pool pool, uint64_t reserved_bytes);
/* Marks the start of a phase of a step: trace_phase(t, 3, "backward").
 * memprof attributes every event to the last marker before it. */
void trace_phase(trace *t, int64_t step, const char *phase);
/* A timing figure of a step: trace_step_timing(t, 3, "gpu_wait_transfers", 1.7). */
void trace_step_timing(trace *t, int64_t step, const char *key, double ms);

/* The device's static memory plan, as the engine places it: the planned
 * region once (arena_plan_region, where it is reserved), then each buffer
 * of the plan with its offset in the region, size (as charged), category,
 * lifetime in schedule positions [start, end) (end INT32_MAX: to the end of
 * the run) and role. memprof checks every device allocation inside the
 * region against these records. */
void trace_region(trace *t, const void *base, uint64_t bytes);
void trace_planned(trace *t, ferry_mem_category category, const char *name, uint64_t offset, uint64_t bytes,
                   int32_t start, int32_t end, trace_plan_role role);
/* Params mode: group `group` (named `name`) puts `bytes` of its weights
 * (category params) or gradients (grads) in the slot at `slot`, and later
 * gives the slot back with the same fields. */
void trace_occupy(trace *t, ferry_mem_category category, const char *name, int group, uint64_t bytes,
                  const void *slot);
void trace_vacate(trace *t, ferry_mem_category category, const char *name, int group, uint64_t bytes,
                  const void *slot);

/* Records written or buffered so far (for tests and benchmarks). */
uint64_t trace_record_count(trace *t);

/* The checksum a record at position `index` (0-based) carries: the CRC-32C
 * (common/crc32c.h) of the index (u64) then the record's bytes with `crc` taken as 0. */
uint32_t trace_record_crc(const trace_record *r, uint64_t index);
/* The checksum of a header's first 28 bytes (stored at offset 28). */
uint32_t trace_header_crc(const unsigned char header[TRACE_HEADER_SIZE]);

#ifdef __cplusplus
}
#endif

#endif
