/* kern_avx512_i8dot.c — a decode step's Q·Kᵀ and P·V over an int8 cache as
 * 16-bit integer dot products (AVX512_VNNI's vpdpwssd), for int8.c.
 *
 * The widening kernels (kern_simd_kv.h, qkd and pv) turn every int8 value
 * into a float32 — a sign extension and a conversion, two instructions for
 * sixteen values, on the ports the FMAs use — so an int8 step costs about
 * as many instructions as a float32 one while reading a quarter of the
 * bytes, and is bound by them, not by memory.  Q·Kᵀ: each query row is
 * rounded once per score tile to 16-bit integers, with a scale of its own:
 *   q16_it = round(q_it · 32767 / max_t |q_it|)
 * and a K row's int8 values, sign-extended to 16 bits (32 a vector, once for
 * all the query rows), go into vpdpwssd: 32 products a vector, summed in
 * pairs into 16 int32 lanes, exactly.  So
 *   s_ij = scale · (max|q_i| / 32767) · Σ_t q16_it · k8_jt
 * the integer sum exact: each lane's (|q16·k8| ≤ 32767·128, two a lane a
 * step, d/32 steps: under 2^31 while d ≤ AC_I8DOT_MAX_D), and the sixteen
 * lanes summed as integers too while d ≤ AC_I8DOT_EXACT_D (512: the whole
 * sum under 32767·128·d < 2^31), then converted to float32 once; past that,
 * each lane converted and the sixteen summed in float32.
 *
 * What this adds to the error is the rounding of q alone: each q_it is off
 * by at most max|q_i| / 65534, each score by at most
 * scale · ks_j · max|q_i| / 65534 · Σ_t |k8_jt|, against the key's own
 * rounding to int8, max|k_j| / 254 a value: about 1/258 of it for rows of
 * like spread (docs/usage.md, "An int8 cache").  A row that is non-finite,
 * or whose max|q| lies outside [2^-100, 2^100] and is not 0, is declined, and
 * with it the call: the caller runs the widening kernel, as for
 * d > AC_I8DOT_MAX_D (so NaN, inf and overflow come out as they do there).
 *
 * P·V rounds the weights the same way, per row and block of keys (below).
 *
 * Compiled for AVX512_VNNI (with BW and VL) by the target pragma; int8.c
 * calls them only when supported() (at the end, outside the pragma) says the
 * CPU has them.
 */
#include "internal.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")
#endif
#include <immintrin.h>

#include "kern_avx512_sums.h"

/* Each stream is prefetched twice: into L1 a few keys ahead of its loads
 * (KEYS_AHEAD for K, PV_KEYS for V), and into L2 far ahead (KEYS_FAR,
 * PV_FAR).  An int8 row is short (128 bytes at d = 128), so the L1 distance
 * alone is 2 KB, about one miss's latency of the stream: the L2 prefetch
 * keeps the stream's misses in flight early.  On a Xeon with AVX512_VNNI
 * (tools/cache_speed.py's case, paired calls in one process) the far
 * prefetch took a step 1.04x (MHA) and 1.07x (GQA 32/8) faster by the
 * median; 64 to 256 keys for K read alike. */
#define KEYS_AHEAD 16 /* keys ahead that the K stream is prefetched into L1 */
#define KEYS_FAR 128  /* and into L2 */

/* acc += the products of a's and b's 16-bit pairs, summed a pair to each
 * int32 lane (vpdpwssd), in place.  Written as one instruction of inline asm,
 * whose "+v" operand keeps each accumulator in its register: through the
 * intrinsic, GCC 12 copied every accumulator of P·V's loop to another
 * register and back around each step (32 moves and two spills a pair of
 * keys; with the asm a GQA step took 0.96× the time, tools/ab.py). */
static inline __attribute__((always_inline)) void dpwssd(__m512i *acc, __m512i a, __m512i b) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(*acc) : "v"(a), "v"(b));
}

/* The first n lanes of 16 (all for n ≥ 16, none for n ≤ 0); of 32. */
static inline __mmask16 first16(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}
static inline __mmask32 first32(int64_t n) {
    return n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}

/* q16 = the row rounded as above, zero-padded to d32 values; returns the
 * factor (max|q| / 32767) that undoes it, or -1 for a row to decline. */
static float quantise_row(const float *q, int64_t d, int64_t d32, int16_t *q16) {
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    const __m512 inf = _mm512_set1_ps(INFINITY);
    for (int64_t t = 0; t < d; t += 16) {
        const __mmask16 m = first16(d - t);
        const __m512 x = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, q + t));
        bad |= _mm512_cmp_ps_mask(x, inf, _CMP_NLT_UQ); /* inf or NaN */
        amax = _mm512_max_ps(amax, x);
    }
    const float top = _mm512_reduce_max_ps(amax);
    if (bad || (top != 0 && !(top >= 0x1p-100f && top <= 0x1p100f))) return -1;
    const __m512 inv = _mm512_set1_ps(top > 0 ? 32767.0f / top : 0.0f);
    for (int64_t t = 0; t < d32; t += 16) {
        const __mmask16 m = first16(d - t);
        const __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, q + t), inv));
        _mm256_storeu_si256((__m256i *)(q16 + t), _mm512_cvtepi32_epi16(r));
    }
    return top / 32767.0f;
}

/* s[i, u] = f[i] · Σ q16[i]·k[u] for `rows` query rows (q16, d32 apart)
 * against `keys` keys, each K row loaded once for all the rows. */
static inline __attribute__((always_inline)) void dot_keys(int rows, int keys, int64_t d,
                                                           int64_t d32, const int16_t *q16,
                                                           const int8_t *k, int64_t ldk,
                                                           const float *f, __m512i perm, __m512 fv,
                                                           float *s, int64_t lds) {
    __m512i acc[16];
    for (int a = 0; a < rows * keys; a++) acc[a] = _mm512_setzero_si512();
#define DOT_STEP(t, kload)                                                                    \
    do {                                                                                      \
        __m512i qv[4];                                                                        \
        for (int i = 0; i < rows; i++) qv[i] = _mm512_loadu_si512(q16 + i * d32 + (t));       \
        for (int u = 0; u < keys; u++) {                                                      \
            const __m512i kw = _mm512_cvtepi8_epi16(kload);                                   \
            for (int i = 0; i < rows; i++)                                                    \
                acc[u * rows + i] = _mm512_dpwssd_epi32(acc[u * rows + i], qv[i], kw);        \
        }                                                                                     \
    } while (0)
    int64_t t = 0;
    for (; t + 64 <= d; t += 64) { /* a cache line of each key a step, prefetched once */
        for (int u = 0; u < keys; u++) {
            __builtin_prefetch(k + (u + KEYS_AHEAD) * ldk + t);
            __builtin_prefetch(k + (u + KEYS_FAR) * ldk + t, 0, 1);
        }
        DOT_STEP(t, _mm256_loadu_si256((const __m256i *)(k + u * ldk + t)));
        DOT_STEP(t + 32, _mm256_loadu_si256((const __m256i *)(k + u * ldk + t + 32)));
    }
    if (t + 32 <= d) {
        DOT_STEP(t, _mm256_loadu_si256((const __m256i *)(k + u * ldk + t)));
        t += 32;
    }
    if (t < d) { /* the last d % 32 values: q16 is zero past d, K is not read past it */
        const __mmask32 m = first32(d - t);
        DOT_STEP(t, _mm256_maskz_loadu_epi8(m, k + u * ldk + t));
    }
#undef DOT_STEP
    /* each accumulator's lanes summed: a full register tile's at once by the
     * transposing tree over the integers (lane u·rows + i: eight for one row,
     * sixteen for two or four), each key's sum converted to float32 once,
     * reordered to rows of keys (perm: lane i·keys + u), times each row's
     * factor, and each row's keys stored at once; past AC_I8DOT_EXACT_D,
     * where a key's sum may leave int32, and for the last keys of a tile and
     * three rows, one accumulator at a time in float32 */
    if (rows == 1 && keys == 8 && d <= AC_I8DOT_EXACT_D) {
        const __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(hsum8_i32(acc)), _mm512_set1_ps(f[0]));
        _mm_storeu_ps(s, _mm512_castps512_ps128(x));
        _mm_storeu_ps(s + 4, _mm512_extractf32x4_ps(x, 2));
        return;
    }
    if (rows * keys == 16 && d <= AC_I8DOT_EXACT_D) {
        const __m512 sums = _mm512_cvtepi32_ps(hsum16_i32(acc));
        const __m512 x = _mm512_mul_ps(_mm512_permutexvar_ps(perm, sums), fv);
        if (rows == 2) {
            _mm256_storeu_ps(s, _mm512_castps512_ps256(x));
            _mm256_storeu_ps(s + lds, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
        } else {
            _mm_storeu_ps(s, _mm512_castps512_ps128(x));
            _mm_storeu_ps(s + lds, _mm512_extractf32x4_ps(x, 1));
            _mm_storeu_ps(s + 2 * lds, _mm512_extractf32x4_ps(x, 2));
            _mm_storeu_ps(s + 3 * lds, _mm512_extractf32x4_ps(x, 3));
        }
        return;
    }
    for (int u = 0; u < keys; u++)
        for (int i = 0; i < rows; i++)
            s[i * lds + u] = _mm512_reduce_add_ps(_mm512_cvtepi32_ps(acc[u * rows + i])) * f[i];
}

/* keys at a time for `rows` rows: 8 for one or two rows (8 or 16
 * accumulators; sixteen keys for one row left too few registers for their
 * addresses), 4 for three or four */
#define KEYS_FOR(rows) ((rows) <= 2 ? 8 : 4)

static inline __attribute__((always_inline)) void dot_rows(int rows, int64_t bk, int64_t d,
                                                           int64_t d32, const int16_t *q16,
                                                           const int8_t *k, int64_t ldk,
                                                           const float *f, float *s, int64_t lds) {
    const int keys = KEYS_FOR(rows);
    /* lane i·keys + u of the stored scores takes lane u·rows + i of the sums,
     * and row i's factor (a tile of sixteen: two rows or four) */
    int32_t idx[16] = {0};
    float fs[16] = {0};
    if (rows * keys == 16)
        for (int i = 0; i < rows; i++)
            for (int u = 0; u < keys; u++) {
                idx[i * keys + u] = u * rows + i;
                fs[i * keys + u] = f[i];
            }
    const __m512i perm = _mm512_loadu_si512(idx);
    const __m512 fv = _mm512_loadu_ps(fs);
    int64_t c = 0;
    for (; c + keys <= bk; c += keys)
        dot_keys(rows, keys, d, d32, q16, k + c * ldk, ldk, f, perm, fv, s + c, lds);
    for (; c < bk; c++) dot_keys(rows, 1, d, d32, q16, k + c * ldk, ldk, f, perm, fv, s + c, lds);
}

/* The kernel: as kv_i8.qkd, four query rows at a time; 0 (nothing to rely
 * on in s) where it declines. */
static int qkd_i8dot(int64_t bq, int64_t bk, int64_t d, const float *q, int64_t ldq,
                     const int8_t *k, int64_t ldk, float scale, float *s, int64_t lds) {
    if (d < 1 || d > AC_I8DOT_MAX_D) return 0;
    const int64_t d32 = (d + 31) / 32 * 32;
    int16_t q16[4 * AC_I8DOT_MAX_D];
    float f[4];
    for (int64_t r0 = 0; r0 < bq; r0 += 4) {
        const int rows = bq - r0 < 4 ? (int)(bq - r0) : 4;
        for (int i = 0; i < rows; i++) {
            const float back = quantise_row(q + (r0 + i) * ldq, d, d32, q16 + i * d32);
            if (back < 0) return 0;
            f[i] = scale * back;
        }
        float *sr = s + r0 * lds;
        switch (rows) { /* each count its own unrolled copy */
        case 4: dot_rows(4, bk, d, d32, q16, k, ldk, f, sr, lds); break;
        case 3: dot_rows(3, bk, d, d32, q16, k, ldk, f, sr, lds); break;
        case 2: dot_rows(2, bk, d, d32, q16, k, ldk, f, sr, lds); break;
        default: dot_rows(1, bk, d, d32, q16, k, ldk, f, sr, lds); break;
        }
    }
    return 1;
}

/* ---- O += P·V: the weights rounded to 16 bits, V's int8 values exactly ----
 * A block of PV_KEYS keys at a time: each row's weights (the softmax's
 * numerators times each value's scale, all ≥ 0) rounded to
 *   w16_ij = round(w_ij · 32767 / max_j w_ij)   (the max over the block)
 * and V's rows taken in pairs, the two keys' values of each column side by
 * side as 16-bit integers (an unpack of the two rows' bytes, then a sign
 * extension), so that vpdpwssd multiplies a pair of weights, broadcast, into
 * sixteen columns at once, exactly.  At the block's end each column's
 * integer sum, times max w / 32767, is added to O.  (The unpack works within
 * 128-bit lanes: one vector of a 32-column group holds columns 0-7 and
 * 16-23, the other 8-15 and 24-31, put back in order when added to O.)
 * The error: each weight off by at most max w / 65534 of its block. */
#define PV_KEYS 64
#define PV_FAR 256 /* keys ahead that V is prefetched into L2 (as KEYS_FAR) */

/* acc[i·ld + 2g], acc[i·ld + 2g+1] += the pair of keys whose 32 values of
 * group g are a and b (b zero for none), times each row's pair of weights tp
 * (the accumulators a flat array, ld a row). */
static inline __attribute__((always_inline)) void pv_dot(int rows, __m512i *acc, int ld, int g,
                                                         const int32_t *wp, int64_t tp, __m256i a,
                                                         __m256i b) {
    const __m512i lo = _mm512_cvtepi8_epi16(_mm256_unpacklo_epi8(a, b));
    const __m512i hi = _mm512_cvtepi8_epi16(_mm256_unpackhi_epi8(a, b));
    for (int i = 0; i < rows; i++) {
        const __m512i w = _mm512_set1_epi32(wp[i * (PV_KEYS / 2) + tp]);
        dpwssd(&acc[i * ld + 2 * g], lo, w);
        dpwssd(&acc[i * ld + 2 * g + 1], hi, w);
    }
}

/* The same for `groups` whole groups of the keys' rows va and vb. */
static inline __attribute__((always_inline)) void pv_pair(int rows, int groups, __m512i *acc,
                                                          const int32_t *wp, int64_t tp,
                                                          const int8_t *va, const int8_t *vb) {
    for (int g = 0; g < groups; g++)
        pv_dot(rows, acc, 2 * groups, g, wp, tp, _mm256_loadu_si256((const __m256i *)(va + 32 * g)),
               _mm256_loadu_si256((const __m256i *)(vb + 32 * g)));
}

/* o[:, 0 .. width) += f · (the block's integer sums), for `groups` groups
 * (the last `width - 32·(groups-1)` columns wide, masked where short) */
static inline __attribute__((always_inline)) void pv_add(int rows, int groups, __m512i *acc,
                                                         const float *f, int64_t width, float *o,
                                                         int64_t ldo) {
    for (int i = 0; i < rows; i++) {
        const __m512 fi = _mm512_set1_ps(f[i]);
        for (int g = 0; g < groups; g++) {
            const __m512 a = _mm512_cvtepi32_ps(acc[i * 2 * groups + 2 * g]);
            const __m512 b = _mm512_cvtepi32_ps(acc[i * 2 * groups + 2 * g + 1]);
            float *oc = o + i * ldo + 32 * g;
            const int64_t left = width - 32 * g; /* columns of this group */
            const __mmask16 m0 = first16(left), m1 = first16(left - 16);
            const __m512 x0 = _mm512_shuffle_f32x4(a, b, 0x44); /* columns 0-15 */
            const __m512 x1 = _mm512_shuffle_f32x4(a, b, 0xEE); /* 16-31 */
            _mm512_mask_storeu_ps(oc, m0, _mm512_fmadd_ps(x0, fi, _mm512_maskz_loadu_ps(m0, oc)));
            if (m1)
                _mm512_mask_storeu_ps(oc + 16, m1,
                                      _mm512_fmadd_ps(x1, fi, _mm512_maskz_loadu_ps(m1, oc + 16)));
        }
    }
}

/* One block of bt ≤ PV_KEYS keys for `rows` rows over the columns [0, dv):
 * whole groups `groups` at a time, then the last columns (dv % 32) masked. */
static inline __attribute__((always_inline)) void pv_block_rows(int rows, int groups, int64_t bt,
                                                                int64_t dv, const int32_t *wp,
                                                                const float *f, const int8_t *v,
                                                                int64_t ldv, float *o,
                                                                int64_t ldo) {
    __m512i acc[16];
    const int64_t whole = dv / 32 * 32;
    int64_t c0 = 0;
    for (; c0 + 32 * groups <= whole; c0 += 32 * groups) {
        for (int i = 0; i < rows; i++)
            for (int g = 0; g < 2 * groups; g++) acc[i * 2 * groups + g] = _mm512_setzero_si512();
        for (int64_t t = 0; t < bt; t += 2) {
            /* an odd block's last key pairs with itself, its partner's
             * weight 0 (wp is zero past bt): one loop, no branch in it */
            const int8_t *va = v + t * ldv + c0, *vb = t + 1 < bt ? va + ldv : va;
            __builtin_prefetch(va + PV_KEYS * ldv);
            __builtin_prefetch(va + (PV_KEYS + 1) * ldv);
            __builtin_prefetch(va + PV_FAR * ldv, 0, 1);
            __builtin_prefetch(va + (PV_FAR + 1) * ldv, 0, 1);
            pv_pair(rows, groups, acc, wp, t / 2, va, vb);
        }
        pv_add(rows, groups, acc, f, 32 * groups, o + c0, ldo);
    }
    for (; c0 < dv; c0 += 32) { /* one group at a time: whole ones, then the masked last */
        const int64_t left = dv - c0 < 32 ? dv - c0 : 32;
        const __mmask32 m = first32(left);
        __m512i acc1[8];
        for (int i = 0; i < rows; i++) acc1[2 * i] = acc1[2 * i + 1] = _mm512_setzero_si512();
        for (int64_t t = 0; t < bt; t += 2)
            pv_dot(rows, acc1, 2, 0, wp, t / 2, _mm256_maskz_loadu_epi8(m, v + t * ldv + c0),
                   t + 1 < bt ? _mm256_maskz_loadu_epi8(m, v + (t + 1) * ldv + c0)
                              : _mm256_setzero_si256());
        pv_add(rows, 1, acc1, f, left, o + c0, ldo);
    }
}

/* The weights of one block for up to 4 rows: wp (as int32 pairs of int16,
 * zero past bt) and the factors f = max w / 32767 that undo the rounding. */
static void pv_weights(int rows, int64_t bt, const float *p, int64_t ldp, int32_t *wp, float *f) {
    for (int i = 0; i < rows; i++) {
        const float *pr = p + i * ldp;
        __m512 top = _mm512_setzero_ps();
        for (int64_t t = 0; t < bt; t += 16) {
            const __mmask16 m = first16(bt - t);
            top = _mm512_max_ps(top, _mm512_maskz_loadu_ps(m, pr + t));
        }
        const float wmax = _mm512_reduce_max_ps(top);
        const __m512 inv = _mm512_set1_ps(wmax > 0 ? 32767.0f / wmax : 0.0f);
        int16_t *w16 = (int16_t *)(wp + i * (PV_KEYS / 2));
        for (int64_t t = 0; t < PV_KEYS; t += 16) {
            const __mmask16 m = first16(bt - t);
            const __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, pr + t), inv));
            _mm256_storeu_si256((__m256i *)(w16 + t), _mm512_cvtepi32_epi16(r));
        }
        f[i] = wmax / 32767.0f;
    }
}

/* The kernel: as kv_i8.pv (o += p·v, bq rows), four rows at a time; 0 (o
 * untouched) where a weight is negative or NaN, or a block's largest weight
 * is above 2^100 or below 2^-100 and not 0 (its rounding's scale would leave
 * float's range): then the widening kernel runs.  Decode's weights lie in
 * [0, max vs], so only values of an extreme size, or scores more than about
 * 69 below their row's max throughout a block, are declined.  One row (MHA
 * decode) is declined too: the pairs of V rows interleaved for vpdpwssd then
 * serve that row alone, and the widening kernel was the faster there —
 * as fast on an Intel Xeon (MHA step 1.01x, the build before this kernel
 * against it), 0.84-0.88x the time on an AMD Zen 4 (in one process, 15
 * rounds, H = 32, d = 128, m = 8192 and 32768). */
static int pv_i8dot(int64_t bq, int64_t bk, int64_t dv, const float *p, int64_t ldp,
                    const int8_t *v, int64_t ldv, float *o, int64_t ldo) {
    if (bq < 2) return 0;
    for (int64_t r = 0; r < bq; r++) /* first, before o is touched */
        for (int64_t t0 = 0; t0 < bk; t0 += PV_KEYS) {
            const int64_t bt = bk - t0 < PV_KEYS ? bk - t0 : PV_KEYS;
            __m512 top = _mm512_setzero_ps();
            __mmask16 bad = 0;
            for (int64_t t = 0; t < bt; t += 16) {
                const __mmask16 m = first16(bt - t);
                const __m512 x = _mm512_maskz_loadu_ps(m, p + r * ldp + t0 + t);
                bad |= _mm512_mask_cmp_ps_mask(m, x, _mm512_setzero_ps(), _CMP_NGE_UQ); /* < 0, NaN */
                top = _mm512_max_ps(top, x);
            }
            const float wmax = _mm512_reduce_max_ps(top);
            if (bad || !(wmax <= 0x1p100f) || (wmax > 0 && !(wmax >= 0x1p-100f))) return 0;
        }
    int32_t wp[4 * (PV_KEYS / 2)];
    float f[4];
    for (int64_t t0 = 0; t0 < bk; t0 += PV_KEYS) {
        const int64_t bt = bk - t0 < PV_KEYS ? bk - t0 : PV_KEYS;
        for (int64_t r0 = 0; r0 < bq; r0 += 4) {
            const int rows = bq - r0 < 4 ? (int)(bq - r0) : 4;
            pv_weights(rows, bt, p + r0 * ldp + t0, ldp, wp, f);
            const int8_t *vb = v + t0 * ldv;
            float *ob = o + r0 * ldo;
            switch (rows) { /* each count its own unrolled copy: 2 groups (64 columns) for
                               four or three rows, 4 (128) for two or one */
            case 4: pv_block_rows(4, 2, bt, dv, wp, f, vb, ldv, ob, ldo); break;
            case 3: pv_block_rows(3, 2, bt, dv, wp, f, vb, ldv, ob, ldo); break;
            case 2: pv_block_rows(2, 4, bt, dv, wp, f, vb, ldv, ob, ldo); break;
            default: pv_block_rows(1, 4, bt, dv, wp, f, vb, ldv, ob, ldo); break;
            }
        }
    }
    return 1;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* Outside the target region: runs on any x86 CPU.  AVX512_VNNI is CPUID
 * leaf 7, subleaf 0, ECX bit 11 (read directly, as kern_avx512_bf16.c reads
 * its bit); asked once (CPUID is dear in a VM, and int8.c asks every tile). */
#include <cpuid.h>
#include <stdatomic.h>
static int vnni_on_this_cpu(void) {
    unsigned a, b, c, d;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
        return 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 11));
}
static int i8dot_supported(void) {
    static _Atomic int known = -1; /* -1: not asked yet */
    int cpu = atomic_load(&known);
    if (cpu < 0) atomic_store(&known, cpu = vnni_on_this_cpu());
    return cpu;
}

const ac_i8dot_ops ac_i8dot_avx512 = {.supported = i8dot_supported, .qkd = qkd_i8dot, .pv = pv_i8dot};

#else /* not x86: nothing to run */
const ac_i8dot_ops ac_i8dot_avx512 = {.supported = NULL, .qkd = NULL, .pv = NULL};
#endif
