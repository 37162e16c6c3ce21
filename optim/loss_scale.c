/* optim/loss_scale.c: the GradScaler-style dynamic loss scale update. */
#include "optim/loss_scale.h"

#include <math.h>

#include "common/error.h"

ferry_status loss_scale_init(loss_scaler *ls, float init, float growth, float backoff, int interval)
{
    if (!ls)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "loss_scale_init: ls is NULL");
    if (!isfinite(init) || init <= 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "loss scale: initial scale %g; give a finite value > 0 (65536 is usual)",
                       (double)init);
    if (!isfinite(growth) || growth <= 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "loss scale: growth factor %g; give a value > 1 (2 is usual)",
                       (double)growth);
    if (!(backoff > 0 && backoff < 1))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "loss scale: backoff factor %g; give a value in (0, 1) (0.5 is usual)",
                       (double)backoff);
    if (interval < 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "loss scale: growth interval %d; give >= 1 (2000 is usual)", interval);
    *ls = (loss_scaler){init, growth, backoff, interval, 0};
    return FERRY_OK;
}

void loss_scale_init_default(loss_scaler *ls)
{
    *ls = (loss_scaler){LOSS_SCALE_INIT_DEFAULT, LOSS_SCALE_GROWTH_DEFAULT, LOSS_SCALE_BACKOFF_DEFAULT,
                        LOSS_SCALE_INTERVAL_DEFAULT, 0};
}

float loss_scale_inverse(const loss_scaler *ls) { return 1.0f / ls->scale; }

bool loss_scale_update(loss_scaler *ls, bool found_nonfinite)
{
    if (found_nonfinite) {
        ls->scale *= ls->backoff;
        ls->good_steps = 0;
        return true;
    }
    if (++ls->good_steps < ls->interval)
        return false;
    ls->good_steps = 0;
    float grown = ls->scale * ls->growth;
    if (!isfinite(grown)) /* as torch's _amp_update_scale_: never grow to inf */
        return false;
    ls->scale = grown;
    return true;
}
