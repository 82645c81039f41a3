/* rope: rotary position embedding, "rotate half" (Hugging Face LLaMA).
 * x [B, T, H*hd]; for head h, position t, pair j < hd/2, with
 * f = theta^(-2j/hd) and a = t*f, (x[j], x[j+hd/2]) is rotated by a.
 * Scaling (RopeScaling of compiler/graph.h) changes f: 1 linear, f/factor;
 * 2 llama3, wavelength 2pi/f below orig/high kept, above orig/low divided by
 * factor, in between blended with s = (orig/wavelength - low)/(high - low);
 * 3 YaRN (low, high = beta_fast, beta_slow, 0 meaning 32 and 1): pair j
 * blends f/factor and f by a ramp over the pairs whose wavelength makes
 * between beta_fast and beta_slow rotations in orig positions (as
 * transformers' _compute_yarn_parameters with truncate, and the host's
 * hk_rope_freq). YaRN's attention factor is a scale op of the model.
 * 4 longrope (Phi-3's su): pair j's f divided by ZK_ROPE_LONG[j] when the
 * sequence (the longest sample + 1 past its last position) is longer than
 * orig, by ZK_ROPE_SHORT[j] otherwise: the unit of such an op carries its
 * two lists as constants (ZK_ROPE_NPAIR numbers each, the plan's values to
 * the last bit), as the host's hk_rope_freq reads them.
 * Partial rotary (Phi-4-mini): the first rd columns of each head turn,
 * rotate-half over them with the frequencies of a head of rd; columns rd..hd
 * pass through (the thread of pair j >= rd/2 copies two of them). cos and
 * sin are multiplied by af (transformers' attention_scaling; 1: none) in fp64
 * before rounding, as the host's rope_unit.
 * Backward applies the inverse rotation (-a) to dy and accumulates into dx.
 * The angle and its sine and cosine are computed in fp64: t*f reaches
 * thousands of radians, where an fp32 angle is off by 1e-4. One thread per
 * pair; sizes are arguments. Packed rows (several samples a row): seg
 * [B*T], seg[b*T + t] the position where the sample holding t begins, and
 * position t rotates by its sample's own position t - seg; NULL, a row is
 * one sample. */
#include "common.cuh"

__device__ double zk_rope_freq(double theta, long long j, long long hd, long long scaling, double factor,
                               double low, double high, double orig) {
    double f = pow(theta, -2.0 * (double)j / (double)hd);
    if (scaling == 1) return f / factor;
    if (scaling == 3) {
        double fast = low > 0 ? low : 32.0, slow = high > 0 ? high : 1.0, lb = 2.0 * log(theta), d = (double)hd;
        double lo = floor(d * log(orig / (fast * 6.283185307179586)) / lb);
        double hi = ceil(d * log(orig / (slow * 6.283185307179586)) / lb);
        if (lo < 0) lo = 0;
        if (hi > d - 1) hi = d - 1;
        if (lo == hi) hi += 0.001;
        double ramp = ((double)j - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        return f / factor * ramp + f * (1.0 - ramp);
    }
    if (scaling != 2) return f;
    double wavelen = 6.283185307179586 / f;
    if (wavelen < orig / high) return f;
    if (wavelen > orig / low) return f / factor;
    double s = (orig / wavelen - low) / (high - low);
    return (1.0 - s) * f / factor + s * f;
}

#ifdef ZK_ROPE_NPAIR
__device__ const double zk_rope_short[ZK_ROPE_NPAIR] = {ZK_ROPE_SHORT};
__device__ const double zk_rope_long[ZK_ROPE_NPAIR] = {ZK_ROPE_LONG};
#endif

/* longrope's choice of list: the sequence's length, Tn, or with packed rows
 * the longest sample's (position_ids' maximum + 1, as the host's
 * rope_apply), reduced by each block over seg (only when Tn > orig: a
 * shorter row never leaves the short list). Block-uniform. */
__device__ bool zk_rope_long_list(long long B, long long Tn, float orig, const int *seg) {
    if ((double)Tn <= (double)orig) return false;
    if (!seg) return true;
    __shared__ long long most[256];
    long long m = 0;
    for (long long i = threadIdx.x; i < B * Tn; i += blockDim.x) {
        long long len = i % Tn - seg[i] + 1;
        if (len > m) m = len;
    }
    most[threadIdx.x] = m;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s && most[threadIdx.x + s] > most[threadIdx.x]) most[threadIdx.x] = most[threadIdx.x + s];
        __syncthreads();
    }
    bool r = (double)most[0] > (double)orig;
    __syncthreads();
    return r;
}

extern "C" __global__ void zk_rope(T *y, const T *x, long long B, long long Tn, long long H, long long hd,
                                   float theta, long long inverse, long long acc, long long scaling, float factor,
                                   float low, float high, float orig, long long rd, float af, const int *seg) {
    long long half = hd / 2, rhalf = rd / 2, n = B * Tn * H * half;
    bool lng = scaling == 4 && zk_rope_long_list(B, Tn, orig, seg);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long j = i % half, rest = i / half;  /* rest = (b*T + t)*H + h */
        long long base = rest * hd;
        if (j >= rhalf) { /* partial rotary: columns rd + 2(j - rd/2) and the next pass through */
            long long col = rd + 2 * (j - rhalf);
            zk_put(y + base + col, zk_ld(x + base + col), acc);
            zk_put(y + base + col + 1, zk_ld(x + base + col + 1), acc);
            continue;
        }
        long long t = (rest / H) % Tn;
        if (seg) t -= seg[rest / H];
        double f;
#ifdef ZK_ROPE_NPAIR
        if (scaling == 4) f = pow((double)theta, -2.0 * (double)j / (double)rd) / (lng ? zk_rope_long : zk_rope_short)[j];
        else
#endif
            f = zk_rope_freq((double)theta, j, rd, scaling, (double)factor, (double)low, (double)high, (double)orig);
        double sa, ca;
        sincos((double)t * f, &sa, &ca);
        float s = (float)((inverse ? -sa : sa) * (double)af), c = (float)(ca * (double)af);
        float x0 = zk_ld(x + base + j), x1 = zk_ld(x + base + j + rhalf);
        zk_put(y + base + j, x0 * c - x1 * s, acc);
        zk_put(y + base + j + rhalf, x0 * s + x1 * c, acc);
    }
}
