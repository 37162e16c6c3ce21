/* optim/loss_scale.h: dynamic loss scaling for fp16 training, with torch's
 * GradScaler's rule and defaults. The embedder multiplies its loss (its
 * gradient) by `scale` before backward, so small gradients survive fp16;
 * the step divides them back out (loss_scale_inverse, folded into the clip
 * coefficient). A step whose gradients hold an inf or NaN is skipped and the
 * scale multiplied by `backoff`; after `interval` clean steps in a row it is
 * multiplied by `growth`. Owns only this small state; the caller feeds it
 * the step's skip decision (optim/gradnorm.h's gradnorm_decide, which data
 * parallel ranks feed with an all-reduced flag, so every rank updates its
 * scale the same way). Knows nothing of CUDA. Not thread-safe: one owner.
 *
 * The update is torch's _amp_update_scale_ (the kernel GradScaler.update()
 * runs), step for step:
 *   found inf/NaN:  scale = fp32(scale x backoff), tracker = 0
 *   else:           tracker + 1 == interval ? (scale = fp32(scale x growth)
 *                   unless that is inf; tracker = 0) : tracker += 1
 * with the products in double (torch passes the factors as doubles) and
 * rounded once to fp32, the scale's type. */
#ifndef FERRY_OPTIM_LOSS_SCALE_H
#define FERRY_OPTIM_LOSS_SCALE_H

#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GradScaler's defaults: init_scale 2^16, growth_factor 2, backoff_factor
 * 0.5, growth_interval 2000. */
#define LOSS_SCALE_INIT_DEFAULT 65536.0f
#define LOSS_SCALE_GROWTH_DEFAULT 2.0
#define LOSS_SCALE_BACKOFF_DEFAULT 0.5
#define LOSS_SCALE_INTERVAL_DEFAULT 2000

typedef struct loss_scaler {
    float scale;         /* the loss's multiplier now: finite, > 0 */
    int32_t tracker;     /* clean steps since the scale last changed (torch's growth_tracker) */
    double growth;       /* > 1 */
    double backoff;      /* in (0, 1) */
    int32_t interval;    /* clean steps before growing, >= 1 */
} loss_scaler;

/* Checks the settings: FERRY_ERR_INVALID_ARGUMENT with a sentence naming the
 * value for init not finite or <= 0, growth not finite or <= 1, backoff
 * outside (0, 1), interval < 1. `who` starts the message. */
ferry_status loss_scale_check(float init, double growth, double backoff, int interval, const char *who);
/* Fills *ls (tracker 0) after loss_scale_check. */
ferry_status loss_scale_init(loss_scaler *ls, float init, double growth, double backoff, int interval);

/* The factor that unscales gradients: fp32(1 / double(scale)), as
 * GradScaler.unscale_ computes it. Exact for powers of two; inf for a
 * scale that backed off below 2^-128 (or to 0). */
float loss_scale_inverse(const loss_scaler *ls);

/* Records a step's outcome (see the rule above). Returns true when the
 * scale changed. */
bool loss_scale_update(loss_scaler *ls, bool found_nonfinite);

/* Restores a saved state (a checkpoint's): FERRY_ERR_FORMAT when the scale
 * is not finite and > 0 or the tracker is negative; the state is unchanged
 * then. A tracker at or past this scaler's interval (a run resumed with a
 * shorter one) becomes interval - 1: the next clean step grows the scale. */
ferry_status loss_scale_restore(loss_scaler *ls, float scale, int32_t tracker);

#ifdef __cplusplus
}
#endif
#endif
