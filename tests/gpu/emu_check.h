/* emu_check: what the emulator checks of generated launches share
 * (tests/gpu/check_moe.c, tests/gpu/check_tiles.c): the set-up of a graph
 * and its generator, an op and its backward, the emulated unit of a launch, running an op's
 * launches with their arguments bound, bf16 values and the normwise error
 * of one tensor against its reference. A setup error prints the program's
 * name and exits 2, the harnesses' exit code for it. */
#ifndef ZINF_EMU_CHECK_H
#define ZINF_EMU_CHECK_H
#include <stddef.h>
#include <stdint.h>
#include "cuda_gen.h"

/* The program's name for messages, and the prefix of its units' cached
 * files (each harness its own name space under $TMPDIR/zinf-emu). */
void ec_init(const char *prog, const char *unit_prefix);
/* Prints "PROG: what" and exits 2. */
void ec_die(const char *what);

/* An empty graph of training dtype dt and a generator on the checkout's
 * kernels (ZINF_STDLIB_DIR/kernels). */
void ec_gen_init(Arena *a, DiagSink *d, Graph *g, CudaGen *cg, DType dt);

/* Adds forward op f reading in[0..nin) and writing out; returns its id. */
int ec_add_fwd(Graph *g, GOp *f, int nin, const int *in, int out);
/* Adds the backward op of forward op fwd: its first nfin inputs, then y
 * and dy; writing outs[0..nout). Returns its id. */
int ec_add_bwd(Graph *g, int fwd, int nfin, int y, int dy, int nout, const int *outs);

size_t ec_esz(DType dt);
uint16_t ec_to_bf16(float f); /* rounded to nearest even */
float ec_ld(const void *p, DType dt, int64_t i);

/* Runs ks[0..n) on the emulator: a tensor argument at addr(ctx, tensor)
 * plus its offset, the workspace at ws, run-time values 1, absent and
 * packed-row arguments NULL; dies when a launch fails or the op's error
 * word (info->err_off) is set afterwards. */
void ec_run(const CudaKernel *ks, int n, const CudaOpInfo *info, uint8_t *ws, uint8_t *(*addr)(void *ctx, int tensor),
            void *ctx);

/* The normwise relative error max|ref - got| / max|ref| (1 for an all-zero
 * ref) of n values of dtype dt; infinite for a NaN on either side, and for
 * any difference of i32 values. */
double ec_normwise(const void *ref, const void *got, DType dt, int64_t n);

#endif
