/* Offload auto: which mode a run takes, from the memory plan's byte counts
 * (plan.c, counted from the layout table setup allocates from), the device
 * budget and the host memory available. engine_auto_choose is arithmetic
 * only, so the GPT-2 planner (models/gpt2_plan.c) predicts with the very
 * function setup decides with; engine_auto_resolve makes the choice for an
 * engine at setup, agreeing across ranks, and the orchestrator applies it.
 * The host memory is common/hostmem's (the job's own cgroup, page cache
 * taken back, less a headroom for the pinned pool), and the line says which
 * limit gave it. A disk candidate needs nvme_path on a disk: a folder on a
 * file system in memory (tmpfs, ramfs) takes it out of the running, said in
 * the line; when the disk is chosen, the line says how it will be reached
 * (io_uring, or where io_uring is refused the threads of pread/pwrite with
 * their rate measured there). Places nothing itself (placement.c does, for
 * the mode chosen); never reads timings to choose. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/hostmem.h"
#include "common/units.h"
#include "engine/auto.h"
#include "backend/comm.h"
#include "offload/nvme.h"

const char *engine_auto_candidate_name(engine_auto_candidate c)
{
    switch (c) {
    case ENGINE_AUTO_NONE: return "none";
    case ENGINE_AUTO_OPTIMIZER: return "optimizer";
    case ENGINE_AUTO_PARAMS: return "params";
    case ENGINE_AUTO_NVME: return "nvme";
    case ENGINE_AUTO_PARAMS_DISK: return "params with the state on disk";
    case ENGINE_AUTO_CANDIDATES: break;
    }
    return "nothing";
}

static ferry_offload candidate_mode(engine_auto_candidate c)
{
    static const ferry_offload mode[ENGINE_AUTO_CANDIDATES] = {
        FERRY_OFFLOAD_NONE, FERRY_OFFLOAD_OPTIMIZER, FERRY_OFFLOAD_PARAMS, FERRY_OFFLOAD_NVME, FERRY_OFFLOAD_PARAMS};
    return mode[c];
}

/* One candidate's device (engine + embedder) and host bytes. Params mode is
 * counted for its whole window (prefetch_groups ahead), not for residency,
 * which only fills what the budget leaves. */
static ferry_status count(const engine_auto_request *rq, engine_auto_candidate c, uint64_t *dev, uint64_t *host)
{
    engine_plan_request p = rq->plan;
    p.offload = candidate_mode(c);
    p.disk = c == ENGINE_AUTO_NVME || c == ENGINE_AUTO_PARAMS_DISK;
    if (!p.disk)
        p.disk_master = false;
    p.device_budget = 0;
    engine_memory_plan m;
    ferry_status st = engine_plan_memory(&p, &m);
    if (st != FERRY_OK)
        return st;
    *dev = 0; /* the embedder's bytes are in the plan's region */
    *host = 0;
    for (int k = 0; k < FERRY_MEM_CATEGORY_COUNT; k++) {
        *dev += m.device_bytes[k];
        *host += m.host_bytes[k];
    }
    return FERRY_OK;
}

static bool host_fits(const engine_auto_request *rq, uint64_t host)
{
    return !rq->host_available || host <= rq->host_available;
}

static void why_not(const engine_auto_request *rq, const engine_auto_choice *c, engine_auto_candidate k, char *buf,
                    size_t cap)
{
    char d[32], h[32];
    units_fmt_bytes(d, sizeof d, c->device_bytes[k]);
    units_fmt_bytes(h, sizeof h, c->host_bytes[k]);
    if (k == ENGINE_AUTO_NONE)
        snprintf(buf, cap, "%s needs %s on the device", engine_auto_candidate_name(k), d);
    else
        snprintf(buf, cap, "%s %s on the device and %s on the host%s", engine_auto_candidate_name(k), d, h,
                 c->device_bytes[k] > rq->device_budget ? "" : host_fits(rq, c->host_bytes[k]) ? "" : " (host short)");
}

/* "none needs 9.1 GiB on the device; optimizer 2.0 GiB ... " for the
 * candidates before `upto` that were considered. */
static void list_counts(const engine_auto_request *rq, const engine_auto_choice *c, engine_auto_candidate from,
                        engine_auto_candidate upto, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int k = from; k < (int)upto && at < cap; k++) {
        if (!c->considered[k])
            continue;
        char one[160];
        why_not(rq, c, (engine_auto_candidate)k, one, sizeof one);
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", at ? "; " : "", one);
    }
}

static void write_reason(const engine_auto_request *rq, engine_auto_candidate first, engine_auto_choice *c)
{
    char budget[32], host[48] = "host memory not checked", acts[32], d[32], h[32], rest[400];
    units_fmt_bytes(budget, sizeof budget, rq->device_budget);
    if (rq->host_available) {
        char avail[32];
        snprintf(host, sizeof host, "of %s available", units_fmt_bytes(avail, sizeof avail, rq->host_available));
    }
    units_fmt_bytes(acts, sizeof acts, rq->plan.embedder_bytes);
    units_fmt_bytes(d, sizeof d, c->device_bytes[c->pick]);
    units_fmt_bytes(h, sizeof h, c->host_bytes[c->pick]);
    list_counts(rq, c, first, c->pick, rest, sizeof rest);
    snprintf(c->reason, sizeof c->reason,
             "offload auto chose %s: it needs %s of the %s device budget (activations %s included) and %s on "
             "the host (%s)%s%s",
             engine_auto_candidate_name(c->pick), d, budget, acts, h, host, rest[0] ? "; does not fit: " : "", rest);
}

static ferry_status nothing_fits(const engine_auto_request *rq, engine_auto_candidate first, engine_auto_choice *c)
{
    char budget[32], host[48] = "not checked", acts[32], all[400];
    units_fmt_bytes(budget, sizeof budget, rq->device_budget);
    units_fmt_bytes(acts, sizeof acts, rq->plan.embedder_bytes);
    if (rq->host_available) {
        char avail[32];
        snprintf(host, sizeof host, "%s available", units_fmt_bytes(avail, sizeof avail, rq->host_available));
    }
    list_counts(rq, c, first, ENGINE_AUTO_CANDIDATES, all, sizeof all);
    snprintf(c->reason, sizeof c->reason, "offload auto: nothing fits");
    return err_set(FERRY_ERR_OUT_OF_MEMORY,
                   "offload auto: no mode fits a device budget of %s (host memory %s; activations %s): %s; "
                   "raise the device budget, take fewer activations (a smaller batch or sequence, recompute)%s",
                   budget, host, acts, all,
                   rq->nvme || rq->plan.ranks > 1 ? ", or free host memory"
                                                  : ", free host memory, or give nvme_path for the NVMe tier");
}

ferry_status engine_auto_choose(const engine_auto_request *rq, engine_auto_candidate first, engine_auto_choice *out)
{
    if (!rq || !out || first < ENGINE_AUTO_NONE || first > ENGINE_AUTO_CANDIDATES)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine_auto_choose: NULL argument or candidate %d", (int)first);
    engine_auto_choice c;
    memset(&c, 0, sizeof c);
    c.pick = ENGINE_AUTO_CANDIDATES;
    bool alone = rq->plan.ranks <= 1;
    for (int k = first; k < ENGINE_AUTO_CANDIDATES && c.pick == ENGINE_AUTO_CANDIDATES; k++) {
        if ((k == ENGINE_AUTO_NVME || k == ENGINE_AUTO_PARAMS_DISK) && !(rq->nvme && alone))
            continue;
        ferry_status st = count(rq, (engine_auto_candidate)k, &c.device_bytes[k], &c.host_bytes[k]);
        if (st != FERRY_OK)
            return err_wrap(st, "offload auto");
        c.considered[k] = true;
        if (c.device_bytes[k] <= rq->device_budget && host_fits(rq, c.host_bytes[k]))
            c.pick = (engine_auto_candidate)k;
    }
    ferry_status st = FERRY_OK;
    if (c.pick == ENGINE_AUTO_CANDIDATES) {
        st = nothing_fits(rq, first, &c);
    } else {
        c.offload = candidate_mode(c.pick);
        c.disk = c.pick == ENGINE_AUTO_PARAMS_DISK;
        write_reason(rq, first, &c);
    }
    *out = c;
    return st;
}

/* ---- the engine's side: at setup ---- */

/* Host memory this rank may take: what the machine (and its cgroup) has
 * available, shared by the ranks on it, and host_budget_bytes when set;
 * `words` says which limit it is. */
static uint64_t rank_host_available(const engine_auto_setup *in, char *words, size_t cap)
{
    hostmem_figures h;
    uint64_t avail = hostmem_available(NULL, &h);
    hostmem_describe(&h, words, cap);
    int local = in->ranked ? comm_world_local_size() : 1;
    if (local > 1) {
        avail /= (uint64_t)local;
        size_t len = strlen(words);
        snprintf(words + len, cap - len, ", shared by the %d ranks on this machine", local);
    }
    if (in->cfg->host_budget_bytes && (!avail || in->cfg->host_budget_bytes < avail)) {
        char b[32], m[400];
        snprintf(m, sizeof m, "%s", words);
        avail = in->cfg->host_budget_bytes;
        snprintf(words, cap, "host_budget_bytes %s, below the machine's %s", units_fmt_bytes(b, sizeof b, avail), m);
    }
    return avail;
}

/* Whether nvme_path can hold the state: not a file system in memory. Its
 * sentence into `why` when not. */
static bool disk_usable(const char *dir, char *why, size_t cap)
{
    nvme_probe p;
    if (nvme_probe_dir(dir, false, 0, 0, 0, &p) != FERRY_OK) {
        snprintf(why, cap, "%s", ferry_last_error());
        return false;
    }
    if (p.memory)
        snprintf(why, cap, "%s", p.why);
    return !p.memory;
}

/* How the disk chosen will be reached: io_uring, or the threads with their
 * rate measured in the folder (64 MiB written and read at the tier's block
 * size and queue depth). */
static void disk_path_words(const engine_auto_setup *in, char *buf, size_t cap)
{
    nvme_probe p;
    if (nvme_probe_dir(in->nvme_dir, false, 0, 0, 0, &p) != FERRY_OK || p.uring) {
        snprintf(buf, cap, "; the disk through io_uring");
        return;
    }
    char why[220];
    snprintf(why, sizeof why, "%s", p.uring_why);
    if (nvme_probe_dir(in->nvme_dir, true, (uint64_t)64 << 20, (size_t)in->cfg->nvme_block_bytes,
                       in->cfg->nvme_queue_depth, &p) != FERRY_OK) {
        snprintf(buf, cap, "; io_uring is refused here (%s), and the threads of pread/pwrite could not be measured: %s",
                 why, ferry_last_error());
        return;
    }
    snprintf(buf, cap, "; io_uring is refused here (%s): the disk through threads of pread/pwrite, measured at %.2f "
             "GB/s read + write in '%s'", why, p.rate / 1e9, in->nvme_dir);
}

/* Every rank's pick, as counts per candidate (the last slot: nothing fits). */
static ferry_status gather_picks(int ranks, engine_auto_candidate mine, int *lo, int *hi)
{
    double votes[ENGINE_AUTO_CANDIDATES + 1] = {0};
    votes[mine] = 1;
    *lo = *hi = (int)mine;
    if (ranks <= 1)
        return FERRY_OK;
    ferry_status st = comm_world_all_reduce_f64(votes, ENGINE_AUTO_CANDIDATES + 1);
    if (st != FERRY_OK)
        return err_wrap(st, "offload auto: agreeing on the mode across ranks");
    *lo = ENGINE_AUTO_CANDIDATES;
    *hi = 0;
    for (int k = 0; k <= ENGINE_AUTO_CANDIDATES; k++)
        if (votes[k] > 0) {
            *lo = k < *lo ? k : *lo;
            *hi = k;
        }
    return FERRY_OK;
}

/* The ranks agree on the most offloaded of their picks: each picks again
 * from there on until every rank holds the same (a few rounds at most: the
 * start only moves on). */
static ferry_status choose_agreed(int ranks, const engine_auto_request *rq, engine_auto_choice *c)
{
    engine_auto_candidate first = ENGINE_AUTO_NONE;
    for (;;) {
        ferry_status st = engine_auto_choose(rq, first, c), agreed;
        if (st != FERRY_OK && st != FERRY_ERR_OUT_OF_MEMORY)
            return st;
        int lo, hi;
        if ((agreed = gather_picks(ranks, c->pick, &lo, &hi)) != FERRY_OK)
            return agreed;
        if (hi == ENGINE_AUTO_CANDIDATES)
            return st != FERRY_OK ? st
                                  : err_set(FERRY_ERR_OUT_OF_MEMORY, "offload auto: %s here, but on another rank no "
                                                                     "mode fits (see its message)",
                                            engine_auto_candidate_name(c->pick));
        if (lo == hi)
            return FERRY_OK;
        first = (engine_auto_candidate)hi;
    }
}

ferry_status engine_auto_resolve(const engine_auto_setup *in, engine_auto_choice *c, char *line, size_t cap)
{
    const engine_groups *gs = in->groups;
    const ferry_engine_config *cfg = in->cfg;
    size_t *numel = malloc((size_t)gs->n * sizeof *numel);
    if (!numel)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    for (int g = 0; g < gs->n; g++)
        numel[g] = gs->g[g].numel;
    char host_words[600], no_disk[400] = "";
    uint64_t host = rank_host_available(in, host_words, sizeof host_words);
    bool disk = in->nvme_dir && disk_usable(in->nvme_dir, no_disk, sizeof no_disk);
    engine_auto_request rq = {
        .plan = {.backend = in->backend,
                 .dtype = in->act,
                 .offload = FERRY_OFFLOAD_NONE,
                 .prefetch_groups = cfg->prefetch_groups,
                 .micro_batches = cfg->auto_micro_batches > 0 ? cfg->auto_micro_batches : 1,
                 .group_numel = numel,
                 .ngroups = gs->n,
                 .disk = false,
                 .disk_master = cfg->nvme_master != 0,
                 .disk_window_bytes = cfg->nvme_window_bytes,
                 .disk_block_bytes = cfg->nvme_block_bytes,
                 .ranks = in->ranks,
                 .device_budget = 0,
                 .embedder_bytes = cfg->auto_activation_bytes,
                 .upload_window = cfg->upload_window,
                 .upload_window_chunks = cfg->upload_window_chunks,
                 .upload_window_chunk_bytes = cfg->upload_window_chunk_bytes},
        .device_budget = in->device_budget,
        .host_available = host,
        .nvme = disk,
    };
    ferry_status st = choose_agreed(in->ranks, &rq, c);
    free(numel);
    if (st != FERRY_OK && no_disk[0]) {
        char keep[ERR_MESSAGE_MAX];
        snprintf(keep, sizeof keep, "%s", ferry_last_error());
        return err_set(st, "ferry_engine_setup: %s; host memory: %s; and the disk was no candidate: %s", keep,
                       host_words, no_disk);
    }
    if (st != FERRY_OK)
        return err_wrap(st, "ferry_engine_setup (host memory: %s)", host_words);
    char path[600] = "";
    if (c->offload == FERRY_OFFLOAD_NVME || c->disk)
        disk_path_words(in, path, sizeof path);
    snprintf(line, cap, "%s%s; host memory: %s%s%s%s", c->reason, in->ranked ? " (every rank takes the same)" : "",
             host_words, path, no_disk[0] ? "; not the disk: " : "", no_disk);
    return FERRY_OK;
}
