/* Running a grid on the simulated device: blocks spread over a pool of OS
 * threads; within a block, one fiber per CUDA thread, scheduled one at a time
 * until it blocks (a barrier, a warp collective) or ends, in an order the
 * settings choose: ascending thread index, descending, or seeded random; or
 * warp-serial, ascending or descending: the first (last) warp with a ready
 * thread runs until all its lanes wait at the block barrier, so one warp
 * gets a whole barrier interval ahead of the others. A missing barrier then
 * lets some thread read what another has not written yet, or overwrite what
 * another has not read yet, under at least one order, as a GPU would under
 * some timing.
 *
 * Here live the barriers (__syncthreads and its reductions: every live
 * thread of the block), the warp collectives (__syncwarp, shuffles, votes,
 * WMMA's mma_sync: exactly the lanes of the mask, which must name the
 * caller, exist and not have exited, and call the same intrinsic with the
 * same mask), the block's shared memory (the dynamic part first, then the
 * static variables as the threads reach them, each between red zones, 0xff
 * until written), the checks of each shared-memory access that the kernels'
 * access hooks report (bounds: inside a variable or the dynamic part; races:
 * two plain accesses to one byte in one barrier interval, one a write, from
 * threads no __syncwarp orders), and the probe that learns a kernel's facts
 * before its launch is accepted. A block that deadlocks or breaks a rule
 * stops its grid with a sticky error and a diagnostic naming the kernel, the
 * block, the threads and the source lines. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <thread>

#include "sim.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUDASIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDASIM_ASAN 1
#endif
#endif
#ifdef CUDASIM_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace cudasim {

thread_local CUDASIM_CONSTINIT thread_ctx *tl_cur = nullptr;

namespace {

/* T_NEW: ready, never run (no fiber yet); T_READY: ready, parked on its
 * fiber; the rest as named. */
enum thread_state { T_NEW, T_READY, T_RUNNING, T_WAIT_BAR, T_WAIT_WARP, T_EXITED, T_STOPPED };
enum coll_kind { C_SYNCWARP, C_SHFL, C_VOTE, C_MMA };

const char *coll_name(int kind, int sub)
{
    static const char *shfl[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync"};
    static const char *vote[] = {"__ballot_sync", "__all_sync", "__any_sync"};
    switch (kind) {
    case C_SYNCWARP: return "__syncwarp";
    case C_SHFL: return shfl[sub];
    case C_VOTE: return vote[sub];
    default: return "wmma::mma_sync";
    }
}

struct block_state;
struct executor;
struct sim_thread;

/* A fiber: runs threads one after another until one of them blocks, which
 * then keeps the fiber until it resumes and ends. */
struct runner {
    fiber_stack *stack;
    void *sp;
    void *fake;
    sim_thread *start; /* the thread it runs next */
    executor *ex;
};

struct sim_thread : thread_ctx {
    int tid, lane, warp;
    block_state *blk;
    runner *fiber;
    thread_state state;
    const char *wait_file;
    int wait_line;
    uint64_t result;
};

/* One pending collective of a warp: the lanes of `mask` meet in it. */
struct coll_slot {
    bool used;
    int kind, sub;
    unsigned mask, arrived;
    int width;
    const char *file;
    int line;
};

/* A completed __syncwarp whose mask leaves some lane of the warp out. */
struct warp_sync {
    uint32_t id;
    unsigned mask;
};
constexpr int SYNC_RING = 16;

struct warp_state {
    unsigned live, exist;
    coll_slot slots[4]; /* disjoint masks may wait at once */
    /* Each lane is in at most one collective: its inputs. */
    uint64_t val[32];
    int arg[32];
    int pred[32];
    const float *ma[32], *mb[32], *mc[32];
    float *md[32];
    /* The race check's view of __syncwarp: completed ones are numbered; the
     * last whose mask held every lane, and the latest partial ones. */
    uint32_t syncs, last_full;
    warp_sync partial[SYNC_RING];
};

/* A region of the block's shared memory a kernel may touch: a static
 * variable (named) or the dynamic part. */
struct smem_var {
    unsigned key;
    size_t off, bytes;
    const char *name;
};

struct block_state {
    executor *ex;
    launch_rec *L;
    uint3 idx;
    std::vector<sim_thread> th;
    int n, live;
    std::deque<int> ready;        /* thread-serial schedules */
    std::deque<int> wready[32];   /* warp-serial ones: per warp */
    unsigned wready_mask;         /* warps with a ready thread */
    uint64_t rng;
    /* the block barrier */
    int bar_arrived, bar_op;
    int bar_accum;
    const char *bar_file;
    int bar_line;
    std::vector<warp_state> warps;
    /* shared memory: [red zone][dynamic part][red zone][variable][red zone]... */
    char *smem;
    size_t static_cap, static_used; /* as the prologue counts: each variable rounded to 16 */
    size_t cursor, capacity;        /* where the next variable goes, and the arena's end */
    std::vector<smem_var> vars;     /* vars[0]: the dynamic part */
    uint32_t serial;                /* this block's number on its OS thread (bounds shadow) */
    size_t copy_bytes;              /* bytes of cp.async in flight (race check), 0: none to look up */
    /* a failure stops the block */
    bool failed;
    cudaError_t err;
    std::string msg;
    uintptr_t fault_pc[2]; /* code addresses the message names (\x01, \x02), symbolized at the end */
};

constexpr size_t CANARY = 64;           /* each red zone */
constexpr unsigned char CANARY_BYTE = 0xa5;
constexpr size_t DYN_OFF = 1024;        /* the dynamic part: 1024-byte aligned, after the first red zone */

/* The race check's record of one byte of shared memory in the current
 * barrier interval (`epoch`): its last writer, and its readers since then. */
struct smem_cell {
    uint32_t epoch;
    uint16_t wtid, rtid, rtid0; /* thread index + 1; 0: none */
    uint32_t wsync, rsync;      /* the warp's __syncwarp count at the write, at the oldest read kept */
    uint32_t rwarps, rlanes;    /* warps that read it, and lanes (of any of them) */
    uintptr_t wpc, rpc, rpc0;   /* code addresses: the write, the last read, the first read */
};

/* The race check's record of a cp.async in flight over one byte of shared
 * memory, across barrier intervals: the block (its serial) and the thread
 * that issued it, and where; serial 0 or another block's: none. */
struct copy_cell {
    uint32_t serial;
    uint16_t tid; /* thread index + 1 */
    uintptr_t pc;
};

struct executor {
    std::vector<fiber_stack> stacks;
    std::vector<runner> runners;
    std::vector<int> free_runners;
    std::vector<char> arena_store;
    char *arena;
    size_t arena_bytes;
    void *sched_sp;
    void *sched_fake;
    fiber_stack sched_stack; /* the OS thread's own stack, for ASan's switch calls */
    block_state blk;
    /* The access checks' shadow of the arena, a slot per byte: the block that
     * placed a variable over it (bounds) and its race record. */
    std::vector<uint32_t> valid;
    std::vector<smem_cell> cells;
    std::vector<copy_cell> copies;
    uint32_t blocks_run, epoch;

    executor()
        : arena(nullptr), arena_bytes(0), sched_sp(nullptr), sched_fake(nullptr), sched_stack(), blk(), blocks_run(0),
          epoch(0)
    {
        pthread_attr_t at;
        void *lo = nullptr;
        size_t size = 0;
        if (pthread_getattr_np(pthread_self(), &at) == 0) {
            pthread_attr_getstack(&at, &lo, &size);
            pthread_attr_destroy(&at);
        }
        sched_stack.lo = static_cast<char *>(lo);
        sched_stack.hi = sched_stack.lo + size;
    }
    ~executor()
    {
        for (auto &s : stacks)
            stack_destroy(&s);
    }
};

/* The arena of the block this OS thread runs, as the access hooks see it
 * (empty between blocks): constant-initialized, so a hook reads it without
 * C++'s TLS wrapper. */
struct smem_watch {
    uintptr_t lo;
    size_t size;
};
thread_local CUDASIM_CONSTINIT smem_watch tl_watch = {0, 0};

executor &this_executor()
{
    static thread_local executor ex;
    return ex;
}

sim_thread *running(const char *what)
{
    thread_ctx *t = tl_cur;
    if (!t)
        fatal_no_thread(what);
    return static_cast<sim_thread *>(t);
}

uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

bool warp_serial()
{
    const schedule_kind k = settings().schedule;
    return k == SCHED_WARP_ASCENDING || k == SCHED_WARP_DESCENDING;
}

bool descending()
{
    const schedule_kind k = settings().schedule;
    return k == SCHED_DESCENDING || k == SCHED_WARP_DESCENDING;
}

/* Queues thread `id` (new, or a waiting thread made ready). */
inline void enqueue(block_state &b, int id)
{
    if (warp_serial()) {
        b.wready[id / 32].push_back(id);
        b.wready_mask |= 1u << (id / 32);
    } else {
        b.ready.push_back(id);
    }
}

inline bool any_ready(const block_state &b) { return warp_serial() ? b.wready_mask != 0 : !b.ready.empty(); }

/* Makes thread `id` ready (a waiting thread was started: T_READY). */
inline void push_ready(block_state &b, int id)
{
    b.th[(size_t)id].state = T_READY;
    enqueue(b, id);
}

/* Makes the threads of mask `m` in warp `w` ready, in the schedule's order. */
void ready_lanes(block_state &b, int w, unsigned m)
{
    if (descending()) {
        for (int l = 31; l >= 0; l--)
            if (m & (1u << l))
                push_ready(b, w * 32 + l);
    } else {
        for (int l = 0; l < 32; l++)
            if (m & (1u << l))
                push_ready(b, w * 32 + l);
    }
}

int pick(block_state &b)
{
    if (warp_serial()) { /* the first (last) warp with a ready lane keeps running */
        const int w = settings().schedule == SCHED_WARP_ASCENDING ? __builtin_ctz(b.wready_mask)
                                                                  : 31 - __builtin_clz(b.wready_mask);
        const int id = b.wready[w].front();
        b.wready[w].pop_front();
        if (b.wready[w].empty())
            b.wready_mask &= ~(1u << w);
        return id;
    }
    if (settings().schedule == SCHED_RANDOM && b.ready.size() > 1) {
        b.rng ^= b.rng << 13; /* xorshift64: cheap, and seeded per block */
        b.rng ^= b.rng >> 7;
        b.rng ^= b.rng << 17;
        size_t k = (size_t)(((b.rng >> 32) * (uint64_t)b.ready.size()) >> 32);
        std::swap(b.ready[0], b.ready[k]);
    }
    int id = b.ready.front();
    b.ready.pop_front();
    return id;
}

std::string where(const char *file, int line)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s:%d", file ? file : "?", line);
    return buf;
}

std::string thread_name(const block_state &b, const sim_thread &t)
{
    char buf[160];
    snprintf(buf, sizeof buf, "thread (%u,%u,%u) [warp %d lane %d] of block (%u,%u,%u)", t.thread_idx.x,
             t.thread_idx.y, t.thread_idx.z, t.warp, t.lane, b.idx.x, b.idx.y, b.idx.z);
    return buf;
}

/* Records the block's first failure. */
void block_fail(block_state &b, cudaError_t e, const char *msg)
{
    if (b.failed)
        return;
    b.failed = true;
    b.err = e;
    b.msg = msg;
}

void runner_main(void *arg);

runner *new_runner(executor &ex, sim_thread *start)
{
    int i = ex.free_runners.back();
    ex.free_runners.pop_back();
    runner *r = &ex.runners[(size_t)i];
    r->start = start;
    r->fake = nullptr;
    r->sp = fiber_prepare(r->stack, runner_main, r);
    return r;
}

void release_runner(executor &ex, runner *r) { ex.free_runners.push_back((int)(r - ex.runners.data())); }

/* From a fiber whose thread just blocked (`self` keeps the thread) or ended
 * (`exiting`): runs the next ready thread. A thread never run starts on a
 * fresh fiber, or on this one when its thread ended (returns true: the
 * caller runs r->start); a parked thread resumes on its fiber. With nothing
 * ready, or the block failed, control goes back to the block's scheduler.
 * A blocked thread's call returns when it is resumed. */
bool switch_next(executor &ex, runner *self, bool exiting)
{
    block_state &b = ex.blk;
    void *dead = nullptr;
    void **save = exiting ? &dead : &self->sp;
    void **fake = exiting ? nullptr : &self->fake;
    if (b.failed || !any_ready(b)) {
        if (exiting)
            release_runner(ex, self);
        fiber_switch(save, ex.sched_sp, &ex.sched_stack, fake, exiting);
    } else {
        sim_thread *n = &b.th[(size_t)pick(b)];
        if (n->state == T_NEW) {
            if (exiting) {
                self->start = n;
                return true;
            }
            runner *r = new_runner(ex, n);
            fiber_switch(save, r->sp, r->stack, fake, false);
        } else {
            n->state = T_RUNNING;
            tl_cur = n;
            if (n->fiber == self) /* the blocked thread itself was picked: it goes on */
                return false;
            if (exiting)
                release_runner(ex, self);
            fiber_switch(save, n->fiber->sp, n->fiber->stack, fake, exiting);
        }
    }
    /* Resumed (never when exiting). */
    fiber_switched(self->fake, nullptr, nullptr);
    return false;
}

/* From a blocking call: lets others run; returns when this thread resumes. */
void block_here(sim_thread *t)
{
    executor &ex = *t->blk->ex;
    switch_next(ex, t->fiber, false);
    tl_cur = t;
}

/* From a fiber: stop this thread for good with the block failed. `msg` is a
 * plain string: the fiber never resumes, so nothing on its stack is ever
 * destroyed. */
[[noreturn]] void stop_thread(sim_thread *t, cudaError_t e, const char *msg)
{
    block_fail(*t->blk, e, msg);
    t->state = T_STOPPED;
    block_here(t);
    abort(); /* never resumed: the block failed */
}

void release_barrier(block_state &b)
{
    if (descending()) {
        for (int i = b.n - 1; i >= 0; i--)
            if (b.th[(size_t)i].state == T_WAIT_BAR) {
                b.th[(size_t)i].result = (uint64_t)(unsigned)b.bar_accum;
                push_ready(b, i);
            }
    } else {
        for (int i = 0; i < b.n; i++)
            if (b.th[(size_t)i].state == T_WAIT_BAR) {
                b.th[(size_t)i].result = (uint64_t)(unsigned)b.bar_accum;
                push_ready(b, i);
            }
    }
    b.bar_arrived = 0;
    b.ex->epoch++; /* a new barrier interval: every access before it is ordered before every one after */
}

/* A completed __syncwarp, for the race check. */
void note_syncwarp(warp_state &w, unsigned mask)
{
    const uint32_t id = ++w.syncs;
    if ((mask & w.exist) == w.exist)
        w.last_full = id;
    else
        w.partial[id % SYNC_RING] = warp_sync{id, mask};
}

void complete_coll(block_state &b, int warp, coll_slot &c)
{
    warp_state &w = b.warps[(size_t)warp];
    const int base_tid = warp * 32;
    if (c.kind == C_MMA) {
        float A[16][16], Bm[16][16], C[16][16];
        for (int l = 0; l < 32; l++)
            for (int e = 0; e < 8; e++) {
                int r = (l * 8 + e) / 16, col = (l * 8 + e) % 16;
                A[r][col] = w.ma[l][e];
                Bm[r][col] = w.mb[l][e];
                C[r][col] = w.mc[l][e];
            }
        for (int l = 0; l < 32; l++)
            for (int e = 0; e < 8; e++) {
                int r = (l * 8 + e) / 16, col = (l * 8 + e) % 16;
                float acc = C[r][col];
                for (int k = 0; k < 16; k++)
                    acc += A[r][k] * Bm[k][col];
                w.md[l][e] = acc;
            }
    } else if (c.kind == C_SHFL || c.kind == C_VOTE) {
        unsigned ballot = 0;
        if (c.kind == C_VOTE)
            for (int k = 0; k < 32; k++)
                if ((c.mask & (1u << k)) && w.pred[k])
                    ballot |= 1u << k;
        for (int l = 0; l < 32; l++) {
            if (!(c.mask & (1u << l)))
                continue;
            sim_thread &t = b.th[(size_t)(base_tid + l)];
            if (c.kind == C_VOTE) {
                t.result = c.sub == VOTE_BALLOT ? ballot : c.sub == VOTE_ALL ? (ballot == c.mask) : (ballot != 0);
                continue;
            }
            const int seg = l & ~(c.width - 1);
            int src = l;
            switch (c.sub) {
            case SHFL_IDX: src = seg + (w.arg[l] & (c.width - 1)); break;
            case SHFL_UP: src = l - w.arg[l] >= seg ? l - w.arg[l] : l; break;
            case SHFL_DOWN: src = l + w.arg[l] < seg + c.width ? l + w.arg[l] : l; break;
            case SHFL_XOR: src = ((l ^ w.arg[l]) & ~(c.width - 1)) == seg ? (l ^ w.arg[l]) : l; break;
            }
            t.result = w.val[src];
        }
    }
    if (c.kind == C_SYNCWARP)
        note_syncwarp(w, c.mask);
    c.used = false;
    ready_lanes(b, warp, c.mask);
}

/* A lane's arrival at a warp collective; returns its result when released. */
uint64_t warp_arrive(int kind, int sub, unsigned mask, int width, const char *file, int line, uint64_t val,
                     int arg, int pred, const float *ma, const float *mb, const float *mc, float *md)
{
    sim_thread *t = running(coll_name(kind, sub));
    block_state &b = *t->blk;
    warp_state &w = b.warps[(size_t)t->warp];
    const unsigned me = 1u << t->lane;
    const char *name = coll_name(kind, sub);
    char buf[512];
    if (__builtin_expect(!(mask & me), 0)) {
        snprintf(buf, sizeof buf, "%s at %s: mask 0x%08x does not name the calling %s", name,
                 where(file, line).c_str(), mask, thread_name(b, *t).c_str());
        stop_thread(t, cudaErrorIllegalInstruction, buf);
    }
    if (__builtin_expect(width <= 0 || width > 32 || (width & (width - 1)), 0)) {
        snprintf(buf, sizeof buf, "%s at %s: width %d is not a power of two up to 32", name,
                 where(file, line).c_str(), width);
        stop_thread(t, cudaErrorIllegalInstruction, buf);
    }
    if (__builtin_expect(mask & ~w.exist, 0)) {
        snprintf(buf, sizeof buf, "%s at %s: mask 0x%08x names lanes 0x%08x that warp %d of a %d-thread block "
                 "does not have", name, where(file, line).c_str(), mask, mask & ~w.exist, t->warp, b.n);
        stop_thread(t, cudaErrorIllegalInstruction, buf);
    }
    if (__builtin_expect(mask & ~w.live, 0)) {
        snprintf(buf, sizeof buf, "%s at %s (%s): mask 0x%08x names lanes 0x%08x that have exited", name,
                 where(file, line).c_str(), thread_name(b, *t).c_str(), mask, mask & ~w.live);
        stop_thread(t, cudaErrorIllegalInstruction, buf);
    }
    coll_slot *c = nullptr, *free_slot = nullptr;
    for (coll_slot &x : w.slots) {
        if (!x.used) {
            if (!free_slot)
                free_slot = &x;
            continue;
        }
        if (!(x.mask & mask))
            continue;
        if (x.mask != mask || x.kind != kind || x.sub != sub || x.width != width) {
            snprintf(buf, sizeof buf, "warp %d of block (%u,%u,%u): lane %d calls %s(mask 0x%08x) at %s while "
                     "lanes 0x%08x wait in %s(mask 0x%08x) at %s: the lanes of a mask must all call the same "
                     "intrinsic with the same mask", t->warp, b.idx.x, b.idx.y, b.idx.z, t->lane, name, mask,
                     where(file, line).c_str(), x.arrived, coll_name(x.kind, x.sub), x.mask,
                     where(x.file, x.line).c_str());
            stop_thread(t, cudaErrorIllegalInstruction, buf);
        }
        c = &x;
        break;
    }
    if (!c) {
        if (!free_slot)
            stop_thread(t, cudaErrorIllegalInstruction, "more than four warp collectives with disjoint masks wait at "
                        "once in one warp");
        c = free_slot;
        c->used = true;
        c->kind = kind;
        c->sub = sub;
        c->mask = mask;
        c->arrived = 0;
        c->width = width;
        c->file = file;
        c->line = line;
    }
    const int l = t->lane;
    w.val[l] = val;
    w.arg[l] = arg;
    w.pred[l] = pred;
    w.ma[l] = ma;
    w.mb[l] = mb;
    w.mc[l] = mc;
    w.md[l] = md;
    c->arrived |= me;
    t->state = T_WAIT_WARP;
    t->wait_file = file;
    t->wait_line = line;
    if (c->arrived == c->mask)
        complete_coll(b, t->warp, *c);
    block_here(t);
    return t->result;
}

void describe_waits(block_state &b, std::string *out)
{
    /* Group threads by what they wait for. */
    std::map<std::string, std::vector<int>> groups;
    for (int i = 0; i < b.n; i++) {
        const sim_thread &t = b.th[(size_t)i];
        std::string key;
        if (t.state == T_WAIT_BAR)
            key = "__syncthreads at " + where(t.wait_file, t.wait_line);
        else if (t.state == T_WAIT_WARP) {
            for (const coll_slot &c : b.warps[(size_t)t.warp].slots)
                if (c.used && (c.mask & (1u << t.lane))) {
                    char m[64];
                    snprintf(m, sizeof m, "(mask 0x%08x, arrived 0x%08x)", c.mask, c.arrived);
                    key = std::string(coll_name(c.kind, c.sub)) + m + " at " + where(c.file, c.line);
                }
        } else
            continue;
        groups[key].push_back(i);
    }
    for (auto &g : groups) {
        char buf[128];
        const std::vector<int> &ids = g.second;
        if (ids.size() == 1)
            snprintf(buf, sizeof buf, "; thread %d waits in ", ids[0]);
        else
            snprintf(buf, sizeof buf, "; %zu threads (%d..%d) wait in ", ids.size(), ids.front(), ids.back());
        *out += buf;
        *out += g.first;
    }
}

void thread_exit(sim_thread *t)
{
    block_state &b = *t->blk;
    warp_state &w = b.warps[(size_t)t->warp];
    t->state = T_EXITED;
    b.live--;
    w.live &= ~(1u << t->lane);
    for (const coll_slot &c : w.slots)
        if (c.used && (c.mask & (1u << t->lane))) {
            char buf[512];
            snprintf(buf, sizeof buf, "%s exited while lanes 0x%08x wait in %s(mask 0x%08x) at %s, which names it",
                     thread_name(b, *t).c_str(), c.arrived, coll_name(c.kind, c.sub), c.mask,
                     where(c.file, c.line).c_str());
            block_fail(b, cudaErrorIllegalInstruction, buf);
        }
    if (b.bar_arrived > 0 && b.bar_arrived == b.live)
        release_barrier(b);
}

void runner_main(void *arg)
{
    runner *r = static_cast<runner *>(arg);
    executor &ex = *r->ex;
    fiber_switched(nullptr, nullptr, nullptr);
    launch_rec *L = ex.blk.L;
    for (;;) {
        sim_thread *t = r->start;
        t->fiber = r;
        t->state = T_RUNNING;
        tl_cur = t;
        L->run(L->payload);
        thread_exit(t);
        if (!switch_next(ex, r, true))
            abort(); /* an exiting switch never comes back */
    }
}

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Marks [p, p + n) of the arena as off limits (ASan's poison) or not. */
void arena_poison(char *p, size_t n, bool poison)
{
#ifdef CUDASIM_ASAN
    if (poison)
        ASAN_POISON_MEMORY_REGION(p, n);
    else
        ASAN_UNPOISON_MEMORY_REGION(p, n);
#else
    (void)p, (void)n, (void)poison;
#endif
}

/* The arena (1024-byte aligned, so the dynamic part's alignment is real) and
 * the access checks' shadow of it. */
bool ensure_arena(executor &ex, size_t bytes)
{
    if (ex.arena_bytes >= bytes)
        return true;
    if (!ex.arena_store.empty())
        arena_poison(ex.arena_store.data(), ex.arena_store.size(), false);
    try {
        ex.arena_store.assign(bytes + 1024, 0);
        if (access_hooks) {
            ex.valid.assign(bytes, 0);
            ex.cells.assign(bytes, smem_cell());
            ex.copies.assign(bytes, copy_cell());
        }
    } catch (...) {
        ex.arena_bytes = 0;
        return false;
    }
    ex.arena = reinterpret_cast<char *>(round_up((uintptr_t)ex.arena_store.data(), 1024));
    ex.arena_bytes = bytes;
    ex.blocks_run = 0; /* the bounds shadow starts over */
    return true;
}

/* Bytes of arena a block needs at most: the dynamic part and every static
 * variable between red zones (at most one variable per 16 bytes of the static
 * size, each aligned to at most 16 more). */
size_t arena_need(size_t static_cap, size_t dyn)
{
    const size_t vars = static_cap / 16 + 1;
    return DYN_OFF + round_up(dyn, 16) + CANARY + static_cap + vars * (CANARY + 16) + 1024;
}

/* Adds a region to the block's shared memory at `off`: NaN (0xff) until
 * written, a red zone of canaries after it, in bounds for the access checks. */
void place_region(block_state &b, unsigned key, size_t off, size_t bytes, const char *name)
{
    arena_poison(b.smem + off, bytes + CANARY, false);
    memset(b.smem + off, 0xff, bytes); /* uninitialised shared memory reads as NaN */
    memset(b.smem + off + bytes, CANARY_BYTE, CANARY);
    arena_poison(b.smem + off + bytes, CANARY, true);
    if (access_hooks && settings().shared_check != SHARED_CHECK_OFF)
        std::fill(b.ex->valid.begin() + (ptrdiff_t)off, b.ex->valid.begin() + (ptrdiff_t)(off + bytes), b.serial);
    b.vars.push_back(smem_var{key, off, bytes, name});
}

/* The red zone after each region still holds its canaries (a write the
 * access hooks did not see: an ASan build's, or the simulator's own). */
void check_red_zones(block_state &b)
{
    for (const smem_var &v : b.vars)
        for (size_t i = 0; i < CANARY; i++)
            if ((unsigned char)b.smem[v.off + v.bytes + i] != CANARY_BYTE) {
                char buf[320];
                snprintf(buf, sizeof buf, "a write %zu bytes past the end of %s%s (%zu bytes) in block (%u,%u,%u)",
                         i, v.name ? "__shared__ " : "", v.name ? v.name : "the dynamic shared memory", v.bytes,
                         b.idx.x, b.idx.y, b.idx.z);
                block_fail(b, cudaErrorIllegalAddress, buf);
                return;
            }
}

std::string code_location(uintptr_t pc);

/* The block's failure message with the code addresses it names written out. */
std::string failure_message(const block_state &b)
{
    std::string m;
    for (char c : b.msg) {
        if (c == '\x01' || c == '\x02')
            m += code_location(b.fault_pc[c - 1]);
        else
            m += c;
    }
    return m;
}

/* Fibers for a block of n threads: at most one per thread plus the one that
 * starts them. */
bool ensure_runners(executor &ex, size_t n)
{
    if (ex.stacks.size() < n + 1) {
        size_t have = ex.stacks.size();
        ex.stacks.resize(n + 1);
        for (size_t i = have; i < n + 1; i++)
            if (!stack_create(&ex.stacks[i], settings().stack_bytes)) {
                ex.stacks.resize(i);
                return false;
            }
        ex.runners.resize(ex.stacks.size());
        for (size_t i = 0; i < ex.runners.size(); i++) {
            ex.runners[i].stack = &ex.stacks[i];
            ex.runners[i].ex = &ex;
        }
    }
    ex.free_runners.clear();
    for (size_t i = ex.runners.size(); i-- > 0;)
        ex.free_runners.push_back((int)i);
    return true;
}

void run_block(executor &ex, launch_rec *L, uint64_t linear, cudaError_t *err, std::string *msg)
{
    block_state &b = ex.blk;
    b.ex = &ex;
    b.L = L;
    b.idx.x = (unsigned)(linear % L->grid.x);
    b.idx.y = (unsigned)(linear / L->grid.x % L->grid.y);
    b.idx.z = (unsigned)(linear / ((uint64_t)L->grid.x * L->grid.y));
    b.n = (int)(L->block.x * L->block.y * L->block.z);
    b.live = b.n;
    b.ready.clear();
    for (std::deque<int> &q : b.wready)
        q.clear();
    b.wready_mask = 0;
    b.rng = settings().seed ^ (L->seq * 0x9E3779B97F4A7C15ull) ^ (linear * 0xD1B54A32D192ED03ull);
    b.rng = next_rand(&b.rng) | 1; /* never 0: xorshift would stay there */
    b.bar_arrived = 0;
    b.bar_op = 0;
    b.bar_accum = 0;
    const int warps = (b.n + 31) / 32;
    b.warps.resize((size_t)warps);
    for (int w = 0; w < warps; w++) {
        warp_state &ws = b.warps[(size_t)w];
        unsigned lanes = w == warps - 1 && b.n % 32 ? (1u << (b.n % 32)) - 1 : 0xffffffffu;
        ws.live = ws.exist = lanes;
        for (coll_slot &c : ws.slots)
            c.used = false;
        ws.syncs = ws.last_full = 0;
        for (warp_sync &x : ws.partial)
            x = warp_sync{0, 0};
    }
    b.failed = false;
    b.err = cudaSuccess;
    b.msg.clear();
    b.fault_pc[0] = b.fault_pc[1] = 0;
    b.vars.clear();
    b.copy_bytes = 0;
    b.static_cap = L->k.static_smem;
    b.static_used = 0;
    b.capacity = arena_need(b.static_cap, L->dyn_smem);
    if (!ensure_arena(ex, b.capacity) || !ensure_runners(ex, (size_t)b.n)) {
        *err = cudaErrorMemoryAllocation;
        *msg = "the simulator has no host memory for a block's shared memory or fiber stacks";
        return;
    }
    b.smem = ex.arena;
    if (++ex.blocks_run == 0 && access_hooks) { /* 2^32 blocks on this thread: the stamps start over */
        std::fill(ex.valid.begin(), ex.valid.end(), 0u);
        std::fill(ex.copies.begin(), ex.copies.end(), copy_cell());
        ex.blocks_run = 1;
    }
    b.serial = ex.blocks_run;
    ex.epoch++;
    arena_poison(b.smem, b.capacity, true);
    place_region(b, 0, DYN_OFF, L->dyn_smem, nullptr);
    b.cursor = DYN_OFF + round_up(L->dyn_smem, 16) + CANARY;
    /* Threads. */
    b.th.resize((size_t)b.n);
    for (int i = 0; i < b.n; i++) {
        sim_thread &t = b.th[(size_t)i];
        t.thread_idx.x = (unsigned)(i % L->block.x);
        t.thread_idx.y = (unsigned)(i / L->block.x % L->block.y);
        t.thread_idx.z = (unsigned)(i / (L->block.x * L->block.y));
        t.block_idx = b.idx;
        t.block_dim = L->block;
        t.grid_dim = L->grid;
        t.tid = i;
        t.lane = i % 32;
        t.warp = i / 32;
        t.blk = &b;
        t.fiber = nullptr;
        t.state = T_NEW;
        t.wait_file = nullptr;
        t.wait_line = 0;
        t.result = 0;
    }
    if (descending())
        for (int i = b.n - 1; i >= 0; i--)
            enqueue(b, i);
    else
        for (int i = 0; i < b.n; i++)
            enqueue(b, i);
    tl_watch = smem_watch{(uintptr_t)b.smem, b.capacity};
    while (b.live > 0 && !b.failed) {
        if (!any_ready(b)) {
            std::string m = "deadlock: no thread can go on";
            describe_waits(b, &m);
            block_fail(b, cudaErrorLaunchFailure, m.c_str());
            break;
        }
        sim_thread &t = b.th[(size_t)pick(b)];
        if (t.state == T_NEW) {
            runner *r = new_runner(ex, &t);
            fiber_switch(&ex.sched_sp, r->sp, r->stack, &ex.sched_fake, false);
        } else {
            t.state = T_RUNNING;
            tl_cur = &t;
            fiber_switch(&ex.sched_sp, t.fiber->sp, t.fiber->stack, &ex.sched_fake, false);
        }
        fiber_switched(ex.sched_fake, nullptr, nullptr);
        tl_cur = nullptr;
    }
    tl_watch = smem_watch{0, 0};
    if (!b.failed) {
        arena_poison(b.smem, b.capacity, false);
        check_red_zones(b);
    }
    if (b.failed) {
        char head[160];
        snprintf(head, sizeof head, "block (%u,%u,%u): ", b.idx.x, b.idx.y, b.idx.z);
        *err = b.err;
        *msg = head + failure_message(b);
    }
    arena_poison(b.smem, b.capacity, false);
}

/* ---- the pool of OS threads running blocks ---- */

struct grid_job {
    launch_rec *L;
    uint64_t total;
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::condition_variable cv;
    uint64_t done = 0;
    cudaError_t err = cudaSuccess;
    std::string msg;
    int users = 0;              /* pool threads that took the job from the list */
    std::vector<uint32_t> perm; /* random order, small grids */
    uint64_t mul = 1, add = 0;  /* random order, large grids: (mul * i + add) mod total */
};

uint64_t block_at(const grid_job &j, uint64_t i)
{
    switch (settings().schedule) {
    case SCHED_DESCENDING:
    case SCHED_WARP_DESCENDING: return j.total - 1 - i;
    case SCHED_RANDOM: return j.perm.empty() ? (j.mul * i + j.add) % j.total : j.perm[i];
    default: return i;
    }
}

uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

void run_blocks_of(grid_job &j)
{
    executor &ex = this_executor();
    for (;;) {
        if (j.failed.load(std::memory_order_relaxed))
            break;
        uint64_t i = j.next.fetch_add(1);
        if (i >= j.total)
            break;
        cudaError_t e = cudaSuccess;
        std::string m;
        run_block(ex, j.L, block_at(j, i), &e, &m);
        std::lock_guard<std::mutex> g(j.mu);
        if (e != cudaSuccess && j.err == cudaSuccess) {
            j.err = e;
            j.msg = m;
            j.failed = true;
        }
        j.done++;
        if (j.done == j.total || j.failed)
            j.cv.notify_all();
    }
}

struct pool {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<grid_job *> jobs;
    std::vector<std::thread> threads;
    bool started = false;

    void start()
    {
        int n = settings().threads - 1;
        for (int i = 0; i < n; i++)
            threads.emplace_back([this] { loop(); });
        for (auto &t : threads)
            t.detach();
        started = true;
    }

    void loop()
    {
        for (;;) {
            grid_job *j = nullptr;
            {
                std::unique_lock<std::mutex> g(mu);
                cv.wait(g, [this] {
                    for (grid_job *x : jobs)
                        if (x->next.load() < x->total && !x->failed)
                            return true;
                    return false;
                });
                for (grid_job *x : jobs)
                    if (x->next.load() < x->total && !x->failed) {
                        j = x;
                        break;
                    }
                if (!j)
                    continue;
                std::lock_guard<std::mutex> jg(j->mu);
                j->users++; /* run_grid waits for this to fall back to 0 */
            }
            run_blocks_of(*j);
            std::lock_guard<std::mutex> jg(j->mu);
            j->users--;
            j->cv.notify_all();
        }
    }
};

pool &the_pool()
{
    static pool *p = new pool; /* threads outlive static destruction */
    return *p;
}

} // namespace

bool run_grid(launch_rec *L)
{
    grid_job j;
    j.L = L;
    j.total = (uint64_t)L->grid.x * L->grid.y * L->grid.z;
    if (settings().schedule == SCHED_RANDOM) {
        uint64_t s = settings().seed ^ (L->seq * 0x2545F4914F6CDD1Dull);
        if (j.total <= (1u << 20)) {
            j.perm.resize(j.total);
            for (uint64_t i = 0; i < j.total; i++)
                j.perm[i] = (uint32_t)i;
            for (uint64_t i = j.total; i > 1; i--)
                std::swap(j.perm[i - 1], j.perm[next_rand(&s) % i]);
        } else {
            do
                j.mul = next_rand(&s) % j.total;
            while (j.mul == 0 || gcd(j.mul, j.total) != 1);
            j.add = next_rand(&s) % j.total;
        }
    }
    pool &p = the_pool();
    const bool shared = settings().threads > 1 && j.total > 1;
    if (shared) {
        std::lock_guard<std::mutex> g(p.mu);
        if (!p.started)
            p.start();
        p.jobs.push_back(&j);
        p.cv.notify_all();
    }
    run_blocks_of(j);
    if (shared) { /* no pool thread takes the job from now on */
        std::lock_guard<std::mutex> g(p.mu);
        p.jobs.erase(std::find(p.jobs.begin(), p.jobs.end(), &j));
    }
    {
        /* Every block taken must finish (a failed grid takes no more), and
         * every pool thread that took the job must have let it go. */
        std::unique_lock<std::mutex> g(j.mu);
        j.cv.wait(g, [&j] { return j.users == 0 && j.done >= std::min<uint64_t>(j.next.load(), j.total); });
    }
    if (j.err != cudaSuccess) {
        set_sticky(j.err, "kernel %s (launched at %s:%d, grid (%u,%u,%u), block (%u,%u,%u)) failed: %s",
                   L->k.name, L->site.file, L->site.line, L->grid.x, L->grid.y, L->grid.z, L->block.x, L->block.y,
                   L->block.z, j.msg.c_str());
        return false;
    }
    return true;
}

/* ---- the device side's entry points (device.h, mma.h) ---- */

void syncthreads(const char *file, int line) { (void)syncthreads_reduce(-1, 0, file, line); }

int syncthreads_reduce(int op, int pred, const char *file, int line)
{
    sim_thread *t = running("__syncthreads");
    block_state &b = *t->blk;
    static const char *names[] = {"__syncthreads", "__syncthreads_or", "__syncthreads_and", "__syncthreads_count"};
    if (b.bar_arrived == 0) {
        b.bar_op = op;
        b.bar_accum = op == 1 ? 1 : 0;
        b.bar_file = file;
        b.bar_line = line;
    } else if (b.bar_op != op) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s calls %s at %s while other threads wait in %s at %s",
                 thread_name(b, *t).c_str(), names[op + 1], where(file, line).c_str(), names[b.bar_op + 1],
                 where(b.bar_file, b.bar_line).c_str());
        stop_thread(t, cudaErrorIllegalInstruction, buf);
    }
    if (op == 0)
        b.bar_accum |= pred != 0;
    else if (op == 1)
        b.bar_accum &= pred != 0;
    else if (op == 2)
        b.bar_accum += pred != 0;
    b.bar_arrived++;
    t->state = T_WAIT_BAR;
    t->wait_file = file;
    t->wait_line = line;
    if (b.bar_arrived == b.live)
        release_barrier(b);
    block_here(t);
    return (int)t->result;
}

void syncwarp(unsigned mask, const char *file, int line)
{
    warp_arrive(C_SYNCWARP, 0, mask, 32, file, line, 0, 0, 0, nullptr, nullptr, nullptr, nullptr);
}

uint64_t warp_shfl(int kind, unsigned mask, uint64_t value, int arg, int width, const char *file, int line)
{
    return warp_arrive(C_SHFL, kind, mask, width, file, line, value, arg, 0, nullptr, nullptr, nullptr, nullptr);
}

unsigned warp_vote(int kind, unsigned mask, int pred, const char *file, int line)
{
    return (unsigned)warp_arrive(C_VOTE, kind, mask, 32, file, line, 0, 0, pred, nullptr, nullptr, nullptr,
                                 nullptr);
}

unsigned active_mask()
{
    sim_thread *t = running("__activemask");
    return t->blk->warps[(size_t)t->warp].live;
}

int lane_id() { return running("a WMMA call")->lane; }

void trap(const char *file, int line, const char *what)
{
    sim_thread *t = running(what);
    char buf[512];
    snprintf(buf, sizeof buf, "%s at %s in %s", what, where(file, line).c_str(), thread_name(*t->blk, *t).c_str());
    stop_thread(t, cudaErrorLaunchFailure, buf);
}

void wmma_check(const void *ptr, unsigned ldm, size_t elem_bytes, const char *what, const char *file, int line)
{
    sim_thread *t = running(what);
    char buf[512];
    if ((uintptr_t)ptr % 32 != 0) {
        snprintf(buf, sizeof buf, "wmma::%s at %s: the pointer %p is not 32-byte aligned (%s)", what,
                 where(file, line).c_str(), ptr, thread_name(*t->blk, *t).c_str());
        stop_thread(t, cudaErrorMisalignedAddress, buf);
    }
    if ((size_t)ldm * elem_bytes % 16 != 0) {
        snprintf(buf, sizeof buf, "wmma::%s at %s: ldm %u (elements of %zu bytes) is not a multiple of 16 bytes",
                 what, where(file, line).c_str(), ldm, elem_bytes);
        stop_thread(t, cudaErrorMisalignedAddress, buf);
    }
}

void wmma_mma(const float *a, const float *b, const float *c, float *d_out, int operand_kind, const char *file,
              int line)
{
    if (operand_kind == 1 && !arch().bf16) {
        sim_thread *t = running("wmma::mma_sync");
        char buf[256];
        snprintf(buf, sizeof buf, "wmma::mma_sync at %s: bf16 WMMA needs sm_80 or newer; this kernel would not "
                 "compile for sm_%d", where(file, line).c_str(), arch().cc);
        stop_thread(t, cudaErrorNoKernelImageForDevice, buf);
    }
    warp_arrive(C_MMA, 0, 0xffffffffu, 32, file, line, 0, 0, 0, a, b, c, d_out);
}

void *shared_alloc(unsigned key, size_t bytes, size_t align, const char *name)
{
    sim_thread *t = running("a __shared__ variable");
    block_state &b = *t->blk;
    for (const smem_var &v : b.vars)
        if (v.key == key && v.name)
            return b.smem + v.off;
    const size_t a = align < 16 ? 16 : align;
    const size_t off = round_up(b.cursor, a);
    char buf[320];
    if (round_up(b.static_used, a) + bytes > b.static_cap) {
        snprintf(buf, sizeof buf, "__shared__ %s of %zu bytes does not fit the %zu bytes of static shared memory "
                 "the kernel's prologue declared (a __shared__ variable outside the kernel body?)", name, bytes,
                 b.static_cap);
        stop_thread(t, cudaErrorLaunchFailure, buf);
    }
    if (off + bytes + CANARY > b.capacity) {
        snprintf(buf, sizeof buf, "__shared__ %s of %zu bytes aligned to %zu does not fit the simulator's arena of "
                 "%zu bytes for this block", name, bytes, a, b.capacity);
        stop_thread(t, cudaErrorLaunchFailure, buf);
    }
    b.static_used = round_up(b.static_used, a) + round_up(bytes, 16);
    place_region(b, key, off, bytes, name);
    b.cursor = off + bytes + CANARY;
    return b.smem + off;
}

void *dynamic_shared_base(size_t align)
{
    sim_thread *t = running("extern __shared__");
    if (align > DYN_OFF)
        stop_thread(t, cudaErrorMisalignedAddress, "extern __shared__ asks for more than 1024-byte alignment");
    return t->blk->smem + DYN_OFF;
}

namespace {

/* ---- the access hooks: bounds and races in shared memory ----
 * Kernels compiled with -fsanitize=kernel-address and outlined checks call
 * __asan_{load,store}N_noabort(address) before each access they make (the
 * simulator's own code is not compiled so). An address outside the running
 * block's arena returns at once; one inside must lie in a placed variable or
 * the dynamic part (else cudaErrorIllegalAddress), and, under the race check,
 * must not race: two accesses to one byte in one barrier interval, one of
 * them a write, from two threads, are a race unless both are lanes of one
 * warp and a __syncwarp naming both came between them. Shuffles, votes and
 * mma_sync order nothing here, as on a GPU; atomics are not checked.
 * ldmatrix's rows (ptx.cpp) are reads by the lanes that gave their
 * addresses; a cp.async is a write by its issuing thread, checked at its
 * issue against the interval's accesses, in flight until that thread's wait
 * completes it (any other thread's access to its bytes meanwhile races,
 * whatever barriers came between) and recorded again at that wait, so that
 * only a barrier after the wait orders it before other threads' reads. */

std::string hex(uintptr_t x)
{
    char b[32];
    snprintf(b, sizeof b, "0x%lx", (unsigned long)x);
    return b;
}

/* "file:line (function)" of a code address, with the functions it was
 * inlined into, by addr2line on the object holding it; the bare address
 * when that cannot be had. */
std::string code_location(uintptr_t pc)
{
    Dl_info di;
    if (!pc || !dladdr(reinterpret_cast<void *>(pc), &di) || !di.dli_fbase)
        return "code address " + hex(pc);
    uintptr_t at = pc - 1; /* the call, not the return address */
    if (reinterpret_cast<const ElfW(Ehdr) *>(di.dli_fbase)->e_type == ET_DYN)
        at -= (uintptr_t)di.dli_fbase;
    const char *file = di.dli_fname && strchr(di.dli_fname, '/') ? di.dli_fname : "/proc/self/exe";
    if (strchr(file, '\''))
        return "code address " + hex(at) + " in " + file;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "addr2line -C -f -i -e '%s' 0x%lx 2>/dev/null", file, (unsigned long)at);
    std::string out, fn, line;
    char cwd[1024];
    const size_t cwd_len = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
    if (FILE *p = popen(cmd, "r")) {
        char buf[1024];
        for (int i = 0; fgets(buf, sizeof buf, p); i++) {
            buf[strcspn(buf, "\n")] = 0;
            if (i % 2 == 0) {
                fn = buf;
                continue;
            }
            line = buf;
            if (cwd_len && !strncmp(buf, cwd, cwd_len) && buf[cwd_len] == '/')
                line = buf + cwd_len + 1; /* relative to the directory the program runs in */
            out += out.empty() ? line + " (" + fn + ")" : ", inlined in " + fn + " at " + line;
        }
        pclose(p);
    }
    if (out.empty() || out.compare(0, 2, "??") == 0)
        return "code address " + hex(at) + " in " + file;
    return out;
}

/* The region nearest below `off` and how the access stands to it. */
std::string describe_offset(const block_state &b, size_t off, size_t n)
{
    const smem_var *near = nullptr;
    for (const smem_var &v : b.vars)
        if (v.off <= off && (!near || v.off > near->off))
            near = &v;
    char buf[320];
    if (!near)
        snprintf(buf, sizeof buf, "%zu bytes before the dynamic shared memory", DYN_OFF - off);
    else if (off + n <= near->off + near->bytes)
        snprintf(buf, sizeof buf, "byte %zu of %s%s (%zu bytes)", off - near->off, near->name ? "__shared__ " : "",
                 near->name ? near->name : "the dynamic shared memory", near->bytes);
    else
        snprintf(buf, sizeof buf, "%zu bytes past the end of %s%s (%zu bytes)", off - near->off - near->bytes,
                 near->name ? "__shared__ " : "", near->name ? near->name : "the dynamic shared memory",
                 near->bytes);
    return buf;
}

[[noreturn]] void shared_out_of_bounds(sim_thread *t, size_t off, size_t n, bool write, uintptr_t pc)
{
    block_state &b = *t->blk;
    char buf[1024];
    snprintf(buf, sizeof buf, "shared memory out of bounds: %s %ss %zu bytes at \x01, %s (the block's shared "
             "memory: %zu bytes dynamic, %zu static)", thread_name(b, *t).c_str(), write ? "write" : "read", n,
             describe_offset(b, off, n).c_str(), b.L->dyn_smem, b.static_cap);
    b.fault_pc[0] = pc;
    stop_thread(running("the bounds check"), cudaErrorIllegalAddress, buf);
}

/* Lanes `lanes` of warp w were ordered by a __syncwarp completed after
 * count `since`. A partial one older than the ring holds counts as ordering
 * (no race is claimed that cannot be shown). */
bool synced_since(const warp_state &w, uint32_t since, unsigned lanes)
{
    if (w.last_full > since)
        return true;
    if (w.syncs - since > SYNC_RING)
        return true;
    for (const warp_sync &x : w.partial)
        if (x.id > since && (x.mask & lanes) == lanes)
            return true;
    return false;
}

/* An access by t is ordered after thread `other`'s access made when its
 * warp had completed `sync` __syncwarps. */
bool ordered_after(const block_state &b, const sim_thread &t, int other, uint32_t sync)
{
    if (other / 32 != t.warp)
        return false;
    return synced_since(b.warps[(size_t)t.warp], sync, (1u << (other % 32)) | (1u << t.lane));
}

[[noreturn]] void shared_race(sim_thread *t, const smem_cell &c, size_t off, bool write, bool against_write,
                              int other, uintptr_t other_pc, uintptr_t pc)
{
    block_state &b = *t->blk;
    const sim_thread &o = b.th[(size_t)other];
    char buf[1400];
    snprintf(buf, sizeof buf, "shared memory race on %s: %s %ss it at \x01 after %s %s it at \x02 in the same "
             "barrier interval, %s (%s hazard)", describe_offset(b, off, 1).c_str(), thread_name(b, *t).c_str(),
             write ? "write" : "read", thread_name(b, o).c_str(), against_write ? "wrote" : "read",
             o.warp != t->warp ? "another warp, with no __syncthreads between them"
                               : "a lane of its warp, with no __syncwarp naming both between them",
             against_write ? (write ? "write-after-write" : "read-after-write") : "write-after-read");
    (void)c;
    b.fault_pc[0] = pc;
    b.fault_pc[1] = other_pc;
    stop_thread(running("the race check"), cudaErrorLaunchFailure, buf);
}

/* An access by t to a byte that another thread's cp.async is writing. */
[[noreturn]] void copy_race(sim_thread *t, const copy_cell &c, size_t off, bool write, uintptr_t pc)
{
    block_state &b = *t->blk;
    const sim_thread &o = b.th[(size_t)(c.tid - 1)];
    char buf[1400];
    snprintf(buf, sizeof buf, "shared memory race on %s: %s %ss it at \x01 while the cp.async that %s issued into "
             "it at \x02 is in flight: that thread's cp.async.wait_group (or wait_all) completing it, and then a "
             "%s, must come between them (%s hazard)", describe_offset(b, off, 1).c_str(),
             thread_name(b, *t).c_str(), write ? "write" : "read", thread_name(b, o).c_str(),
             o.warp != t->warp ? "__syncthreads" : "__syncthreads or a __syncwarp naming both",
             write ? "write-after-write" : "read-after-write");
    b.fault_pc[0] = pc;
    b.fault_pc[1] = c.pc;
    stop_thread(running("the race check"), cudaErrorLaunchFailure, buf);
}

/* The race check of one byte. */
void race_check(sim_thread *t, smem_cell &c, uint32_t epoch, size_t off, bool write, uintptr_t pc)
{
    block_state &b = *t->blk;
    const warp_state &w = b.warps[(size_t)t->warp];
    const unsigned wbit = 1u << t->warp, lbit = 1u << t->lane;
    if (c.epoch != epoch)
        c = smem_cell{epoch, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (c.wtid && c.wtid - 1 != t->tid && !ordered_after(b, *t, c.wtid - 1, c.wsync))
        shared_race(t, c, off, write, true, c.wtid - 1, c.wpc, pc);
    if (!write) {
        /* Readers of this warp that a full __syncwarp ordered before now are
         * ordered before any later access of this warp: forget them. */
        if (c.rwarps == wbit && w.last_full > c.rsync)
            c.rwarps = 0;
        if (!c.rwarps) {
            c.rlanes = 0;
            c.rsync = w.syncs;
            c.rtid0 = (uint16_t)(t->tid + 1);
            c.rpc0 = pc;
        }
        c.rwarps |= wbit;
        c.rlanes |= lbit;
        c.rtid = (uint16_t)(t->tid + 1);
        c.rpc = pc;
        return;
    }
    if (c.rwarps & ~wbit) { /* another warp read it: no order within the interval */
        const bool last = (c.rtid - 1) / 32 != t->warp;
        shared_race(t, c, off, true, false, (last ? c.rtid : c.rtid0) - 1, last ? c.rpc : c.rpc0, pc);
    }
    if ((c.rlanes & ~lbit) && !synced_since(w, c.rsync, c.rlanes | lbit)) {
        const bool last = c.rtid - 1 != t->tid;
        shared_race(t, c, off, true, false, (last ? c.rtid : c.rtid0) - 1, last ? c.rpc : c.rpc0, pc);
    }
    c.wtid = (uint16_t)(t->tid + 1);
    c.wsync = w.syncs;
    c.wpc = pc;
    c.rwarps = c.rlanes = 0;
}

/* Thread t's access of n bytes at off: bounds, and races as the settings
 * ask (a cp.async of another thread in flight there, then the interval's
 * rule). */
void check_access(sim_thread *t, size_t off, size_t n, bool write, uintptr_t pc)
{
    executor &ex = *t->blk->ex;
    const uint32_t serial = t->blk->serial;
    for (size_t i = 0; i < n; i++)
        if (off + i >= ex.valid.size() || ex.valid[off + i] != serial)
            shared_out_of_bounds(t, off, n, write, pc);
    if (settings().shared_check != SHARED_CHECK_RACE)
        return;
    if (t->blk->copy_bytes)
        for (size_t i = 0; i < n; i++) {
            const copy_cell &c = ex.copies[off + i];
            if (c.serial == serial && c.tid && c.tid - 1 != t->tid)
                copy_race(t, c, off + i, write, pc);
        }
    for (size_t i = 0; i < n; i++)
        race_check(t, ex.cells[off + i], ex.epoch, off + i, write, pc);
}

} // namespace

void shared_access(size_t off, size_t n, bool write, uintptr_t pc)
{
    thread_ctx *ctx = tl_cur;
    if (!ctx || settings().shared_check == SHARED_CHECK_OFF)
        return;
    check_access(static_cast<sim_thread *>(ctx), off, n, write, pc);
}

void shared_access_as(int tid, size_t off, size_t n, bool write, uintptr_t pc)
{
    sim_thread *me = running("PTX");
    if (settings().shared_check == SHARED_CHECK_OFF)
        return;
    block_state &b = *me->blk;
    check_access(&b.th[(size_t)tid], off, n, write, pc);
}

void shared_copy_issue(size_t off, size_t n, uintptr_t pc)
{
    sim_thread *t = running("cp.async");
    if (settings().shared_check == SHARED_CHECK_OFF)
        return;
    check_access(t, off, n, true, pc);
    if (settings().shared_check != SHARED_CHECK_RACE)
        return;
    block_state &b = *t->blk;
    for (size_t i = 0; i < n; i++)
        b.ex->copies[off + i] = copy_cell{b.serial, (uint16_t)(t->tid + 1), pc};
    b.copy_bytes += n;
}

void shared_copy_land(size_t off, size_t n, uintptr_t pc)
{
    sim_thread *t = running("cp.async");
    if (settings().shared_check != SHARED_CHECK_RACE)
        return;
    block_state &b = *t->blk;
    executor &ex = *b.ex;
    for (size_t i = 0; i < n; i++) {
        copy_cell &c = ex.copies[off + i];
        if (c.serial == b.serial && c.tid == t->tid + 1) {
            c.serial = 0;
            b.copy_bytes--;
        }
    }
    for (size_t i = 0; i < n; i++)
        race_check(t, ex.cells[off + i], ex.epoch, off + i, true, pc);
}

/* ---- for the PTX the simulator runs (ptx.cpp) ---- */

void running_shared_window(char **base, size_t *bytes, uint64_t *launch_seq)
{
    sim_thread *t = running("PTX");
    block_state &b = *t->blk;
    *base = b.smem;
    *bytes = b.capacity;
    *launch_seq = b.L->seq;
}

void running_thread_fault(cudaError_t e, const char *what)
{
    sim_thread *t = running("PTX");
    char buf[768];
    snprintf(buf, sizeof buf, "%s (%s)", what, thread_name(*t->blk, *t).c_str());
    stop_thread(t, e, buf);
}

/* ---- the probe ---- */

namespace {
thread_local bool tl_probing;
thread_local bool tl_probe_hit;
thread_local kernel_info tl_probe;
} // namespace

bool kernel_entry(const void *fn, const char *name, unsigned long static_smem, int max_threads)
{
    if (__builtin_expect(!tl_probing, 1))
        return false;
    tl_probe.fn = fn;
    tl_probe.name = name;
    tl_probe.static_smem = static_smem;
    tl_probe.max_threads = max_threads;
    tl_probe_hit = true;
    return true;
}

kernel_info probe_begin()
{
    tl_probing = true;
    tl_probe_hit = false;
    memset(&tl_probe, 0, sizeof tl_probe);
    return tl_probe;
}

bool probe_end(kernel_info *out)
{
    tl_probing = false;
    *out = tl_probe;
    return tl_probe_hit;
}

void fatal_no_thread(const char *what)
{
    fprintf(stderr, "cudasim: %s used outside a running CUDA thread%s; a kernel the simulator's build step did "
            "not rewrite (no prologue), or device code called from the host\n", what,
            tl_probing ? " (while checking a launch)" : "");
    abort();
}

} // namespace cudasim

/* The hooks kernels compiled with -fsanitize=kernel-address (outlined) call
 * before each access. Only that build defines them: an ASan build's runtime
 * has its own of these names. */
#if defined(CUDASIM_ACCESS_HOOKS) && CUDASIM_ACCESS_HOOKS
namespace {
inline void hook(uintptr_t a, size_t n, bool write, void *ret)
{
    const uintptr_t off = a - cudasim::tl_watch.lo;
    if (__builtin_expect(off < cudasim::tl_watch.size, 0))
        cudasim::shared_access(off, n, write, (uintptr_t)ret);
}
} // namespace

extern "C" {
#define CUDASIM_HOOK(N)                                                                                           \
    void __asan_load##N##_noabort(uintptr_t a) { hook(a, N, false, __builtin_return_address(0)); }              \
    void __asan_store##N##_noabort(uintptr_t a) { hook(a, N, true, __builtin_return_address(0)); }
CUDASIM_HOOK(1)
CUDASIM_HOOK(2)
CUDASIM_HOOK(4)
CUDASIM_HOOK(8)
CUDASIM_HOOK(16)
#undef CUDASIM_HOOK
void __asan_loadN_noabort(uintptr_t a, size_t n) { hook(a, n, false, __builtin_return_address(0)); }
void __asan_storeN_noabort(uintptr_t a, size_t n) { hook(a, n, true, __builtin_return_address(0)); }
/* The other calls the instrumentation makes: nothing to do here. */
void __asan_handle_no_return(void) {}
void __asan_before_dynamic_init(const char *) {}
void __asan_after_dynamic_init(void) {}
}
#endif
