/* kern_scalar.c — the portable micro-kernels: plain C, no intrinsics.
 *
 * They are the fallback on any CPU and the baseline the SIMD files are
 * measured and tested against.  Loop order keeps the innermost loop over a
 * contiguous axis (d for Q·Kᵀ, dv for P·V) so a compiler can vectorise it
 * with the baseline instruction set.
 */
#ifndef AC_TEMPLATE
#define AC_TEMPLATE "kern_scalar.c"
#include "internal.h"
#define AC_TEMPLATE_F16
#include "template.h"

/* The probes in plain C: eight chains / accumulators, which is what a
 * compiler without vector instructions can keep in flight.  Multiply and
 * add, not fmaf: the baseline instruction set has no FMA, and fmaf would be
 * a library call. */
static float fma_probe_scalar(int64_t iters, int64_t *flops) {
    float acc[8];
    for (int c = 0; c < 8; c++) acc[c] = (float)c;
    for (int64_t i = 0; i < iters; i++)
        for (int c = 0; c < 8; c++) acc[c] = acc[c] * 0.999999f + 1e-7f;
    *flops = iters * 8 * 2;
    float s = 0;
    for (int c = 0; c < 8; c++) s += acc[c];
    return s;
}

static float read_probe_scalar(const float *x, int64_t n) {
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int c = 0; c < 8; c++) s[c] += x[i + c];
    for (; i < n; i++) s[0] += x[i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

const ac_kernels ac_kernels_scalar = {
    .name = "scalar",
    .block_q = 64,
    .block_k = 64,
    .kt_pad = 1,
    AC_KERNEL_ENTRIES(scalar),
    .fma_probe = fma_probe_scalar, .read_probe = read_probe_scalar,
};

#else /* typed body */

/* The scalar kernels read K as it is: packing makes the rows dense (bk, d)
 * (and, for a float16 cache, float32). */
static void R(pack_scalar)(int64_t bk, int64_t d, const kvreal *k, int64_t ldk, real *kp) {
    for (int64_t c = 0; c < bk; c++)
        for (int64_t t = 0; t < d; t++) kp[c * d + t] = KV_TO_REAL(k[c * ldk + t]);
}

static void R(qkd_scalar)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq,
                          const kvreal *k, int64_t ldk, real scale, real *s, int64_t lds) {
    for (int64_t r = 0; r < bq; r++) {
        const real *qr = q + r * ldq; /* (d) */
        real *sr = s + r * lds;       /* (bk) */
        for (int64_t c = 0; c < bk; c++) {
            const kvreal *kc = k + c * ldk; /* (d) */
            real acc = 0;
            for (int64_t t = 0; t < d; t++) acc += qr[t] * KV_TO_REAL(kc[t]);
            sr[c] = acc * scale;
        }
    }
}

static void R(pv_scalar)(int64_t bq, int64_t bk, int64_t dv, const real *p, int64_t ldp,
                         const kvreal *v, int64_t ldv, real *o, int64_t ldo) {
    for (int64_t r = 0; r < bq; r++) {
        const real *pr = p + r * ldp; /* (bk) */
        real *orow = o + r * ldo;     /* (dv) */
        for (int64_t j = 0; j < bk; j++) {
            const real w = pr[j];
            const kvreal *vj = v + j * ldv; /* (dv) */
            for (int64_t c = 0; c < dv; c++) orow[c] += w * KV_TO_REAL(vj[c]);
        }
    }
}

#if AC_KV_IS_REAL /* the kernels on reals alone */
static real R(rowmax_scalar)(const real *x, int64_t n);

static void R(qk_scalar)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq,
                         const real *k, int64_t pbk, real scale, real *s, int64_t lds,
                         real *rmax) {
    (void)pbk; /* packed rows are d values apart whatever the block's size */
    R(qkd_scalar)(bq, bk, d, q, ldq, k, d, scale, s, lds);
    if (rmax)
        for (int64_t r = 0; r < bq; r++) {
            real mx = R(rowmax_scalar)(s + r * lds, bk);
            if (mx > rmax[r] || mx != mx) rmax[r] = mx;
        }
}


static real R(rowmax_scalar)(const real *x, int64_t n) {
    real mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        /* NaN wins and stays: a NaN score must poison its row, not vanish. */
        if (x[i] > mx || x[i] != x[i]) mx = x[i];
        if (mx != mx) break;
    }
    return mx;
}

static real R(expsum_scalar)(real *x, int64_t n, real shift) {
    real sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = R_EXP(x[i] - shift);
        sum += x[i];
    }
    return sum;
}

#endif /* AC_KV_IS_REAL */

#endif
