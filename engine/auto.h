/* Offload auto at setup (engine/auto.c): the choice of a mode from the
 * memory plan's byte counts, the device budget and the host memory this
 * rank may take, agreed across ranks. engine_auto_choose, the arithmetic
 * alone, is declared in engine/intree.h for the planners above the engine.
 * Reads the plan and the machine; places nothing. Floor 3. */
#ifndef FERRY_ENGINE_AUTO_H
#define FERRY_ENGINE_AUTO_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/groups.h"
#include "engine/intree.h"

/* What setup knows when it chooses. */
typedef struct engine_auto_setup {
    const engine_groups *groups;
    const ferry_engine_config *cfg; /* prefetch, micro-batches, activations, NVMe sizes, host budget */
    ferry_backend_kind backend;
    ferry_dtype act;
    uint64_t device_budget;
    int ranks;            /* data parallel ranks (1 alone) */
    bool ranked;          /* data parallelism is on: every rank takes the same mode */
    const char *nvme_dir; /* the NVMe tier's folder, or NULL */
} engine_auto_setup;

/* The mode to run, agreed across the ranks; `line` says in one line what
 * was chosen and why, which host limit counted and how a disk is reached. */
ferry_status engine_auto_resolve(const engine_auto_setup *in, engine_auto_choice *c, char *line, size_t cap);

#endif
