/* embedding: y[i, :] = table[ids[i], :].
 * An id outside [0, V) is a run-time error: the row is written as zeros and
 * err[0..2] = {1, id, position} (first writer wins); the executor zeroes err
 * before and checks it after.
 * Backward: atomicAdd into an fp32 gradient, dtab[ids[i], :] += dy[i, :]
 * (ids repeat). For a bf16/f16 gradient the accumulation goes to an fp32
 * workspace that zk_cast_from_f32 (elementwise family) then adds into the
 * gradient; fp32 atomics make the order of the sums, and so the last bits,
 * vary from run to run. One block (128 threads) per id, looping over D.
 *
 * The _tile entries serve memory-centric tiling (docs/kernels.md, "Tile
 * launches"): the table (and its gradient) holds only rows [r0, r0+rows) of
 * the V-row table, row 0 there being row r0; ids outside the tile are some
 * other tile's. Forward writes the rows of the ids in the tile and, when
 * `zero` (the first tile), zeros every other row of y, so that after all
 * tiles each row is written exactly once; an id outside [0, V) is the same
 * error as above. Backward adds the dy rows of the ids in the tile. */
#include "common.cuh"

extern "C" __global__ void zk_embed_fwd(T *y, const T *table, const int *ids, long long n, long long V,
                                        long long D, int *err) {
    for (long long i = blockIdx.x; i < n; i += gridDim.x) {
        long long id = ids[i];
        bool ok = id >= 0 && id < V;
        if (!ok && threadIdx.x == 0 && atomicCAS(err, 0, 1) == 0) {
            err[1] = (int)id;
            err[2] = (int)i;
        }
        for (long long c = threadIdx.x; c < D; c += blockDim.x) {
            if (ok) y[i * D + c] = table[id * D + c];
            else zk_st(y + i * D + c, 0.f);
        }
    }
}

extern "C" __global__ void zk_embed_bwd(float *dtab, const T *dy, const int *ids, long long n, long long V,
                                        long long D) {
    for (long long i = blockIdx.x; i < n; i += gridDim.x) {
        long long id = ids[i];
        if (id < 0 || id >= V) continue;
        for (long long c = threadIdx.x; c < D; c += blockDim.x) atomicAdd(dtab + id * D + c, zk_ld(dy + i * D + c));
    }
}

extern "C" __global__ void zk_embed_fwd_tile(T *y, const T *table, const int *ids, long long n, long long r0,
                                             long long rows, long long V, long long D, long long zero, int *err) {
    for (long long i = blockIdx.x; i < n; i += gridDim.x) {
        long long id = ids[i];
        if (!(id >= 0 && id < V) && threadIdx.x == 0 && atomicCAS(err, 0, 1) == 0) {
            err[1] = (int)id;
            err[2] = (int)i;
        }
        bool in = id >= r0 && id < r0 + rows;
        if (!in && !zero) continue;
        for (long long c = threadIdx.x; c < D; c += blockDim.x) {
            if (in) y[i * D + c] = table[(id - r0) * D + c];
            else zk_st(y + i * D + c, 0.f);
        }
    }
}

extern "C" __global__ void zk_embed_bwd_tile(float *dtab, const T *dy, const int *ids, long long n, long long r0,
                                             long long rows, long long D) {
    for (long long i = blockIdx.x; i < n; i += gridDim.x) {
        long long v = (long long)ids[i] - r0;
        if (v < 0 || v >= rows) continue;
        for (long long c = threadIdx.x; c < D; c += blockDim.x) atomicAdd(dtab + v * D + c, zk_ld(dy + i * D + c));
    }
}
