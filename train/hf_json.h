/* What the Hugging Face folders of every family share (GPT-2's in
 * train/hf_checkpoint.c, the Llama family's in train/hf_llama.c): a JSON
 * file read as one object with every key once, a value described for a
 * message, torch_dtype's names, the "ferry" fields of config.json and the
 * safetensors metadata that bind a checkpoint to its run and step, and a
 * JSON file written atomically. Owns no state; any thread. Internal to
 * train/. */
#ifndef FERRY_TRAIN_HF_JSON_H
#define FERRY_TRAIN_HF_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "ferry.h"
#include "train/hf_checkpoint.h"

/* What a JSON value is, for a message: "the string \"2\"", "2.7", "true",
 * "null", "an array", "an object". */
void hf_json_describe(const cJSON *v, char *buf, size_t cap);

/* Reads `path` (FERRY_ERR_IO if it cannot) as one JSON object, with nothing
 * but blanks after it and no key twice at any depth; anything else is
 * FERRY_ERR_FORMAT. `what` names the file's role in messages ("model
 * config"), `example` shows what it should look like ("{\"n_layer\": 12,
 * ...}"). On success *out is the caller's to cJSON_Delete. */
ferry_status hf_json_read_object(const char *path, const char *what, const char *example, cJSON **out);

/* A JSON number that is a whole number in [lo, hi]. */
bool hf_json_whole(const cJSON *v, double lo, double hi);

/* A run identity: 32 lowercase hex digits. */
bool hf_is_run_id(const char *s);
/* config.json's "ferry" object, if any: {"run": "<32 hex digits>", "step":
 * N}; out gets run "" and step -1 for what is absent; damaged fields are
 * FERRY_ERR_FORMAT naming `path`. */
ferry_status hf_json_read_ferry(const char *path, const cJSON *j, hf_ferry_info *out);
/* Adds that object to j when `ferry` (may be NULL) records anything. */
void hf_json_add_ferry(cJSON *j, const hf_ferry_info *ferry);
/* The "__metadata__" pairs of a saved safetensors file: format "pt",
 * producer, and ferry_run / ferry_step when `ferry` (may be NULL) records
 * them, into meta[0..2n) (the strings point into ferry, producer and
 * step_buf). Returns n. */
size_t hf_ferry_metadata(const hf_ferry_info *ferry, const char *producer, const char *meta[8], char step_buf[24]);

/* torch_dtype's names of the float types weights are stored in: "float32",
 * "float16", "bfloat16". parse: false for any other name. name: NULL for
 * any other type. */
bool hf_torch_dtype_parse(const char *name, ferry_dtype *out);
const char *hf_torch_dtype_name(ferry_dtype d);

/* DIR/NAME into buf, or FERRY_ERR_INVALID_ARGUMENT naming the folder when it
 * does not fit. */
ferry_status hf_path(char *buf, size_t cap, const char *dir, const char *name);
/* Writes j, indented, to `path` atomically (fileio_atomic). */
ferry_status hf_json_write(const char *path, const cJSON *j);

#endif
