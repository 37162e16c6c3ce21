/* Fibers for the simulated device: one per CUDA thread, switched by a few
 * instructions of x86-64 assembly (the callee-saved registers, the x87
 * control word and MXCSR, the stack pointer; no signal mask, no system call,
 * unlike ucontext), on stacks mapped with a guard page below them, so an
 * overflow faults instead of corrupting a neighbour. Under AddressSanitizer
 * every switch is announced (__sanitizer_start_switch_fiber /
 * __sanitizer_finish_switch_fiber) and a reused stack is unpoisoned, so ASan
 * follows the fibers and stays clean. Owns no scheduling: block.cpp decides
 * who runs. */
#include <sys/mman.h>
#include <unistd.h>

#include <string.h>

#include "sim.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDASIM_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CUDASIM_ASAN 1
#endif

#ifdef CUDASIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "the simulated device's fiber switch is written for x86-64"
#endif

extern "C" void cudasim_switch(void **save_sp, void *to_sp);
extern "C" void cudasim_fiber_start();

/* cudasim_switch(save, to): push the callee-saved registers and the FPU
 * control state, store the stack pointer in *save, load `to`, pop, return
 * into the other context. cudasim_fiber_start is where a new fiber's first
 * return lands: it calls entry(arg) from r13/r12 and never returns (a fiber
 * ends by switching away for good). */
asm(R"(
    .text
    .globl cudasim_switch
    .type cudasim_switch, @function
cudasim_switch:
    .cfi_startproc
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    pushq %rbx
    .cfi_adjust_cfa_offset 8
    pushq %r12
    .cfi_adjust_cfa_offset 8
    pushq %r13
    .cfi_adjust_cfa_offset 8
    pushq %r14
    .cfi_adjust_cfa_offset 8
    pushq %r15
    .cfi_adjust_cfa_offset 8
    subq $16, %rsp
    .cfi_adjust_cfa_offset 16
    fnstcw (%rsp)
    stmxcsr 8(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    fldcw (%rsp)
    ldmxcsr 8(%rsp)
    addq $16, %rsp
    .cfi_adjust_cfa_offset -16
    popq %r15
    .cfi_adjust_cfa_offset -8
    popq %r14
    .cfi_adjust_cfa_offset -8
    popq %r13
    .cfi_adjust_cfa_offset -8
    popq %r12
    .cfi_adjust_cfa_offset -8
    popq %rbx
    .cfi_adjust_cfa_offset -8
    popq %rbp
    .cfi_adjust_cfa_offset -8
    ret
    .cfi_endproc
    .size cudasim_switch, .-cudasim_switch

    .globl cudasim_fiber_start
    .type cudasim_fiber_start, @function
cudasim_fiber_start:
    .cfi_startproc
    .cfi_undefined rip
    movq %r12, %rdi
    callq *%r13
    ud2
    .cfi_endproc
    .size cudasim_fiber_start, .-cudasim_fiber_start
)");

namespace cudasim {

bool stack_create(fiber_stack *s, size_t bytes)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    bytes = (bytes + page - 1) / page * page;
    size_t total = bytes + page;
    void *m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return false;
    if (mprotect(m, page, PROT_NONE) != 0) { /* the guard page below the stack */
        munmap(m, total);
        return false;
    }
    s->map = static_cast<char *>(m);
    s->map_bytes = total;
    s->lo = s->map + page;
    s->hi = s->map + total;
    return true;
}

void stack_destroy(fiber_stack *s)
{
#ifdef CUDASIM_ASAN
    /* The frames' redzones would outlive the mapping in ASan's shadow and
     * poison whatever is mapped there next. */
    if (s->lo)
        ASAN_UNPOISON_MEMORY_REGION(s->lo, (size_t)(s->hi - s->lo));
#endif
    if (s->map)
        munmap(s->map, s->map_bytes);
    memset(s, 0, sizeof *s);
}

void *fiber_prepare(fiber_stack *s, void (*entry)(void *), void *arg)
{
#ifdef CUDASIM_ASAN
    /* Frames of the thread that used this stack before may still be poisoned. */
    ASAN_UNPOISON_MEMORY_REGION(s->lo, (size_t)(s->hi - s->lo));
#endif
    /* After the switch pops 16 bytes of FPU state and six registers and
     * returns, rsp must be 16-byte aligned for cudasim_fiber_start's call. */
    uintptr_t top = ((uintptr_t)s->hi - 64) & ~(uintptr_t)15;
    uint64_t *sp = reinterpret_cast<uint64_t *>(top - 72);
    memset(sp, 0, 72);
    uint16_t fcw = 0x037f;     /* x87: round to nearest, all exceptions masked */
    uint32_t mxcsr = 0x1f80;   /* SSE: likewise, no flush-to-zero */
    memcpy(sp, &fcw, sizeof fcw);
    memcpy(reinterpret_cast<char *>(sp) + 8, &mxcsr, sizeof mxcsr);
    sp[2] = 0;                                          /* r15 */
    sp[3] = 0;                                          /* r14 */
    sp[4] = reinterpret_cast<uint64_t>(entry);          /* r13 */
    sp[5] = reinterpret_cast<uint64_t>(arg);            /* r12 */
    sp[6] = 0;                                          /* rbx */
    sp[7] = 0;                                          /* rbp */
    sp[8] = reinterpret_cast<uint64_t>(&cudasim_fiber_start);
    return sp;
}

void fiber_switch(void **save_sp, void *to_sp, const fiber_stack *to, void **fake_save, bool exiting)
{
#ifdef CUDASIM_ASAN
    __sanitizer_start_switch_fiber(exiting ? nullptr : fake_save, to->lo, (size_t)(to->hi - to->lo));
#else
    (void)to;
    (void)fake_save;
    (void)exiting;
#endif
    cudasim_switch(save_sp, to_sp);
}

void fiber_switched(void *fake_save, const void **from_lo, size_t *from_size)
{
#ifdef CUDASIM_ASAN
    __sanitizer_finish_switch_fiber(fake_save, from_lo, from_size);
#else
    (void)fake_save;
    if (from_lo)
        *from_lo = nullptr;
    if (from_size)
        *from_size = 0;
#endif
}

} // namespace cudasim
