/* Damaged copies of a safetensors file for the checkpoint tests: a tensor
 * left out, reshaped (same element count), retyped to I32 (same bytes), or
 * an extra one added. Header-only; a test includes it once. */
#ifndef FERRY_TESTS_TRAIN_SFT_EDIT_H
#define FERRY_TESTS_TRAIN_SFT_EDIT_H

#include <stdlib.h>
#include <string.h>

#include "train/safetensors.h"

typedef struct sft_edit {
    const char *drop;    /* leave this tensor out */
    const char *reshape; /* give this one shape {s0, s1} (same element count) */
    int64_t s0, s1;
    const char *retype;  /* make this one I32 (same bytes) */
    const char *add;     /* add a tensor of this name, F32 zeros [add_rows, add_cols] */
    int add_rows, add_cols;
} sft_edit;

/* Writes src with the edit applied to dst. */
static inline ferry_status sft_rewrite(const char *src, const char *dst, const sft_edit *ed)
{
    sft_file *f = NULL;
    ferry_status st = sft_open(src, &f);
    if (st != FERRY_OK)
        return st;
    size_t n = sft_count(f), k = 0;
    sft_tensor *ts = (sft_tensor *)calloc(n + 1, sizeof *ts);
    float *extra = ed->add ? (float *)calloc((size_t)ed->add_rows * (size_t)ed->add_cols + 1, sizeof *extra) : NULL;
    for (size_t i = 0; ts && i < n; i++) {
        sft_tensor t = *sft_tensor_at(f, i);
        if (ed->drop && strcmp(t.name, ed->drop) == 0)
            continue;
        if (ed->reshape && strcmp(t.name, ed->reshape) == 0)
            t.ndim = 2, t.shape[0] = ed->s0, t.shape[1] = ed->s1;
        if (ed->retype && strcmp(t.name, ed->retype) == 0)
            t.dtype = FERRY_DTYPE_I32;
        ts[k++] = t;
    }
    if (ts && extra) {
        sft_tensor t = {ed->add, FERRY_DTYPE_F32, 2, {ed->add_rows, ed->add_cols}, extra, 0};
        ts[k++] = t;
    }
    st = ts && (extra || !ed->add) ? sft_write(dst, ts, k, NULL, 0) : FERRY_ERR_OUT_OF_MEMORY;
    free(extra);
    free(ts);
    sft_close(f);
    return st;
}

#endif
