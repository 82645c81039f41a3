/* cuda_gen_reduce: the launches on stdlib/kernels/reduce.cu: column sums
 * (the bias gradient of linear, broadcast operands' gradients) and the
 * gradient norm over every parameter's gradient. */
#include <inttypes.h>
#include "cuda_gen_impl.h"

enum { SUMSQ_PARTS = 64 }; /* partial sums per gradient in the grad norm */

/* Column sums: out (+)= sum over rows of x (times mulby) viewed as [rows, cols]. */
void cg_colsum(GenCtx *c, int out, int x, int mulby, int64_t rows, int64_t cols, const char *role) {
    DType dt = T_(c, x)->dtype;
    int64_t parts = rows / 64;
    if (parts < 1) parts = 1;
    if (parts > 64) parts = 64;
    int64_t rpp = (rows + parts - 1) / parts;
    parts = (rows + rpp - 1) / rpp;
    if (parts < 1) parts = 1;
    int64_t off = cg_ws_alloc(c, parts * cols * 4);
    CudaKernel *k = cg_kdt(c, "reduce", dt, "zk_colsum_partial", role);
    k->grid[0] = cg_gdim(c, ((cols + 31) / 32), 0x7fffffff);
    k->grid[1] = cg_gdim(c, parts, 65535);
    k->block[0] = 32;
    k->block[1] = 8;
    arg_ws(k, off);
    arg_t(k, x);
    arg_t(k, mulby);
    arg_i(k, rows);
    arg_i(k, cols);
    arg_i(k, rpp);
    k = cg_kdt(c, "reduce", T_(c, out)->dtype, "zk_colsum_final", role);
    elementwise_grid(k, cols);
    arg_t(k, out);
    arg_ws(k, off);
    arg_i(k, parts);
    arg_i(k, cols);
    arg_f(k, 1.0);
    arg_i(k, 1);
}

void cg_gen_grad_norm(GenCtx *c) {
    const Graph *g = c->g;
    int nslots = 0;
    for (int t = 0; t < g->ntensors; t++)
        if (g->tensors[t].cls == TC_PARAM && g->tensors[t].grad >= 0) nslots++;
    int64_t ws = cg_ws_alloc(c, (int64_t)(nslots ? nslots : 1) * SUMSQ_PARTS * 4);
    int slot = 0;
    for (int t = 0; t < g->ntensors; t++) {
        if (g->tensors[t].cls != TC_PARAM || g->tensors[t].grad < 0) continue;
        int gr = g->tensors[t].grad;
        DType dt = g->tensors[gr].dtype;
        if (!float_dtype(dt)) {
            cg_fail(c, "gradient %s has dtype %s", g->tensors[gr].name, cuda_dtype_name(dt));
            return;
        }
        CudaKernel *k = cg_kdt(c, "reduce", dt, "zk_sumsq_partial", "partial sums of squares of one gradient");
        k->grid[0] = SUMSQ_PARTS;
        k->block[0] = 256;
        arg_ws(k, ws + (int64_t)slot * SUMSQ_PARTS * 4);
        arg_t(k, gr);
        arg_i(k, g->tensors[gr].numel);
        slot++;
    }
    CudaKernel *k = cg_kdt(c, "reduce", g->train.dtype, "zk_norm_final", "grad_norm = sqrt(sum of the partials)");
    k->block[0] = 256;
    arg_t(k, c->o->out[0]);
    arg_ws(k, ws);
    arg_i(k, (int64_t)nslots * SUMSQ_PARTS);
    arg_i(k, 1);
}
