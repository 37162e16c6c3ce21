/* safetensors files: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {str: str}}), then the tensors' bytes back to back.
 * Owns writing such a file atomically and reading one with every field
 * checked. Knows nothing of models: names are the caller's. */
#ifndef FERRY_TOKENIZE_SAFETENSORS_H
#define FERRY_TOKENIZE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "common/dtype.h"
#include "ferry.h"

#define ST_MAX_DIMS 8

/* Element types are ferry_dtype's (F32, F16, BF16, I32, I64; sizes from
 * common/dtype.h). This is the format's spelling of one: "F32", "F16",
 * "BF16", "I32", "I64"; "?" for a type the format has no name for here. */
const char *sft_dtype_name(ferry_dtype d);

/* A tensor to write, or one read from a file. */
typedef struct sft_tensor {
    const char *name;
    ferry_dtype dtype;
    int ndim;                    /* 0..ST_MAX_DIMS; 0 is a scalar */
    int64_t shape[ST_MAX_DIMS];
    const void *data;            /* writing: its bytes (may be NULL with sft_writer_put);
                                    reading: inside the mapped file, aligned only if the
                                    writer aligned it (ours does) */
    uint64_t nbytes;             /* reading: product(shape) * dtype size; ignored when writing */
} sft_tensor;

/* ---- writing ---- */

typedef struct sft_writer sft_writer;

/* Starts `path`: lays out `n` tensors (names unique, non-empty, not
 * "__metadata__"; data ordered by dtype size, largest first, so each tensor
 * is aligned to its element size) and writes the header to DIR/.NAME.tmp.
 * `meta` holds n_meta key/value pairs (meta[2i], meta[2i+1]) for
 * "__metadata__", or NULL. The tensors' data is not read here. */
ferry_status sft_writer_begin(const char *path, const sft_tensor *tensors, size_t n,
                             const char *const *meta, size_t n_meta, sft_writer **out);
/* Writes bytes [offset, offset+len) of tensor i; any order, any pieces. */
ferry_status sft_writer_put(sft_writer *w, size_t i, uint64_t offset, const void *data, uint64_t len);
/* Checks every tensor was written in full, then fsync + rename + fsync of the
 * directory. Frees w whatever the outcome; on failure the old file stays. */
ferry_status sft_writer_commit(sft_writer *w);
/* Drops the temporary; the old file stays. Accepts NULL. */
void sft_writer_abort(sft_writer *w);

/* One call: begin, put each tensor's `data` whole, commit. */
ferry_status sft_write(const char *path, const sft_tensor *tensors, size_t n,
                      const char *const *meta, size_t n_meta);

/* ---- reading ---- */

typedef struct sft_file sft_file;

/* Maps `path` and checks all of it: the header length against the file size,
 * the JSON, each dtype name, shape, and data_offsets (begin <= end, within the
 * data, end - begin == product(shape) * dtype size, no overlap, no hole, the
 * data fully covered), names unique, metadata values strings. FERRY_ERR_IO if
 * it cannot be read; FERRY_ERR_FORMAT naming the file and the tensor;
 * FERRY_ERR_UNSUPPORTED for a valid dtype this library does not handle (F64,
 * U8, ...). On success *out owns the mapping; release with sft_close. */
ferry_status sft_open(const char *path, sft_file **out);
void sft_close(sft_file *f);

size_t sft_count(const sft_file *f);
/* Tensor i in the header's order (0 <= i < sft_count); NULL if out of range. */
const sft_tensor *sft_tensor_at(const sft_file *f, size_t i);
/* The tensor called `name`, or NULL (no error message is set). */
const sft_tensor *sft_find(const sft_file *f, const char *name);
/* Like sft_find, but FERRY_ERR_FORMAT naming the file and tensor when it is
 * missing, or when its dtype or shape differs from the expected ones (ndim < 0
 * skips the shape check). */
ferry_status sft_expect(const sft_file *f, const char *name, ferry_dtype dtype, int ndim, const int64_t *shape,
                       const sft_tensor **out);
/* What identifies the tensors' bytes of a file, whatever its header says
 * (metadata, names, order): their length and the CRC-32C of all of them, as
 * stored. A checkpoint records it for the model.safetensors saved with it,
 * so a weights file changed or damaged afterwards is told apart. */
typedef struct sft_checksum {
    uint64_t bytes;
    uint32_t crc32c;
} sft_checksum;
ferry_status sft_data_checksum(const sft_file *f, sft_checksum *out);
/* The same of part `part` (0 .. parts - 1) of the tensors' bytes alone,
 * [B part / parts, B (part + 1) / parts) of B: each of several processes
 * reads its part, and crc32c_combine in part order gives the whole's. */
ferry_status sft_data_checksum_part(const sft_file *f, int part, int parts, sft_checksum *out);

/* Reads bytes [offset, offset + len) of tensor t (one of f's) into buf
 * through the file, not the mapping: nothing of the file stays resident
 * in the process after it, and a file cut short since sft_open is
 * FERRY_ERR_FORMAT naming it and the tensor, not a SIGBUS. Any thread. */
ferry_status sft_read(const sft_file *f, const sft_tensor *t, uint64_t offset, void *buf, uint64_t len);

/* A "__metadata__" value, or NULL. */
const char *sft_metadata(const sft_file *f, const char *key);

/* Writes a shape as people read it, "[768]", "[3, 4, 5]", "[]" for a scalar,
 * into buf (cut to cap, NUL-terminated). Returns buf. */
char *sft_format_shape(const int64_t *shape, int ndim, char *buf, size_t cap);

#endif
