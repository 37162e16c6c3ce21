/* Kernel launches on the simulated device, checked as a card checks them
 * before any thread runs, with the error a card gives:
 *   - a block of 0 or more than 1024 threads, x or y above 1024, z above 64,
 *     a grid dimension of 0, x at 2^31 or more, y or z above 65535:
 *     cudaErrorInvalidConfiguration;
 *   - more threads than the kernel's __launch_bounds__:
 *     cudaErrorLaunchOutOfResources;
 *   - dynamic shared memory above what the kernel may have: 48 KiB less its
 *     static shared memory, or the cudaFuncAttributeMaxDynamicSharedMemorySize
 *     it was given (at most the card's opt-in limit less its static shared
 *     memory): cudaErrorInvalidValue;
 *   - a stream that is not live: cudaErrorInvalidResourceHandle.
 * A refused launch sets the launching thread's last error (what
 * cudaGetLastError after <<<...>>> reports) and runs nothing. An accepted one
 * runs in stream order; when it ends, the device buffers' guards are
 * checked. Also the opt-in itself (cudaFuncSetAttribute), and the launch
 * log (FERRY_CUDASIM_LAUNCH_LOG): one line per kernel and launch shape a
 * process accepts, which tools/build/kernel_resources.py joins with each
 * kernel's registers and shared memory as compiled for each card. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "sim.h"

namespace cudasim {

namespace {

struct func_attrs {
    size_t max_dynamic_smem; /* 0: not set */
    long static_smem;        /* -1 until a launch has told */
};

std::mutex &attrs_mu()
{
    static std::mutex *m = new std::mutex;
    return *m;
}

std::map<const void *, func_attrs> &attrs()
{
    static auto *m = new std::map<const void *, func_attrs>;
    return *m;
}

std::atomic<uint64_t> g_seq{0};

/* FERRY_CUDASIM_PROFILE=1: time spent per kernel, printed at exit. */
struct profile_row {
    uint64_t launches = 0, blocks = 0, threads = 0;
    double seconds = 0;
};
std::mutex *g_prof_mu = new std::mutex;
std::map<std::string, profile_row> *g_prof = new std::map<std::string, profile_row>;
bool profiling()
{
    static const bool on = [] {
        const char *v = getenv("FERRY_CUDASIM_PROFILE");
        return v && *v && strcmp(v, "0");
    }();
    return on;
}

void print_profile()
{
    std::lock_guard<std::mutex> g(*g_prof_mu);
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (auto &kv : *g_prof) {
        rows.emplace_back(kv.second.seconds, kv.first);
        total += kv.second.seconds;
    }
    std::sort(rows.rbegin(), rows.rend());
    fprintf(stderr, "cudasim profile: %.3f s in kernels\n", total);
    for (auto &r : rows) {
        const profile_row &p = (*g_prof)[r.second];
        fprintf(stderr, "  %8.3f s %5.1f%%  %7llu launches %10llu blocks %12llu threads  %s\n", r.first,
                total > 0 ? 100 * r.first / total : 0.0, (unsigned long long)p.launches,
                (unsigned long long)p.blocks, (unsigned long long)p.threads, r.second.c_str());
    }
}

void note_profile(const launch_rec &L, double seconds)
{
    static std::once_flag once;
    std::call_once(once, [] { atexit(print_profile); });
    std::lock_guard<std::mutex> g(*g_prof_mu);
    profile_row &p = (*g_prof)[L.k.name];
    p.launches++;
    uint64_t blocks = (uint64_t)L.grid.x * L.grid.y * L.grid.z;
    p.blocks += blocks;
    p.threads += blocks * L.block.x * L.block.y * L.block.z;
    p.seconds += seconds;
}

cudaError_t refuse(const launch_site &site, const kernel_info &k, cudaError_t e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

cudaError_t refuse(const launch_site &site, const kernel_info &k, cudaError_t e, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    stat_add(STAT_REFUSALS);
    return fail_msg(e, "launch of %s at %s:%d refused, as an sm_%d card refuses it: %s", k.name ? k.name : site.kernel,
                    site.file, site.line, arch().cc, why);
}

/* The object holding code address `fn` and fn's address in it as its
 * symbol table has it (less the load base where the object is position
 * independent): with `nm`, the kernel's exact instantiation. */
void code_object(const void *fn, std::string *object, unsigned long *address)
{
    Dl_info di;
    *object = "?";
    *address = (unsigned long)(uintptr_t)fn;
    if (!dladdr(fn, &di) || !di.dli_fbase)
        return;
    if (reinterpret_cast<const ElfW(Ehdr) *>(di.dli_fbase)->e_type == ET_DYN)
        *address -= (unsigned long)(uintptr_t)di.dli_fbase;
    char exe[4096];
    ssize_t n;
    if (di.dli_fname && strchr(di.dli_fname, '/'))
        *object = di.dli_fname;
    else if ((n = readlink("/proc/self/exe", exe, sizeof exe - 1)) > 0)
        *object = std::string(exe, (size_t)n);
}

/* Adds "sm_NN<TAB>kernel<TAB>threads<TAB>dynamic bytes<TAB>launch bounds<TAB>
 * file:line<TAB>object<TAB>address<TAB>object's mtime" to the launch log, once
 * per distinct line in this process; each line is one write to a file opened
 * for appending, so the processes of a test run can share it. The mtime (in
 * seconds) tells the reader whether the object was relinked since, which
 * moves its kernels' addresses. */
void log_launch(const launch_site &site, const kernel_info &k, unsigned long long threads, size_t smem)
{
    static std::mutex mu;
    static std::set<std::string> seen;
    static int fd = -2;
    std::string object;
    unsigned long address = 0;
    code_object(k.fn, &object, &address);
    struct stat sb;
    const long long mtime = stat(object.c_str(), &sb) == 0 ? (long long)sb.st_mtime : 0;
    char line[4096 + 1024];
    snprintf(line, sizeof line, "sm_%d\t%s\t%llu\t%zu\t%d\t%s:%d\t%s\t0x%lx\t%lld\n", arch().cc, k.name, threads,
             smem, k.max_threads, site.file, site.line, object.c_str(), address, mtime);
    std::lock_guard<std::mutex> g(mu);
    if (!seen.insert(line).second)
        return;
    if (fd == -2) {
        fd = open(settings().launch_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            diag("cannot open the launch log %s: %s", settings().launch_log, strerror(errno));
    }
    if (fd >= 0 && write(fd, line, strlen(line)) != (ssize_t)strlen(line))
        diag("cannot add to the launch log %s: %s", settings().launch_log, strerror(errno));
}

} // namespace

size_t func_max_dynamic_smem(const void *fn)
{
    std::lock_guard<std::mutex> g(attrs_mu());
    auto it = attrs().find(fn);
    return it == attrs().end() ? 0 : it->second.max_dynamic_smem;
}

cudaError_t func_set_max_dynamic_smem(const void *fn, int bytes)
{
    const arch_limits &a = arch();
    std::lock_guard<std::mutex> g(attrs_mu());
    auto it = attrs().find(fn);
    long stat = it == attrs().end() ? -1 : it->second.static_smem;
    if (bytes < 0 || (size_t)bytes > a.smem_per_block_optin ||
        (stat >= 0 && (size_t)bytes + (size_t)stat > a.smem_per_block_optin))
        return fail_msg(cudaErrorInvalidValue,
                        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d): above the %zu bytes an sm_%d card "
                        "allows per block%s", bytes, a.smem_per_block_optin, a.cc,
                        stat > 0 ? " with the kernel's static shared memory" : "");
    if (it == attrs().end())
        it = attrs().emplace(fn, func_attrs{0, -1}).first;
    it->second.max_dynamic_smem = (size_t)bytes;
    return cudaSuccess;
}

void refuse_unprobed_launch(const launch_site &site)
{
    stat_add(STAT_REFUSALS);
    fail_msg(cudaErrorInvalidDeviceFunction, "launch of %s at %s:%d: the kernel has no simulator prologue (was its "
             "file rewritten by the simulator's build step?)", site.kernel, site.file, site.line);
}

void submit_launch(const launch_site &site, const kernel_info &k, dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, void *payload, void (*run)(void *), void (*destroy)(void *))
{
    cudaError_t e = api_enter("a kernel launch");
    if (e != cudaSuccess) {
        destroy(payload);
        return;
    }
    const arch_limits &a = arch();
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        threads > 1024)
        e = refuse(site, k, cudaErrorInvalidConfiguration, "a block of (%u,%u,%u) threads (at most 1024 in all; x, y "
                   "<= 1024, z <= 64)", block.x, block.y, block.z);
    else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        e = refuse(site, k, cudaErrorInvalidConfiguration, "a grid of (%u,%u,%u) blocks (x < 2^31, y and z <= 65535, "
                   "none 0)", grid.x, grid.y, grid.z);
    else if (k.max_threads > 0 && threads > (unsigned long long)k.max_threads)
        e = refuse(site, k, cudaErrorLaunchOutOfResources, "%llu threads per block, above the kernel's "
                   "__launch_bounds__(%d)", threads, k.max_threads);
    if (e == cudaSuccess) {
        size_t opt_in = 0;
        {
            std::lock_guard<std::mutex> g(attrs_mu());
            auto it = attrs().find(k.fn);
            if (it == attrs().end())
                it = attrs().emplace(k.fn, func_attrs{0, -1}).first;
            it->second.static_smem = (long)k.static_smem;
            opt_in = it->second.max_dynamic_smem;
        }
        const size_t dyn_limit = opt_in ? opt_in
                                 : a.smem_per_block > k.static_smem ? a.smem_per_block - k.static_smem
                                                                    : 0;
        if (k.static_smem > a.smem_per_block)
            e = refuse(site, k, cudaErrorInvalidValue, "%lu bytes of static shared memory, above 48 KiB",
                       k.static_smem);
        else if (smem > dyn_limit)
            e = refuse(site, k, cudaErrorInvalidValue,
                       "%zu bytes of dynamic shared memory with %lu static; without "
                       "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) a block may have 48 KiB in all%s",
                       smem, k.static_smem, opt_in ? "; the kernel was given less than this" : "");
        else if (k.static_smem + smem > a.smem_per_block_optin)
            e = refuse(site, k, cudaErrorInvalidValue, "%zu bytes of shared memory in all, above the %zu bytes an "
                       "sm_%d block may have", k.static_smem + smem, a.smem_per_block_optin, a.cc);
    }
    sim_stream *s = nullptr;
    if (e == cudaSuccess && !(s = stream_of(stream, &e))) {
        stat_add(STAT_REFUSALS);
    }
    if (e != cudaSuccess) {
        destroy(payload);
        return;
    }
    auto L = std::make_shared<launch_rec>();
    L->k = k;
    L->site = site;
    L->grid = grid;
    L->block = block;
    L->dyn_smem = smem;
    L->payload = payload;
    L->run = run;
    L->destroy = destroy;
    L->seq = g_seq++;
    stat_add(STAT_LAUNCHES);
    if (settings().launch_log)
        log_launch(site, k, threads, smem);
    stream_op op;
    op.what = "a kernel";
    op.always = true; /* so that the payload is freed after a fault too */
    op.run = [L] {
        if (sticky() == cudaSuccess) {
            stat_add(STAT_BLOCKS, (uint64_t)L->grid.x * L->grid.y * L->grid.z);
            const auto t0 = std::chrono::steady_clock::now();
            const bool ok = run_grid(L.get());
            if (profiling())
                note_profile(*L, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            if (ok) {
                char after[512];
                snprintf(after, sizeof after, "kernel %s (launched at %s:%d)", L->k.name, L->site.file, L->site.line);
                check_guards(after);
            }
        }
        L->destroy(L->payload);
    };
    stream_enqueue(s, std::move(op));
}

} // namespace cudasim
