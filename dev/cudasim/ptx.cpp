/* The inline PTX of ferry's kernels on the simulated device: reading an asm
 * statement's template (include/cudasim/ptx.h has how gen_cu.py hands it
 * over) and running it as the PTX ISA specifies. Owns the instructions'
 * semantics; the warp rendezvous, the block's shared memory and a thread's
 * failure are block.cpp's.
 *
 * - mma.sync.aligned.m16n8k16 / .m16n8k8, .row.col, f32 accumulators, bf16
 *   or f16 operands: all 32 lanes of the warp meet at the instruction (a
 *   lane missing, exited or at another instruction stops the kernel); the
 *   fragments are read with the layouts of the PTX ISA ("Matrix Fragments
 *   for mma.m16n8k16 / mma.m16n8k8 with floating point type"), groupID =
 *   lane >> 2 and threadID_in_group = lane % 4:
 *     A m16n8k16 (a0..a7, two to a register): row groupID for a0,a1,a4,a5,
 *       groupID + 8 for the others; col 2 threadID_in_group + (i & 1), + 8
 *       for a4..a7. A m16n8k8 (a0..a3): row groupID for a0,a1, + 8 for
 *       a2,a3; col 2 threadID_in_group + (i & 1).
 *     B m16n8k16 (b0..b3): row 2 threadID_in_group + (i & 1), + 8 for b2,b3;
 *       col groupID. B m16n8k8 (b0,b1): row 2 threadID_in_group + i.
 *     C, D (c0..c3): row groupID for c0,c1, + 8 for c2,c3; col
 *       2 threadID_in_group + (i & 1).
 *   The first element of a register is its low 16 bits. D = A B + C is
 *   summed in fp32 in k order (a tensor core's order and internal precision
 *   differ: docs/cudasim.md).
 * - ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16: lane 8i + r
 *   gives the address of row r of matrix i (16 bytes, 16-byte aligned, in
 *   the block's shared memory; lanes 8..31 are not read for .x1, 16..31 for
 *   .x2); lane l receives in register i, of matrix i, row l / 4, elements
 *   2 (l % 4) and 2 (l % 4) + 1 (.trans: column l / 4, rows 2 (l % 4) and
 *   2 (l % 4) + 1), the first in the low half.
 * - cp.async.{ca,cg}.shared.global [dst], [src], size[, src-size]: queued on
 *   the issuing thread, its destination filled with 0xff (NaN in every
 *   float type) until it completes, which is when that thread's
 *   cp.async.wait_group N leaves at most the N newest committed groups
 *   pending (cp.async.wait_all: every copy, committed or not), never
 *   earlier. So a thread that reads a destination before its wait, or
 *   another thread that reads it without a barrier after that wait, reads
 *   NaN. src-size below size reads src-size bytes and zero-fills the rest;
 *   the source must lie in device memory, both addresses be aligned to
 *   size (.cg: 16 only).
 * The warp's meeting is a __syncwarp of all 32 lanes (the simulator's own
 * checks of exited and missing lanes apply), each lane's operands left in a
 * per-warp table first, two tables alternating so one instruction's results
 * are read while the next one's operands arrive.
 * Architectures: bf16 operands and m16n8k16 need sm_80, m16n8k8 f16 and
 * ldmatrix sm_75, cp.async sm_80; on an older card the kernel stops with
 * cudaErrorNoKernelImageForDevice, as nvcc would not have compiled it.
 * The race check (block.cpp) sees ldmatrix's rows as reads of the lanes
 * that gave them, and a cp.async as its thread's write, in flight from the
 * issue to the wait that completes it. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "sim.h"

namespace cudasim {

namespace {

/* ---- reading a template ---- */

void set_error(ptx_insn *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void set_error(ptx_insn *in, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(in->error, sizeof in->error, fmt, ap);
    va_end(ap);
    in->kind = ptx_insn::BAD;
}

std::string trim(const std::string &s)
{
    size_t a = 0, b = s.size();
    while (a < b && isspace((unsigned char)s[a]))
        a++;
    while (b > a && isspace((unsigned char)s[b - 1]))
        b--;
    return s.substr(a, b - a);
}

std::vector<std::string> split(const std::string &s, char sep)
{
    std::vector<std::string> out;
    std::string cur;
    int depth = 0;
    for (char c : s) {
        if (c == '{' || c == '[')
            depth++;
        else if (c == '}' || c == ']')
            depth--;
        if (c == sep && depth == 0) {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    out.push_back(cur);
    return out;
}

/* "%12" -> 12, else -1. */
int reg_number(const std::string &s)
{
    if (s.size() < 2 || s[0] != '%')
        return -1;
    for (size_t i = 1; i < s.size(); i++)
        if (!isdigit((unsigned char)s[i]))
            return -1;
    return atoi(s.c_str() + 1);
}

bool read_operand(const std::string &text, ptx_insn::operand *op)
{
    std::string s = trim(text);
    memset(op, 0, sizeof *op);
    if (s.size() >= 2 && s.front() == '{' && s.back() == '}') {
        std::vector<std::string> regs = split(s.substr(1, s.size() - 2), ',');
        if (regs.size() > 4)
            return false;
        op->kind = 1;
        op->count = (int)regs.size();
        for (size_t i = 0; i < regs.size(); i++)
            if ((op->regs[i] = reg_number(trim(regs[i]))) < 0)
                return false;
        op->first = op->regs[0];
        return true;
    }
    if (s.size() >= 2 && s.front() == '[' && s.back() == ']') {
        op->kind = 2;
        op->first = reg_number(trim(s.substr(1, s.size() - 2)));
        return op->first >= 0;
    }
    if ((op->first = reg_number(s)) >= 0)
        return true;
    char *end = nullptr;
    op->imm = strtol(s.c_str(), &end, 0);
    op->kind = 3;
    return !s.empty() && end && *end == '\0';
}

void read_mma(ptx_insn *in, const std::vector<std::string> &w)
{
    /* mma sync aligned SHAPE row col f32 T T f32 */
    if (w.size() != 10 || w[1] != "sync" || w[2] != "aligned" || w[4] != "row" || w[5] != "col" || w[6] != "f32" ||
        w[9] != "f32" || w[7] != w[8] || (w[7] != "bf16" && w[7] != "f16") ||
        (w[3] != "m16n8k16" && w[3] != "m16n8k8"))
        return set_error(in, "the simulator runs mma.sync.aligned.{m16n8k16,m16n8k8}.row.col.f32.{bf16,f16}."
                         "{bf16,f16}.f32 only");
    in->kind = ptx_insn::MMA;
    in->m = 16;
    in->n = 8;
    in->k = w[3] == "m16n8k16" ? 16 : 8;
    in->bf16 = w[7] == "bf16";
    const int a_regs = in->k / 4, b_regs = in->k / 8;
    const ptx_insn::operand *o = in->ops;
    if (in->noperands != 4 || o[0].kind != 1 || o[0].count != 4 || o[1].kind != 1 || o[1].count != a_regs ||
        o[2].kind != 1 || o[2].count != b_regs || o[3].kind != 1 || o[3].count != 4)
        set_error(in, "%s takes {4 f32 registers}, {%d registers of A}, {%d of B}, {4 f32 registers}",
                  w[3].c_str(), a_regs, b_regs);
}

void read_ldmatrix(ptx_insn *in, const std::vector<std::string> &w)
{
    /* ldmatrix sync aligned m8n8 xN [trans] shared[::cta] b16 */
    size_t i = 5;
    in->trans = w.size() > 5 && w[5] == "trans";
    i += in->trans;
    if (w.size() != i + 2 || w[1] != "sync" || w[2] != "aligned" || w[3] != "m8n8" ||
        (w[4] != "x1" && w[4] != "x2" && w[4] != "x4") || (w[i] != "shared" && w[i] != "shared::cta") ||
        w[i + 1] != "b16")
        return set_error(in, "the simulator runs ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16 only");
    in->kind = ptx_insn::LDMATRIX;
    in->matrices = w[4][1] - '0';
    const ptx_insn::operand *o = in->ops;
    if (in->noperands != 2 || o[0].kind != 1 || o[0].count != in->matrices || o[1].kind != 2)
        set_error(in, "ldmatrix .x%d takes {%d registers}, [address]", in->matrices, in->matrices);
}

void read_cp_async(ptx_insn *in, const std::vector<std::string> &w)
{
    const ptx_insn::operand *o = in->ops;
    if (w.size() == 3 && w[2] == "commit_group") {
        in->kind = ptx_insn::COMMIT_GROUP;
        if (in->noperands != 0)
            set_error(in, "cp.async.commit_group takes no operand");
        return;
    }
    if (w.size() == 3 && w[2] == "wait_all") {
        in->kind = ptx_insn::WAIT_ALL;
        if (in->noperands != 0)
            set_error(in, "cp.async.wait_all takes no operand");
        return;
    }
    if (w.size() == 3 && w[2] == "wait_group") {
        in->kind = ptx_insn::WAIT_GROUP;
        if (in->noperands != 1 || (o[0].kind != 0 && o[0].kind != 3))
            set_error(in, "cp.async.wait_group takes one count");
        return;
    }
    /* cp async ca|cg shared[::cta] global */
    if (w.size() != 5 || (w[2] != "ca" && w[2] != "cg") || (w[3] != "shared" && w[3] != "shared::cta") ||
        w[4] != "global")
        return set_error(in, "the simulator runs cp.async.{ca,cg}.shared.global, .commit_group, .wait_group and "
                         ".wait_all only");
    in->kind = ptx_insn::CP_ASYNC;
    in->cache_global = w[2] == "cg";
    if ((in->noperands != 3 && in->noperands != 4) || o[0].kind != 2 || o[1].kind != 2 ||
        (o[2].kind != 0 && o[2].kind != 3) || (in->noperands == 4 && o[3].kind != 0 && o[3].kind != 3))
        set_error(in, "cp.async takes [shared destination], [global source], size[, source size]");
}

/* Reads the template into `in` (the constructor's work; a bad one sets
 * in->error). */
void read_template(ptx_insn *in, const char *tmpl)
{
    std::string s(tmpl);
    size_t semi = s.find(';');
    if (semi == std::string::npos || !trim(s.substr(semi + 1)).empty())
        return set_error(in, "one instruction ending in ';' is what the simulator reads from an asm template");
    s = trim(s.substr(0, semi));
    size_t sp = 0;
    while (sp < s.size() && !isspace((unsigned char)s[sp]))
        sp++;
    const std::string opcode = s.substr(0, sp), rest = trim(s.substr(sp));
    std::vector<std::string> w = split(opcode, '.');
    const bool cp_async = w[0] == "cp" && w.size() >= 3 && w[1] == "async";
    if (w[0] != "mma" && w[0] != "ldmatrix" && !cp_async)
        return set_error(in, "the simulator does not implement '%s' (dev/cudasim/ptx.cpp lists what it runs)",
                         opcode.c_str());
    if (!rest.empty()) {
        std::vector<std::string> parts = split(rest, ',');
        if (parts.size() > 5)
            return set_error(in, "more operands than any instruction the simulator runs");
        in->noperands = (int)parts.size();
        for (int i = 0; i < in->noperands; i++)
            if (!read_operand(parts[(size_t)i], &in->ops[i]))
                return set_error(in, "operand '%s' is not %%N, {%%N, ...}, [%%N] or a number",
                                 trim(parts[(size_t)i]).c_str());
    }
    if (w[0] == "mma")
        read_mma(in, w);
    else if (w[0] == "ldmatrix")
        read_ldmatrix(in, w);
    else
        read_cp_async(in, w);
}

} // namespace

ptx_insn::ptx_insn(const char *tmpl, const char *file_, int line_)
    : kind(BAD), text(tmpl), file(file_), line(line_), error(), m(0), n(0), k(0), bf16(0), matrices(0), trans(0),
      cache_global(0), noperands(0), ops()
{
    read_template(this, tmpl);
}

namespace {

/* ---- running it ---- */

[[noreturn]] void fault(cudaError_t e, const ptx_insn &in, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
[[noreturn]] void fault(cudaError_t e, const ptx_insn &in, const char *fmt, ...)
{
    char what[400], buf[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    /* The opcode, from a plain buffer: running_thread_fault does not return
     * and the thread's stack is abandoned, so nothing here may own heap
     * memory (a std::string would leak). */
    const char *t = in.text ? in.text : "";
    while (*t && isspace((unsigned char)*t))
        t++;
    const int op_len = (int)strcspn(t, " \t\n;");
    snprintf(buf, sizeof buf, "%.*s at %s:%d: %s", op_len, t, in.file ? in.file : "?", in.line, what);
    running_thread_fault(e, buf);
}

void need_arch(const ptx_insn &in, int cc, const char *what)
{
    if (arch().cc < cc)
        fault(cudaErrorNoKernelImageForDevice, in, "%s needs sm_%d or newer; this kernel would not compile for sm_%d",
              what, cc, arch().cc);
}

struct pending_copy {
    char *dst;
    const char *src;
    unsigned bytes, src_bytes;
    long group; /* -1 until committed */
    size_t off; /* dst's offset in shared memory */
    uintptr_t pc; /* where it was issued */
};

/* One warp's meeting: two alternating tables of the lanes' operands and the
 * results, which the first lane past the meeting computes for all. */
struct lane_slot {
    const ptx_insn *insn;
    uint64_t serial;
    uint32_t in[12];
    uint32_t addr;
    uintptr_t pc; /* the lane's call site, for the race check */
};

struct warp_table {
    lane_slot slot[2][32];
    uint64_t computed[2]; /* serial + 1 of the results held */
    uint32_t result[2][32][4];
};

/* What this OS thread's block has going: reset when another block starts. */
struct block_tables {
    uint64_t launch = ~0ull;
    uint3 block = {~0u, ~0u, ~0u};
    std::vector<warp_table> warps;
    std::vector<uint64_t> serial;                    /* per thread: warp instructions run */
    std::vector<std::vector<pending_copy>> copies;   /* per thread */
    std::vector<long> groups;                        /* per thread: groups committed */
    char *smem = nullptr;
    size_t smem_bytes = 0;
};

thread_local block_tables tl_tables;

struct me {
    int tid, lane, warp;
};

me who()
{
    const thread_ctx &t = cur("PTX");
    const int tid = (int)(t.thread_idx.x + t.block_dim.x * (t.thread_idx.y + t.block_dim.y * t.thread_idx.z));
    return me{tid, tid % 32, tid / 32};
}

block_tables &tables()
{
    const thread_ctx &t = cur("PTX");
    block_tables &b = tl_tables;
    char *base = nullptr;
    size_t bytes = 0;
    uint64_t launch = 0;
    running_shared_window(&base, &bytes, &launch);
    if (b.launch != launch || b.block.x != t.block_idx.x || b.block.y != t.block_idx.y ||
        b.block.z != t.block_idx.z) {
        const size_t n = (size_t)t.block_dim.x * t.block_dim.y * t.block_dim.z;
        b.launch = launch;
        b.block = t.block_idx;
        b.warps.assign((n + 31) / 32, warp_table());
        for (warp_table &w : b.warps)
            w.computed[0] = w.computed[1] = 0;
        b.serial.assign(n, 0);
        b.copies.assign(n, std::vector<pending_copy>());
        b.groups.assign(n, 0);
    }
    b.smem = base;
    b.smem_bytes = bytes;
    return b;
}

uint32_t u32(const ptx_arg &a) { uint32_t v = 0; memcpy(&v, a.addr, a.size < 4 ? a.size : 4); return v; }
uint64_t u64(const ptx_arg &a)
{
    uint64_t v = 0;
    memcpy(&v, a.addr, a.size < 8 ? a.size : 8);
    return v;
}

float from16(uint16_t h, bool bf16)
{
    if (bf16) {
        uint32_t w = (uint32_t)h << 16;
        float f;
        memcpy(&f, &w, 4);
        return f;
    }
    __half_raw r;
    r.x = h;
    return __half2float(__half(r));
}

/* The 16-bit element i of a lane's register array (two to a register, the
 * first in the low half). */
uint16_t half_of(const uint32_t *regs, int i) { return (uint16_t)(regs[i / 2] >> (16 * (i % 2))); }

void compute_mma(const ptx_insn &in, warp_table &w, int p)
{
    float A[16][16] = {}, B[16][8] = {}, C[16][8] = {};
    const int a_regs = in.k / 4, b_regs = in.k / 8;
    for (int l = 0; l < 32; l++) {
        const lane_slot &s = w.slot[p][l];
        const int g = l >> 2, t = l & 3;
        const uint32_t *a = s.in, *b = s.in + a_regs, *c = s.in + a_regs + b_regs;
        for (int i = 0; i < 2 * a_regs; i++) {
            const int row = in.k == 16 ? ((i < 2 || (i >= 4 && i < 6)) ? g : g + 8) : (i < 2 ? g : g + 8);
            const int col = t * 2 + (i & 1) + (in.k == 16 && i >= 4 ? 8 : 0);
            A[row][col] = from16(half_of(a, i), in.bf16);
        }
        for (int i = 0; i < 2 * b_regs; i++) {
            const int row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
            B[row][g] = from16(half_of(b, i), in.bf16);
        }
        for (int i = 0; i < 4; i++)
            memcpy(&C[i < 2 ? g : g + 8][t * 2 + (i & 1)], &c[i], 4);
    }
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        for (int i = 0; i < 4; i++) {
            const int row = i < 2 ? g : g + 8, col = t * 2 + (i & 1);
            float acc = C[row][col];
            for (int kk = 0; kk < in.k; kk++)
                acc += A[row][kk] * B[kk][col];
            memcpy(&w.result[p][l][i], &acc, 4);
        }
    }
}

/* A 16-byte row of shared memory at `off`, checked. */
const char *ld_row(const ptx_insn &in, const block_tables &b, uint32_t off, int lane)
{
    if (off % 16 != 0)
        fault(cudaErrorMisalignedAddress, in, "lane %d's row address 0x%x is not 16-byte aligned", lane, off);
    if ((size_t)off + 16 > b.smem_bytes)
        fault(cudaErrorIllegalAddress, in, "lane %d's row [0x%x, +16) is past the block's %zu bytes of shared memory",
              lane, off, b.smem_bytes);
    return b.smem + off;
}

void compute_ldmatrix(const ptx_insn &in, const block_tables &b, warp_table &w, int p, int warp)
{
    const char *rows[4][8];
    for (int i = 0; i < in.matrices; i++)
        for (int r = 0; r < 8; r++)
            rows[i][r] = ld_row(in, b, w.slot[p][8 * i + r].addr, 8 * i + r);
    /* each row a read of the lane that gave its address, checked as the
     * kernel's own reads are (bounds, races) */
    for (int i = 0; i < in.matrices; i++)
        for (int r = 0; r < 8; r++) {
            const lane_slot &s = w.slot[p][8 * i + r];
            shared_access_as(warp * 32 + 8 * i + r, s.addr, 16, false, s.pc);
        }
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        for (int i = 0; i < in.matrices; i++) {
            uint16_t lo, hi;
            if (!in.trans) {
                memcpy(&lo, rows[i][g] + 4 * t, 2);
                memcpy(&hi, rows[i][g] + 4 * t + 2, 2);
            } else {
                memcpy(&lo, rows[i][2 * t] + 2 * g, 2);
                memcpy(&hi, rows[i][2 * t + 1] + 2 * g, 2);
            }
            w.result[p][l][i] = (uint32_t)lo | (uint32_t)hi << 16;
        }
    }
}

/* The warp instructions: operands into the table, the meeting, the results. */
void run_warp_op(const ptx_insn &in, std::initializer_list<ptx_arg> ops, uintptr_t pc)
{
    block_tables &b = tables();
    const me m = who();
    if (m.warp >= (int)b.warps.size())
        fault(cudaErrorLaunchFailure, in, "a thread outside its block's warps");
    warp_table &w = b.warps[(size_t)m.warp];
    const uint64_t serial = b.serial[(size_t)m.tid]++;
    const int p = (int)(serial & 1);
    lane_slot &s = w.slot[p][m.lane];
    s.insn = &in;
    s.serial = serial;
    s.pc = pc;
    const ptx_arg *a = ops.begin();
    if (in.kind == ptx_insn::MMA) {
        int at = 0;
        for (int v = 1; v <= 3; v++) /* A, B, C, in that order */
            for (int r = 0; r < in.ops[v].count; r++)
                s.in[at++] = u32(a[in.ops[v].first + r]);
    } else {
        s.addr = u32(a[in.ops[1].first]);
    }
    ::cudasim::syncwarp(0xffffffffu, in.file, in.line);
    if (w.computed[p] != serial + 1) {
        for (int l = 0; l < 32; l++) {
            const lane_slot &o = w.slot[p][l];
            if (o.insn != &in || o.serial != serial)
                fault(cudaErrorIllegalInstruction, in,
                      "lane %d of warp %d did not run this instruction with the others (%s): a .sync.aligned "
                      "instruction needs all 32 lanes of the warp at the same instruction",
                      l, m.warp, o.insn ? (o.insn == &in ? "it is an instruction behind or ahead" :
                                           "it ran another one") : "it ran none");
        }
        if (in.kind == ptx_insn::MMA)
            compute_mma(in, w, p);
        else
            compute_ldmatrix(in, b, w, p, m.warp);
        w.computed[p] = serial + 1;
    }
    for (int r = 0; r < in.ops[0].count; r++)
        memcpy(a[in.ops[0].first + r].addr, &w.result[p][m.lane][r], 4);
}

void complete(pending_copy &c)
{
    if (c.src_bytes)
        memcpy(c.dst, c.src, c.src_bytes);
    memset(c.dst + c.src_bytes, 0, c.bytes - c.src_bytes);
    shared_copy_land(c.off, c.bytes, c.pc);
}

/* Completes the copies of `list` in groups <= `upto` (every copy when
 * `all`), in the order issued. */
void complete_upto(std::vector<pending_copy> &list, long upto, bool all)
{
    std::vector<pending_copy> keep;
    for (pending_copy &c : list) {
        if (all || (c.group >= 0 && c.group <= upto))
            complete(c);
        else
            keep.push_back(c);
    }
    list.swap(keep);
}

long value_of(const ptx_insn::operand &o, const ptx_arg *a) { return o.kind == 3 ? o.imm : (long)(int32_t)u32(a[o.first]); }

void run_cp_async(const ptx_insn &in, std::initializer_list<ptx_arg> ops, uintptr_t pc)
{
    need_arch(in, 80, "cp.async");
    block_tables &b = tables();
    const me m = who();
    std::vector<pending_copy> &list = b.copies[(size_t)m.tid];
    const ptx_arg *a = ops.begin();
    switch (in.kind) {
    case ptx_insn::COMMIT_GROUP: {
        const long g = ++b.groups[(size_t)m.tid];
        for (pending_copy &c : list)
            if (c.group < 0)
                c.group = g;
        return;
    }
    case ptx_insn::WAIT_ALL: complete_upto(list, 0, true); return;
    case ptx_insn::WAIT_GROUP: {
        const long n = value_of(in.ops[0], a);
        if (n < 0)
            fault(cudaErrorIllegalInstruction, in, "wait_group %ld: the count is not negative", n);
        complete_upto(list, b.groups[(size_t)m.tid] - n, false);
        return;
    }
    default: break;
    }
    const long bytes = value_of(in.ops[2], a);
    const long src_bytes = in.noperands == 4 ? value_of(in.ops[3], a) : bytes;
    if (bytes != 4 && bytes != 8 && bytes != 16)
        fault(cudaErrorIllegalInstruction, in, "copy size %ld; cp.async copies 4, 8 or 16 bytes", bytes);
    if (in.cache_global && bytes != 16)
        fault(cudaErrorIllegalInstruction, in, "cp.async.cg copies 16 bytes, not %ld", bytes);
    if (src_bytes < 0 || src_bytes > bytes)
        fault(cudaErrorIllegalInstruction, in, "source size %ld is outside [0, %ld]", src_bytes, bytes);
    const uint64_t dst_off = u64(a[in.ops[0].first]);
    const char *src = reinterpret_cast<const char *>(u64(a[in.ops[1].first]));
    if (dst_off % (uint64_t)bytes || (uintptr_t)src % (uintptr_t)bytes)
        fault(cudaErrorMisalignedAddress, in, "destination 0x%llx or source %p is not aligned to the %ld bytes "
              "copied", (unsigned long long)dst_off, (const void *)src, bytes);
    if (dst_off + (uint64_t)bytes > b.smem_bytes)
        fault(cudaErrorIllegalAddress, in, "destination [0x%llx, +%ld) is past the block's %zu bytes of shared "
              "memory", (unsigned long long)dst_off, bytes, b.smem_bytes);
    if (src_bytes > 0) {
        /* The reason moves to a plain buffer before the fault, which
         * abandons this stack (a std::string left on it would leak). */
        char why_buf[256] = "";
        {
            std::string why;
            if (!device_range_ok(src, (size_t)src_bytes, &why))
                snprintf(why_buf, sizeof why_buf, "%s", why.empty() ? "not device memory" : why.c_str());
        }
        if (why_buf[0])
            fault(cudaErrorIllegalAddress, in, "source [%p, +%ld): %s", (const void *)src, src_bytes, why_buf);
    }
    shared_copy_issue((size_t)dst_off, (size_t)bytes, pc);
    pending_copy c = {b.smem + dst_off, src, (unsigned)bytes, (unsigned)src_bytes, -1, (size_t)dst_off, pc};
    memset(c.dst, 0xff, c.bytes); /* undefined until the wait: NaN */
    list.push_back(c);
}

} // namespace

void ptx_insn::run(std::initializer_list<ptx_arg> args) const
{
    const uintptr_t pc = (uintptr_t)__builtin_return_address(0); /* the kernel's asm statement */
    if (kind == BAD)
        fault(cudaErrorLaunchFailure, *this, "%s", error);
    int need = 0;
    for (int i = 0; i < noperands; i++) {
        const operand &o = ops[i];
        if (o.kind == 1)
            for (int r = 0; r < o.count; r++)
                need = o.regs[r] + 1 > need ? o.regs[r] + 1 : need;
        else if (o.kind != 3)
            need = o.first + 1 > need ? o.first + 1 : need;
    }
    if ((int)args.size() != need)
        fault(cudaErrorLaunchFailure, *this, "the template names %d operands, the statement gives %zu", need,
              args.size());
    /* Outputs (= or +) exactly where the instruction writes: its first
     * operand of mma and ldmatrix, none of cp.async. */
    const int outs = kind == MMA ? 4 : kind == LDMATRIX ? matrices : 0;
    int i = 0;
    for (const ptx_arg &a : args) {
        const bool out = a.constraint[0] == '=' || a.constraint[0] == '+';
        if (out != (i < outs))
            fault(cudaErrorLaunchFailure, *this, "operand %%%d (\"%s\") %s", i, a.constraint,
                  out ? "is an output of an instruction that writes none there" : "is not an output");
        if (i < outs && a.size != 4)
            fault(cudaErrorLaunchFailure, *this, "operand %%%d is a %u-byte variable, the instruction writes 32 bits",
                  i, a.size);
        i++;
    }
    /* In a vector, %N count up from the first. */
    for (int k2 = 0; k2 < noperands; k2++)
        for (int r = 0; ops[k2].kind == 1 && r < ops[k2].count; r++)
            if (ops[k2].regs[r] != ops[k2].first + r)
                fault(cudaErrorLaunchFailure, *this, "a vector's registers are not %%N, %%N+1, ... in order");
    switch (kind) {
    case MMA:
        need_arch(*this, bf16 || k == 16 ? 80 : 75,
                  bf16 ? "mma.sync with bf16 operands" : "mma.sync.m16n8k16 with f16 operands");
        run_warp_op(*this, args, pc);
        break;
    case LDMATRIX:
        need_arch(*this, 75, "ldmatrix");
        run_warp_op(*this, args, pc);
        break;
    default: run_cp_async(*this, args, pc); break;
    }
}

uint32_t shared_offset(const void *p, const char *file, int line)
{
    char *base = nullptr;
    size_t bytes = 0;
    uint64_t launch = 0;
    running_shared_window(&base, &bytes, &launch);
    const char *c = static_cast<const char *>(p);
    if (c < base || c >= base + bytes) {
        char buf[256];
        snprintf(buf, sizeof buf, "__cvta_generic_to_shared at %s:%d: %p is not in the block's shared memory",
                 file ? file : "?", line, p);
        running_thread_fault(cudaErrorIllegalAddress, buf);
    }
    return (uint32_t)(c - base);
}

} // namespace cudasim
