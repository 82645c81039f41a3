/* emu.c: a host emulator of CUDA thread blocks for the kernel units (see
 * emu.h). One block at a time; its threads are coroutines run round-robin
 * until each reaches a barrier; a warp barrier releases when every live
 * thread of the warp is at one, the block barrier when every live thread of
 * the block is. A state where nothing can be released is a divergent
 * barrier: reported, and the launch fails.
 *
 * The coroutine switch: on x86-64 a hand-written one (emu_ctx_switch below:
 * the callee-saved registers, rsp, mxcsr and the x87 control word; no signal
 * mask, so no syscall), elsewhere (or with -DEMU_UCONTEXT) ucontext's
 * swapcontext, which makes an rt_sigprocmask syscall per switch. In a
 * process with the AddressSanitizer runtime (this file instrumented or not)
 * the switches are announced to it (__sanitizer_start_switch_fiber /
 * __sanitizer_finish_switch_fiber), so instrumented code on the coroutine
 * stacks is checked right, and the stacks of coroutines abandoned at a
 * divergent barrier are unpoisoned. Not for a
 * process running with the CET shadow stack enabled (the switch returns
 * onto another stack). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#if !defined(__x86_64__) && !defined(EMU_UCONTEXT)
#define EMU_UCONTEXT 1
#endif
#ifdef EMU_UCONTEXT
#include <ucontext.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
/* AddressSanitizer's fiber interface, weak: present when the process has
 * the ASan runtime, whether or not this file is instrumented (the fake
 * libcuda.so.1 is not, its users may be) */
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size) __attribute__((weak));
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old)
    __attribute__((weak));
void __asan_unpoison_memory_region(void const volatile *addr, size_t size) __attribute__((weak));
#include "half.h"
typedef struct emu_dim3 {
    unsigned x, y, z;
} emu_dim3; /* as in emu.h */

/* the entry points emu.h declares for the units */
const emu_dim3 *emu_threadIdx(void);
void emu_syncthreads(void);
float emu_shfl(float v, int arg, int xor_mode);
void emu_mma_m16n8k16(float *c, const unsigned *a, const unsigned *b, int f16);
float emu_f16_to_f32(unsigned short h);
unsigned short emu_f32_to_f16(float f);
unsigned short emu_f32_to_bf16(float f);
int emu_launch(void (*fn)(void **), void **params, const unsigned grid[3], const unsigned block[3], char *err,
               size_t nerr);
void emu_reset(void);

enum { ST_READY, ST_WARP, ST_BLOCK, ST_DONE, EMU_STACK = 256 * 1024, EMU_MAXT = 1024, EMU_MAXW = EMU_MAXT / 32 };

typedef struct EmuThread {
#ifdef EMU_UCONTEXT
    ucontext_t ctx;
#else
    void *sp; /* its stack pointer while switched out (emu_ctx_switch) */
#endif
    void *fake; /* ASan's fake stack of the coroutine while switched out */
    emu_dim3 tid;
    int state, lane, warp;
    int side; /* which half of the warp exchange buffers its next collective uses */
    char *stack;
} EmuThread;

emu_dim3 emu_blockIdx, emu_blockDim, emu_gridDim;
static EmuThread th[EMU_MAXT];
static int nth;
#ifdef EMU_UCONTEXT
static ucontext_t sched;
#else
static void *sched_sp;
#endif
static const void *sched_bottom; /* the scheduler's stack, as ASan told the coroutine it came from */
static size_t sched_size;
static EmuThread *cur;
static void (*cur_fn)(void **);
static void **cur_params;
/* barrier bookkeeping, kept up as the threads yield and finish, so that a
 * round costs what it runs: the block's live threads and those at
 * __syncthreads; per warp, its live threads and those at a collective */
static int n_live, n_block, w_live[EMU_MAXW], w_wait[EMU_MAXW];
static int runq[EMU_MAXT], nrun; /* the threads the next round runs, in index order */
/* The warp exchange buffers, two of each: a collective writes its lane's
 * slot of one side, waits once for the warp, reads the others' slots, and
 * the thread's next collective uses the other side. No lane can write a
 * side again before every lane has read it: that write comes after the
 * next collective's barrier, which every live lane reaches only after its
 * read. (One barrier per collective, not two: half the coroutine switches
 * of a shuffle reduction.) */
static float shfl[2][EMU_MAXT / 32][32];
static unsigned mA[2][EMU_MAXT / 32][32][4], mB[2][EMU_MAXT / 32][32][2];
static float mC[2][EMU_MAXT / 32][32][4];

#ifndef EMU_UCONTEXT
/* emu_ctx_switch(&save, to): pushes the callee-saved registers (System V
 * x86-64: rbp rbx r12-r15) and the control words (mxcsr, x87 cw) on the
 * current stack, stores rsp in *save, switches to the stack `to` (saved by
 * an earlier switch, or laid out by ctx_init) and pops the same from it.
 * emu_ctx_entry: where a fresh coroutine starts (ctx_init makes it the
 * return address): calls rbx(r12), which never returns. */
__attribute__((visibility("hidden"))) void emu_ctx_switch(void **save, void *to);
__attribute__((visibility("hidden"))) void emu_ctx_entry(void);
#if defined(__CET__)
#define EMU_ENDBR "endbr64\n\t"
#else
#define EMU_ENDBR ""
#endif
__asm__(".pushsection .text\n"
        ".p2align 4\n"
        ".globl emu_ctx_switch\n"
        ".hidden emu_ctx_switch\n"
        ".type emu_ctx_switch,@function\n"
        "emu_ctx_switch:\n\t" EMU_ENDBR
        "pushq %rbp\n\t"
        "pushq %rbx\n\t"
        "pushq %r12\n\t"
        "pushq %r13\n\t"
        "pushq %r14\n\t"
        "pushq %r15\n\t"
        "subq $8, %rsp\n\t"
        "stmxcsr (%rsp)\n\t"
        "fnstcw 4(%rsp)\n\t"
        "movq %rsp, (%rdi)\n\t"
        "movq %rsi, %rsp\n\t"
        "ldmxcsr (%rsp)\n\t"
        "fldcw 4(%rsp)\n\t"
        "addq $8, %rsp\n\t"
        "popq %r15\n\t"
        "popq %r14\n\t"
        "popq %r13\n\t"
        "popq %r12\n\t"
        "popq %rbx\n\t"
        "popq %rbp\n\t"
        "ret\n"
        ".size emu_ctx_switch, .-emu_ctx_switch\n"
        ".p2align 4\n"
        ".globl emu_ctx_entry\n"
        ".hidden emu_ctx_entry\n"
        ".type emu_ctx_entry,@function\n"
        "emu_ctx_entry:\n\t"
        ".cfi_startproc\n\t"
        ".cfi_undefined rip\n\t"
        "movq %r12, %rdi\n\t"
        "callq *%rbx\n\t"
        "ud2\n\t"
        ".cfi_endproc\n"
        ".size emu_ctx_entry, .-emu_ctx_entry\n"
        ".popsection\n");
#endif

/* the coroutine's first frame: nothing of it is left on the stack when the
 * coroutine is abandoned, so no ASan poison stays on a reused stack */
#ifdef EMU_ASAN
__attribute__((no_sanitize_address))
#endif
static void thread_entry(EmuThread *t);
#ifdef EMU_UCONTEXT
#ifdef EMU_ASAN
__attribute__((no_sanitize_address))
#endif
static void thread_main(void) { thread_entry(cur); } /* makecontext passes no pointer portably */
#endif

/* lays out a fresh coroutine for thread t */
static void ctx_init(EmuThread *t) {
#ifdef EMU_UCONTEXT
    getcontext(&t->ctx);
    t->ctx.uc_stack.ss_sp = t->stack;
    t->ctx.uc_stack.ss_size = EMU_STACK;
    t->ctx.uc_link = &sched;
    makecontext(&t->ctx, thread_main, 0);
#else
    /* what emu_ctx_switch pops, from the saved rsp up: control words, r15
     * r14 r13, r12 = t, rbx = thread_entry, rbp = 0 (ends frame chains),
     * return address = emu_ctx_entry; then two zero words: after the ret
     * rsp = top - 16, 16-aligned, so thread_entry is entered at rsp % 16 == 8
     * as the ABI has it */
    uintptr_t top = ((uintptr_t)t->stack + EMU_STACK) & ~(uintptr_t)15;
    uint64_t *f = (uint64_t *)top - 10;
    unsigned mx;
    unsigned short cw;
    __asm__ volatile("stmxcsr %0" : "=m"(mx));
    __asm__ volatile("fnstcw %0" : "=m"(cw));
    f[0] = (uint64_t)mx | (uint64_t)cw << 32;
    f[1] = f[2] = f[3] = 0;
    f[4] = (uint64_t)(uintptr_t)t;
    f[5] = (uint64_t)(uintptr_t)thread_entry;
    f[6] = 0;
    f[7] = (uint64_t)(uintptr_t)emu_ctx_entry;
    f[8] = f[9] = 0;
    t->sp = f;
#endif
}

/* scheduler -> thread t */
static void to_thread(EmuThread *t) {
    void *fake = NULL;
    if (__sanitizer_start_switch_fiber) __sanitizer_start_switch_fiber(&fake, t->stack, EMU_STACK);
#ifdef EMU_UCONTEXT
    swapcontext(&sched, &t->ctx);
#else
    emu_ctx_switch(&sched_sp, t->sp);
#endif
    if (__sanitizer_finish_switch_fiber) __sanitizer_finish_switch_fiber(fake, NULL, NULL);
}

/* thread t -> scheduler; returns when the scheduler resumes t */
static void to_sched(EmuThread *t) {
    if (__sanitizer_start_switch_fiber) __sanitizer_start_switch_fiber(&t->fake, sched_bottom, sched_size);
#ifdef EMU_UCONTEXT
    swapcontext(&t->ctx, &sched);
#else
    emu_ctx_switch(&t->sp, sched_sp);
#endif
    if (__sanitizer_finish_switch_fiber) __sanitizer_finish_switch_fiber(t->fake, &sched_bottom, &sched_size);
}

const emu_dim3 *emu_threadIdx(void) { return &cur->tid; }

static void yield(int st) {
    EmuThread *t = cur;
    t->state = st;
    if (st == ST_WARP) w_wait[t->warp]++;
    else n_block++;
    to_sched(t);
}

void emu_syncthreads(void) { yield(ST_BLOCK); }

float emu_shfl(float v, int arg, int xor_mode) {
    int w = cur->warp, l = cur->lane, s = cur->side;
    cur->side ^= 1;
    shfl[s][w][l] = v;
    yield(ST_WARP);
    return shfl[s][w][(xor_mode ? (l ^ arg) : arg) & 31];
}

/* runtime/base/half.h, not _Float16: the same rounding, and every C compiler
 * (clang on some targets has no _Float16) */
float emu_f16_to_f32(unsigned short h) { return half_f16_to_f32(h); }
unsigned short emu_f32_to_f16(float f) { return half_f32_to_f16(f); }
unsigned short emu_f32_to_bf16(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float half_of(unsigned short h, int f16) {
    if (f16) return emu_f16_to_f32(h);
    unsigned u = (unsigned)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* D = A B + C for one warp; fragments as the PTX ISA lays them out for
 * mma.m16n8k16 with .row.col: groupID = lane / 4, tig = lane % 4. */
void emu_mma_m16n8k16(float *c, const unsigned *a, const unsigned *b, int f16) {
    int w = cur->warp, l = cur->lane, s = cur->side;
    cur->side ^= 1;
    memcpy(mA[s][w][l], a, sizeof mA[s][w][l]);
    memcpy(mB[s][w][l], b, sizeof mB[s][w][l]);
    memcpy(mC[s][w][l], c, sizeof mC[s][w][l]);
    yield(ST_WARP);
    float A[16][16], B[16][8];
    for (int L = 0; L < 32; L++) {
        for (int r = 0; r < 4; r++) {
            int row = L / 4 + 8 * (r % 2), col = 2 * (L % 4) + 8 * (r / 2);
            A[row][col] = half_of((unsigned short)(mA[s][w][L][r] & 0xffff), f16);
            A[row][col + 1] = half_of((unsigned short)(mA[s][w][L][r] >> 16), f16);
        }
        for (int r = 0; r < 2; r++) {
            int n = L / 4, k = 2 * (L % 4) + 8 * r;
            B[k][n] = half_of((unsigned short)(mB[s][w][L][r] & 0xffff), f16);
            B[k + 1][n] = half_of((unsigned short)(mB[s][w][L][r] >> 16), f16);
        }
    }
    for (int r = 0; r < 4; r++) {
        int row = l / 4 + 8 * (r / 2), col = 2 * (l % 4) + r % 2;
        float d = mC[s][w][l][r];
        for (int k = 0; k < 16; k++) d += A[row][k] * B[k][col];
        c[r] = d;
    }
}

static void thread_entry(EmuThread *t) {
    if (__sanitizer_finish_switch_fiber) __sanitizer_finish_switch_fiber(NULL, &sched_bottom, &sched_size);
    cur_fn(cur_params);
    t->state = ST_DONE;
    n_live--;
    w_live[t->warp]--;
    if (__sanitizer_start_switch_fiber) /* NULL: this coroutine ends */
        __sanitizer_start_switch_fiber(NULL, sched_bottom, sched_size);
#ifndef EMU_UCONTEXT
    emu_ctx_switch(&t->sp, sched_sp);
    __builtin_unreachable();
#endif
    /* ucontext: returns to uc_link, the scheduler */
}

/* Runs fn(params) over the grid; returns 0, or -1 (message in err) on a divergent barrier. */
int emu_launch(void (*fn)(void **), void **params, const unsigned grid[3], const unsigned block[3], char *err,
               size_t nerr) {
    nth = (int)(block[0] * block[1] * block[2]);
    if (nth < 1 || nth > EMU_MAXT) {
        snprintf(err, nerr, "emu: %d threads per block", nth);
        return -1;
    }
    cur_fn = fn;
    cur_params = params;
    emu_gridDim = (emu_dim3){grid[0], grid[1], grid[2]};
    emu_blockDim = (emu_dim3){block[0], block[1], block[2]};
    for (int i = 0; i < nth; i++)
        if (!th[i].stack && !(th[i].stack = malloc(EMU_STACK))) {
            snprintf(err, nerr, "emu: out of memory");
            return -1;
        }
    int nw = (nth + 31) / 32;
    for (int i = 0; i < nth; i++) {
        EmuThread *t = &th[i];
        t->tid = (emu_dim3){(unsigned)i % block[0], (unsigned)(i / block[0]) % block[1],
                            (unsigned)(i / (block[0] * block[1]))};
        t->lane = i % 32;
        t->warp = i / 32;
    }
    for (unsigned bz = 0; bz < grid[2]; bz++)
        for (unsigned by = 0; by < grid[1]; by++)
            for (unsigned bx = 0; bx < grid[0]; bx++) {
                emu_blockIdx = (emu_dim3){bx, by, bz};
                n_live = nth;
                n_block = 0;
                for (int w = 0; w < nw; w++) {
                    w_live[w] = nth - 32 * w < 32 ? nth - 32 * w : 32;
                    w_wait[w] = 0;
                }
                for (int i = 0; i < nth; i++) {
                    th[i].state = ST_READY;
                    th[i].side = 0;
                    ctx_init(&th[i]);
                    runq[i] = i;
                }
                nrun = nth;
                for (;;) {
                    for (int k = 0; k < nrun; k++) {
                        cur = &th[runq[k]];
                        to_thread(cur);
                    }
                    if (!n_live) break;
                    nrun = 0;
                    for (int w = 0; w < nw; w++)
                        if (w_wait[w] && w_wait[w] == w_live[w]) {
                            for (int i = w * 32; i < nth && i < w * 32 + 32; i++)
                                if (th[i].state == ST_WARP) {
                                    th[i].state = ST_READY;
                                    runq[nrun++] = i;
                                }
                            w_wait[w] = 0;
                        }
                    if (!nrun && n_block == n_live) {
                        for (int i = 0; i < nth; i++)
                            if (th[i].state == ST_BLOCK) {
                                th[i].state = ST_READY;
                                runq[nrun++] = i;
                            }
                        n_block = 0;
                    }
                    if (!nrun) {
                        snprintf(err, nerr, "emu: divergent barrier in block (%u,%u,%u): %d live threads, %d at __syncthreads",
                                 bx, by, bz, n_live, n_block);
                        /* the stuck coroutines are abandoned: their frames' poison goes */
                        if (__asan_unpoison_memory_region)
                            for (int i = 0; i < nth; i++)
                                if (th[i].state != ST_DONE) __asan_unpoison_memory_region(th[i].stack, EMU_STACK);
                        return -1;
                    }
                }
            }
    return 0;
}

/* Frees the coroutine stacks: a host that unloads the emulator (the fake
 * CUDA driver of tests/fakecuda, when its last context goes) calls it, so
 * nothing is left allocated and unreachable. The next launch allocates anew. */
void emu_reset(void) {
    for (int i = 0; i < EMU_MAXT; i++) {
        free(th[i].stack);
        th[i].stack = NULL;
    }
}
