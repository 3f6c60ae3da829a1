/* internal.h — what the algorithm files share: the micro-kernel table that
 * each ISA fills in, workspace allocation, argument checks.
 *
 * The algorithms (softmax.c, scores.c, flash.c) are written once against the
 * table below; an ISA file (kern_scalar.c, ...) supplies the inner loops.
 * Adding an ISA means adding one file and one line in runtime.c.
 */
#ifndef ATTNCORE_INTERNAL_H
#define ATTNCORE_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "attncore.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* The inner loops one ISA provides, for one element type.
 *
 * pack:   kp = a K block (bk, d) in the layout qk reads (Kᵀ for the SIMD
 *         kernels); kp holds ac_kpack_size(K, bk, d) values.  Done once per
 *         block and call, so its cost is spread over every Q block.
 * qk:     s[r*lds + c] = scale * <q_r, k_c> for the first bk keys of a block
 *         packed from pbk keys (bk <= pbk)                       S tile (bq, bk)
 *         and, if rmax is not NULL, rmax[r] = max(rmax[r], max_c s[r, c]),
 *         NaN-propagating: the scale and the running max are fused into the
 *         store of the tile.
 * pv:     o[r*ldo + c] += sum_j p[r*ldp + j] * v[j*ldv + c]  O tile (bq, dv)
 *         plain IEEE arithmetic (0 · NaN is NaN); ac_pv_causal keeps masked
 *         keys out where that matters.
 * rowmax: the NaN-propagating max of x[0..n), -inf for n == 0.
 * expsum: x[i] = exp(x[i] - shift) in place; returns the sum.
 */
#define AC_KERNEL_FIELDS(real, suf)                                                      \
    void (*pack_##suf)(int64_t bk, int64_t d, const real *k, int64_t ldk, real *kp);      \
    void (*qk_##suf)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq,       \
                     const real *kp, int64_t pbk, real scale, real *s, int64_t lds,       \
                     real *rmax);                                                         \
    void (*pv_##suf)(int64_t bq, int64_t bk, int64_t dv, const real *p, int64_t ldp,      \
                     const real *v, int64_t ldv, real *o, int64_t ldo);                   \
    real (*rowmax_##suf)(const real *x, int64_t n);                                       \
    real (*expsum_##suf)(real *x, int64_t n, real shift);

typedef struct {
    const char *name;
    int64_t block_q, block_k; /* default tile sizes for this ISA (float32) */
    int64_t kt_pad;           /* a packed block holds d * round_up(bk, kt_pad) values */
    AC_KERNEL_FIELDS(float, f32)
    AC_KERNEL_FIELDS(double, f64)
    /* the probes behind the benchmarks' roofs (probes.c), in float32 */
    float (*fma_probe)(int64_t iters, int64_t *flops); /* independent FMA chains */
    float (*read_probe)(const float *x, int64_t n);    /* streaming sum */
} ac_kernels;

extern const ac_kernels ac_kernels_scalar;
extern const ac_kernels ac_kernels_avx2;
extern const ac_kernels ac_kernels_avx512;

/* Values in one packed K block of up to bk keys of dimension d. */
static inline int64_t ac_kpack_size(const ac_kernels *K, int64_t bk, int64_t d) {
    int64_t pad = K->kt_pad > 0 ? K->kt_pad : 1;
    return ((bk + pad - 1) / pad) * pad * (d > 0 ? d : 1);
}

/* The table in use (never NULL). */
const ac_kernels *ac_kernels_active(void);

/* Workspace: counted allocations.  ac_ws_alloc returns NULL on overflow or
 * failure; ac_ws_free takes the size it was given. */
void *ac_ws_alloc(int64_t count, int64_t elem_size);
void ac_ws_free(void *p, int64_t count, int64_t elem_size);

/* Shared checks of an ac_attn_args; need_v = 0 for the score table alone. */
int ac_check_attn(const ac_attn_args *a, const void *q, const void *k, const void *v,
                  const void *out, int need_v);

/* a*b into *r, 0 on overflow or a negative operand. */
static inline int ac_mul(int64_t a, int64_t b, int64_t *r) {
    if (a < 0 || b < 0) return 0;
    return !__builtin_mul_overflow(a, b, r);
}

/* Softmax of one row in place (softmax.c); returns its log-sum-exp. */
float ac_softmax_row_f32(const ac_kernels *K, float *y, int64_t n);
double ac_softmax_row_f64(const ac_kernels *K, double *y, int64_t n);

/* O += P·V over a tile whose row r sees only its first clamp(e0 + r, 0, cols)
 * keys (e0 >= cols: no mask in the tile).  For a causal tile of rows from i0
 * and keys from j0, e0 = i0 + 1 + (m - n) - j0, unclamped.  Masked keys never reach a row,
 * even when their values are inf or NaN (tiles.c). */
void ac_pv_causal_f32(const ac_kernels *K, int64_t rows, int64_t cols, int64_t dv,
                      const float *p, int64_t ldp, const float *v, int64_t ldv, float *o,
                      int64_t ldo, int64_t e0);
void ac_pv_causal_f64(const ac_kernels *K, int64_t rows, int64_t cols, int64_t dv,
                      const double *p, int64_t ldp, const double *v, int64_t ldv, double *o,
                      int64_t ldo, int64_t e0);

/* Causal: the rows [0, i1) of an (n, m) problem see at least one key of
 * [0, end) and none after it (0 <= end <= m). */
static inline int64_t ac_causal_end(int64_t i1, int64_t n, int64_t m) {
    int64_t e = i1 + (m - n);
    return e < 0 ? 0 : (e > m ? m : e);
}

#define AC_NUM_THREADS(nt) ((nt) > 0 ? (nt) : ac_max_threads())

#endif
