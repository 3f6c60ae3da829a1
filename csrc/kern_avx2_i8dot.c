/* kern_avx2_i8dot.c — a decode step's Q·Kᵀ and P·V over an int8 cache as
 * 16-bit integer dot products on AVX2 (vpmaddwd, then vpaddd), for int8.c.
 *
 * The same arithmetic as kern_avx512_i8dot.c, whose comments derive it (the
 * rounding of each query row, and of each row's weights per block of
 * PV_KEYS keys, to 16 bits; the bounds that rounding adds; what is
 * declined), at half the width and without AVX512_VNNI's fused step:
 * vpmaddwd multiplies sixteen 16-bit pairs and adds each pair into one of
 * eight int32 lanes, and a vpaddd adds those to the accumulator.  Where the
 * widening kernels (kern_simd_kv.h) spend four instructions turning sixteen
 * int8 values into two float32 vectors, on the ports the FMAs use, this
 * spends one sign extension, shared by all the query rows of a step.
 *
 * The int32 lanes stay exact while d ≤ AC_I8DOT_MAX_D: a lane of Q·Kᵀ takes
 * two products a step, d/16 steps, each at most 32767·128 < 2^22 in size, so
 * d/8 · 2^22 ≤ 2^31 at d = 4096; eight keys' lanes at a time are summed
 * as integers too while d ≤ AC_I8DOT_EXACT_D (each key's whole sum then
 * under 2^31), then converted once, as the AVX-512 kernels do.  The integer
 * sums are those of the AVX-512 kernels (the same rounding of q and of the
 * weights); only the order of the float32 additions after them differs.
 *
 * AVX2 has no byte-masked loads: a K row's last d % 16 values, and V's last
 * dv % 16 columns, are copied into a zeroed buffer first (load16).
 *
 * Compiled for AVX2 by the target pragma; the avx2 table, whose kernels all
 * need AVX2, holds it, so supported() asks for nothing more.
 */
#include <string.h>

#include "internal.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#include <immintrin.h>

#include "kern_avx2_sums.h"

/* *acc += x (vpaddd), in place: one instruction of inline asm, whose "+x"
 * operand keeps the accumulator in its register.  Through the intrinsic,
 * GCC 12 copied P·V's eight accumulators to other registers and back every
 * pair of keys, and, AVX2 having sixteen, spilled one to the stack: a
 * store and a load in the loop's chain of adds.  (A GQA step took 0.93×
 * the time with the asm in P·V, and 0.94-0.96× again with it in Q·Kᵀ too,
 * tools/ab.py.) */
static inline __attribute__((always_inline)) void add_in_place(__m256i *acc, __m256i x) {
    __asm__("vpaddd %1, %0, %0" : "+x"(*acc) : "x"(x));
}

/* Each stream is prefetched twice: into L1 a few keys ahead of its loads
 * (KEYS_AHEAD for K, PV_KEYS for V), and into L2 far ahead (KEYS_FAR,
 * PV_FAR), as kern_avx512_i8dot.c does. */
#define KEYS_AHEAD 16 /* keys ahead that the K stream is prefetched into L1 */
#define KEYS_FAR 128  /* and into L2 */

/* The lane mask of the first n of 8 float32 lanes (for maskload/maskstore). */
static inline __m256i first8(int64_t n) {
    const int c = n >= 8 ? 8 : n <= 0 ? 0 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Sixteen int8 values from p, of which the first n are read (n ≥ 16: all;
 * the rest zero). */
static inline __m128i load16(const int8_t *p, int64_t n) {
    if (n >= 16) return _mm_loadu_si128((const __m128i *)p);
    int8_t buf[16] = {0};
    memcpy(buf, p, (size_t)n);
    return _mm_loadu_si128((const __m128i *)buf);
}

/* x rounded to the nearest integers, as eight int16 */
static inline __m128i round16(__m256 x) {
    const __m256i r = _mm256_cvtps_epi32(x);
    return _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* q16 = the row rounded (q · 32767 / max|q|), zero-padded to d16 values;
 * returns the factor (max|q| / 32767) that undoes it, or -1 for a row to
 * decline (as kern_avx512_i8dot.c's). */
static float quantise_row(const float *q, int64_t d, int64_t d16, int16_t *q16) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 inf = _mm256_set1_ps(INFINITY);
    __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int64_t t = 0; t < d; t += 8) {
        const __m256 x = _mm256_and_ps(_mm256_maskload_ps(q + t, first8(d - t)), magnitude);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(x, inf, _CMP_NLT_UQ)); /* inf or NaN */
        amax = _mm256_max_ps(amax, x);
    }
    const float top = hmax_f32(amax);
    if (_mm256_movemask_ps(bad) || (top != 0 && !(top >= 0x1p-100f && top <= 0x1p100f))) return -1;
    const __m256 inv = _mm256_set1_ps(top > 0 ? 32767.0f / top : 0.0f);
    for (int64_t t = 0; t < d16; t += 8)
        _mm_storeu_si128((__m128i *)(q16 + t),
                         round16(_mm256_mul_ps(_mm256_maskload_ps(q + t, first8(d - t)), inv)));
    return top / 32767.0f;
}

/* acc[u·rows + i] = the int32 lanes of q16[i]·k[u] (eight lanes, summed
 * later) for `rows` query rows (q16, d16 apart) against `keys` keys, each K
 * row loaded once for all the rows. */
static inline __attribute__((always_inline)) void dot_lanes(int rows, int keys, int64_t d,
                                                            int64_t d16, const int16_t *q16,
                                                            const int8_t *k, int64_t ldk,
                                                            __m256i *acc) {
    for (int a = 0; a < rows * keys; a++) acc[a] = _mm256_setzero_si256();
#define DOT_STEP(t, kload)                                                                       \
    do {                                                                                         \
        for (int u = 0; u < keys; u++) {                                                         \
            const __m256i kw = _mm256_cvtepi8_epi16(kload);                                      \
            for (int i = 0; i < rows; i++)                                                       \
                add_in_place(&acc[u * rows + i],                                                 \
                             _mm256_madd_epi16(                                                  \
                                 _mm256_loadu_si256((const __m256i *)(q16 + i * d16 + (t))), kw)); \
        }                                                                                        \
    } while (0)
    for (int64_t t = 0; t < d; t += 64) /* the keys KEYS_AHEAD on, a line at a time */
        for (int u = 0; u < keys; u++) {
            __builtin_prefetch(k + (u + KEYS_AHEAD) * ldk + t);
            __builtin_prefetch(k + (u + KEYS_FAR) * ldk + t, 0, 1);
        }
    int64_t t = 0;
    for (; t + 16 <= d; t += 16) DOT_STEP(t, _mm_loadu_si128((const __m128i *)(k + u * ldk + t)));
    if (t < d) /* the last d % 16 values: q16 is zero past d, K is not read past it */
        DOT_STEP(t, load16(k + u * ldk + t, d - t));
#undef DOT_STEP
}

/* s[0 .. 8) = f · the sums of eight keys' lanes: as integers, each key's sum
 * converted to float32 once, while d ≤ AC_I8DOT_EXACT_D keeps it in int32;
 * past it each lane converted, then summed in float32 */
static inline void sum8_store(const __m256i *lanes, int64_t d, float f, float *s) {
    __m256 x;
    if (d <= AC_I8DOT_EXACT_D) {
        x = _mm256_cvtepi32_ps(hsum8_i32(lanes));
    } else {
        __m256 flat[8];
        float sum[8];
        for (int u = 0; u < 8; u++) flat[u] = _mm256_cvtepi32_ps(lanes[u]);
        hsum8_f32(flat, sum);
        x = _mm256_loadu_ps(sum);
    }
    _mm256_storeu_ps(s, _mm256_mul_ps(x, _mm256_set1_ps(f)));
}

/* s[i, :bk] = f[i] · q16[i]·K for `rows` rows, eight keys at a time: for one
 * row, eight keys' accumulators at once; for more, a key at a time (`rows`
 * accumulators: eight and more spilled), each key's lanes kept until eight
 * keys' are summed at once; the last bk % 8 keys one by one. */
static inline __attribute__((always_inline)) void dot_rows(int rows, int64_t bk, int64_t d,
                                                           int64_t d16, const int16_t *q16,
                                                           const int8_t *k, int64_t ldk,
                                                           const float *f, float *s, int64_t lds) {
    int64_t c = 0;
    for (; c + 8 <= bk; c += 8) {
        __m256i lanes[4][8];
        if (rows == 1) {
            dot_lanes(1, 8, d, d16, q16, k + c * ldk, ldk, lanes[0]);
        } else {
            for (int u = 0; u < 8; u++) {
                __m256i acc[4];
                dot_lanes(rows, 1, d, d16, q16, k + (c + u) * ldk, ldk, acc);
                for (int i = 0; i < rows; i++) lanes[i][u] = acc[i];
            }
        }
        for (int i = 0; i < rows; i++) sum8_store(lanes[i], d, f[i], s + i * lds + c);
    }
    for (; c < bk; c++) {
        __m256i acc[4];
        dot_lanes(rows, 1, d, d16, q16, k + c * ldk, ldk, acc);
        for (int i = 0; i < rows; i++) s[i * lds + c] = hsum_f32(_mm256_cvtepi32_ps(acc[i])) * f[i];
    }
}

/* The kernel: as kv_i8.qkd, four query rows at a time; 0 (nothing to rely
 * on in s) where it declines. */
static int qkd_i8dot(int64_t bq, int64_t bk, int64_t d, const float *q, int64_t ldq,
                     const int8_t *k, int64_t ldk, float scale, float *s, int64_t lds) {
    if (d < 1 || d > AC_I8DOT_MAX_D) return 0;
    const int64_t d16 = (d + 15) / 16 * 16;
    int16_t q16[4 * AC_I8DOT_MAX_D];
    float f[4];
    for (int64_t r0 = 0; r0 < bq; r0 += 4) {
        const int rows = bq - r0 < 4 ? (int)(bq - r0) : 4;
        for (int i = 0; i < rows; i++) {
            const float back = quantise_row(q + (r0 + i) * ldq, d, d16, q16 + i * d16);
            if (back < 0) return 0;
            f[i] = scale * back;
        }
        float *sr = s + r0 * lds;
        switch (rows) { /* each count its own unrolled copy */
        case 4: dot_rows(4, bk, d, d16, q16, k, ldk, f, sr, lds); break;
        case 3: dot_rows(3, bk, d, d16, q16, k, ldk, f, sr, lds); break;
        case 2: dot_rows(2, bk, d, d16, q16, k, ldk, f, sr, lds); break;
        default: dot_rows(1, bk, d, d16, q16, k, ldk, f, sr, lds); break;
        }
    }
    return 1;
}

/* ---- O += P·V: the weights rounded to 16 bits per block, V exactly ----
 * V's rows in pairs: the two keys' bytes of sixteen columns interleaved (an
 * unpack), sign-extended to 16 bits, so that vpmaddwd multiplies a pair of
 * weights, broadcast, into eight columns at once; a group is sixteen
 * columns, two accumulators, in order. */
#define PV_KEYS 64
#define PV_FAR 256 /* keys ahead that V is prefetched into L2 (as KEYS_FAR) */

/* acc[i·ld + 2g], acc[i·ld + 2g+1] += the pair of keys whose 16 values of
 * group g are a and b (b zero for none), times each row's pair of weights
 * tp (the accumulators a flat array, ld a row). */
static inline __attribute__((always_inline)) void pv_dot(int rows, __m256i *acc, int ld, int g,
                                                         const int32_t *wp, int64_t tp, __m128i a,
                                                         __m128i b) {
    const __m256i lo = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b)); /* columns 0-7 */
    const __m256i hi = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(a, b)); /* 8-15 */
    for (int i = 0; i < rows; i++) {
        const __m256i w = _mm256_set1_epi32(wp[i * (PV_KEYS / 2) + tp]);
        add_in_place(&acc[i * ld + 2 * g], _mm256_madd_epi16(lo, w));
        add_in_place(&acc[i * ld + 2 * g + 1], _mm256_madd_epi16(hi, w));
    }
}

/* o[:, 0 .. width) += f · (the block's integer sums), for `groups` groups
 * (the last `width - 16·(groups-1)` columns wide, masked where short) */
static inline __attribute__((always_inline)) void pv_add(int rows, int groups, __m256i *acc,
                                                         const float *f, int64_t width, float *o,
                                                         int64_t ldo) {
    for (int i = 0; i < rows; i++) {
        const __m256 fi = _mm256_set1_ps(f[i]);
        for (int h = 0; h < 2 * groups; h++) {
            float *oc = o + i * ldo + 8 * h;
            const int64_t left = width - 8 * h; /* columns of this half group */
            const __m256 x = _mm256_cvtepi32_ps(acc[i * 2 * groups + h]);
            if (left >= 8) {
                _mm256_storeu_ps(oc, _mm256_fmadd_ps(x, fi, _mm256_loadu_ps(oc)));
            } else if (left > 0) {
                const __m256i m = first8(left);
                _mm256_maskstore_ps(oc, m, _mm256_fmadd_ps(x, fi, _mm256_maskload_ps(oc, m)));
            }
        }
    }
}

/* One block of bt ≤ PV_KEYS keys for `rows` rows over the columns [0, dv):
 * whole groups `groups` at a time, then one at a time (the last one short). */
static inline __attribute__((always_inline)) void pv_block_rows(int rows, int groups, int64_t bt,
                                                                int64_t dv, const int32_t *wp,
                                                                const float *f, const int8_t *v,
                                                                int64_t ldv, float *o,
                                                                int64_t ldo) {
    __m256i acc[8];
    int64_t c0 = 0;
    for (; c0 + 16 * groups <= dv; c0 += 16 * groups) {
        for (int i = 0; i < rows; i++)
            for (int h = 0; h < 2 * groups; h++) acc[i * 2 * groups + h] = _mm256_setzero_si256();
        for (int64_t t = 0; t < bt; t += 2) {
            /* an odd block's last key pairs with itself, its partner's
             * weight 0 (wp is zero past bt): no branch in the loop */
            const int8_t *va = v + t * ldv + c0, *vb = t + 1 < bt ? va + ldv : va;
            __builtin_prefetch(va + PV_KEYS * ldv);
            __builtin_prefetch(vb + PV_KEYS * ldv);
            __builtin_prefetch(va + PV_FAR * ldv, 0, 1);
            __builtin_prefetch(vb + PV_FAR * ldv, 0, 1);
            for (int g = 0; g < groups; g++)
                pv_dot(rows, acc, 2 * groups, g, wp, t / 2,
                       _mm_loadu_si128((const __m128i *)(va + 16 * g)),
                       _mm_loadu_si128((const __m128i *)(vb + 16 * g)));
        }
        pv_add(rows, groups, acc, f, 16 * groups, o + c0, ldo);
    }
    for (; c0 < dv; c0 += 16) {
        const int64_t left = dv - c0;
        for (int i = 0; i < rows; i++) acc[2 * i] = acc[2 * i + 1] = _mm256_setzero_si256();
        for (int64_t t = 0; t < bt; t += 2)
            pv_dot(rows, acc, 2, 0, wp, t / 2, load16(v + t * ldv + c0, left),
                   t + 1 < bt ? load16(v + (t + 1) * ldv + c0, left) : _mm_setzero_si128());
        pv_add(rows, 1, acc, f, left < 16 ? left : 16, o + c0, ldo);
    }
}

/* The weights of one block for up to 4 rows: wp (as int32 pairs of int16,
 * zero past bt) and the factors f = max w / 32767 that undo the rounding. */
static void pv_weights(int rows, int64_t bt, const float *p, int64_t ldp, int32_t *wp, float *f) {
    for (int i = 0; i < rows; i++) {
        const float *pr = p + i * ldp;
        __m256 top = _mm256_setzero_ps();
        for (int64_t t = 0; t < bt; t += 8) top = _mm256_max_ps(top, _mm256_maskload_ps(pr + t, first8(bt - t)));
        const float wmax = hmax_f32(top);
        const __m256 inv = _mm256_set1_ps(wmax > 0 ? 32767.0f / wmax : 0.0f);
        int16_t *w16 = (int16_t *)(wp + i * (PV_KEYS / 2));
        for (int64_t t = 0; t < PV_KEYS; t += 8)
            _mm_storeu_si128((__m128i *)(w16 + t),
                             round16(_mm256_mul_ps(_mm256_maskload_ps(pr + t, first8(bt - t)), inv)));
        f[i] = wmax / 32767.0f;
    }
}

/* The kernel: as kv_i8.pv (o += p·v, bq rows), four rows at a time; 0 (o
 * untouched) where it declines: a weight negative or NaN, or a block's
 * largest weight above 2^100 or below 2^-100 and not 0 (as
 * kern_avx512_i8dot.c's). */
static int pv_i8dot(int64_t bq, int64_t bk, int64_t dv, const float *p, int64_t ldp,
                    const int8_t *v, int64_t ldv, float *o, int64_t ldo) {
    for (int64_t r = 0; r < bq; r++) /* first, before o is touched */
        for (int64_t t0 = 0; t0 < bk; t0 += PV_KEYS) {
            const int64_t bt = bk - t0 < PV_KEYS ? bk - t0 : PV_KEYS;
            __m256 top = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
            for (int64_t t = 0; t < bt; t += 8) {
                const __m256 x = _mm256_maskload_ps(p + r * ldp + t0 + t, first8(bt - t));
                bad = _mm256_or_ps(bad, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NGE_UQ));
                top = _mm256_max_ps(top, x);
            }
            const float wmax = hmax_f32(top);
            if (_mm256_movemask_ps(bad) || !(wmax <= 0x1p100f) || (wmax > 0 && !(wmax >= 0x1p-100f)))
                return 0;
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
            switch (rows) { /* each count its own unrolled copy: 1 group (16 columns) for
                               four or three rows, 2 for two, 4 for one */
            case 4: pv_block_rows(4, 1, bt, dv, wp, f, vb, ldv, ob, ldo); break;
            case 3: pv_block_rows(3, 1, bt, dv, wp, f, vb, ldv, ob, ldo); break;
            case 2: pv_block_rows(2, 2, bt, dv, wp, f, vb, ldv, ob, ldo); break;
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

/* Outside the target region: the avx2 table is chosen only where the CPU has
 * AVX2, all these need. */
static int i8dot_supported(void) { return 1; }

const ac_i8dot_ops ac_i8dot_avx2 = {.supported = i8dot_supported, .qkd = qkd_i8dot, .pv = pv_i8dot};

#else /* not x86: nothing to run */
const ac_i8dot_ops ac_i8dot_avx2 = {.supported = NULL, .qkd = NULL, .pv = NULL};
#endif
