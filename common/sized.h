/* The size-stamp promise of ferry.h, kept in one place: every versioned
 * struct of the public API starts with `size_t size`, stamped by its _INIT
 * macro with the sizeof the caller was compiled against. A struct from an
 * older, smaller header is accepted: the library reads the fields the caller
 * has and takes its own defaults for the rest (sized_read), and writes only
 * the fields the caller has room for (sized_write), as NCCL does with
 * ncclConfig_t. A size that leaves no field after the size, or larger than
 * the library knows (a header newer than the library: fields it would
 * silently ignore), is FERRY_ERR_INVALID_ARGUMENT naming the struct and its
 * _INIT macro. Owns no state; any thread. */
#ifndef FERRY_COMMON_SIZED_H
#define FERRY_COMMON_SIZED_H

#include <stddef.h>

#include "ferry.h"

/* The end of field f of struct T: one entry of a field table. */
#define SIZED_END(T, f) (offsetof(T, f) + sizeof(((T *)0)->f))
/* The layout rule that makes a size name one version: a versioned input
 * struct never ends in padding (add a `reserved` field where it would), so
 * every released sizeof is the end of its last field, and fields are only
 * ever appended. Put this after the struct's field table, naming its last
 * field, which is also the table's last entry. */
#define SIZED_NO_TAIL_PADDING(T, last)                                                         \
    _Static_assert(sizeof(T) == SIZED_END(T, last),                                            \
                   #T " must end with its last field, " #last ", and no padding")

/* dst holds the library's defaults for a struct of dst_size bytes whose
 * fields end at field_ends[0..nfields) (increasing; SIZED_END). The caller's
 * src->size must be one of those ends (the sizeof of the version of the
 * header it was compiled against); copies its fields over the defaults and
 * stamps dst's size with dst_size. Any other size is no version's and is
 * refused. `what` names the struct in messages ("ferry_engine_config"). */
ferry_status sized_read(void *dst, size_t dst_size, const void *src, const size_t *field_ends,
                        size_t nfields, const char *what);

/* Copies the library's full struct src (src_size bytes, its size field
 * ignored) into the caller's dst, up to dst->size bytes, keeping the
 * caller's size field. */
ferry_status sized_write(void *dst, const void *src, size_t src_size, const char *what);

#endif
