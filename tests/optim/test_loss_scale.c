/* tests/optim/test_loss_scale.c: the dynamic loss scale against GradScaler's
 * rules worked out by hand: halve on overflow, double after `interval` good
 * steps, count reset by an overflow, never grow to inf, bad settings refused. */
#include <math.h>

#include "optim/loss_scale.h"
#include "tests/tap.h"

int main(void)
{
    loss_scaler ls;
    loss_scale_init_default(&ls);
    TAP_IS_CLOSE(ls.scale, 65536.0, 0, 0, "default initial scale 65536");
    TAP_IS_CLOSE(ls.growth, 2.0, 0, 0, "default growth 2");
    TAP_IS_CLOSE(ls.backoff, 0.5, 0, 0, "default backoff 0.5");
    TAP_IS_INT(ls.interval, 2000, "default interval 2000");
    TAP_IS_CLOSE(loss_scale_inverse(&ls), 1.0 / 65536, 0, 0, "inverse 2^-16");

    TAP_IS_INT(loss_scale_update(&ls, true), 1, "overflow changes the scale");
    TAP_IS_CLOSE(ls.scale, 32768.0, 0, 0, "overflow halves: 32768");
    for (int i = 0; i < 1999; i++)
        loss_scale_update(&ls, false);
    TAP_IS_CLOSE(ls.scale, 32768.0, 0, 0, "1999 good steps: unchanged");
    TAP_IS_INT(loss_scale_update(&ls, false), 1, "the 2000th good step changes the scale");
    TAP_IS_CLOSE(ls.scale, 65536.0, 0, 0, "2000 good steps double it");
    for (int i = 0; i < 1500; i++)
        loss_scale_update(&ls, false);
    loss_scale_update(&ls, true);
    TAP_IS_CLOSE(ls.scale, 32768.0, 0, 0, "overflow after 1500 good steps halves");
    for (int i = 0; i < 1999; i++)
        loss_scale_update(&ls, false);
    TAP_IS_CLOSE(ls.scale, 32768.0, 0, 0, "the count restarted at the overflow");

    TAP_IS_STATUS(loss_scale_init(&ls, 1e38f, 4.0f, 0.5f, 1), FERRY_OK, "custom scaler");
    TAP_IS_INT(loss_scale_update(&ls, false), 0, "growth that would overflow to inf is refused");
    TAP_IS_CLOSE(ls.scale, 1e38f, 0, 0, "scale kept finite");
    TAP_IS_STATUS(loss_scale_init(&ls, 0.0f, 2.0f, 0.5f, 10), FERRY_ERR_INVALID_ARGUMENT, "init 0 refused");
    TAP_IS_STATUS(loss_scale_init(&ls, NAN, 2.0f, 0.5f, 10), FERRY_ERR_INVALID_ARGUMENT, "init NaN refused");
    TAP_IS_STATUS(loss_scale_init(&ls, 8.0f, 1.0f, 0.5f, 10), FERRY_ERR_INVALID_ARGUMENT, "growth 1 refused");
    TAP_IS_STATUS(loss_scale_init(&ls, 8.0f, 2.0f, 1.0f, 10), FERRY_ERR_INVALID_ARGUMENT, "backoff 1 refused");
    TAP_IS_STATUS(loss_scale_init(&ls, 8.0f, 2.0f, 0.5f, 0), FERRY_ERR_INVALID_ARGUMENT, "interval 0 refused");
    return tap_done();
}
