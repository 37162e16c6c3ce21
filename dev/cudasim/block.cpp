/* Running a grid on the simulated device: blocks spread over a pool of OS
 * threads; within a block, one fiber per CUDA thread, scheduled one at a time
 * until it blocks (a barrier, a warp collective) or ends, in an order the
 * settings choose: ascending thread index, descending, or seeded random. A
 * missing barrier then lets some thread read what another has not written
 * yet under at least one order, as a GPU would under some timing.
 *
 * Here live the barriers (__syncthreads and its reductions: every live
 * thread of the block), the warp collectives (__syncwarp, shuffles, votes,
 * WMMA's mma_sync: exactly the lanes of the mask, which must name the
 * caller, exist and not have exited, and call the same intrinsic with the
 * same mask), the block's shared memory (static variables laid out as the
 * threads reach them, the dynamic part after them, poisoned with 0xff at the
 * start of each block, a canary after the end), and the probe that learns a
 * kernel's facts before its launch is accepted. A block that deadlocks or
 * breaks a rule stops its grid with a sticky error and a diagnostic naming
 * the kernel, the block, the threads and the source lines. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

thread_local thread_ctx *tl_cur;

namespace {

enum thread_state { T_READY, T_RUNNING, T_WAIT_BAR, T_WAIT_WARP, T_EXITED, T_STOPPED };
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

struct sim_thread : thread_ctx {
    int tid, lane, warp;
    block_state *blk;
    void *sp;
    fiber_stack *stack;
    void *fake;
    thread_state state;
    const char *wait_file;
    int wait_line;
    uint64_t result;
};

struct warp_coll {
    int kind, sub;
    unsigned mask, arrived;
    int width;
    const char *file;
    int line;
    uint64_t val[32];
    int arg[32];
    int pred[32];
    const float *ma[32], *mb[32], *mc[32];
    float *md[32];
    int operand_kind;
};

struct shared_site {
    unsigned key;
    size_t off, bytes;
};

struct block_state {
    executor *ex;
    launch_rec *L;
    uint3 idx;
    std::vector<sim_thread> th;
    int n, live;
    std::deque<int> ready;
    uint64_t rng;
    /* the block barrier */
    int bar_arrived, bar_op;
    int bar_accum;
    const char *bar_file;
    int bar_line;
    /* per warp */
    std::vector<std::vector<warp_coll>> colls;
    std::vector<unsigned> warp_live, warp_exist;
    /* shared memory */
    char *smem;
    size_t static_cap, static_used, dyn_off, arena_used;
    std::vector<shared_site> sites;
    /* a failure stops the block */
    bool failed;
    cudaError_t err;
    std::string msg;
};

constexpr size_t CANARY = 64;
constexpr unsigned char CANARY_BYTE = 0xa5;

struct executor {
    std::vector<fiber_stack> stacks;
    std::vector<char> arena_store;
    char *arena;
    size_t arena_bytes;
    void *sched_sp;
    void *sched_fake;
    fiber_stack sched_stack; /* the OS thread's own stack, for ASan's switch calls */
    block_state blk;

    executor() : arena(nullptr), arena_bytes(0), sched_sp(nullptr), sched_fake(nullptr), sched_stack(), blk() {}
    ~executor()
    {
        for (auto &s : stacks)
            stack_destroy(&s);
    }
};

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

/* Makes the threads of `ids` (in thread order) ready, in the schedule's order. */
void make_ready(block_state &b, const std::vector<int> &ids)
{
    if (settings().schedule == SCHED_DESCENDING) {
        for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
            b.th[*it].state = T_READY;
            b.ready.push_back(*it);
        }
    } else {
        for (int id : ids) {
            b.th[id].state = T_READY;
            b.ready.push_back(id);
        }
    }
}

int pick(block_state &b)
{
    if (settings().schedule == SCHED_RANDOM && b.ready.size() > 1) {
        size_t k = next_rand(&b.rng) % b.ready.size();
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
void block_fail(block_state &b, cudaError_t e, const std::string &msg)
{
    if (b.failed)
        return;
    b.failed = true;
    b.err = e;
    b.msg = msg;
}

/* From a fiber: switch to the block's scheduler; returns when resumed. */
void yield_to_scheduler(sim_thread *t)
{
    executor &ex = *t->blk->ex;
    fiber_switch(&t->sp, ex.sched_sp, &ex.sched_stack, &t->fake, false);
    fiber_switched(t->fake, nullptr, nullptr);
    tl_cur = t;
}

/* From a fiber: stop this thread for good with the block failed. */
[[noreturn]] void stop_thread(sim_thread *t, cudaError_t e, const std::string &msg)
{
    block_fail(*t->blk, e, msg);
    t->state = T_STOPPED;
    yield_to_scheduler(t);
    abort(); /* never resumed */
}

void release_barrier(block_state &b)
{
    std::vector<int> ids;
    for (int i = 0; i < b.n; i++)
        if (b.th[i].state == T_WAIT_BAR) {
            b.th[i].result = (uint64_t)(unsigned)b.bar_accum;
            ids.push_back(i);
        }
    b.bar_arrived = 0;
    make_ready(b, ids);
}

void complete_coll(block_state &b, int warp, size_t ci)
{
    warp_coll c = b.colls[warp][ci];
    b.colls[warp].erase(b.colls[warp].begin() + (long)ci);
    const int base_tid = warp * 32;
    std::vector<int> ids;
    if (c.kind == C_MMA) {
        float A[16][16], Bm[16][16], C[16][16];
        for (int l = 0; l < 32; l++)
            for (int e = 0; e < 8; e++) {
                int r = (l * 8 + e) / 16, col = (l * 8 + e) % 16;
                A[r][col] = c.ma[l][e];
                Bm[r][col] = c.mb[l][e];
                C[r][col] = c.mc[l][e];
            }
        for (int l = 0; l < 32; l++)
            for (int e = 0; e < 8; e++) {
                int r = (l * 8 + e) / 16, col = (l * 8 + e) % 16;
                float acc = C[r][col];
                for (int k = 0; k < 16; k++)
                    acc += A[r][k] * Bm[k][col];
                c.md[l][e] = acc;
            }
    }
    for (int l = 0; l < 32; l++) {
        if (!(c.mask & (1u << l)))
            continue;
        sim_thread &t = b.th[base_tid + l];
        const int seg = l & ~(c.width - 1);
        switch (c.kind) {
        case C_SHFL: {
            int src = l;
            switch (c.sub) {
            case SHFL_IDX: src = seg + (c.arg[l] & (c.width - 1)); break;
            case SHFL_UP: src = l - c.arg[l] >= seg ? l - c.arg[l] : l; break;
            case SHFL_DOWN: src = l + c.arg[l] < seg + c.width ? l + c.arg[l] : l; break;
            case SHFL_XOR: src = ((l ^ c.arg[l]) & ~(c.width - 1)) == seg ? (l ^ c.arg[l]) : l; break;
            }
            t.result = c.val[src];
            break;
        }
        case C_VOTE: {
            unsigned ballot = 0;
            for (int k = 0; k < 32; k++)
                if ((c.mask & (1u << k)) && c.pred[k])
                    ballot |= 1u << k;
            t.result = c.sub == VOTE_BALLOT ? ballot
                       : c.sub == VOTE_ALL  ? (ballot == c.mask)
                                            : (ballot != 0);
            break;
        }
        default: t.result = 0; break;
        }
        ids.push_back(base_tid + l);
    }
    make_ready(b, ids);
}

/* A lane's arrival at a warp collective; returns its result when released. */
uint64_t warp_arrive(int kind, int sub, unsigned mask, int width, const char *file, int line, uint64_t val,
                     int arg, int pred, const float *ma, const float *mb, const float *mc, float *md,
                     int operand_kind)
{
    sim_thread *t = running(coll_name(kind, sub));
    block_state &b = *t->blk;
    const unsigned me = 1u << t->lane;
    const char *name = coll_name(kind, sub);
    char buf[512];
    if (!(mask & me)) {
        snprintf(buf, sizeof buf, "%s at %s: mask 0x%08x does not name the calling %s", name,
                 where(file, line).c_str(), mask, thread_name(b, *t).c_str());
        stop_thread(t, cudaErrorIllegalInstruction, buf);
    }
    if (width <= 0 || width > 32 || (width & (width - 1))) {
        snprintf(buf, sizeof buf, "%s at %s: width %d is not a power of two up to 32", name,
                 where(file, line).c_str(), width);
        stop_thread(t, cudaErrorIllegalInstruction, buf);
    }
    if (mask & ~b.warp_exist[t->warp]) {
        snprintf(buf, sizeof buf, "%s at %s: mask 0x%08x names lanes 0x%08x that warp %d of a %d-thread block "
                 "does not have", name, where(file, line).c_str(), mask, mask & ~b.warp_exist[t->warp], t->warp, b.n);
        stop_thread(t, cudaErrorIllegalInstruction, buf);
    }
    if (mask & ~b.warp_live[t->warp]) {
        snprintf(buf, sizeof buf, "%s at %s (%s): mask 0x%08x names lanes 0x%08x that have exited", name,
                 where(file, line).c_str(), thread_name(b, *t).c_str(), mask, mask & ~b.warp_live[t->warp]);
        stop_thread(t, cudaErrorIllegalInstruction, buf);
    }
    std::vector<warp_coll> &list = b.colls[t->warp];
    size_t ci = list.size();
    for (size_t i = 0; i < list.size(); i++) {
        if (!(list[i].mask & mask))
            continue;
        const warp_coll &c = list[i];
        if (c.mask != mask || c.kind != kind || c.sub != sub || c.width != width) {
            snprintf(buf, sizeof buf, "warp %d of block (%u,%u,%u): lane %d calls %s(mask 0x%08x) at %s while "
                     "lanes 0x%08x wait in %s(mask 0x%08x) at %s: the lanes of a mask must all call the same "
                     "intrinsic with the same mask", t->warp, b.idx.x, b.idx.y, b.idx.z, t->lane, name, mask,
                     where(file, line).c_str(), c.arrived, coll_name(c.kind, c.sub), c.mask,
                     where(c.file, c.line).c_str());
            stop_thread(t, cudaErrorIllegalInstruction, buf);
        }
        ci = i;
        break;
    }
    if (ci == list.size()) {
        warp_coll c;
        memset(&c, 0, sizeof c);
        c.kind = kind;
        c.sub = sub;
        c.mask = mask;
        c.width = width;
        c.file = file;
        c.line = line;
        c.operand_kind = operand_kind;
        list.push_back(c);
    }
    warp_coll &c = list[ci];
    c.val[t->lane] = val;
    c.arg[t->lane] = arg;
    c.pred[t->lane] = pred;
    c.ma[t->lane] = ma;
    c.mb[t->lane] = mb;
    c.mc[t->lane] = mc;
    c.md[t->lane] = md;
    c.arrived |= me;
    t->state = T_WAIT_WARP;
    t->wait_file = file;
    t->wait_line = line;
    if (c.arrived == c.mask)
        complete_coll(b, t->warp, ci);
    yield_to_scheduler(t);
    return t->result;
}

void describe_waits(block_state &b, std::string *out)
{
    /* Group threads by what they wait for. */
    std::map<std::string, std::vector<int>> groups;
    for (int i = 0; i < b.n; i++) {
        const sim_thread &t = b.th[i];
        std::string key;
        if (t.state == T_WAIT_BAR)
            key = "__syncthreads at " + where(t.wait_file, t.wait_line);
        else if (t.state == T_WAIT_WARP) {
            for (const warp_coll &c : b.colls[t.warp])
                if (c.mask & (1u << t.lane)) {
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
    t->state = T_EXITED;
    b.live--;
    b.warp_live[t->warp] &= ~(1u << t->lane);
    for (const warp_coll &c : b.colls[t->warp])
        if (c.mask & (1u << t->lane)) {
            char buf[512];
            snprintf(buf, sizeof buf, "%s exited while lanes 0x%08x wait in %s(mask 0x%08x) at %s, which names it",
                     thread_name(b, *t).c_str(), c.arrived, coll_name(c.kind, c.sub), c.mask,
                     where(c.file, c.line).c_str());
            block_fail(b, cudaErrorIllegalInstruction, buf);
        }
    if (b.bar_arrived > 0 && b.bar_arrived == b.live)
        release_barrier(b);
}

void thread_main(void *arg)
{
    sim_thread *t = static_cast<sim_thread *>(arg);
    executor &ex = *t->blk->ex;
    const void *from_lo = nullptr;
    size_t from_size = 0;
    fiber_switched(nullptr, &from_lo, &from_size);
    if (from_lo && !ex.sched_stack.lo) { /* the scheduler's stack, as ASan saw it */
        ex.sched_stack.lo = const_cast<char *>(static_cast<const char *>(from_lo));
        ex.sched_stack.hi = ex.sched_stack.lo + from_size;
    }
    tl_cur = t;
    t->blk->L->run(t->blk->L->payload);
    thread_exit(t);
    void *dead;
    fiber_switch(&dead, ex.sched_sp, &ex.sched_stack, nullptr, true);
    abort();
}

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

bool ensure_arena(executor &ex, size_t bytes)
{
    if (ex.arena_bytes >= bytes)
        return true;
    try {
        ex.arena_store.assign(bytes + 256, 0);
    } catch (...) {
        return false;
    }
    ex.arena = reinterpret_cast<char *>(round_up((uintptr_t)ex.arena_store.data(), 256));
    ex.arena_bytes = bytes;
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
    b.rng = settings().seed ^ (L->seq * 0x9E3779B97F4A7C15ull) ^ (linear * 0xD1B54A32D192ED03ull);
    b.bar_arrived = 0;
    b.bar_op = 0;
    b.bar_accum = 0;
    const int warps = (b.n + 31) / 32;
    b.colls.assign((size_t)warps, std::vector<warp_coll>());
    b.warp_live.assign((size_t)warps, 0);
    b.warp_exist.assign((size_t)warps, 0);
    b.failed = false;
    b.err = cudaSuccess;
    b.msg.clear();
    b.sites.clear();
    /* Shared memory: static, then dynamic (aligned up to 1 KiB), then a canary. */
    b.static_cap = L->k.static_smem;
    b.static_used = 0;
    b.dyn_off = round_up(b.static_cap, 16);
    const size_t need = b.dyn_off + 1024 + L->dyn_smem + CANARY;
    if (!ensure_arena(ex, need)) {
        *err = cudaErrorMemoryAllocation;
        *msg = "the simulator has no host memory for a block's shared memory";
        return;
    }
    b.smem = ex.arena;
#ifdef CUDASIM_ASAN
    ASAN_UNPOISON_MEMORY_REGION(ex.arena, ex.arena_bytes);
#endif
    b.arena_used = b.dyn_off + 1024 + L->dyn_smem;
    memset(b.smem, 0xff, b.arena_used); /* uninitialised shared memory reads as NaN */
    memset(b.smem + b.arena_used, CANARY_BYTE, CANARY);
    /* Threads. */
    if (ex.stacks.size() < (size_t)b.n) {
        size_t have = ex.stacks.size();
        ex.stacks.resize((size_t)b.n);
        for (size_t i = have; i < (size_t)b.n; i++)
            if (!stack_create(&ex.stacks[i], settings().stack_bytes)) {
                ex.stacks.resize(i);
                *err = cudaErrorMemoryAllocation;
                *msg = "the simulator could not map fiber stacks";
                return;
            }
    }
    b.th.resize((size_t)b.n);
    std::vector<int> all((size_t)b.n);
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
        t.stack = &ex.stacks[(size_t)i];
        t.sp = fiber_prepare(t.stack, thread_main, &t);
        t.fake = nullptr;
        t.state = T_READY;
        t.wait_file = nullptr;
        t.wait_line = 0;
        t.result = 0;
        b.warp_live[(size_t)t.warp] |= 1u << t.lane;
        b.warp_exist[(size_t)t.warp] |= 1u << t.lane;
        all[(size_t)i] = i;
    }
    make_ready(b, all);
    while (b.live > 0 && !b.failed) {
        if (b.ready.empty()) {
            std::string m = "deadlock: no thread can go on";
            describe_waits(b, &m);
            block_fail(b, cudaErrorLaunchFailure, m);
            break;
        }
        sim_thread &t = b.th[(size_t)pick(b)];
        t.state = T_RUNNING;
        tl_cur = &t;
        fiber_switch(&ex.sched_sp, t.sp, t.stack, &ex.sched_fake, false);
        fiber_switched(ex.sched_fake, nullptr, nullptr);
        tl_cur = nullptr;
    }
    if (!b.failed)
        for (size_t i = 0; i < CANARY; i++)
            if ((unsigned char)b.smem[b.arena_used + i] != CANARY_BYTE) {
                char buf[256];
                snprintf(buf, sizeof buf, "a write past the end of shared memory (%zu bytes static, %zu dynamic) "
                         "in block (%u,%u,%u)", b.static_cap, L->dyn_smem, b.idx.x, b.idx.y, b.idx.z);
                block_fail(b, cudaErrorIllegalAddress, buf);
                break;
            }
#ifdef CUDASIM_ASAN
    /* Threads stopped mid-way leave poisoned frames: the next block unpoisons. */
#endif
    if (b.failed) {
        char head[160];
        snprintf(head, sizeof head, "block (%u,%u,%u): ", b.idx.x, b.idx.y, b.idx.z);
        *err = b.err;
        *msg = head + b.msg;
    }
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
    case SCHED_DESCENDING: return j.total - 1 - i;
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
    yield_to_scheduler(t);
    return (int)t->result;
}

void syncwarp(unsigned mask, const char *file, int line)
{
    warp_arrive(C_SYNCWARP, 0, mask, 32, file, line, 0, 0, 0, nullptr, nullptr, nullptr, nullptr, 0);
}

uint64_t warp_shfl(int kind, unsigned mask, uint64_t value, int arg, int width, const char *file, int line)
{
    return warp_arrive(C_SHFL, kind, mask, width, file, line, value, arg, 0, nullptr, nullptr, nullptr, nullptr, 0);
}

unsigned warp_vote(int kind, unsigned mask, int pred, const char *file, int line)
{
    return (unsigned)warp_arrive(C_VOTE, kind, mask, 32, file, line, 0, 0, pred, nullptr, nullptr, nullptr,
                                 nullptr, 0);
}

unsigned active_mask()
{
    sim_thread *t = running("__activemask");
    return t->blk->warp_live[(size_t)t->warp];
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
    warp_arrive(C_MMA, 0, 0xffffffffu, 32, file, line, 0, 0, 0, a, b, c, d_out, operand_kind);
}

void *shared_alloc(unsigned key, size_t bytes, size_t align)
{
    sim_thread *t = running("a __shared__ variable");
    block_state &b = *t->blk;
    for (const shared_site &s : b.sites)
        if (s.key == key)
            return b.smem + s.off;
    size_t off = round_up(b.static_used, align < 16 ? 16 : align);
    if (off + bytes > b.static_cap) {
        char buf[256];
        snprintf(buf, sizeof buf, "__shared__ variable of %zu bytes does not fit the %zu bytes of static shared "
                 "memory the kernel's prologue declared (a __shared__ variable outside the kernel body?)",
                 bytes, b.static_cap);
        stop_thread(t, cudaErrorLaunchFailure, buf);
    }
    b.sites.push_back(shared_site{key, off, bytes});
    b.static_used = off + round_up(bytes, 16);
    return b.smem + off;
}

void *dynamic_shared_base(size_t align)
{
    sim_thread *t = running("extern __shared__");
    block_state &b = *t->blk;
    size_t a = align < 16 ? 16 : align;
    if (a > 1024)
        stop_thread(t, cudaErrorMisalignedAddress, "extern __shared__ asks for more than 1024-byte alignment");
    return b.smem + round_up(b.dyn_off, a);
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
