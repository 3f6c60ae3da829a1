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
#include <stdatomic.h>
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
 * qkd:    qk straight from K rows (ldk apart), no packing, for a few query
 *         rows against many keys (decode): each K row is read once for all rows.
 * pv:     o[r*ldo + c] += sum_j p[r*ldp + j] * v[j*ldv + c]  O tile (bq, dv)
 * (pack, qkd and pv also come in an f16 form: float16 K/V converted as they
 * are loaded, F16C / AVX-512 in the SIMD sets, float32 arithmetic.)
 *         plain IEEE arithmetic (0 · NaN is NaN); ac_pv_causal keeps masked
 *         keys out where that matters.
 * rowmax: the NaN-propagating max of x[0..n), -inf for n == 0.
 * expsum: x[i] = exp(x[i] - shift) in place; returns the sum.
 */
/* The kernels on reals alone (scores, softmax), per compute type... */
#define AC_REAL_FIELDS(real, suf)                                                        \
    void (*qk_##suf)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq,       \
                     const real *kp, int64_t pbk, real scale, real *s, int64_t lds,       \
                     real *rmax);                                                         \
    real (*rowmax_##suf)(const real *x, int64_t n);                                       \
    real (*expsum_##suf)(real *x, int64_t n, real shift);
/* ...and those that read K or V, per (compute type, storage type). */
#define AC_KV_FIELDS(real, kvreal, suf)                                                  \
    void (*pack_##suf)(int64_t bk, int64_t d, const kvreal *k, int64_t ldk, real *kp);    \
    void (*pv_##suf)(int64_t bq, int64_t bk, int64_t dv, const real *p, int64_t ldp,      \
                     const kvreal *v, int64_t ldv, real *o, int64_t ldo);                 \
    void (*qkd_##suf)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq,      \
                      const kvreal *k, int64_t ldk, real scale, real *s, int64_t lds);

typedef struct {
    const char *name;
    int64_t block_q, block_k; /* default tile sizes for this ISA (float32) */
    int64_t kt_pad;           /* a packed block holds d * round_up(bk, kt_pad) values */
    AC_REAL_FIELDS(float, f32)
    AC_KV_FIELDS(float, float, f32)
    AC_REAL_FIELDS(double, f64)
    AC_KV_FIELDS(double, double, f64)
    AC_KV_FIELDS(float, uint16_t, f16) /* float16 K/V, float32 arithmetic */
    /* the probes behind the benchmarks' roofs (probes.c), in float32 */
    float (*fma_probe)(int64_t iters, int64_t *flops); /* independent FMA chains */
    float (*read_probe)(const float *x, int64_t n);    /* streaming sum */
} ac_kernels;

/* The typed entries of a table whose kernels are named name_<isa>_<type>. */
#define AC_KERNEL_ENTRIES(isa)                                                           \
    .pack_f32 = pack_##isa##_f32, .qk_f32 = qk_##isa##_f32, .pv_f32 = pv_##isa##_f32,    \
    .qkd_f32 = qkd_##isa##_f32, .rowmax_f32 = rowmax_##isa##_f32,                         \
    .expsum_f32 = expsum_##isa##_f32, .pack_f64 = pack_##isa##_f64, .qk_f64 = qk_##isa##_f64, \
    .pv_f64 = pv_##isa##_f64, .qkd_f64 = qkd_##isa##_f64, .rowmax_f64 = rowmax_##isa##_f64, \
    .expsum_f64 = expsum_##isa##_f64, .pack_f16 = pack_##isa##_f16, .pv_f16 = pv_##isa##_f16, \
    .qkd_f16 = qkd_##isa##_f16

extern const ac_kernels ac_kernels_scalar;
extern const ac_kernels ac_kernels_avx2;
extern const ac_kernels ac_kernels_avx512;

/* IEEE half -> float, exactly (subnormals, inf and NaN included). */
static inline float ac_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) { /* inf or NaN */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) { /* normal */
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) { /* zero */
        bits = sign;
    } else { /* subnormal: normalise */
        int shift = 0;
        while (!(man & 0x400u)) {
            man <<= 1;
            shift++;
        }
        bits = sign | ((uint32_t)(113 - shift) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    __builtin_memcpy(&f, &bits, sizeof f);
    return f;
}

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

/* ---- interruption ------------------------------------------------------
 * Each task loop asks ac_stop_poll before a task (and the long ones before
 * each tile): 1 = skip it.  Only the
 * calling thread (thread 0 of the team) calls the hook, and at most every
 * AC_POLL_SECONDS; once it says stop, every thread sees the flag.  Loops
 * that every thread of a team must run alike (those around an omp for) run
 * on and only skip the work inside. */
typedef struct {
    int (*fn)(void *ctx);
    void *ctx;
    _Atomic int stop;
    double next; /* when the hook may next be called (seconds) */
} ac_stop;
void ac_stop_init(ac_stop *s, const ac_attn_args *a);
int ac_stop_poll(ac_stop *s);
static inline int ac_stopped(ac_stop *s) {
    return atomic_load_explicit(&s->stop, memory_order_relaxed);
}

/* a*b into *r, 0 on overflow or a negative operand. */
static inline int ac_mul(int64_t a, int64_t b, int64_t *r) {
    if (a < 0 || b < 0) return 0;
    return !__builtin_mul_overflow(a, b, r);
}

/* a*b + c into *r, 0 on overflow or a negative operand. */
static inline int ac_muladd(int64_t a, int64_t b, int64_t c, int64_t *r) {
    if (c < 0 || !ac_mul(a, b, r)) return 0;
    return !__builtin_add_overflow(*r, c, r);
}

/* Softmax of one row in place (softmax.c); returns its log-sum-exp. */
float ac_softmax_row_f32(const ac_kernels *K, float *y, int64_t n);
double ac_softmax_row_f64(const ac_kernels *K, double *y, int64_t n);


/* ---- which keys a row sees ---------------------------------------------
 * For one (batch, head): row i sees the keys [lo(i), hi(i)) that the boolean
 * mask also allows.  hi and lo never decrease with i, which is what lets the
 * blockwise kernel skip whole blocks outside the band. */
typedef struct {
    int64_t n, m;             /* query rows; keys in play (key_lengths applied) */
    int causal;
    int64_t window;           /* 0: none */
    const uint8_t *mask;      /* (n, m) view for this (batch, head), or NULL */
    int64_t mask_rs, mask_cs; /* its strides in bytes */
} ac_vis;

static inline void ac_vis_init(ac_vis *v, const ac_attn_args *a, int64_t b, int64_t h) {
    v->n = a->n;
    v->m = a->m;
    if (a->key_lengths) {
        int64_t len = a->key_lengths[b];
        v->m = len < 0 ? 0 : (len < a->m ? len : a->m);
    }
    v->causal = a->causal;
    v->window = a->causal ? a->window : 0;
    v->mask = a->mask ? a->mask + b * a->mask_stride[0] + h * a->mask_stride[1] : NULL;
    v->mask_rs = a->mask_stride[2];
    v->mask_cs = a->mask_stride[3];
}

static inline int64_t ac_vis_hi(const ac_vis *v, int64_t i) {
    if (!v->causal) return v->m;
    int64_t e = i + 1 + (v->m - v->n);
    return e < 0 ? 0 : (e > v->m ? v->m : e);
}

static inline int64_t ac_vis_lo(const ac_vis *v, int64_t i) {
    if (v->window <= 0) return 0;
    int64_t lo = i + 1 + (v->m - v->n) - v->window, hi = ac_vis_hi(v, i);
    return lo < 0 ? 0 : (lo > hi ? hi : lo);
}

/* Rows [i0, i0+rows) see every key of [j0, j0+cols): nothing to mask. */
static inline int ac_vis_clear(const ac_vis *v, int64_t i0, int64_t rows, int64_t j0,
                               int64_t cols) {
    return !v->mask && j0 >= ac_vis_lo(v, i0 + rows - 1) && j0 + cols <= ac_vis_hi(v, i0);
}

/* Set s[r, c] = -inf where tile row r cannot see key j0+c (tiles.c).  Row r
 * is query i0 + r % period: period = rows for a plain Q block; decode stacks
 * the n rows of every query head of a GQA group, period = n. */
void ac_mask_tile_f32(const ac_vis *v, int64_t i0, int64_t rows, int64_t period, int64_t j0,
                      int64_t cols, float *s, int64_t lds);
void ac_mask_tile_f64(const ac_vis *v, int64_t i0, int64_t rows, int64_t period, int64_t j0,
                      int64_t cols, double *s, int64_t lds);

/* O += P·V for a tile of rows (as in ac_mask_tile) and keys from j0; keys a
 * row cannot see never reach it, even when their values are inf or NaN. */
void ac_pv_tile_f32(const ac_kernels *K, const ac_vis *vis, int64_t i0, int64_t rows,
                    int64_t period, int64_t j0, int64_t cols, int64_t dv, const float *p,
                    int64_t ldp, const float *v, int64_t ldv, float *o, int64_t ldo,
                    int v_finite);
int ac_all_finite_f32(const float *v, int64_t rows, int64_t cols, int64_t ld);
void ac_pv_tile_f64(const ac_kernels *K, const ac_vis *vis, int64_t i0, int64_t rows,
                    int64_t period, int64_t j0, int64_t cols, int64_t dv, const double *p,
                    int64_t ldp, const double *v, int64_t ldv, double *o, int64_t ldo,
                    int v_finite);
int ac_all_finite_f64(const double *v, int64_t rows, int64_t cols, int64_t ld);
void ac_pv_tile_f16(const ac_kernels *K, const ac_vis *vis, int64_t i0, int64_t rows,
                    int64_t period, int64_t j0, int64_t cols, int64_t dv, const float *p,
                    int64_t ldp, const uint16_t *v, int64_t ldv, float *o, int64_t ldo,
                    int v_finite);
int ac_all_finite_f16(const uint16_t *v, int64_t rows, int64_t cols, int64_t ld);

/* The merge of one block of rows: parts c at o[c] + r*o_stride, lse[c] +
 * r*lse_stride (merge.c); out rows ldo apart. */
void ac_merge_rows_f32(int64_t parts, int64_t rows, int64_t dv, const float *const *o,
                       int64_t o_stride, const float *const *lse, int64_t lse_stride, float *out,
                       int64_t ldo, float *lse_out);
void ac_merge_rows_f64(int64_t parts, int64_t rows, int64_t dv, const double *const *o,
                       int64_t o_stride, const double *const *lse, int64_t lse_stride,
                       double *out, int64_t ldo, double *lse_out);

/* The online softmax over a stream of score tiles (tiles.c): start zeroes
 * O (rows, dv) and sets m = -inf, l = 0; update folds in one tile whose row
 * maxima are bmax (P = exp(S - m') in place, the rescale of l and O);
 * finish divides by l and writes lse (0 and -inf for a row that saw nothing). */
#define AC_ONLINE_DECL(real, suf)                                                          \
    void ac_online_start_##suf(int64_t rows, real *mi, real *li, real *o, int64_t dv);      \
    void ac_online_update_##suf(const ac_kernels *K, int64_t rows, int64_t cols, real *s,  \
                                int64_t lds, const real *bmax, real *mi, real *li, real *o, \
                                int64_t dv);                                               \
    void ac_online_finish_##suf(int64_t rows, const real *mi, const real *li, real *o,     \
                                int64_t dv, real *lse);
AC_ONLINE_DECL(float, f32)
AC_ONLINE_DECL(double, f64)

/* Split-KV decode (decode.c): used by ac_flash when a GQA group stacks at
 * most AC_DECODE_MAX_ROWS query rows and there are keys for two chunks. */
#define AC_DECODE_MAX_ROWS 32
#define AC_DECODE_MIN_CHUNK 256
#define AC_DECODE_TASKS 16 /* tasks a decode step aims for (4 each for 4 threads) */
int ac_decode_applies(const ac_attn_args *a);
int ac_decode_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                  float *out, float *lse);
int ac_decode_f64(const ac_attn_args *a, const double *q, const double *k, const double *v,
                  double *out, double *lse);
int ac_decode_f16(const ac_attn_args *a, const float *q, const uint16_t *k, const uint16_t *v,
                  float *out, float *lse);

#define AC_NUM_THREADS(nt) ((nt) > 0 ? (nt) : ac_max_threads())

#endif
