/* The simulated device's internals, shared by its parts (never included by
 * the code it runs): the card's limits (arch.cpp), fibers (fiber.cpp), the
 * block scheduler and the grid (block.cpp), the runtime's errors, memory
 * registry and streams (runtime.cpp, memory.cpp, stream.cpp), and the
 * settings read from the environment once (settings()).
 *
 * One OS thread runs one block at a time: all its CUDA threads are fibers
 * switched by hand on that OS thread; blocks of a grid spread over a pool of
 * OS threads. A stream is an OS thread running its queue in order. */
#ifndef CUDASIM_SIM_H
#define CUDASIM_SIM_H

#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "include/cudasim/device.h"

namespace cudasim {

/* ---- settings (environment, read once; tests may override some) ---- */
#if defined(CUDASIM_ACCESS_HOOKS) && CUDASIM_ACCESS_HOOKS
constexpr bool access_hooks = true;
#else
constexpr bool access_hooks = false;
#endif
/* Thread-serial schedules run each thread until it blocks, in thread order
 * (ascending, descending) or seeded random order; warp-serial ones run the
 * lowest (highest) warp with a ready thread until every lane of it waits at
 * the block barrier or has exited, so one warp can run a whole barrier
 * interval ahead of the others. */
enum schedule_kind { SCHED_ASCENDING, SCHED_DESCENDING, SCHED_RANDOM, SCHED_WARP_ASCENDING, SCHED_WARP_DESCENDING };
/* What the shared-memory access checks do (block.cpp): nothing, bounds only
 * (every access inside a variable or the dynamic part), or bounds and the
 * race check (plain accesses of one barrier interval from threads that no
 * __syncwarp orders). Only where the kernels were compiled with the access
 * hooks (CUDASIM_ACCESS_HOOKS: every build but ASan's). */
enum shared_check_kind { SHARED_CHECK_OFF, SHARED_CHECK_BOUNDS, SHARED_CHECK_RACE };

struct sim_settings {
    int arch;                   /* FERRY_CUDASIM_ARCH: 70, 75, 80, 86, 89, 90 */
    schedule_kind schedule;     /* FERRY_CUDASIM_SCHEDULE: ascending, descending, random[:seed],
                                   warp-ascending, warp-descending */
    shared_check_kind shared_check; /* FERRY_CUDASIM_SHARED_CHECK: off, bounds, race (default race) */
    uint64_t seed;              /* for random schedules and stream delays */
    int threads;                /* FERRY_CUDASIM_THREADS: OS threads running blocks */
    unsigned delay_us;          /* FERRY_CUDASIM_DELAY_US: max random delay before each stream op */
    unsigned copy_delay_us;     /* FERRY_CUDASIM_COPY_DELAY_US: a host-to-device copy's bytes land this late */
    uint64_t memory_bytes;      /* FERRY_CUDASIM_MEMORY: the card's memory */
    uint64_t context_bytes;     /* FERRY_CUDASIM_CONTEXT: what the CUDA context takes of it */
    const char *launch_log;     /* FERRY_CUDASIM_LAUNCH_LOG: a file to add each kernel's launch shapes to */
    size_t stack_bytes;         /* a fiber's stack */
    bool no_device;             /* FERRY_CUDASIM_NO_DEVICE=1: behave like a machine without a driver */
    bool quiet;                 /* FERRY_CUDASIM_QUIET=1: no diagnostics on stderr */
};
sim_settings &settings();
/* A schedule's or a shared check's name (as FERRY_CUDASIM_SCHEDULE and
 * FERRY_CUDASIM_SHARED_CHECK spell them); false for a name not known, or a
 * check this build cannot make. */
bool parse_schedule(const char *name, schedule_kind *out);
bool parse_shared_check(const char *name, shared_check_kind *out);

/* ---- the card (arch.cpp) ---- */
struct arch_limits {
    int cc;                       /* 80 for sm_80 */
    const char *card;             /* a card of this architecture, for the device name */
    int sms;
    size_t smem_per_block;        /* without opt-in: 48 KiB */
    size_t smem_per_block_optin;  /* with cudaFuncSetAttribute */
    size_t smem_per_sm;
    int max_threads_per_sm;
    uint64_t memory_bytes;        /* of the card named */
    int bf16;                     /* bf16 tensor cores */
};
const arch_limits *arch_find(int cc);
const arch_limits &arch();
void arch_list(std::string *out);

/* ---- diagnostics ---- */
void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- errors (runtime.cpp) ---- */
/* Sets the calling thread's last error and returns `e` (as every failing
 * runtime call does); a sticky error is remembered for the whole process. */
cudaError_t fail(cudaError_t e);
cudaError_t fail_msg(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void set_sticky(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t sticky();
/* The common entry of every runtime call: the sticky error, a call from a
 * host function (not permitted), an injected fault. cudaSuccess to go on. */
cudaError_t api_enter(const char *name);
void count_call(const char *name);

/* ---- device memory (memory.cpp) ---- */
enum mem_kind { MEM_PAGEABLE, MEM_DEVICE, MEM_PINNED, MEM_REGISTERED, MEM_SYMBOL };
const char *mem_kind_name(mem_kind k);
/* What [p, p+n) is: a device buffer (whole range inside one), pinned or
 * registered host memory, or plain host memory. `why` gets a sentence when
 * the range is bad (runs past a device buffer, lies in a freed one). */
mem_kind classify(const void *p, size_t n, std::string *why);
bool device_range_ok(const void *p, size_t n, std::string *why);
void check_guards(const char *after);
void register_symbol(const void *p, size_t n);

/* ---- streams (stream.cpp) ---- */
struct stream_op {
    const char *what;
    std::function<void()> run;
    bool always = false; /* runs after a sticky error too (event records, waits) */
};
struct sim_stream;
sim_stream *stream_of(cudaStream_t s, cudaError_t *err);
void stream_enqueue(sim_stream *s, stream_op op);
/* Runs `fn` on the stream in order and waits for it (pageable copies). */
cudaError_t stream_run_sync(sim_stream *s, const char *what, std::function<void()> fn);
bool on_callback_thread();
void wait_all_streams();
/* Host waits (stats): `blocking` when the wait would block on a card, not spin. */
void note_host_wait(bool blocking);

/* ---- counters (cudasim_stats) ---- */
enum { STAT_LAUNCHES, STAT_REFUSALS, STAT_BLOCKS, STAT_HOST_FUNCS, STAT_MATMULS, STAT_COLLECTIVES, STAT_COUNT };
void stat_add(int which, uint64_t n = 1);
uint64_t stat_counter(int which);
/* An injected fault of a cuBLASLt or NCCL function: its code, or 0. */
int injected_fault(const char *name);
uint64_t device_bytes_in_use(uint64_t *peak);
/* What the card's own software holds outside cudaMalloc: the context (from
 * the first call) and each live cuBLASLt handle (LIBRARY_HANDLE_BYTES). */
constexpr uint64_t LIBRARY_HANDLE_BYTES = 2ull << 20;
void note_library_bytes(int64_t delta);
uint64_t software_bytes();

/* ---- kernels (block.cpp) ---- */
struct launch_rec {
    kernel_info k;
    launch_site site;
    dim3 grid, block;
    size_t dyn_smem;
    void *payload;
    void (*run)(void *);
    void (*destroy)(void *);
    uint64_t seq;
};
/* Runs a whole grid on the pool; returns false when a block failed (the
 * sticky error is set). Called on the stream's thread. */
bool run_grid(launch_rec *L);
/* A kernel's access at byte `off` of the running block's shared memory
 * (the access hooks call it): bounds, then races, as the settings ask;
 * stops the thread with the block failed on a violation. */
void shared_access(size_t off, size_t n, bool write, uintptr_t pc);
/* The same for thread `tid` of the running block (ldmatrix's rows, read by
 * the lanes that gave their addresses); the running thread stops on a
 * violation. */
void shared_access_as(int tid, size_t off, size_t n, bool write, uintptr_t pc);
/* A cp.async of the running thread into [off, off + n): checked as its
 * write at the issue, then in flight (another thread's access races) until
 * shared_copy_land, at the wait that completes it, where it is that
 * thread's write again. */
void shared_copy_issue(size_t off, size_t n, uintptr_t pc);
void shared_copy_land(size_t off, size_t n, uintptr_t pc);
/* The opt-in a kernel was given by cudaFuncSetAttribute (0: none). */
size_t func_max_dynamic_smem(const void *fn);
cudaError_t func_set_max_dynamic_smem(const void *fn, int bytes);

/* ---- what ptx.cpp asks of the running thread's block (block.cpp) ---- */
/* The block's shared memory: [base, base + bytes), offsets as
 * __cvta_generic_to_shared gives them; and its launch's sequence number. */
void running_shared_window(char **base, size_t *bytes, uint64_t *launch_seq);
/* Stops the running thread, its block failed with `e` and `what` (the
 * thread named after it). */
[[noreturn]] void running_thread_fault(cudaError_t e, const char *what);

/* ---- fibers (fiber.cpp) ---- */
struct fiber_stack {
    char *lo;   /* usable [lo, hi) */
    char *hi;
    char *map;  /* the mapping, guard page included */
    size_t map_bytes;
};
bool stack_create(fiber_stack *s, size_t bytes);
void stack_destroy(fiber_stack *s);
/* Prepares `s` to start entry(arg) on the first switch to the returned sp. */
void *fiber_prepare(fiber_stack *s, void (*entry)(void *), void *arg);
void fiber_switch(void **save_sp, void *to_sp, const fiber_stack *to, void **fake_save, bool exiting);
void fiber_switched(void *fake_save, const void **from_lo, size_t *from_size);

} // namespace cudasim

#endif
