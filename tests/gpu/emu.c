/* emu.c: a host emulator of CUDA thread blocks for the kernel units (see
 * emu.h). One block at a time; its threads are ucontext coroutines run
 * round-robin until each reaches a barrier; a warp barrier releases when
 * every live thread of the warp is at one, the block barrier when every live
 * thread of the block is. A state where nothing can be released is a
 * divergent barrier: reported, and the launch fails. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
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

enum { ST_READY, ST_WARP, ST_BLOCK, ST_DONE, EMU_STACK = 256 * 1024, EMU_MAXT = 1024 };

typedef struct EmuThread {
    ucontext_t ctx;
    emu_dim3 tid;
    int state, lane, warp;
    char *stack;
} EmuThread;

emu_dim3 emu_blockIdx, emu_blockDim, emu_gridDim;
static EmuThread th[EMU_MAXT];
static int nth;
static ucontext_t sched;
static EmuThread *cur;
static void (*cur_fn)(void **);
static void **cur_params;
static float shfl[EMU_MAXT / 32][32];
static unsigned mA[EMU_MAXT / 32][32][4], mB[EMU_MAXT / 32][32][2];
static float mC[EMU_MAXT / 32][32][4];

const emu_dim3 *emu_threadIdx(void) { return &cur->tid; }

static void yield(int st) {
    cur->state = st;
    swapcontext(&cur->ctx, &sched);
}

void emu_syncthreads(void) { yield(ST_BLOCK); }

float emu_shfl(float v, int arg, int xor_mode) {
    int w = cur->warp, l = cur->lane;
    shfl[w][l] = v;
    yield(ST_WARP);
    float r = shfl[w][(xor_mode ? (l ^ arg) : arg) & 31];
    yield(ST_WARP);
    return r;
}

/* runtime/half.h, not _Float16: the same rounding, and every C compiler
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
    int w = cur->warp, l = cur->lane;
    memcpy(mA[w][l], a, sizeof mA[w][l]);
    memcpy(mB[w][l], b, sizeof mB[w][l]);
    memcpy(mC[w][l], c, sizeof mC[w][l]);
    yield(ST_WARP);
    float A[16][16], B[16][8];
    for (int L = 0; L < 32; L++) {
        for (int r = 0; r < 4; r++) {
            int row = L / 4 + 8 * (r % 2), col = 2 * (L % 4) + 8 * (r / 2);
            A[row][col] = half_of((unsigned short)(mA[w][L][r] & 0xffff), f16);
            A[row][col + 1] = half_of((unsigned short)(mA[w][L][r] >> 16), f16);
        }
        for (int r = 0; r < 2; r++) {
            int n = L / 4, k = 2 * (L % 4) + 8 * r;
            B[k][n] = half_of((unsigned short)(mB[w][L][r] & 0xffff), f16);
            B[k + 1][n] = half_of((unsigned short)(mB[w][L][r] >> 16), f16);
        }
    }
    for (int r = 0; r < 4; r++) {
        int row = l / 4 + 8 * (r / 2), col = 2 * (l % 4) + r % 2;
        float d = mC[w][l][r];
        for (int k = 0; k < 16; k++) d += A[row][k] * B[k][col];
        c[r] = d;
    }
    yield(ST_WARP);
}

static void thread_main(void) {
    cur_fn(cur_params);
    cur->state = ST_DONE;
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
    for (unsigned bz = 0; bz < grid[2]; bz++)
        for (unsigned by = 0; by < grid[1]; by++)
            for (unsigned bx = 0; bx < grid[0]; bx++) {
                emu_blockIdx = (emu_dim3){bx, by, bz};
                for (int i = 0; i < nth; i++) {
                    EmuThread *t = &th[i];
                    t->tid = (emu_dim3){(unsigned)i % block[0], (unsigned)(i / block[0]) % block[1],
                                        (unsigned)(i / (block[0] * block[1]))};
                    t->lane = i % 32;
                    t->warp = i / 32;
                    t->state = ST_READY;
                    getcontext(&t->ctx);
                    t->ctx.uc_stack.ss_sp = t->stack;
                    t->ctx.uc_stack.ss_size = EMU_STACK;
                    t->ctx.uc_link = &sched;
                    makecontext(&t->ctx, thread_main, 0);
                }
                for (;;) {
                    for (int i = 0; i < nth; i++)
                        if (th[i].state == ST_READY) {
                            cur = &th[i];
                            swapcontext(&sched, &th[i].ctx);
                        }
                    int live = 0, at_block = 0, released = 0;
                    for (int i = 0; i < nth; i++) {
                        live += th[i].state != ST_DONE;
                        at_block += th[i].state == ST_BLOCK;
                    }
                    if (!live) break;
                    for (int w = 0; w * 32 < nth; w++) {
                        int lv = 0, aw = 0;
                        for (int i = w * 32; i < nth && i < w * 32 + 32; i++) {
                            lv += th[i].state != ST_DONE;
                            aw += th[i].state == ST_WARP;
                        }
                        if (aw && aw == lv) {
                            for (int i = w * 32; i < nth && i < w * 32 + 32; i++) th[i].state = ST_READY;
                            released = 1;
                        }
                    }
                    if (!released && at_block == live) {
                        for (int i = 0; i < nth; i++)
                            if (th[i].state == ST_BLOCK) th[i].state = ST_READY;
                        released = 1;
                    }
                    if (!released) {
                        snprintf(err, nerr, "emu: divergent barrier in block (%u,%u,%u): %d live threads, %d at __syncthreads",
                                 bx, by, bz, live, at_block);
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
