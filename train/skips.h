/* Steps the engine skipped (a gradient held inf or NaN; with a loss scaler,
 * an overflow): the trainer's one count of them, and its one decision to
 * stop a run that skips too many in a row. The engine counts (its step
 * report.s skips_in_row); this says what they mean for a
 * run: the words of the progress line and the log, and the stop. Owns no
 * engine state. */
#ifndef FERRY_TRAIN_SKIPS_H
#define FERRY_TRAIN_SKIPS_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

typedef struct train_skips {
    int limit;          /* steps skipped in a row that stop the run; 0 = never */
    int64_t in_a_row;   /* as the last step report said */
    int64_t total;      /* since the run (or its resume) started */
    int64_t first_step; /* the first step of the current run of skips; -1 when none */
} train_skips;

void train_skips_init(train_skips *s, int limit);

/* Takes the report of step `step` (1-based). FERRY_ERR_STATE once `limit`
 * steps in a row were skipped, with a sentence naming how many, from which
 * step, the first group whose gradient was not finite (`bad_group`, may be
 * NULL) and what to do. */
ferry_status train_skips_count(train_skips *s, int64_t step, const ferry_step_report *rep, const char *bad_group);

/* " | skipped 3 in a row, 5 in all" for the progress line; "" before any
 * skip. Returns buf. */
const char *train_skips_describe(const train_skips *s, char *buf, size_t cap);

#endif
