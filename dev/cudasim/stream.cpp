/* Streams, events and host functions of the simulated device.
 *
 * A stream is an OS thread running its queue in order; nothing a stream runs
 * waits for another stream unless an event says so (cudaStreamWaitEvent), or
 * the legacy default stream's implicit synchronization with blocking streams
 * does. With FERRY_CUDASIM_DELAY_US each operation of a stream starts after
 * a seeded random delay, so work on different streams interleaves
 * differently from run to run of the seed: a missing event wait between
 * the compute, upload and drain streams becomes a wrong result.
 *
 * An event records the stream's work so far; an event never recorded is
 * complete; cudaEventQuery of unfinished work is cudaErrorNotReady (which,
 * as on CUDA, also becomes the calling thread's last error). Elapsed time
 * needs two completed events created without cudaEventDisableTiming.
 * Host functions (cudaLaunchHostFunc) run on one callback thread for the
 * whole process, as CUDA's do, in stream order; a CUDA call from one is
 * refused with cudaErrorNotPermitted. Each host wait is counted, and counted
 * as a spinning one unless the event was made with cudaEventBlockingSync or
 * the device flags ask for blocking sync (cudasim_stats). */
#include <time.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "cudasim.h"
#include "sim.h"

namespace cudasim {

struct sim_stream {
    unsigned flags;
    bool legacy;
    int id;
    uint64_t rng;
    std::mutex mu;
    std::condition_variable cv, idle;
    std::deque<stream_op> q;
    uint64_t submitted = 0, finished = 0;
    bool quit = false;
};

struct sim_event {
    unsigned flags;
    std::mutex mu;
    std::condition_variable cv;
    uint64_t recorded = 0, completed = 0;
    std::chrono::steady_clock::time_point when;
};

namespace {

struct registry {
    std::mutex mu;
    std::map<sim_stream *, std::shared_ptr<sim_stream>> streams;
    std::map<sim_event *, std::shared_ptr<sim_event>> events;
    std::shared_ptr<sim_stream> legacy;
    int next_id = 1;
};

registry &reg()
{
    static registry *r = new registry; /* outlives the detached stream threads */
    return *r;
}

std::atomic<uint64_t> g_stats[STAT_COUNT];

uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void worker(std::shared_ptr<sim_stream> s)
{
    std::unique_lock<std::mutex> g(s->mu);
    for (;;) {
        s->cv.wait(g, [&] { return !s->q.empty() || s->quit; });
        if (s->q.empty())
            break;
        stream_op op = std::move(s->q.front());
        s->q.pop_front();
        g.unlock();
        unsigned delay = settings().delay_us;
        if (delay) {
            struct timespec ts = {0, (long)(next_rand(&s->rng) % delay) * 1000};
            nanosleep(&ts, nullptr);
        }
        if (op.always || sticky() == cudaSuccess)
            op.run();
        op.run = nullptr; /* what it captured goes now, not at the next op */
        g.lock();
        s->finished++;
        s->idle.notify_all();
    }
}

std::shared_ptr<sim_stream> make_stream(unsigned flags, bool legacy)
{
    auto s = std::make_shared<sim_stream>();
    s->flags = flags;
    s->legacy = legacy;
    {
        std::lock_guard<std::mutex> g(reg().mu);
        s->id = reg().next_id++;
    }
    s->rng = settings().seed * 0x9E3779B97F4A7C15ull + (uint64_t)s->id;
    std::thread(worker, s).detach();
    return s;
}

sim_stream *legacy_stream()
{
    registry &r = reg();
    std::lock_guard<std::mutex> g(r.mu);
    if (!r.legacy) {
        r.mu.unlock();
        auto s = make_stream(cudaStreamDefault, true);
        r.mu.lock();
        if (!r.legacy)
            r.legacy = s;
        else {
            std::lock_guard<std::mutex> sg(s->mu);
            s->quit = true;
            s->cv.notify_all();
        }
    }
    return r.legacy.get();
}

void wait_idle(sim_stream *s, uint64_t target)
{
    std::unique_lock<std::mutex> g(s->mu);
    s->idle.wait(g, [&] { return s->finished >= target; });
}

uint64_t submitted(sim_stream *s)
{
    std::lock_guard<std::mutex> g(s->mu);
    return s->submitted;
}

sim_event *event_of(cudaEvent_t h, std::shared_ptr<sim_event> *keep)
{
    registry &r = reg();
    std::lock_guard<std::mutex> g(r.mu);
    auto it = r.events.find(reinterpret_cast<sim_event *>(h));
    if (it == r.events.end())
        return nullptr;
    if (keep)
        *keep = it->second;
    return it->first;
}

/* ---- the callback thread ---- */
struct host_call {
    cudaHostFn_t fn;
    void *data;
    bool done = false;
};

thread_local bool tl_callback;
std::mutex *g_cb_mu = new std::mutex;
std::condition_variable *g_cb_cv = new std::condition_variable;
std::deque<host_call *> *g_cb_q = new std::deque<host_call *>;
bool g_cb_started = false;

void callback_loop()
{
    tl_callback = true;
    std::unique_lock<std::mutex> g(*g_cb_mu);
    for (;;) {
        g_cb_cv->wait(g, [] { return !g_cb_q->empty(); });
        host_call *c = g_cb_q->front();
        g_cb_q->pop_front();
        g.unlock();
        c->fn(c->data);
        g.lock();
        c->done = true;
        g_cb_cv->notify_all();
    }
}

void run_on_callback_thread(cudaHostFn_t fn, void *data)
{
    host_call c;
    c.fn = fn;
    c.data = data;
    std::unique_lock<std::mutex> g(*g_cb_mu);
    if (!g_cb_started) {
        std::thread(callback_loop).detach();
        g_cb_started = true;
    }
    g_cb_q->push_back(&c);
    g_cb_cv->notify_all();
    g_cb_cv->wait(g, [&] { return c.done; });
}

} // namespace

void stat_add(int which, uint64_t n) { g_stats[which] += n; }
uint64_t stat_counter(int which) { return g_stats[which].load(); }

bool on_callback_thread() { return tl_callback; }

sim_stream *stream_of(cudaStream_t h, cudaError_t *err)
{
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread)
        return legacy_stream();
    registry &r = reg();
    std::lock_guard<std::mutex> g(r.mu);
    auto it = r.streams.find(reinterpret_cast<sim_stream *>(h));
    if (it == r.streams.end()) {
        *err = fail_msg(cudaErrorInvalidResourceHandle, "stream %p is not a live stream (destroyed, or never created)",
                        (void *)h);
        return nullptr;
    }
    return it->first;
}

void stream_enqueue(sim_stream *s, stream_op op)
{
    /* The legacy default stream and blocking streams wait for each other. */
    std::vector<std::pair<std::shared_ptr<sim_stream>, uint64_t>> deps;
    {
        registry &r = reg();
        std::lock_guard<std::mutex> g(r.mu);
        if (s->legacy) {
            for (auto &kv : r.streams)
                if (!(kv.first->flags & cudaStreamNonBlocking))
                    deps.emplace_back(kv.second, 0);
        } else if (!(s->flags & cudaStreamNonBlocking) && r.legacy) {
            deps.emplace_back(r.legacy, 0);
        }
    }
    for (auto &d : deps)
        d.second = submitted(d.first.get());
    if (!deps.empty()) {
        auto body = std::move(op.run);
        op.run = [deps, body] {
            for (auto &d : deps)
                wait_idle(d.first.get(), d.second);
            body();
        };
    }
    std::lock_guard<std::mutex> g(s->mu);
    s->q.push_back(std::move(op));
    s->submitted++;
    s->cv.notify_all();
}

cudaError_t stream_run_sync(sim_stream *s, const char *what, std::function<void()> fn)
{
    stream_enqueue(s, stream_op{what, std::move(fn)});
    wait_idle(s, submitted(s));
    cudaError_t e = sticky();
    return e == cudaSuccess ? e : fail(e);
}

void wait_all_streams()
{
    std::vector<std::shared_ptr<sim_stream>> all;
    {
        registry &r = reg();
        std::lock_guard<std::mutex> g(r.mu);
        for (auto &kv : r.streams)
            all.push_back(kv.second);
        if (r.legacy)
            all.push_back(r.legacy);
    }
    for (auto &s : all)
        wait_idle(s.get(), submitted(s.get()));
}

} // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags)
{
    cudaError_t e = api_enter("cudaStreamCreateWithFlags");
    if (e != cudaSuccess)
        return fail(e);
    if (!out || (flags & ~(unsigned)cudaStreamNonBlocking))
        return fail(cudaErrorInvalidValue);
    auto s = make_stream(flags, false);
    {
        std::lock_guard<std::mutex> g(reg().mu);
        reg().streams[s.get()] = s;
    }
    *out = reinterpret_cast<cudaStream_t>(s.get());
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *out) { return cudaStreamCreateWithFlags(out, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *out, unsigned flags, int priority)
{
    (void)priority;
    return cudaStreamCreateWithFlags(out, flags);
}

cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    cudaError_t e = api_enter("cudaStreamDestroy");
    if (e != cudaSuccess)
        return fail(e);
    std::shared_ptr<sim_stream> s;
    {
        std::lock_guard<std::mutex> g(reg().mu);
        auto it = reg().streams.find(reinterpret_cast<sim_stream *>(h));
        if (it == reg().streams.end())
            return fail_msg(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p): not a live stream", (void *)h);
        s = it->second;
        reg().streams.erase(it);
    }
    /* As CUDA: returns at once; the work already queued still runs. */
    std::lock_guard<std::mutex> g(s->mu);
    s->quit = true;
    s->cv.notify_all();
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    cudaError_t e = api_enter("cudaStreamSynchronize");
    if (e != cudaSuccess)
        return fail(e);
    sim_stream *s = stream_of(h, &e);
    if (!s)
        return fail(e);
    note_host_wait(false);
    wait_idle(s, submitted(s));
    e = sticky();
    return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaStreamQuery(cudaStream_t h)
{
    cudaError_t e = api_enter("cudaStreamQuery");
    if (e != cudaSuccess)
        return fail(e);
    sim_stream *s = stream_of(h, &e);
    if (!s)
        return fail(e);
    std::lock_guard<std::mutex> g(s->mu);
    return s->finished == s->submitted ? cudaSuccess : fail(cudaErrorNotReady);
}

cudaError_t cudaStreamGetDevice(cudaStream_t h, int *device)
{
    cudaError_t e = api_enter("cudaStreamGetDevice");
    if (e != cudaSuccess)
        return fail(e);
    if (!device)
        return fail(cudaErrorInvalidValue);
    if (!stream_of(h, &e))
        return fail(e);
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t e = api_enter("cudaDeviceSynchronize");
    if (e != cudaSuccess)
        return fail(e);
    note_host_wait(false);
    wait_all_streams();
    e = sticky();
    return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned flags)
{
    cudaError_t e = api_enter("cudaEventCreateWithFlags");
    if (e != cudaSuccess)
        return fail(e);
    const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if (!out || (flags & ~known) ||
        ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)))
        return fail(cudaErrorInvalidValue);
    auto ev = std::make_shared<sim_event>();
    ev->flags = flags;
    {
        std::lock_guard<std::mutex> g(reg().mu);
        reg().events[ev.get()] = ev;
    }
    *out = reinterpret_cast<cudaEvent_t>(ev.get());
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *out) { return cudaEventCreateWithFlags(out, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t h)
{
    cudaError_t e = api_enter("cudaEventDestroy");
    if (e != cudaSuccess)
        return fail(e);
    std::lock_guard<std::mutex> g(reg().mu);
    if (!reg().events.erase(reinterpret_cast<sim_event *>(h)))
        return fail_msg(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p): not a live event", (void *)h);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t h, cudaStream_t stream)
{
    cudaError_t e = api_enter("cudaEventRecord");
    if (e != cudaSuccess)
        return fail(e);
    std::shared_ptr<sim_event> ev;
    if (!event_of(h, &ev))
        return fail_msg(cudaErrorInvalidResourceHandle, "cudaEventRecord(%p): not a live event", (void *)h);
    sim_stream *s = stream_of(stream, &e);
    if (!s)
        return fail(e);
    uint64_t gen;
    {
        std::lock_guard<std::mutex> g(ev->mu);
        gen = ++ev->recorded;
    }
    stream_op op;
    op.what = "cudaEventRecord";
    op.always = true;
    op.run = [ev, gen] {
        std::lock_guard<std::mutex> g(ev->mu);
        if (ev->completed < gen) {
            ev->completed = gen;
            ev->when = std::chrono::steady_clock::now();
        }
        ev->cv.notify_all();
    };
    stream_enqueue(s, std::move(op));
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t h, unsigned flags)
{
    cudaError_t e = api_enter("cudaStreamWaitEvent");
    if (e != cudaSuccess)
        return fail(e);
    std::shared_ptr<sim_event> ev;
    if (!event_of(h, &ev))
        return fail_msg(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent(event %p): not a live event", (void *)h);
    if (flags & ~(unsigned)cudaEventWaitExternal)
        return fail(cudaErrorInvalidValue);
    sim_stream *s = stream_of(stream, &e);
    if (!s)
        return fail(e);
    uint64_t target;
    {
        std::lock_guard<std::mutex> g(ev->mu);
        target = ev->recorded; /* the work captured by the last record, as of now */
    }
    if (target == 0)
        return cudaSuccess;
    stream_op op;
    op.what = "cudaStreamWaitEvent";
    op.always = true;
    op.run = [ev, target] {
        std::unique_lock<std::mutex> g(ev->mu);
        ev->cv.wait(g, [&] { return ev->completed >= target; });
    };
    stream_enqueue(s, std::move(op));
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t h)
{
    cudaError_t e = api_enter("cudaEventQuery");
    if (e != cudaSuccess)
        return fail(e);
    sim_event *ev = event_of(h, nullptr);
    if (!ev)
        return fail_msg(cudaErrorInvalidResourceHandle, "cudaEventQuery(%p): not a live event", (void *)h);
    std::lock_guard<std::mutex> g(ev->mu);
    return ev->completed >= ev->recorded ? cudaSuccess : fail(cudaErrorNotReady);
}

cudaError_t cudaEventSynchronize(cudaEvent_t h)
{
    cudaError_t e = api_enter("cudaEventSynchronize");
    if (e != cudaSuccess)
        return fail(e);
    std::shared_ptr<sim_event> ev;
    if (!event_of(h, &ev))
        return fail_msg(cudaErrorInvalidResourceHandle, "cudaEventSynchronize(%p): not a live event", (void *)h);
    note_host_wait((ev->flags & cudaEventBlockingSync) != 0);
    {
        std::unique_lock<std::mutex> g(ev->mu);
        uint64_t target = ev->recorded;
        ev->cv.wait(g, [&] { return ev->completed >= target; });
    }
    e = sticky();
    return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    cudaError_t e = api_enter("cudaEventElapsedTime");
    if (e != cudaSuccess)
        return fail(e);
    std::shared_ptr<sim_event> a, b;
    if (!ms || !event_of(start, &a) || !event_of(end, &b))
        return fail(cudaErrorInvalidResourceHandle);
    if ((a->flags | b->flags) & cudaEventDisableTiming)
        return fail_msg(cudaErrorInvalidResourceHandle,
                        "cudaEventElapsedTime: an event was created with cudaEventDisableTiming");
    std::chrono::steady_clock::time_point ta, tb;
    {
        std::lock_guard<std::mutex> g(a->mu);
        if (a->recorded == 0)
            return fail(cudaErrorInvalidResourceHandle);
        if (a->completed < a->recorded)
            return fail(cudaErrorNotReady);
        ta = a->when;
    }
    {
        std::lock_guard<std::mutex> g(b->mu);
        if (b->recorded == 0)
            return fail(cudaErrorInvalidResourceHandle);
        if (b->completed < b->recorded)
            return fail(cudaErrorNotReady);
        tb = b->when;
    }
    *ms = std::chrono::duration<float, std::milli>(tb - ta).count();
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *data)
{
    cudaError_t e = api_enter("cudaLaunchHostFunc");
    if (e != cudaSuccess)
        return fail(e);
    if (!fn)
        return fail(cudaErrorInvalidValue);
    sim_stream *s = stream_of(stream, &e);
    if (!s)
        return fail(e);
    stream_op op;
    op.what = "cudaLaunchHostFunc";
    op.always = true; /* host code: it runs (and frees what it owns) after a device fault too */
    op.run = [fn, data] {
        stat_add(STAT_HOST_FUNCS);
        run_on_callback_thread(fn, data);
    };
    stream_enqueue(s, std::move(op));
    return cudaSuccess;
}

} /* extern "C" */
