/* The cards the simulated device can be, and its settings.
 *
 * The limits table: for each architecture ferry builds for (sm_70 and sm_75
 * for fp16; sm_80, 86, 89 and 90 for bf16), a card of it and the limits a
 * launch is checked against — shared memory per block without and with the
 * cudaFuncSetAttribute opt-in, per SM, threads per SM, SMs — as the CUDA
 * programming guide's table of compute capabilities and the cards'
 * cudaDeviceProp report them. Threads per block (1024; x, y <= 1024, z <=
 * 64) and the grid (x < 2^31, y and z <= 65535) are the same for all of
 * them. Registers are not simulated.
 *
 * The settings come from the environment, read once (docs/cudasim.md):
 *   FERRY_CUDASIM_ARCH       sm_70 | 75 | 80 | 86 | 89 | 90 (default 90)
 *   FERRY_CUDASIM_SCHEDULE   ascending | descending | random[:SEED] | warp-ascending |
 *                            warp-descending (default ascending)
 *   FERRY_CUDASIM_SHARED_CHECK  race | bounds | off: what is checked of each
 *                            shared-memory access (default race; off under ASan,
 *                            whose poisoned red zones bound the accesses there)
 *   FERRY_CUDASIM_SEED       seed of random schedules and stream delays (default 1)
 *   FERRY_CUDASIM_THREADS    OS threads running blocks (default 2)
 *   FERRY_CUDASIM_DELAY_US   up to this many microseconds of seeded random
 *                            delay before each operation of a stream (default 0)
 *   FERRY_CUDASIM_COPY_DELAY_US  a slow bus: each asynchronous host-to-device
 *                            copy holds its stream this many microseconds before
 *                            its bytes land (default 0), so work on another stream
 *                            that does not wait for the copy's event reads the old
 *                            bytes
 *   FERRY_CUDASIM_MEMORY     the card's memory, e.g. 24GiB (default: the card's)
 *   FERRY_CUDASIM_CONTEXT    what the CUDA context takes of it (default 512MiB; an
 *                            H200's measured 527 MiB with CUDA 13); each cuBLASLt
 *                            handle takes 2 MiB more, as measured there
 *   FERRY_CUDASIM_LAUNCH_LOG a file to which each process adds one line per kernel
 *                            and launch shape: card, kernel, threads a block,
 *                            dynamic shared memory, __launch_bounds__, launch site,
 *                            the kernel's object, address and the object's mtime
 *   FERRY_CUDASIM_STACK_KIB  a CUDA thread's stack (default 64, 256 under ASan)
 *   FERRY_CUDASIM_NO_DEVICE  1: no driver, as on a machine without a GPU
 *   FERRY_CUDASIM_FAIL       faults to inject (runtime.cpp)
 *   FERRY_CUDASIM_QUIET      1: no diagnostics on stderr */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

namespace cudasim {

namespace {

const arch_limits table[] = {
    /* cc  card                       SMs  per block  opt-in         per SM         thr/SM memory         bf16 */
    {70, "Tesla V100-SXM2-32GB", 80, 48 << 10, 96 << 10, 96 << 10, 2048, 32ull << 30, 0},
    {75, "Tesla T4", 40, 48 << 10, 64 << 10, 64 << 10, 1024, 16ull << 30, 0},
    {80, "NVIDIA A100-SXM4-80GB", 108, 48 << 10, 163 << 10, 164 << 10, 2048, 80ull << 30, 1},
    {86, "NVIDIA GeForce RTX 3090", 82, 48 << 10, 99 << 10, 100 << 10, 1536, 24ull << 30, 1},
    {89, "NVIDIA GeForce RTX 4090", 128, 48 << 10, 99 << 10, 100 << 10, 1536, 24ull << 30, 1},
    {90, "NVIDIA H100 80GB HBM3", 132, 48 << 10, 227 << 10, 228 << 10, 2048, 80ull << 30, 1},
};

bool asan_build()
{
#if defined(__SANITIZE_ADDRESS__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return true;
#else
    return false;
#endif
#else
    return false;
#endif
}

[[noreturn]] void bad_setting(const char *name, const char *value, const char *want)
{
    fprintf(stderr, "cudasim: %s=%s is not %s\n", name, value, want);
    exit(2);
}

uint64_t parse_bytes(const char *name, const char *v)
{
    char *end = nullptr;
    double x = strtod(v, &end);
    if (end == v || x <= 0)
        bad_setting(name, v, "a size such as 24GiB");
    while (*end == ' ')
        end++;
    double mul = 1;
    if (!strcasecmp(end, "k") || !strcasecmp(end, "kib"))
        mul = 1024.0;
    else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib"))
        mul = 1024.0 * 1024;
    else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib"))
        mul = 1024.0 * 1024 * 1024;
    else if (*end)
        bad_setting(name, v, "a size such as 24GiB");
    return (uint64_t)(x * mul);
}

constexpr const char *SCHEDULES = "ascending, descending, random[:SEED], warp-ascending or warp-descending";

sim_settings read_settings()
{
    sim_settings s;
    memset(&s, 0, sizeof s);
    s.arch = 90;
    s.schedule = SCHED_ASCENDING;
    s.shared_check = access_hooks ? SHARED_CHECK_RACE : SHARED_CHECK_OFF;
    s.seed = 1;
    s.threads = 2;
    s.stack_bytes = (asan_build() ? 256 : 64) << 10;
    const char *v;
    if ((v = getenv("FERRY_CUDASIM_ARCH")) && *v) {
        const char *d = v;
        if (!strncasecmp(d, "sm_", 3))
            d += 3;
        int cc = 0;
        if (strchr(d, '.')) {
            int major = 0, minor = 0;
            if (sscanf(d, "%d.%d", &major, &minor) == 2)
                cc = major * 10 + minor;
        } else {
            cc = atoi(d);
        }
        if (!arch_find(cc)) {
            std::string list;
            arch_list(&list);
            bad_setting("FERRY_CUDASIM_ARCH", v, list.c_str());
        }
        s.arch = cc;
    }
    if ((v = getenv("FERRY_CUDASIM_SEED")) && *v)
        s.seed = strtoull(v, nullptr, 0);
    if ((v = getenv("FERRY_CUDASIM_SCHEDULE")) && *v) {
        const char *colon = strchr(v, ':');
        std::string kind(v, colon ? (size_t)(colon - v) : strlen(v));
        if (!parse_schedule(kind.c_str(), &s.schedule) || (colon && s.schedule != SCHED_RANDOM))
            bad_setting("FERRY_CUDASIM_SCHEDULE", v, SCHEDULES);
        if (colon)
            s.seed = strtoull(colon + 1, nullptr, 0);
    }
    if ((v = getenv("FERRY_CUDASIM_SHARED_CHECK")) && *v && !parse_shared_check(v, &s.shared_check))
        bad_setting("FERRY_CUDASIM_SHARED_CHECK", v, access_hooks ? "race, bounds or off" : "off (an ASan build "
                    "has no access hooks: its poisoned red zones bound shared memory)");
    if ((v = getenv("FERRY_CUDASIM_THREADS")) && *v) {
        s.threads = atoi(v);
        if (s.threads < 1 || s.threads > 256)
            bad_setting("FERRY_CUDASIM_THREADS", v, "a number of threads from 1 to 256");
    }
    if ((v = getenv("FERRY_CUDASIM_DELAY_US")) && *v)
        s.delay_us = (unsigned)strtoul(v, nullptr, 10);
    if ((v = getenv("FERRY_CUDASIM_COPY_DELAY_US")) && *v)
        s.copy_delay_us = (unsigned)strtoul(v, nullptr, 10);
    s.memory_bytes = arch_find(s.arch)->memory_bytes;
    if ((v = getenv("FERRY_CUDASIM_MEMORY")) && *v)
        s.memory_bytes = parse_bytes("FERRY_CUDASIM_MEMORY", v);
    s.context_bytes = 512ull << 20;
    if ((v = getenv("FERRY_CUDASIM_CONTEXT")) && *v)
        s.context_bytes = !strcmp(v, "0") ? 0 : parse_bytes("FERRY_CUDASIM_CONTEXT", v);
    if ((v = getenv("FERRY_CUDASIM_LAUNCH_LOG")) && *v)
        s.launch_log = v;
    if ((v = getenv("FERRY_CUDASIM_STACK_KIB")) && *v) {
        long k = atol(v);
        if (k < 16 || k > 65536)
            bad_setting("FERRY_CUDASIM_STACK_KIB", v, "a stack size in KiB from 16 to 65536");
        s.stack_bytes = (size_t)k << 10;
    }
    s.no_device = (v = getenv("FERRY_CUDASIM_NO_DEVICE")) && *v && strcmp(v, "0");
    s.quiet = (v = getenv("FERRY_CUDASIM_QUIET")) && *v && strcmp(v, "0");
    return s;
}

} // namespace

bool parse_schedule(const char *v, schedule_kind *out)
{
    static const struct {
        const char *name;
        schedule_kind kind;
    } names[] = {{"ascending", SCHED_ASCENDING},           {"asc", SCHED_ASCENDING},
                 {"descending", SCHED_DESCENDING},         {"desc", SCHED_DESCENDING},
                 {"random", SCHED_RANDOM},                 {"warp-ascending", SCHED_WARP_ASCENDING},
                 {"warp-descending", SCHED_WARP_DESCENDING}};
    for (const auto &n : names)
        if (!strcmp(v, n.name)) {
            *out = n.kind;
            return true;
        }
    return false;
}

bool parse_shared_check(const char *v, shared_check_kind *out)
{
    shared_check_kind k;
    if (!strcmp(v, "off"))
        k = SHARED_CHECK_OFF;
    else if (!strcmp(v, "bounds"))
        k = SHARED_CHECK_BOUNDS;
    else if (!strcmp(v, "race"))
        k = SHARED_CHECK_RACE;
    else
        return false;
    if (k != SHARED_CHECK_OFF && !access_hooks)
        return false;
    *out = k;
    return true;
}

sim_settings &settings()
{
    static sim_settings s = read_settings();
    return s;
}

const arch_limits *arch_find(int cc)
{
    for (const arch_limits &a : table)
        if (a.cc == cc)
            return &a;
    return nullptr;
}

const arch_limits &arch() { return *arch_find(settings().arch); }

void arch_list(std::string *out)
{
    *out = "one of";
    for (const arch_limits &a : table) {
        char b[16];
        snprintf(b, sizeof b, " sm_%d", a.cc);
        *out += b;
    }
}

void diag(const char *fmt, ...)
{
    if (settings().quiet)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cudasim: %s\n", buf);
}

} // namespace cudasim
