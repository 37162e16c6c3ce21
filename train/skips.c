/* Counting skipped steps and stopping a run that skips too many (skips.h). */
#include "train/skips.h"

#include <stdio.h>

#include "common/error.h"

void train_skips_init(train_skips *s, int limit)
{
    s->limit = limit;
    s->in_a_row = s->total = 0;
    s->first_step = -1;
}

ferry_status train_skips_count(train_skips *s, int64_t step, const ferry_step_report *rep, const char *bad_group)
{
    s->in_a_row = rep->skips_in_row;
    s->total += rep->skipped ? 1 : 0;
    if (!rep->skipped) {
        s->first_step = -1;
        return FERRY_OK;
    }
    if (s->first_step < 0 || s->in_a_row == 1)
        s->first_step = step;
    if (s->limit <= 0 || s->in_a_row < s->limit)
        return FERRY_OK;
    return err_set(FERRY_ERR_STATE, "%lld steps in a row were skipped (steps %lld to %lld): their gradients held inf "
                   "or NaN%s%s%s, so the weights have not changed since step %lld; the run has diverged or its data "
                   "is bad: resume from an earlier checkpoint with a lower --lr or a --clip, check the data, or raise "
                   "--max-skips (0 never stops)",
                   (long long)s->in_a_row, (long long)s->first_step, (long long)step,
                   bad_group ? " (the first in group '" : "", bad_group ? bad_group : "", bad_group ? "')" : "",
                   (long long)s->first_step - 1);
}

const char *train_skips_describe(const train_skips *s, char *buf, size_t cap)
{
    if (s->total == 0)
        snprintf(buf, cap, "%s", "");
    else
        snprintf(buf, cap, " | skipped %lld in a row, %lld in all", (long long)s->in_a_row, (long long)s->total);
    return buf;
}
