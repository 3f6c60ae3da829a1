/* kern_avx512_bf16.c — the bfloat16 dot-product micro-kernels (AVX512_BF16),
 * for attention whose q, k and v are all bfloat16 (bf16dot.c).
 *
 * vdpbf16ps takes, in each 32-bit lane, a pair of bfloat16 from each source,
 * multiplies the two pairs element by element and adds both products to a
 * float32 accumulator: 32 multiply-adds per instruction where an FMA on
 * floats does 16.  Both products are exact in float32 (8-bit significands);
 * only the sums round, as with FMAs on the widened values, but the two of a
 * pair are added odd first, so the order of the sum differs from the
 * widening kernels'.  It treats subnormal inputs as zero and flushes
 * subnormal results to zero.
 *
 * So each operand is laid out in pairs along the axis the product sums over:
 *   Q·Kᵀ sums over d:     Q rows as pairs (q[2p], q[2p+1]); K packed as
 *                         kp[p][c] = (k[c][2p], k[c][2p+1]), dp = ⌈d/2⌉ rows of
 *                         ldkt keys, zero-padded (an odd d's last pair, and
 *                         the keys past the block);
 *   P·V sums over keys:   P rows as pairs (p[2t], p[2t+1]), rounded to
 *                         bfloat16 (as GPU flash kernels round P); V packed as
 *                         vp[t][c] = (v[2t][c], v[2t+1][c]), ⌈bk/2⌉ rows of ldvp
 *                         columns, zero-padded.
 * Register tiles as the float32 AVX-512 kernels': 6 rows × 4 vectors (24
 * accumulators + 4 K or V vectors + 1 broadcast pair).
 *
 * Compiled for AVX512_BF16 by the target pragma; bf16dot.c calls these only
 * when the avx512 kernels are in use and supported() says the CPU has it.
 */
#include "internal.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512bf16,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512bf16,avx2,fma")
#endif
#include <immintrin.h>

#define R 6              /* rows of a register tile */
#define C 4              /* vectors of a register tile */
#define VL 16            /* float32 lanes (and bfloat16 pairs) a vector */
#define W (C * VL)       /* keys (Q·Kᵀ) or columns (P·V) of a register tile */

#define PAIRS(x) ((__m512bh)(x))

static inline uint32_t pair(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

/* kp = a K block (bk keys of d values, ldk apart) as d-pairs, (dp, ldkt).
 * Each pair is two neighbouring bfloat16 of a key, one 32-bit word: a row of
 * kp gathers that word from 16 keys at once (the keys past the block as 0).
 * An odd d's last pair would read past its key's row, so it is built by hand,
 * as is everything when 16 keys' offsets do not fit the gather's 32 bits. */
static void pack_k(int64_t bk, int64_t d, const uint16_t *k, int64_t ldk, uint32_t *kp) {
    const int64_t ldkt = AC_BF16DOT_LDKT(bk), dp = (d + 1) / 2;
    const int64_t whole = ldk <= INT32_MAX / VL && ldk >= -(INT32_MAX / VL) ? d / 2 : 0;
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)(whole ? ldk : 0)));
    for (int64_t p = 0; p < whole; p++)
        for (int64_t c = 0; c < ldkt; c += VL) {
            const int64_t left = bk - c;
            const __mmask16 m = left >= VL ? (__mmask16)0xFFFF
                                : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            const void *base = k + (left > 0 ? c : 0) * ldk + 2 * p;
            const __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, base, 2);
            _mm512_storeu_si512(kp + p * ldkt + c, g);
        }
    for (int64_t p = whole; p < dp; p++) {
        uint32_t *row = kp + p * ldkt;
        const int64_t t = 2 * p;
        for (int64_t c = 0; c < bk; c++)
            row[c] = pair(k[c * ldk + t], t + 1 < d ? k[c * ldk + t + 1] : 0);
        for (int64_t c = bk; c < ldkt; c++) row[c] = 0;
    }
}

/* vp = a V block (bk keys of dv values, ldv apart) as key pairs, (⌈bk/2⌉, ldvp):
 * two rows interleaved 16 columns at a time, the column tail by hand. */
static void pack_v(int64_t bk, int64_t dv, const uint16_t *v, int64_t ldv, uint32_t *vp) {
    const int64_t ldvp = AC_BF16DOT_LDVP(dv);
    /* lane 2i takes a[i], lane 2i + 1 takes b[i]: the low 16 of 32 from each */
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                            40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                            1, 32, 0);
    for (int64_t t = 0; t < bk; t += 2) {
        const uint16_t *a = v + t * ldv, *b = t + 1 < bk ? a + ldv : NULL;
        uint32_t *row = vp + t / 2 * ldvp;
        int64_t c = 0;
        for (; c + VL <= dv; c += VL) {
            const __m512i x = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + c)));
            const __m512i y = b ? _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b + c)))
                                : _mm512_setzero_si512();
            _mm512_storeu_si512(row + c, _mm512_permutex2var_epi16(x, lo_idx, y));
        }
        for (; c < dv; c++) row[c] = pair(a[c], b ? b[c] : 0);
        for (; c < ldvp; c++) row[c] = 0;
    }
}

/* qp = Q rows (bfloat16, ldq apart) as d-pairs, (rows, dp), an odd d padded
 * with 0.  For an even d a row's pairs are its values as they lie. */
static void pack_q(int64_t rows, int64_t d, const uint16_t *q, int64_t ldq, uint32_t *qp) {
    const int64_t dp = (d + 1) / 2;
    for (int64_t r = 0; r < rows; r++) {
        if (d % 2 == 0) {
            __builtin_memcpy(qp + r * dp, q + r * ldq, (size_t)d * sizeof *q);
            continue;
        }
        for (int64_t p = 0; p < dp; p++)
            qp[r * dp + p] = pair(q[r * ldq + 2 * p], 2 * p + 1 < d ? q[r * ldq + 2 * p + 1] : 0);
    }
}

/* ---- S = scale · Q·Kᵀ ---------------------------------------------------- */

/* One register tile (as qk_tile in kern_simd_ops.h): `valid` of its nvec·16
 * columns are keys; the row maxima stay vectors across a row's tiles. */
static inline __attribute__((always_inline)) void qk_tile(
    int rows, int nvec, int64_t dp, const uint32_t *qp, int64_t ldq, const uint32_t *kp,
    int64_t ldkt, float scale, float *s, int64_t lds, __m512 *mx, __mmask16 *nan,
    float *tail_max, int64_t valid) {
    __m512 acc[R][C];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < nvec; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t p = 0; p < dp; p++) {
        __m512i kv[C];
        for (int j = 0; j < nvec; j++) kv[j] = _mm512_loadu_si512(kp + p * ldkt + j * VL);
        for (int i = 0; i < rows; i++) {
            uint32_t qw; /* a pair of q as one word (q may be bfloat16 as it lies) */
            __builtin_memcpy(&qw, qp + i * ldq + p, sizeof qw);
            const __m512i qb = _mm512_set1_epi32((int)qw);
            for (int j = 0; j < nvec; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], PAIRS(qb), PAIRS(kv[j]));
        }
    }
    const __m512 vs = _mm512_set1_ps(scale);
    for (int i = 0; i < rows; i++) {
        float *si = s + i * lds;
        if (valid == (int64_t)nvec * VL) {
            for (int j = 0; j < nvec; j++) {
                const __m512 x = _mm512_mul_ps(acc[i][j], vs);
                _mm512_storeu_ps(si + j * VL, x);
                mx[i] = _mm512_max_ps(mx[i], x);
                nan[i] |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
            }
        } else { /* the last keys of the block */
            float m = -INFINITY;
            for (int j = 0; j < nvec; j++) {
                const int64_t left = valid - j * VL;
                const __mmask16 k = left >= VL ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
                const __m512 x = _mm512_mul_ps(acc[i][j], vs);
                _mm512_mask_storeu_ps(si + j * VL, k, x);
                if (_mm512_mask_cmp_ps_mask(k, x, x, _CMP_UNORD_Q)) m = NAN;
                if (m == m) {
                    const float h = _mm512_mask_reduce_max_ps(k, x);
                    if (h > m) m = h;
                }
            }
            tail_max[i] = m;
        }
    }
}

static inline __attribute__((always_inline)) void qk_rows(
    int rows, int64_t bk, int64_t dp, const uint32_t *qp, int64_t ldq, const uint32_t *kp,
    int64_t ldkt, float scale, float *s, int64_t lds, float *rmax) {
    __m512 mx[R];
    __mmask16 nan[R];
    float tail[R];
    for (int i = 0; i < rows; i++) {
        mx[i] = _mm512_set1_ps(-INFINITY);
        nan[i] = 0;
        tail[i] = -INFINITY;
    }
    int64_t c0 = 0;
    for (; c0 + W <= bk; c0 += W)
        qk_tile(rows, C, dp, qp, ldq, kp + c0, ldkt, scale, s + c0, lds, mx, nan, tail, W);
    if (c0 < bk)
        qk_tile(rows, (int)((bk - c0 + VL - 1) / VL), dp, qp, ldq, kp + c0, ldkt, scale, s + c0,
                lds, mx, nan, tail, bk - c0);
    if (!rmax) return;
    for (int i = 0; i < rows; i++) {
        float m = nan[i] ? NAN : _mm512_reduce_max_ps(mx[i]);
        if (tail[i] > m || tail[i] != tail[i]) m = tail[i];
        if (m > rmax[i] || m != m) rmax[i] = m;
    }
}

/* s = scale · Q·Kᵀ for bq rows of qp (dp pairs a row, ldq apart) against the
 * first bk keys of a block packed from pbk keys; rmax as the float32 qk. */
static void qk(int64_t bq, int64_t bk, int64_t dp, const uint32_t *qp, int64_t ldq,
               const uint32_t *kp, int64_t pbk, float scale, float *s, int64_t lds, float *rmax) {
    const int64_t ldkt = AC_BF16DOT_LDKT(pbk);
    int64_t r0 = 0;
    for (; r0 + R <= bq; r0 += R)
        qk_rows(R, bk, dp, qp + r0 * ldq, ldq, kp, ldkt, scale, s + r0 * lds, lds,
                rmax ? rmax + r0 : NULL);
    if (r0 < bq)
        qk_rows((int)(bq - r0), bk, dp, qp + r0 * ldq, ldq, kp, ldkt, scale, s + r0 * lds, lds,
                rmax ? rmax + r0 : NULL);
}

/* ---- the weights: exp, straight to bfloat16 pairs -------------------------
 * P·V takes the weights rounded to bfloat16, so they need not be the float32
 * kernels' exps first: e^x = 2^t with t = x·log2 e, f = t − ⌊t⌋ (one
 * vreduceps) and 2^f by a polynomial of degree 5 on [0, 1) (fitted for
 * relative error, constant term 1 so that e^0 = 1 exactly), scaled by
 * 2^⌊t⌋ (vscalefps floors t itself): within 2·10⁻⁷ of e^x, relative, in
 * float32 arithmetic (x as exact as the float32 exp takes it), in 10
 * operations a vector where the float32 exp (a degree-7 series after a
 * two-part ln 2 reduction, and its range checks) takes 17; that exp was the
 * largest part of a dot-product tile that is not a product.  t < −126
 * (below the smallest normal; −inf: a hidden key) gives 0 as the float32 exp
 * does; NaN stays NaN.  The weights are summed as float32, before rounding. */
static inline __m512 exp_weights(__m512 x) {
    const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f));
    const __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); /* t − ⌊t⌋ */
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.001867131912149489f), f,
                               _mm512_set1_ps(0.00901702605187893f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05579991638660431f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24016444385051727f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931512951850891f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    /* lanes t >= -126 or NaN keep their value; the rest (and -inf) are 0 */
    const __mmask16 keep = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    return _mm512_maskz_scalef_ps(keep, p, t);
}

/* pp = exp(s − shift) for the first `seen` of a row's cols scores, rounded to
 * bfloat16 (nearest even) as key pairs, ⌈cols/2⌉ of them, 0 past `seen`;
 * returns the sum of the float32 weights. */
static float exp_pairs(const float *s, int64_t seen, int64_t cols, float shift, uint32_t *pp) {
    const __m512 vs = _mm512_set1_ps(shift);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 2 * VL <= seen; c += 2 * VL) { /* 32 weights: 16 pairs */
        const __m512 e0 = exp_weights(_mm512_sub_ps(_mm512_loadu_ps(s + c), vs));
        const __m512 e1 = exp_weights(_mm512_sub_ps(_mm512_loadu_ps(s + c + VL), vs));
        acc0 = _mm512_add_ps(acc0, e0);
        acc1 = _mm512_add_ps(acc1, e1);
        _mm512_storeu_si512(pp + c / 2, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    }
    for (; c < cols; c += 2 * VL) { /* the rest: the weights past `seen` are 0 */
        const int64_t left = seen - c, lc = cols - c;
        const __mmask16 k0 = left >= VL ? (__mmask16)0xFFFF
                             : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        const __mmask16 k1 = left >= 2 * VL ? (__mmask16)0xFFFF
                             : left > VL ? (__mmask16)((1u << (left - VL)) - 1) : 0;
        const __m512 x0 = _mm512_sub_ps(_mm512_maskz_loadu_ps(k0, s + c), vs);
        const __m512 x1 = _mm512_sub_ps(_mm512_maskz_loadu_ps(k1, s + c + VL), vs);
        const __m512 e0 = _mm512_maskz_mov_ps(k0, exp_weights(x0));
        const __m512 e1 = _mm512_maskz_mov_ps(k1, exp_weights(x1));
        acc0 = _mm512_add_ps(acc0, e0);
        acc1 = _mm512_add_ps(acc1, e1);
        const int64_t npairs = lc >= 2 * VL ? VL : (lc + 1) / 2;
        _mm512_mask_storeu_epi32(pp + c / 2, (__mmask16)((1u << npairs) - 1),
                                 (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* ---- O += P·V ------------------------------------------------------------ */

static inline __attribute__((always_inline)) void pv_tile(
    int rows, int nvec, int64_t bk2, const uint32_t *pp, int64_t ldpp, const uint32_t *vp,
    int64_t ldvp, float *o, int64_t ldo, const float *alpha, int64_t valid) {
    __m512 acc[R][C];
    __mmask16 last = valid >= (int64_t)nvec * VL ? (__mmask16)0xFFFF
                                                : (__mmask16)((1u << (valid - (nvec - 1) * VL)) - 1);
    for (int i = 0; i < rows; i++) {
        const __m512 a = _mm512_set1_ps(alpha ? alpha[i] : 1.0f); /* x·1 = x: no change */
        for (int j = 0; j < nvec; j++) {
            const __mmask16 k = j == nvec - 1 ? last : (__mmask16)0xFFFF;
            acc[i][j] = _mm512_mul_ps(a, _mm512_maskz_loadu_ps(k, o + i * ldo + j * VL));
        }
    }
    for (int64_t t = 0; t < bk2; t++) {
        __m512i vv[C];
        for (int j = 0; j < nvec; j++) vv[j] = _mm512_loadu_si512(vp + t * ldvp + j * VL);
        for (int i = 0; i < rows; i++) {
            const __m512i pb = _mm512_set1_epi32((int)pp[i * ldpp + t]);
            for (int j = 0; j < nvec; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], PAIRS(pb), PAIRS(vv[j]));
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < nvec; j++)
            _mm512_mask_storeu_ps(o + i * ldo + j * VL, j == nvec - 1 ? last : (__mmask16)0xFFFF,
                                  acc[i][j]);
}

/* o (bq, dv; ldo apart) = α·o + P·V: pp (bq, bk2 pairs; ldpp apart) against vp
 * (bk2 pair rows of ldvp columns); alpha one a row (NULL: 1), applied as o is
 * loaded into the accumulators (the same product as a pass of o *= α before). */
static void pv(int64_t bq, int64_t bk2, int64_t dv, const uint32_t *pp, int64_t ldpp,
               const uint32_t *vp, int64_t ldvp, float *o, int64_t ldo, const float *alpha) {
    for (int64_t c0 = 0; c0 < dv; c0 += W) {
        const int64_t valid = dv - c0 < W ? dv - c0 : W;
        const int nvec = (int)((valid + VL - 1) / VL);
        int64_t r0 = 0;
        if (nvec == C && valid == W)
            for (; r0 + R <= bq; r0 += R)
                pv_tile(R, C, bk2, pp + r0 * ldpp, ldpp, vp + c0, ldvp, o + r0 * ldo + c0, ldo,
                        alpha ? alpha + r0 : NULL, W);
        for (; r0 < bq; r0 += R) {
            const int rows = (int)(bq - r0 < R ? bq - r0 : R);
            pv_tile(rows, nvec, bk2, pp + r0 * ldpp, ldpp, vp + c0, ldvp, o + r0 * ldo + c0, ldo,
                    alpha ? alpha + r0 : NULL, valid);
        }
    }
}

/* The bfloat16 dot-product roof: independent vdpbf16ps chains, as the FMA
 * probe; flops counts 2 multiply-adds a lane a step (4 FLOPs). */
static float dot_probe(int64_t iters, int64_t *flops) {
    __m512 acc[16];
    const __m512i a = _mm512_set1_epi32(0x3f803f80), b = _mm512_set1_epi32(0x33d633d6);
    for (int c = 0; c < 16; c++) acc[c] = _mm512_set1_ps((float)c);
    for (int64_t i = 0; i < iters; i++)
        for (int c = 0; c < 16; c++) acc[c] = _mm512_dpbf16_ps(acc[c], PAIRS(a), PAIRS(b));
    *flops = iters * 16 * VL * 4;
    __m512 s = _mm512_setzero_ps();
    for (int c = 0; c < 16; c++) s = _mm512_add_ps(s, acc[c]);
    return _mm512_reduce_add_ps(s);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* Outside the target region: runs on any x86 CPU.  AVX512_BF16 is CPUID
 * leaf 7, subleaf 1, EAX bit 5 (read directly: not every compiler's
 * __builtin_cpu_supports knows it). */
#include <cpuid.h>
static int bf16dot_supported(void) {
    unsigned a, b, c, d;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) return 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
}

const ac_bf16dot_ops ac_bf16dot_avx512 = {
    .supported = bf16dot_supported,
    .pack_q = pack_q,
    .pack_k = pack_k,
    .pack_v = pack_v,
    .qk = qk,
    .exp_pairs = exp_pairs,
    .pv = pv,
    .dot_probe = dot_probe,
};

#else /* not x86 with GCC/Clang: never supported */
const ac_bf16dot_ops ac_bf16dot_avx512 = {.supported = NULL};
#endif
