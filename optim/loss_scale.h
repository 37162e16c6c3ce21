/* optim/loss_scale.h: dynamic loss scaling for fp16 training, as PyTorch's
 * GradScaler: the loss is multiplied by `scale` before backward; a step whose
 * gradients overflow is skipped and the scale multiplied by backoff; after
 * `interval` good steps in a row it is multiplied by growth. Owns only this
 * small state; the caller feeds it whether the step's gradients were finite. */
#ifndef FERRY_OPTIM_LOSS_SCALE_H
#define FERRY_OPTIM_LOSS_SCALE_H

#include <stdbool.h>

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loss_scaler {
    float scale;    /* current multiplier of the loss */
    float growth;   /* > 1 */
    float backoff;  /* in (0, 1) */
    int interval;   /* good steps before growing, >= 1 */
    int good_steps; /* finite steps since the last change */
} loss_scaler;

/* GradScaler's defaults: init 65536, growth 2, backoff 0.5, interval 2000. */
#define LOSS_SCALE_INIT_DEFAULT 65536.0f
#define LOSS_SCALE_GROWTH_DEFAULT 2.0f
#define LOSS_SCALE_BACKOFF_DEFAULT 0.5f
#define LOSS_SCALE_INTERVAL_DEFAULT 2000

/* Fills *ls; FERRY_ERR_INVALID_ARGUMENT on init not finite or <= 0,
 * growth <= 1, backoff outside (0, 1), interval < 1. */
ferry_status loss_scale_init(loss_scaler *ls, float init, float growth, float backoff, int interval);
/* loss_scale_init with the defaults. */
void loss_scale_init_default(loss_scaler *ls);

/* 1 / scale: the factor that unscales gradients (exact: scales are powers of
 * two with the defaults). */
float loss_scale_inverse(const loss_scaler *ls);

/* Records a step: found_nonfinite halves (backoff) the scale and resets the
 * count; otherwise the count grows and, at `interval`, the scale grows
 * (unless that would make it inf). Returns true when the scale changed. */
bool loss_scale_update(loss_scaler *ls, bool found_nonfinite);

#ifdef __cplusplus
}
#endif
#endif
