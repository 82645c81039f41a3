/* cuda_gen_embedding: the launches of embedding on
 * stdlib/kernels/embedding.cu, for the whole op and for one tile of the
 * table's rows alike (the whole op is the tile of all V rows, launching
 * the untiled entry points). */
#include <inttypes.h>
#include "cuda_gen_impl.h"

/* y[i] = table[ids[i]]. A tile copies the rows of the ids in its range,
 * tile 0 zeroing y first (an id outside the whole table is the op's error
 * word, at the op's offset). */
static void embed_fwd(GenCtx *c, int table, int ids, int64_t rows, int64_t r0) {
    const GOp *o = c->o;
    const GTensor *Tb = T_(c, table);
    int64_t V = Tb->dims[0], D = Tb->dims[1], n = T_(c, ids)->numel;
    DType dt = Tb->dtype;
    bool tiled = c->ntiles > 0;
    int ts[2] = {table, o->out[0]};
    if (!cg_same_dtype(c, dt, ts, 2)) return;
    int64_t err = cg_err_word(c, dt, "embedding id");
    CudaKernel *k =
        cg_kdt(c, "embedding", dt, tiled ? "zk_embed_fwd_tile" : "zk_embed_fwd",
               tiled ? arena_printf(c->cg->arena, "y[i] = table_t[ids[i] - %" PRId64 "] for ids in [%" PRId64 ", %" PRId64 ")%s",
                                    r0, r0, r0 + rows, c->tile == 0 ? ", zeros elsewhere" : "")
                     : "y[i] = table[ids[i]]");
    k->grid[0] = (unsigned)(n < 65535 * 16 ? (n > 0 ? n : 1) : 65535 * 16);
    k->block[0] = 128;
    arg_t(k, o->out[0]);
    arg_t(k, table);
    arg_t(k, ids);
    arg_i(k, n);
    if (tiled) {
        arg_i(k, r0);
        arg_i(k, rows);
    }
    arg_i(k, V);
    arg_i(k, D);
    if (tiled) arg_i(k, c->tile == 0);
    arg_ws(k, err);
}

/* dtable[ids[i]] += dy[i]; a tile's dtable_t[id - r0] += dy[i] for the ids
 * in its range. Below f32 the sums go into an fp32 accumulator in the
 * workspace, added to the gradient after. */
static void embed_bwd(GenCtx *c, int table, int ids, int64_t rows, int64_t r0) {
    const GOp *o = c->o;
    const GTensor *Tb = T_(c, table);
    int64_t D = Tb->dims[1], n = T_(c, ids)->numel;
    DType dt = Tb->dtype;
    bool tiled = c->ntiles > 0;
    int dtab = o->out[0], dy = o->in[o->nfin + 1];
    if (dtab < 0) return;
    int ts[3] = {table, dy, dtab};
    if (!cg_same_dtype(c, dt, ts, 3)) return;
    int64_t acc = -1;
    if (dt != DT_F32) {
        acc = cg_ws_alloc(c, rows * D * 4);
        cg_fill_ws_f32(c, dt, acc, rows * D,
                       tiled ? "zero the fp32 accumulator of the tile's table gradient"
                             : "zero the fp32 accumulator of the table gradient");
    }
    const char *role =
        tiled ? arena_printf(c->cg->arena, "%s[ids[i] - %" PRId64 "] += dy[i] for ids in [%" PRId64 ", %" PRId64 ") (fp32 atomics)",
                             dt == DT_F32 ? "dtable_t" : "acc", r0, r0, r0 + rows)
        : dt == DT_F32 ? "dtable[ids[i]] += dy[i] (fp32 atomics)"
                       : "acc[ids[i]] += dy[i] (fp32 atomics into the workspace)";
    CudaKernel *k = cg_kdt(c, "embedding", dt, tiled ? "zk_embed_bwd_tile" : "zk_embed_bwd", role);
    k->grid[0] = (unsigned)(n < 65535 * 16 ? (n > 0 ? n : 1) : 65535 * 16);
    k->block[0] = 128;
    if (dt == DT_F32) arg_t(k, dtab);
    else arg_ws(k, acc);
    arg_t(k, dy);
    arg_t(k, ids);
    arg_i(k, n);
    if (tiled) arg_i(k, r0);
    arg_i(k, rows); /* the whole op: V */
    arg_i(k, D);
    if (dt != DT_F32) {
        k = cg_kdt(c, "elementwise", dt, "zk_cast_from_f32", tiled ? "dtable_t += acc" : "dtable += acc");
        elementwise_grid(k, rows * D);
        arg_t(k, dtab);
        arg_ws(k, acc);
        arg_i(k, rows * D);
        arg_f(k, 1.0);
        arg_i(k, 1);
    }
}

void cg_gen_embedding(GenCtx *c, bool bwd) {
    const GOp *o = c->o;
    int table = o->in[0], ids = o->in[1];
    const GTensor *Tb = T_(c, table), *I = T_(c, ids);
    if (Tb->rank != 2 || I->dtype != DT_I32) {
        cg_fail(c, "embedding needs a 2-D table and i32 ids");
        return;
    }
    int64_t rows, r0;
    if (!cg_tile_rows(c, table, &rows, &r0)) return;
    if (bwd) embed_bwd(c, table, ids, rows, r0);
    else embed_fwd(c, table, ids, rows, r0);
}
