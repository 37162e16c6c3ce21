/* The C side of the PyTorch oracles' files (oracle_io.py reads and writes
 * the other side), shared by test_gpt2_oracle.c and test_llama_oracle.c:
 * the input's pieces (raw bytes, int32 fields, the optimizer's settings
 * and the steps' batches, one tensor in ferry's layout), the output read
 * back, and torch.optim.AdamW's update of one element in double, the
 * expectation the tests hold ferry's weights to. Each family's header
 * fields and which tensors decay stay in its test. Header-only. */
#ifndef FERRY_TESTS_MODELS_ORACLE_FILES_H
#define FERRY_TESTS_MODELS_ORACLE_FILES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static inline void oracle_put(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }
static inline void oracle_put_i32(FILE *f, int32_t v) { oracle_put(f, &v, 4); }

/* AdamW's settings as the input carries them (float64 lr, beta1, beta2,
 * eps, weight_decay), then the batch's n tokens once for each of `steps`
 * steps and its n targets as many times. */
static inline void oracle_put_run(FILE *f, const double opt[5], const int32_t *tok, const int32_t *tgt, int steps,
                                  size_t n)
{
    oracle_put(f, opt, 5 * sizeof *opt);
    for (int s = 0; s < steps; s++)
        oracle_put(f, tok, n * 4);
    for (int s = 0; s < steps; s++)
        oracle_put(f, tgt, n * 4);
}

/* One tensor: int32 name length, the name, int32 ndim, int32 shape[ndim],
 * int32 decay when decay >= 0 (the Llama file has the field, GPT-2's does
 * not), then its numel float32 values. */
static inline void oracle_put_tensor(FILE *f, const char *name, int ndim, const void *shape, int decay,
                                     const float *data, size_t numel)
{
    oracle_put_i32(f, (int32_t)strlen(name));
    oracle_put(f, name, strlen(name));
    oracle_put_i32(f, ndim);
    oracle_put(f, shape, 4 * (size_t)ndim);
    if (decay >= 0)
        oracle_put_i32(f, decay);
    oracle_put(f, data, numel * 4);
}

/* An output file: its 8-byte magic, nhdr int32 fields each equal to
 * want[i] (unchecked where want[i] < 0), then narrays float64 arrays of
 * count[i] values into array[i], then its end. Whether all of it was so. */
static inline int oracle_read(const char *path, const char *magic, const int32_t *want, int nhdr,
                              double *const *array, const size_t *count, int narrays)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    char got[8];
    int ok = fread(got, 1, 8, f) == 8 && memcmp(got, magic, 8) == 0;
    for (int i = 0; ok && i < nhdr; i++) {
        int32_t v;
        ok = fread(&v, 4, 1, f) == 1 && (want[i] < 0 || v == want[i]);
    }
    for (int i = 0; ok && i < narrays; i++)
        ok = array[i] && fread(array[i], 8, count[i], f) == count[i];
    ok = ok && fgetc(f) == EOF;
    fclose(f);
    return ok;
}

/* torch.optim.AdamW's settings. */
typedef struct oracle_adamw {
    double lr, beta1, beta2, eps;
} oracle_adamw;

/* One element's update at step `step` (from 1) with gradient gr and weight
 * decay wd, in double as torch computes it: the master *p and moments *m,
 * *v updated; the new weight in float. */
static inline float oracle_adamw_element(const oracle_adamw *o, double *p, double *m, double *v, double gr, double wd,
                                         int step)
{
    double bc1 = 1.0 - pow(o->beta1, step), bc2 = 1.0 - pow(o->beta2, step);
    *p *= 1.0 - o->lr * wd;
    *m = o->beta1 * *m + (1.0 - o->beta1) * gr;
    *v = o->beta2 * *v + (1.0 - o->beta2) * gr * gr;
    *p -= o->lr / bc1 * *m / (sqrt(*v) / sqrt(bc2) + o->eps);
    return (float)*p;
}

#endif
