/* The inline PTX the simulated device runs, as kernels reach it: gen_cu.py
 * (through gen_asm.py) rewrites each `asm [volatile] ("template" : outputs :
 * inputs [: clobbers]);` of a .cu into
 *
 *   { static const ::cudasim::ptx_insn cudasim_ptx_("template", __FILE__, __LINE__);
 *     cudasim_ptx_.run({::cudasim::ptx_op("=f", d0), ..., ::cudasim::ptx_op("r", a0)}); }
 *
 * so the template is read once per call site and each thread's operands
 * (outputs first, then inputs, in the %N order of the template) pass by
 * address. dev/cudasim/ptx.cpp reads the template and runs the instruction:
 *   mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 and
 *   mma.sync.aligned.m16n8k8.row.col.f32.{bf16,f16}.{bf16,f16}.f32,
 *   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared[::cta].b16,
 *   cp.async.{ca,cg}.shared[::cta].global [dst], [src], size[, src-size],
 *   cp.async.commit_group, cp.async.wait_group N, cp.async.wait_all,
 * with the fragment layouts and thread-to-row mappings of the PTX ISA; any
 * other instruction stops the kernel saying so (cudaErrorLaunchFailure).
 * Shared memory is addressed as on a GPU: __cvta_generic_to_shared gives a
 * 32-bit offset into the block's shared window, which these instructions
 * take as [%n]. Not for product code: only gen_cu.py's output includes it
 * (through device.h). */
#ifndef CUDASIM_PTX_H
#define CUDASIM_PTX_H

#include <stddef.h>
#include <stdint.h>

#include <initializer_list>
#include <type_traits>

namespace cudasim {

/* One operand of an asm statement: its constraint ("=r", "+f", "l", "n"...)
 * and where its value lives for the duration of the statement (an input's
 * temporary lives to the end of the full expression that runs it). */
struct ptx_arg {
    const char *constraint;
    void *addr;
    unsigned size;
};

template <class T> inline ptx_arg ptx_op(const char *constraint, T &&x)
{
    using V = typename std::remove_reference<T>::type;
    static_assert(sizeof(V) == 2 || sizeof(V) == 4 || sizeof(V) == 8, "an asm operand is a 16-, 32- or 64-bit value");
    return ptx_arg{constraint, const_cast<void *>(static_cast<const void *>(&x)), (unsigned)sizeof(V)};
}

/* One asm statement's template, read once (an unreadable or unsupported one
 * is remembered, and stops the kernel when a thread runs it). */
class ptx_insn {
public:
    ptx_insn(const char *tmpl, const char *file, int line);
    void run(std::initializer_list<ptx_arg> ops) const;

    enum op_kind { BAD, MMA, LDMATRIX, CP_ASYNC, COMMIT_GROUP, WAIT_GROUP, WAIT_ALL };
    struct operand {
        int kind;     /* 0 a %N register, 1 a {...} vector of them, 2 an [%N] address, 3 an immediate */
        int first;    /* %N of a register or an address; the first of a vector */
        int count;    /* registers in a vector */
        int regs[4];  /* a vector's %N, in order */
        long imm;     /* an immediate's value */
    };

    op_kind kind;
    const char *text, *file;
    int line;
    char error[160]; /* why the template cannot run, when kind is BAD */
    /* mma */
    int m, n, k, bf16;
    /* ldmatrix */
    int matrices, trans;
    /* cp.async */
    int cache_global; /* .cg */
    int noperands;
    operand ops[5];
};

/* The 32-bit offset of a shared-memory pointer in the block's shared window
 * (stops the kernel when p is not in it). */
uint32_t shared_offset(const void *p, const char *file, int line);

} // namespace cudasim

/* The toolkit declares it for nvcc only. */
inline size_t __cvta_generic_to_shared(const void *p, const char *file = __builtin_FILE(), int line = __builtin_LINE())
{
    return ::cudasim::shared_offset(p, file, line);
}

#endif
