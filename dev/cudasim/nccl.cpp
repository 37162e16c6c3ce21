/* A small NCCL for the simulated device, over MPI: the subset ferry's data
 * parallelism calls (communicators from a unique id, started blocking or not
 * (ncclCommInitRankConfig with config.blocking = 0), all-reduce,
 * reduce-scatter, all-gather and broadcast of fp32, bf16 and fp16 with sum,
 * groups, the asynchronous error, abort), with NCCL's semantics where a
 * program can see them:
 *   - a collective is ordered on its stream: it starts after the work
 *     submitted to the stream before it, later work starts after it, and the
 *     call returns at once;
 *   - in place is allowed as NCCL allows it (all-reduce and broadcast with
 *     send == recv, reduce-scatter with recv == send + rank x count,
 *     all-gather with send == recv + rank x count); any other overlap is
 *     refused;
 *   - ncclGroupStart/End defer the collectives of a group to its end;
 *   - every rank's collectives on a communicator run in the order they were
 *     issued; ranks that issue different collectives, counts, types or roots
 *     at the same position set the communicator's asynchronous error
 *     (ncclInvalidUsage, ncclCommGetAsyncError) where NCCL would hang or
 *     corrupt memory.
 * Each buffer must lie wholly in live device memory of the simulator
 * (ncclInvalidArgument otherwise). Sums of 16-bit types are taken in fp32 in
 * rank order and rounded once, the same on every rank (NCCL rounds at each
 * step of its ring: results may differ from a GPU's in the last bit).
 *
 * Each communicator has a proxy thread that makes its MPI calls, as NCCL has
 * one for its network; that needs MPI initialised with MPI_THREAD_MULTIPLE
 * when the program calls MPI itself. With less, the collective runs on the
 * calling thread once its stream has reached it: still ordered, but the call
 * blocks, which can deadlock a program that waits in MPI for a rank blocked
 * in a collective (docs/cudasim.md). MPI_COMM_WORLD is split by the unique
 * id, so every MPI process takes part in starting a communicator.
 *
 * A non-blocking start (config.blocking = 0) returns ncclInProgress at once
 * with the communicator, whose asynchronous error stays ncclInProgress
 * while a thread of its own splits MPI_COMM_WORLD and checks that the ranks
 * agree, then becomes ncclSuccess or the error; a collective on it before
 * then is ncclInvalidUsage. Its first collective returns ncclInProgress, as
 * NCCL's does while it connects (it is enqueued all the same), and the
 * asynchronous error says ncclInProgress once more before ncclSuccess, so a
 * caller must poll as it must on NCCL. A rank that never starts its side leaves the
 * others in progress for ever (the split waits for it), which is what a
 * caller's bounded poll is for; ncclCommAbort then leaves the starting
 * thread to MPI, as a dead peer leaves NCCL's. The program must not run
 * collectives of MPI_COMM_WORLD of its own while a start is in progress
 * (MPI forbids two at once on one communicator). */
/* MPI's C API only: its deprecated C++ bindings do not compile cleanly. */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <thread>

#include "sim.h"

namespace cudasim {

namespace {

enum coll { C_ALLREDUCE, C_REDUCESCATTER, C_ALLGATHER, C_BROADCAST };
const char *coll_names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast"};

struct comm_op;

} // namespace

} // namespace cudasim

struct ncclComm {
    MPI_Comm mpi;
    int rank, nranks;
    bool proxy; /* MPI calls on the proxy thread (MPI_THREAD_MULTIPLE) */
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::shared_ptr<cudasim::comm_op>> queue; /* issued, in order */
    uint64_t issued = 0;
    std::atomic<int> async_error{ncclSuccess};
    std::string async_message;
    bool quit = false, aborted = false;
    bool busy = false; /* the proxy is inside a collective (in MPI) */
    int stream_ops = 0; /* collectives whose stream has not finished its part (they hold the communicator) */
    std::thread thread;
    std::atomic<bool> starting{false}; /* a non-blocking start is under way on start_thread */
    std::thread start_thread;
    bool nonblocking = false, connected = false;
    std::atomic<int> pending_polls{0}; /* polls that still say ncclInProgress after a call returned it */
};

namespace cudasim {

namespace {

/* What every rank says about one collective, compared before it runs. */
struct op_meta {
    int32_t kind, type, op, root;
    uint64_t count, seq;
};

struct comm_op {
    op_meta meta;
    const void *send;
    void *recv;
    bool ready = false, done = false; /* the stream reached it; it ran */
};

thread_local int tl_group_depth = 0;
thread_local std::vector<std::function<ncclResult_t()>> tl_group;

std::mutex g_live_mu;
std::vector<ncclComm *> g_live;

size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclFloat32: return 4;
    case ncclBfloat16:
    case ncclFloat16: return 2;
    default: return 0;
    }
}

float load(const void *p, ncclDataType_t t, size_t i)
{
    switch (t) {
    case ncclBfloat16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    case ncclFloat16: return __half2float(static_cast<const __half *>(p)[i]);
    default: return static_cast<const float *>(p)[i];
    }
}

void store(void *p, ncclDataType_t t, size_t i, float v)
{
    switch (t) {
    case ncclBfloat16: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); break;
    case ncclFloat16: static_cast<__half *>(p)[i] = __float2half_rn(v); break;
    default: static_cast<float *>(p)[i] = v; break;
    }
}

ncclResult_t refuse(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t refuse(ncclResult_t r, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    diag("NCCL: %s (%s)", buf, ncclGetErrorString(r));
    return r;
}

bool live_comm(ncclComm *c)
{
    std::lock_guard<std::mutex> g(g_live_mu);
    for (ncclComm *x : g_live)
        if (x == c)
            return true;
    return false;
}

void set_async(ncclComm *c, ncclResult_t r, const std::string &msg)
{
    int expected = ncclSuccess;
    if (c->async_error.compare_exchange_strong(expected, (int)r)) {
        std::lock_guard<std::mutex> g(c->mu);
        c->async_message = msg;
        diag("NCCL rank %d: %s; the communicator's asynchronous error is now %s", c->rank, msg.c_str(),
             ncclGetErrorString(r));
    }
}

const size_t CHUNK = (size_t)16 << 20; /* bytes per MPI call, to bound the staging memory */

/* The collective itself, on one rank: every rank calls this in the same order. */
void run_collective(ncclComm *c, const comm_op &o)
{
    /* The ranks agree on what they do, or none does anything. */
    std::vector<op_meta> all((size_t)c->nranks);
    MPI_Allgather(&o.meta, sizeof o.meta, MPI_BYTE, all.data(), sizeof o.meta, MPI_BYTE, c->mpi);
    for (int r = 0; r < c->nranks; r++) {
        const op_meta &m = all[(size_t)r];
        if (m.kind != o.meta.kind || m.type != o.meta.type || m.count != o.meta.count || m.op != o.meta.op ||
            m.root != o.meta.root || m.seq != o.meta.seq) {
            char buf[512];
            snprintf(buf, sizeof buf, "collective %llu: rank %d called %s(count %llu, type %d, root %d) while rank %d "
                     "called %s(count %llu, type %d, root %d): every rank must issue the same collectives in the "
                     "same order", (unsigned long long)o.meta.seq, c->rank, coll_names[o.meta.kind],
                     (unsigned long long)o.meta.count, o.meta.type, o.meta.root, r, coll_names[m.kind],
                     (unsigned long long)m.count, m.type, m.root);
            set_async(c, ncclInvalidUsage, buf);
            return;
        }
    }
    const ncclDataType_t t = (ncclDataType_t)o.meta.type;
    const size_t es = type_size(t), n = (size_t)o.meta.count, P = (size_t)c->nranks;
    const size_t per = std::max<size_t>(1, CHUNK / es / P); /* elements per rank per round */
    const char *send = static_cast<const char *>(o.send);
    char *recv = static_cast<char *>(o.recv);
    switch (o.meta.kind) {
    case C_ALLREDUCE: {
        std::vector<char> gathered(per * es * P);
        for (size_t at = 0; at < n; at += per) {
            size_t m = std::min(per, n - at);
            std::vector<char> mine(send + at * es, send + (at + m) * es);
            MPI_Allgather(mine.data(), (int)(m * es), MPI_BYTE, gathered.data(), (int)(m * es), MPI_BYTE, c->mpi);
            for (size_t i = 0; i < m; i++) {
                float s = 0.0f;
                for (size_t r = 0; r < P; r++)
                    s += load(gathered.data() + r * m * es, t, i);
                store(recv + at * es, t, i, s);
            }
        }
        break;
    }
    case C_REDUCESCATTER: {
        /* Rank r receives every rank's r-th block and sums them. */
        std::vector<char> out(per * es * P), in(per * es * P);
        for (size_t at = 0; at < n; at += per) {
            size_t m = std::min(per, n - at);
            for (size_t r = 0; r < P; r++)
                memcpy(out.data() + r * m * es, send + (r * n + at) * es, m * es);
            MPI_Alltoall(out.data(), (int)(m * es), MPI_BYTE, in.data(), (int)(m * es), MPI_BYTE, c->mpi);
            for (size_t i = 0; i < m; i++) {
                float s = 0.0f;
                for (size_t r = 0; r < P; r++)
                    s += load(in.data() + r * m * es, t, i);
                store(recv + at * es, t, i, s);
            }
        }
        break;
    }
    case C_ALLGATHER: {
        std::vector<char> gathered(per * es * P);
        for (size_t at = 0; at < n; at += per) {
            size_t m = std::min(per, n - at);
            std::vector<char> mine(send + at * es, send + (at + m) * es);
            MPI_Allgather(mine.data(), (int)(m * es), MPI_BYTE, gathered.data(), (int)(m * es), MPI_BYTE, c->mpi);
            for (size_t r = 0; r < P; r++)
                memcpy(recv + (r * n + at) * es, gathered.data() + r * m * es, m * es);
        }
        break;
    }
    case C_BROADCAST: {
        if (c->rank == o.meta.root && send != recv)
            memmove(recv, send, n * es);
        for (size_t at = 0; at < n * es; at += CHUNK) {
            size_t m = std::min(CHUNK, n * es - at);
            MPI_Bcast(recv + at, (int)m, MPI_BYTE, o.meta.root, c->mpi);
        }
        break;
    }
    }
    stat_add(STAT_COLLECTIVES);
}

/* The proxy: runs the communicator's collectives in the order issued, each
 * once its stream has reached it. */
void proxy_loop(ncclComm *c)
{
    std::unique_lock<std::mutex> g(c->mu);
    for (;;) {
        c->cv.wait(g, [c] { return c->quit || (!c->queue.empty() && c->queue.front()->ready); });
        if (c->queue.empty() || !c->queue.front()->ready)
            break;
        std::shared_ptr<comm_op> o = c->queue.front();
        const bool run = c->async_error.load() == ncclSuccess && !c->aborted;
        c->busy = run;
        g.unlock();
        if (run)
            run_collective(c, *o);
        g.lock();
        c->busy = false;
        if (!c->queue.empty() && c->queue.front() == o)
            c->queue.pop_front();
        o->done = true;
        c->cv.notify_all();
    }
}

ncclResult_t check_range(const char *call, const char *what, const void *p, size_t bytes)
{
    if (bytes == 0)
        return ncclSuccess;
    std::string why;
    if (!p || !device_range_ok(p, bytes, &why))
        return refuse(ncclInvalidArgument, "%s: the %s (%zu bytes): %s", call, what, bytes,
                      p ? why.c_str() : "NULL");
    return ncclSuccess;
}

bool overlap(const void *a, size_t an, const void *b, size_t bn)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}

/* What an issued collective returns: ncclInProgress for the first of a
 * non-blocking communicator (NCCL connects then), with one poll of the
 * asynchronous error still saying so; ncclSuccess otherwise. */
ncclResult_t first_of_nonblocking(ncclComm *comm)
{
    std::lock_guard<std::mutex> g(comm->mu);
    if (!comm->nonblocking || comm->connected)
        return ncclSuccess;
    comm->connected = true;
    comm->pending_polls = 1;
    return ncclInProgress;
}

/* Checks and issues one collective (now, or at the end of the group). */
ncclResult_t issue(coll kind, const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                   int root, ncclComm_t comm, cudaStream_t stream)
{
    const char *call = coll_names[kind];
    if (!comm || !live_comm(comm))
        return refuse(ncclInvalidArgument, "%s: the communicator is not a live one", call);
    if (comm->starting.load() || comm->async_error.load() == ncclInProgress)
        return refuse(ncclInvalidUsage, "%s: the communicator is still starting (poll ncclCommGetAsyncError until it "
                      "is no longer ncclInProgress)", call);
    if (comm->aborted)
        return refuse(ncclInvalidUsage, "%s: the communicator was aborted", call);
    const size_t es = type_size(type);
    if (!es)
        return refuse(ncclInvalidArgument, "%s: data type %d; the stand-in has ncclFloat32, ncclBfloat16 and "
                      "ncclFloat16", call, (int)type);
    if (kind != C_ALLGATHER && kind != C_BROADCAST && op != ncclSum)
        return refuse(ncclInvalidArgument, "%s: reduction %d; the stand-in has ncclSum", call, (int)op);
    if (kind == C_BROADCAST && (root < 0 || root >= comm->nranks))
        return refuse(ncclInvalidArgument, "%s: root %d of %d ranks", call, root, comm->nranks);
    const size_t P = (size_t)comm->nranks, b = count * es;
    const size_t send_bytes = kind == C_REDUCESCATTER ? b * P : b, recv_bytes = kind == C_ALLGATHER ? b * P : b;
    ncclResult_t r;
    const bool send_used = kind != C_BROADCAST || comm->rank == root;
    if ((send_used && (r = check_range(call, "send buffer", send, send_bytes)) != ncclSuccess) ||
        (r = check_range(call, "receive buffer", recv, recv_bytes)) != ncclSuccess)
        return r;
    if (count && send_used && send != recv && overlap(send, send_bytes, recv, recv_bytes)) {
        const bool in_place = (kind == C_REDUCESCATTER &&
                               static_cast<const char *>(send) + comm->rank * b == static_cast<char *>(recv)) ||
                              (kind == C_ALLGATHER &&
                               static_cast<const char *>(send) == static_cast<char *>(recv) + comm->rank * b);
        if (!in_place)
            return refuse(ncclInvalidArgument, "%s: the send and receive buffers overlap other than in place", call);
    }
    cudaError_t e = cudaSuccess;
    sim_stream *s = stream_of(stream, &e);
    if (!s)
        return refuse(ncclInvalidArgument, "%s: the stream is not a live one", call);
    auto o = std::make_shared<comm_op>();
    o->meta = op_meta{(int32_t)kind, (int32_t)type, (int32_t)op, kind == C_BROADCAST ? root : 0, count, 0};
    o->send = send;
    o->recv = recv;
    {
        std::lock_guard<std::mutex> g(comm->mu);
        o->meta.seq = comm->issued++;
        if (comm->proxy) {
            comm->queue.push_back(o);
            comm->stream_ops++;
        }
    }
    if (comm->proxy) {
        stream_op so;
        so.what = call;
        so.always = true; /* every rank must take part, even after a local device fault */
        so.run = [comm, o] {
            std::unique_lock<std::mutex> g(comm->mu);
            o->ready = true;
            comm->cv.notify_all();
            comm->cv.wait(g, [&] { return o->done; });
            comm->stream_ops--;
            comm->cv.notify_all();
        };
        stream_enqueue(s, std::move(so));
        return first_of_nonblocking(comm);
    }
    /* No proxy: wait for the stream, then run it here. */
    if (stream_run_sync(s, call, [] {}) != cudaSuccess)
        return refuse(ncclUnhandledCudaError, "%s: the device failed before the collective", call);
    if (comm->async_error.load() == ncclSuccess)
        run_collective(comm, *o);
    return first_of_nonblocking(comm);
}

ncclResult_t issue_or_defer(coll kind, const void *send, void *recv, size_t count, ncclDataType_t type,
                            ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    if (int f = injected_fault(coll_names[kind]))
        return (ncclResult_t)f;
    if (tl_group_depth > 0) {
        tl_group.push_back([=] { return issue(kind, send, recv, count, type, op, root, comm, stream); });
        return ncclSuccess;
    }
    return issue(kind, send, recv, count, type, op, root, comm, stream);
}

void stop_proxy(ncclComm *c)
{
    {
        std::lock_guard<std::mutex> g(c->mu);
        c->quit = true;
        c->cv.notify_all();
    }
    if (c->thread.joinable())
        c->thread.join();
}

/* MPI, initialised here when the program has not (a program using NCCL
 * alone, as at world size 1, never calls MPI): with every thread allowed to
 * call it, and finalised at exit, as a launcher expects. */
bool mpi_ready()
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited)
        return !finalized;
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return false;
    atexit([] {
        int done = 0;
        MPI_Finalized(&done);
        if (!done)
            MPI_Finalize();
    });
    return true;
}

} // namespace
} // namespace cudasim

using namespace cudasim;

extern "C" {

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return "";
}

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return refuse(ncclInvalidArgument, "ncclGetUniqueId(NULL)");
    if (int f = injected_fault("ncclGetUniqueId"))
        return (ncclResult_t)f;
    memset(id, 0, sizeof *id);
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(id->internal, 1, 16, f) : 0;
    if (f)
        fclose(f);
    if (got != 16)
        return refuse(ncclSystemError, "ncclGetUniqueId: /dev/urandom could not be read");
    snprintf(id->internal + 16, sizeof id->internal - 16, "cudasim pid %d", (int)getpid());
    return ncclSuccess;
}

} /* extern "C" */

namespace cudasim {
namespace {

/* The start of communicator c: the split of MPI_COMM_WORLD by the unique
 * id, the ranks' agreement, the proxy. Every rank that shares the id must
 * come here. */
ncclResult_t start_comm(ncclComm *c, int nranks, ncclUniqueId id, int rank)
{
    uint64_t h = 1469598103934665603ull;
    for (char ch : id.internal)
        h = (h ^ (unsigned char)ch) * 1099511628211ull;
    MPI_Comm split;
    if (MPI_Comm_split(MPI_COMM_WORLD, (int)(h & 0x3fffffff), rank, &split) != MPI_SUCCESS)
        return refuse(ncclSystemError, "starting a communicator: MPI_Comm_split failed");
    int size = 0, me = 0;
    MPI_Comm_size(split, &size);
    MPI_Comm_rank(split, &me);
    /* Every rank learns whether all agree, so all fail or none. */
    int agree = size == nranks && me == rank, all = 0;
    MPI_Allreduce(&agree, &all, 1, MPI_INT, MPI_LAND, split);
    if (!all) {
        MPI_Comm_free(&split);
        return refuse(ncclInvalidArgument, "starting a communicator: %d processes share this unique id, but rank %d "
                      "was told nranks %d (each rank's number must be unique and below nranks)", size, rank, nranks);
    }
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    c->mpi = split;
    c->proxy = provided == MPI_THREAD_MULTIPLE;
    if (c->proxy)
        c->thread = std::thread(proxy_loop, c);
    else
        diag("NCCL rank %d: MPI was initialised without MPI_THREAD_MULTIPLE: collectives run on the calling "
             "thread and the call blocks", rank);
    return ncclSuccess;
}

/* The checks every start makes before it begins. */
ncclResult_t check_start(const char *call, ncclComm_t *out, int nranks, int rank)
{
    if (!out)
        return refuse(ncclInvalidArgument, "%s: comm is NULL", call);
    *out = nullptr;
    if (int f = injected_fault(call))
        return (ncclResult_t)f;
    if (!mpi_ready())
        return refuse(ncclInvalidUsage, "%s: MPI is not initialised and could not be: the simulated device's NCCL "
                      "rides on MPI; run the ranks with mpirun", call);
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return refuse(ncclInvalidArgument, "%s: rank %d of %d", call, rank, nranks);
    return ncclSuccess;
}

ncclComm *new_comm(int nranks, int rank)
{
    ncclComm *c = new ncclComm;
    c->mpi = MPI_COMM_NULL;
    c->rank = rank;
    c->nranks = nranks;
    return c;
}

void make_live(ncclComm *c)
{
    std::lock_guard<std::mutex> g(g_live_mu);
    g_live.push_back(c);
}

} // namespace
} // namespace cudasim

extern "C" {

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
    ncclResult_t r = check_start("ncclCommInitRank", out, nranks, rank);
    if (r != ncclSuccess)
        return r;
    ncclComm *c = new_comm(nranks, rank);
    if ((r = start_comm(c, nranks, id, rank)) != ncclSuccess) {
        delete c;
        return r;
    }
    make_live(c);
    *out = c;
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config)
{
    const char *call = "ncclCommInitRankConfig";
    bool blocking = true;
    if (config) {
        if (config->size != sizeof(ncclConfig_t) || config->magic != 0xcafebeef)
            return refuse(ncclInvalidArgument, "%s: the config was not made with NCCL_CONFIG_INITIALIZER (size %zu, "
                          "magic 0x%x)", call, config->size, config->magic);
        if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1)
            return refuse(ncclInvalidArgument, "%s: config.blocking %d; 0 or 1", call, config->blocking);
        blocking = config->blocking != 0;
    }
    ncclResult_t r = check_start(call, out, nranks, rank);
    if (r != ncclSuccess)
        return r;
    ncclComm *c = new_comm(nranks, rank);
    if (blocking) {
        if ((r = start_comm(c, nranks, id, rank)) != ncclSuccess) {
            delete c;
            return r;
        }
        make_live(c);
        *out = c;
        return ncclSuccess;
    }
    /* Non-blocking: the communicator at once, its start on a thread. */
    c->nonblocking = true;
    c->async_error = ncclInProgress;
    c->starting = true;
    make_live(c);
    c->start_thread = std::thread([c, nranks, id, rank] {
        ncclResult_t res = start_comm(c, nranks, id, rank);
        c->async_error = (int)res;
        c->starting = false;
    });
    *out = c;
    return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
    if (!comm || !err || !live_comm(comm))
        return refuse(ncclInvalidArgument, "ncclCommGetAsyncError: not a live communicator, or err is NULL");
    *err = (ncclResult_t)comm->async_error.load();
    int pending = comm->pending_polls.load();
    while (*err == ncclSuccess && pending > 0 && !comm->pending_polls.compare_exchange_weak(pending, pending - 1)) {
    }
    if (*err == ncclSuccess && pending > 0)
        *err = ncclInProgress;
    return ncclSuccess;
}

static ncclResult_t end_comm(ncclComm_t comm, bool abort_it)
{
    const char *call = abort_it ? "ncclCommAbort" : "ncclCommDestroy";
    if (!comm)
        return abort_it ? ncclSuccess : refuse(ncclInvalidArgument, "%s(NULL)", call);
    {
        std::lock_guard<std::mutex> g(g_live_mu);
        auto it = std::find(g_live.begin(), g_live.end(), comm);
        if (it == g_live.end())
            return refuse(ncclInvalidArgument, "%s: not a live communicator (destroyed twice?)", call);
        g_live.erase(it);
    }
    if (comm->starting.load()) {
        if (!abort_it)
            return refuse(ncclInvalidUsage, "ncclCommDestroy: the communicator is still starting; abort it");
        /* The start waits in MPI for a rank that never came: left to it. */
        comm->aborted = true;
        comm->start_thread.detach();
        return ncclSuccess;
    }
    if (comm->start_thread.joinable())
        comm->start_thread.join();
    if (comm->async_error.load() != ncclSuccess && !comm->thread.joinable() && comm->mpi == MPI_COMM_NULL) {
        delete comm; /* a start that failed: nothing but the object */
        return ncclSuccess;
    }
    if (abort_it) {
        /* Collectives not yet run are dropped (their streams go on); one a
         * peer never joins keeps the proxy in MPI: then the communicator is
         * left to it, as a dead peer leaves NCCL's. Streams that have not
         * reached a dropped collective yet will touch the communicator when
         * they do: it is left to them too. */
        std::unique_lock<std::mutex> g(comm->mu);
        comm->aborted = true;
        for (auto &o : comm->queue)
            o->done = true;
        comm->queue.clear();
        comm->quit = true;
        comm->cv.notify_all();
        const bool busy = comm->busy, held = comm->stream_ops > 0;
        g.unlock();
        if (busy)
            comm->thread.detach();
        else if (held)
            stop_proxy(comm);
        if (busy || held)
            return ncclSuccess;
    } else {
        /* Destroy waits for what was issued: the streams reach it, the proxy
         * runs it, the streams let go of it. */
        std::unique_lock<std::mutex> g(comm->mu);
        comm->cv.wait(g, [comm] { return comm->queue.empty() && comm->stream_ops == 0; });
    }
    stop_proxy(comm);
    if (!abort_it)
        MPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) { return end_comm(comm, false); }

ncclResult_t ncclCommAbort(ncclComm_t comm) { return end_comm(comm, true); }

ncclResult_t ncclGroupStart(void)
{
    tl_group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (tl_group_depth == 0)
        return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--tl_group_depth > 0)
        return ncclSuccess;
    ncclResult_t first = ncclSuccess;
    std::vector<std::function<ncclResult_t()>> calls;
    calls.swap(tl_group);
    for (auto &f : calls) {
        ncclResult_t r = f();
        if (first == ncclSuccess)
            first = r;
    }
    return first;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream)
{
    return issue_or_defer(C_ALLREDUCE, send, recv, count, type, op, 0, comm, stream);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream)
{
    return issue_or_defer(C_REDUCESCATTER, send, recv, count, type, op, 0, comm, stream);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream)
{
    return issue_or_defer(C_ALLGATHER, send, recv, count, type, ncclSum, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream)
{
    return issue_or_defer(C_BROADCAST, send, recv, count, type, ncclSum, root, comm, stream);
}

} /* extern "C" */
