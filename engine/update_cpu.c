/* The update of optimizer and params modes: every group's fp32 master
 * weights and Adam moments in the pinned host pool (this rank's slot of
 * them with data parallelism), updated by the CPU's AdamW on the optimizer
 * threads, tile by tile; each group's update is a set of jobs, and the h2d
 * stream's wait for exactly those jobs orders the group's next upload
 * (optimizer mode) or fetch (params mode) behind its own update, so the
 * next forward of group i waits for group i only. With the delayed update
 * the uploads of step t wait until step t+1's backward released each group
 * (update_prepare). */
#include "engine/update_impl.h"

static ferry_status cpu_run(engine_update *u, const ferry_step_options *o, float clip)
{
    ferry_status st = update_begin_offloaded(u);
    if (st == FERRY_OK)
        st = update_submit_cpu(u, o, clip, 0);
    if (st == FERRY_OK && update_mode(u) == FERRY_OFFLOAD_PARAMS)
        return update_refresh_resident(u);
    if (update_mode(u) != FERRY_OFFLOAD_OPTIMIZER || u->env.ctx->cfg->delayed_update || st != FERRY_OK)
        return st;
    return update_upload_after(u, 0);
}

const update_ops update_cpu_ops = {
    .name = "cpu",
    .fill = update_fill_offloaded,
    .run = cpu_run,
};
