/* elementwise: fills, activations, broadcast add/mul, casts, scaling,
 * split. One unit per storage dtype ZK_T; sizes are kernel arguments.
 * Every kernel is a grid-stride loop over elements (blockDim 256).
 * Backward kernels ACCUMULATE into their gradient (dx += ...). */
#include "common.cuh"

#define ZK_LOOP(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                           i += (long long)gridDim.x * blockDim.x)

/* y[i] = v (zero_grad, loss_grad). */
extern "C" __global__ void zk_fill(T *y, long long n, float v) {
    ZK_LOOP(i, n) zk_st(y + i, v);
}
extern "C" __global__ void zk_fill_f32(float *y, long long n, float v) {
    ZK_LOOP(i, n) y[i] = v;
}
extern "C" __global__ void zk_fill_i32(int *y, long long n, long long v) {
    ZK_LOOP(i, n) y[i] = (int)v;
}
/* arange: y[i] = i. */
extern "C" __global__ void zk_iota_i32(int *y, long long n) {
    ZK_LOOP(i, n) y[i] = (int)i;
}

/* gelu, tanh approximation: 0.5 x (1 + tanh(c (x + 0.044715 x^3))). */
extern "C" __global__ void zk_gelu_fwd(T *y, const T *x, long long n) {
    const float c = 0.7978845608028654f;
    ZK_LOOP(i, n) {
        float v = zk_ld(x + i);
        float u = c * (v + 0.044715f * v * v * v);
        zk_st(y + i, 0.5f * v * (1.f + tanhf(u)));
    }
}
extern "C" __global__ void zk_gelu_bwd(T *dx, const T *x, const T *dy, long long n) {
    const float c = 0.7978845608028654f;
    ZK_LOOP(i, n) {
        float v = zk_ld(x + i);
        float u = c * (v + 0.044715f * v * v * v);
        float th = tanhf(u);
        float du = c * (1.f + 3.f * 0.044715f * v * v);
        float d = 0.5f * (1.f + th) + 0.5f * v * (1.f - th * th) * du;
        zk_st(dx + i, zk_ld(dx + i) + d * zk_ld(dy + i));
    }
}

/* softcap: y = cap tanh(x / cap) (Gemma's final-logit soft-capping);
 * backward dx += dy (1 - tanh^2(x / cap)). */
extern "C" __global__ void zk_softcap_fwd(T *y, const T *x, long long n, float cap) {
    ZK_LOOP(i, n) zk_st(y + i, cap * tanhf(zk_ld(x + i) / cap));
}
extern "C" __global__ void zk_softcap_bwd(T *dx, const T *x, const T *dy, long long n, float cap) {
    ZK_LOOP(i, n) {
        float th = tanhf(zk_ld(x + i) / cap);
        zk_st(dx + i, zk_ld(dx + i) + zk_ld(dy + i) * (1.f - th * th));
    }
}

/* silu: x * sigmoid(x). */
extern "C" __global__ void zk_silu_fwd(T *y, const T *x, long long n) {
    ZK_LOOP(i, n) {
        float v = zk_ld(x + i);
        zk_st(y + i, v / (1.f + expf(-v)));
    }
}
extern "C" __global__ void zk_silu_bwd(T *dx, const T *x, const T *dy, long long n) {
    ZK_LOOP(i, n) {
        float v = zk_ld(x + i);
        float s = 1.f / (1.f + expf(-v));
        zk_st(dx + i, zk_ld(dx + i) + zk_ld(dy + i) * s * (1.f + v * (1.f - s)));
    }
}

/* add / mul with suffix broadcasting: y[i] = a[i % na] op b[i % nb],
 * n = max(na, nb), op 0 add, 1 mul. */
extern "C" __global__ void zk_binary_fwd(T *y, const T *a, const T *b, long long n, long long na,
                                         long long nb, long long op) {
    ZK_LOOP(i, n) {
        float u = zk_ld(a + (na == n ? i : i % na)), v = zk_ld(b + (nb == n ? i : i % nb));
        zk_st(y + i, op ? u * v : u + v);
    }
}
/* Gradient of the full-size operand: dx[i] += dy[i] (add) or dy[i] * other[i % no] (mul). */
extern "C" __global__ void zk_binary_bwd_full(T *dx, const T *dy, const T *other, long long n,
                                              long long no, long long op) {
    ZK_LOOP(i, n) {
        float g = zk_ld(dy + i);
        if (op) g *= zk_ld(other + (no == n ? i : i % no));
        zk_st(dx + i, zk_ld(dx + i) + g);
    }
}

/* add / mul of a [Tn, ...] operand ("small", ns elements, a learned
 * position embedding) broadcast over the batch of a [B, Tn, ...] one ("big",
 * n elements). In a packed row (seg, several samples a row: seg[b*Tn + t]
 * where the sample holding position t of row b begins) position t reads
 * small at its sample's own position t - seg; seg NULL, at t (the suffix
 * broadcast of zk_binary_fwd). op 0 add, 1 mul. */
__device__ __forceinline__ long long zk_pos_index(const int *seg, long long i, long long ns, long long Tn) {
    long long inner = ns / Tn, row = i / inner, t = row % Tn;
    return (seg ? t - seg[row] : t) * inner + i % inner;
}
extern "C" __global__ void zk_binary_pos_fwd(T *y, const T *big, const T *small, const int *seg, long long n,
                                             long long ns, long long Tn, long long op) {
    ZK_LOOP(i, n) {
        float u = zk_ld(big + i), v = zk_ld(small + zk_pos_index(seg, i, ns, Tn));
        zk_st(y + i, op ? u * v : u + v);
    }
}
/* dbig[i] += dy[i] (add) or dy[i] * small[its position] (mul). */
extern "C" __global__ void zk_binary_pos_bwd_big(T *dbig, const T *dy, const T *small, const int *seg, long long n,
                                                 long long ns, long long Tn, long long op) {
    ZK_LOOP(i, n) {
        float g = zk_ld(dy + i);
        if (op) g *= zk_ld(small + zk_pos_index(seg, i, ns, Tn));
        zk_st(dbig + i, zk_ld(dbig + i) + g);
    }
}
/* dsmall[p, k] += sum over the tokens at sample position p of dy (* big):
 * one thread an element of small, the rows in order (the same sums however
 * the grid runs). Packed, each row is searched for the positions t whose
 * sample starts at t - p: B*Tn reads of seg a thread. */
extern "C" __global__ void zk_binary_pos_bwd_small(T *dsmall, const T *dy, const T *big, const int *seg, long long n,
                                                   long long ns, long long Tn, long long op) {
    long long inner = ns / Tn, B = n / ns;
    ZK_LOOP(j, ns) {
        long long p = j / inner, k = j % inner;
        float acc = 0.f;
        for (long long b = 0; b < B; b++)
            for (long long t = p; t < Tn; t++) {
                if (seg ? t - seg[b * Tn + t] != p : t != p) continue;
                long long i = (b * Tn + t) * inner + k;
                acc += op ? zk_ld(dy + i) * zk_ld(big + i) : zk_ld(dy + i);
                if (!seg) break;
            }
        zk_st(dsmall + j, zk_ld(dsmall + j) + acc);
    }
}

/* Casts and scaling. y (+)= alpha * x. */
extern "C" __global__ void zk_cast_to_f32(float *y, const T *x, long long n, float alpha, long long acc) {
    ZK_LOOP(i, n) y[i] = (acc ? y[i] : 0.f) + alpha * zk_ld(x + i);
}
extern "C" __global__ void zk_cast_from_f32(T *y, const float *x, long long n, float alpha, long long acc) {
    ZK_LOOP(i, n) zk_put(y + i, alpha * x[i], acc);
}
/* Gradient accumulation: y += alpha * x (same dtype). */
extern "C" __global__ void zk_axpy(T *y, const T *x, long long n, float alpha) {
    ZK_LOOP(i, n) zk_st(y + i, zk_ld(y + i) + alpha * zk_ld(x + i));
}
/* Gradient scaling: y *= alpha. */
extern "C" __global__ void zk_scale(T *y, long long n, float alpha) {
    ZK_LOOP(i, n) zk_st(y + i, alpha * zk_ld(y + i));
}

/* split forward: y[r, c] = x[r, off + c] for c < w (x has ld columns). */
extern "C" __global__ void zk_slice_cols(T *y, const T *x, long long rows, long long ld, long long off,
                                         long long w) {
    long long n = rows * w;
    ZK_LOOP(i, n) {
        long long r = i / w, c = i - r * w;
        y[i] = x[r * ld + off + c];
    }
}
/* split backward: dx[r, off + c] += dy[r, c]. */
extern "C" __global__ void zk_unslice_cols(T *dx, const T *dy, long long rows, long long ld, long long off,
                                           long long w) {
    long long n = rows * w;
    ZK_LOOP(i, n) {
        long long r = i / w, c = i - r * w;
        T *p = dx + r * ld + off + c;
        zk_st(p, zk_ld(p) + zk_ld(dy + i));
    }
}
