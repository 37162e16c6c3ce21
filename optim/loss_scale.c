/* optim/loss_scale.c: the GradScaler rule of dynamic loss scaling (see
 * loss_scale.h): settings checked, the scale's update, its inverse. */
#include "optim/loss_scale.h"

#include <math.h>

#include "common/error.h"

/* The smallest double that rounds to inf in fp32 (FLT_MAX + half an ulp):
 * a double at or past it is converted by hand, since C leaves the
 * conversion of an out-of-range value undefined. */
#define TO_FLOAT_INF 0x1.ffffffp+127

static float to_float(double x) { return x < TO_FLOAT_INF ? (float)x : INFINITY; }

ferry_status loss_scale_check(float init, double growth, double backoff, int interval, const char *who)
{
    if (!isfinite(init) || init <= 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: initial loss scale %g; give a finite value > 0 (65536, "
                       "torch's GradScaler default, is usual)", who, (double)init);
    if (!isfinite(growth) || growth <= 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: loss scale growth factor %g; give a finite value > 1 (2 is "
                       "usual)", who, growth);
    if (!(backoff > 0 && backoff < 1))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: loss scale backoff factor %g; give a value in (0, 1) (0.5 "
                       "is usual)", who, backoff);
    if (interval < 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: loss scale growth interval %d; give at least 1 (2000 is "
                       "usual)", who, interval);
    return FERRY_OK;
}

ferry_status loss_scale_init(loss_scaler *ls, float init, double growth, double backoff, int interval)
{
    if (!ls)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "loss_scale_init: the scaler is NULL");
    ferry_status st = loss_scale_check(init, growth, backoff, interval, "loss_scale_init");
    if (st == FERRY_OK)
        *ls = (loss_scaler){init, 0, growth, backoff, interval};
    return st;
}

float loss_scale_inverse(const loss_scaler *ls) { return to_float(1.0 / (double)ls->scale); }

bool loss_scale_update(loss_scaler *ls, bool found_nonfinite)
{
    if (found_nonfinite) {
        float backed = (float)((double)ls->scale * ls->backoff);
        bool changed = backed != ls->scale;
        ls->scale = backed;
        ls->tracker = 0;
        return changed;
    }
    int32_t successful = ls->tracker + 1;
    if (successful != ls->interval) {
        ls->tracker = successful;
        return false;
    }
    ls->tracker = 0;
    float grown = to_float((double)ls->scale * ls->growth);
    if (!isfinite(grown)) /* as torch: never grow past fp32's range to inf */
        return false;
    ls->scale = grown;
    return true;
}

ferry_status loss_scale_restore(loss_scaler *ls, float scale, int32_t tracker)
{
    if (!isfinite(scale) || scale <= 0)
        return err_set(FERRY_ERR_FORMAT, "loss scale %g: a saved scale is finite and > 0", (double)scale);
    if (tracker < 0)
        return err_set(FERRY_ERR_FORMAT, "loss scale growth tracker %d: a saved count is never negative",
                       (int)tracker);
    ls->scale = scale;
    ls->tracker = tracker < ls->interval ? tracker : ls->interval - 1;
    return FERRY_OK;
}
