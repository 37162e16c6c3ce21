/* The host reference of the device optimizer (beside its CUDA twin,
 * backend/ops/adamw.cu): AdamW over fp32 master weights and moments, and the
 * gradient sum of squares, written as common/numerics.h defines them, so on
 * the host backend the update of offload none is bitwise the CPU optimizer's
 * (optim/) and the offload modes agree to the last bit. */
#include "backend/ops/ops_host.h"

#include "common/numerics.h"

void hostop_adamw(float *master, float *m, float *v, const void *grad, ferry_dtype grad_dtype,
                  void *param_out, ferry_dtype act, size_t n, const adamw_hparams *hp, int64_t step,
                  float grad_scale)
{
    adamw_consts c = adamw_consts_make(hp, step, grad_scale);
    for (size_t i = 0; i < n; i++) {
        adamw_element(&c, &master[i], &m[i], &v[i], dtype_load_f32(grad, grad_dtype, i));
        if (param_out)
            dtype_store_f32(param_out, act, i, master[i]);
    }
}

double hostop_sumsq(const void *grad, ferry_dtype act, size_t n)
{
    double sum = 0;
    for (size_t at = 0; at < n; at += NUMERICS_TILE) {
        size_t len = n - at < NUMERICS_TILE ? n - at : NUMERICS_TILE;
        sum += numerics_sumsq_tile((const char *)grad + at * dtype_size(act), act, len);
    }
    return sum;
}
