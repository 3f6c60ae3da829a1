/* kern_avx2.c — the micro-kernels for AVX2 + FMA: 8 floats or 4 doubles a
 * vector, 16 vector registers.
 *
 * Compiled for AVX2/FMA/F16C by the target pragma, called only after
 * avx2_supported (at the end, outside the pragma) has seen the CPU support
 * all three.  Register tiles: Q·Kᵀ 6 rows
 * × 2 vectors and P·V 6 rows × 2 vectors (12 accumulators + 2 loads + 1
 * broadcast).
 * AVX2 has no scalef, so exp builds 2^n from exponent bits: for a softmax's
 * vectors (every exponent small) by one add to p's exponent field, otherwise
 * in two halves so that n = 128 (x near ln FLT_MAX) does not overflow early.
 *
 * The bodies are kern_simd_ops.h (the kernels on reals: exp, expsum, rowmax,
 * qk, the probes) and kern_simd_kv.h (the loaders of K and V: pack, qkd,
 * pv), included below once per element type, and kern_simd_kv.h twice more
 * for the 16-bit caches (float16, bfloat16) and once for the int8 cache;
 * kern_simd_undef.h ends each
 * element type's section.  The table at the end takes every function they
 * define (qk_avx2_f32, pack_avx2_f16, ...) by AC_KERNEL_SETS (internal.h).
 */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#if defined(__clang__) /* clang has no target pragma, but applies an attribute to a region */
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include <immintrin.h>

#include "internal.h"
#include "kern_avx2_sums.h"

/* r[0..7] = the rows of an 8×8 block, transposed in place (24 shuffles where
 * the scalar transpose moves 64 floats one by one), for packing Kᵀ. */
static inline void transpose8_f32(__m256 r[8]) {
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) { /* r[4g + j], lane L: rows 4g..4g+3 at column 4L + j */
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int j = 0; j < 4; j++) {
        t[j] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x20);
        t[4 + j] = _mm256_permute2f128_ps(r[j], r[4 + j], 0x31);
    }
    for (int i = 0; i < 8; i++) r[i] = t[i];
}

#define QK_R 6
#define QK_C 2
#define PV_R 6
#define PROBE_CHAINS 12
#define QKD_ACC 8   /* accumulators of qkd's register tile: few rows × keys */
#define PV_FEW_ACC 12 /* accumulators of pv's tile for a few rows (decode) */
#define PV_C 2

static inline double hsum_f64(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
static inline double hmax_f64(__m256d v) {
    __m128d s = _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_max_sd(s, _mm_unpackhi_pd(s, s)));
}

/* 2^n for integral n in [-126, 127] (float) / [-1022, 1023] (double), from bits */
static inline __m256 pow2_f32(__m256 n) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
static inline __m256d pow2_f64(__m256d n) {
    __m256i e = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n));
    e = _mm256_add_epi64(e, _mm256_set1_epi64x(1023));
    return _mm256_castsi256_pd(_mm256_slli_epi64(e, 52));
}

/* p·2^n by adding n to p's exponent field: exact, and one integer add, while
 * the result is a normal number — n <= 126 (float) / 1022 (double), which
 * x <= fast_hi ensures (p's own exponent is 0 or -1). */
static inline __m256 ldexp_bits_f32(__m256 p, __m256 n) {
    return _mm256_castsi256_ps(_mm256_add_epi32(
        _mm256_castps_si256(p), _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23)));
}
static inline __m256d ldexp_bits_f64(__m256d p, __m256d n) {
    return _mm256_castsi256_pd(_mm256_add_epi64(
        _mm256_castpd_si256(p), _mm256_slli_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n)), 52)));
}

/* The general finish: p·2^n, then the lanes out of range: x > hi -> inf,
 * x < lo -> 0, NaN -> NaN.  2^n is built in two halves so that n = 128
 * (x near ln FLT_MAX) does not overflow early. */
#define AC_EXP_FINISH(suf, VT_, ps, lo, hi)                                                   \
    static inline VT_ exp_finish_##suf(VT_ p, VT_ n, VT_ x) {                                 \
        VT_ n1 = _mm256_floor_##ps(_mm256_mul_##ps(n, _mm256_set1_##ps(0.5)));                \
        VT_ y = _mm256_mul_##ps(_mm256_mul_##ps(p, pow2_##suf(n1)),                          \
                                pow2_##suf(_mm256_sub_##ps(n, n1)));                          \
        y = _mm256_blendv_##ps(y, _mm256_set1_##ps(INFINITY),                                 \
                               _mm256_cmp_##ps(x, _mm256_set1_##ps(hi), _CMP_GT_OQ));         \
        y = _mm256_blendv_##ps(y, _mm256_setzero_##ps(),                                      \
                               _mm256_cmp_##ps(x, _mm256_set1_##ps(lo), _CMP_LT_OQ));         \
        return _mm256_blendv_##ps(y, x, _mm256_cmp_##ps(x, x, _CMP_UNORD_Q));                 \
    }
/* The fast way, for a vector whose every lane is <= fast_hi (87 / 708): every
 * vector of a softmax, whose exponents are <= 0.  No clamp before the
 * reduction and p·2^n in one add; a lane below lo (or -inf) is then cleared
 * by the mask, whatever garbage its unclamped n made, and a NaN lane, which
 * the unordered compare keeps, is NaN already (cvt(NaN) adds 0 to p's bits).
 * Where both apply the two ways give the same bits: below fast_hi the clamp
 * changes nothing. */
#define AC_EXP_FAST(suf, VT_, ps, lo, fast_hi)                                                \
    static inline int exp_fast_ok_##suf(VT_ x) {                                              \
        return !_mm256_movemask_##ps(_mm256_cmp_##ps(x, _mm256_set1_##ps(fast_hi), _CMP_GT_OQ)); \
    }                                                                                         \
    static inline VT_ exp_fast_finish_##suf(VT_ p, VT_ n, VT_ x) {                            \
        return _mm256_and_##ps(ldexp_bits_##suf(p, n),                                        \
                               _mm256_cmp_##ps(x, _mm256_set1_##ps(lo), _CMP_NLT_UQ));        \
    }
AC_EXP_FINISH(f32, __m256, ps, -87.33654f, 88.72283f)
AC_EXP_FINISH(f64, __m256d, pd, -708.3964185322641, 709.782712893384)
AC_EXP_FAST(f32, __m256, ps, -87.33654f, 87.0f)
AC_EXP_FAST(f64, __m256d, pd, -708.3964185322641, 708.0)

/* ---- float32 ---- */
#define real float
#define FN(x) x##_avx2_f32
#define VT __m256
#define VL 8
#define V_LOADU _mm256_loadu_ps
#define V_STOREU _mm256_storeu_ps
#define V_SET1 _mm256_set1_ps
#define V_ZERO _mm256_setzero_ps
#define V_FMA _mm256_fmadd_ps
#define V_MUL _mm256_mul_ps
#define V_DIV _mm256_div_ps
#define V_ADD _mm256_add_ps
#define V_SUB _mm256_sub_ps
#define V_MAX _mm256_max_ps
#define V_MIN _mm256_min_ps
#define V_HMAX hmax_f32
#define V_HSUM hsum_f32
#define V_TRANSPOSE transpose8_f32
#define V_HSUM8 hsum8_f32
#define VN_T __m256
#define VN_INIT _mm256_setzero_ps()
#define VN_ACC(acc, v) _mm256_or_ps((acc), _mm256_cmp_ps((v), (v), _CMP_UNORD_Q))
#define VN_ANY(acc) (_mm256_movemask_ps(acc) != 0)
#define V_ROUND(x) _mm256_round_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_EXP_CLAMP(x) V_MIN(V_MAX((x), V_SET1(EXP_LO)), V_SET1(EXP_HI))
#define V_EXP_FINISH exp_finish_f32
#define V_EXP_FAST_OK exp_fast_ok_f32
#define V_EXP_FAST_FINISH exp_fast_finish_f32
#define EXP_LO -87.33654f
#define EXP_HI 88.72283f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define LOG2E 1.44269504088896341f
#define EXP_DEG 7
#define kvreal float
#define V_LOADU_KV V_LOADU
#define KV_TO_REAL(x) (x)
#include "kern_simd_ops.h"
#include "kern_simd_kv.h"

/* ---- float16 K/V, float32 arithmetic: the same vocabulary, loads converted ---- */
#undef FN
#undef kvreal
#undef V_LOADU_KV
#undef KV_TO_REAL
#define FN(x) x##_avx2_f16
#define kvreal uint16_t
#define V_LOADU_KV(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define KV_TO_REAL(x) _cvtsh_ss(x)
#include "kern_simd_kv.h"
#undef V_LOADU_KV
#undef KV_TO_REAL
#undef FN

/* ---- bfloat16 K/V: the top half of a float32, widened by a shift ---- */
#define FN(x) x##_avx2_bf16
#define V_LOADU_KV(p) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define KV_TO_REAL(x) ac_bf16_to_float(x)
#include "kern_simd_kv.h"
#undef V_LOADU_KV
#undef KV_TO_REAL
#undef FN
#undef kvreal

/* ---- int8 K/V (an int8 cache, unscaled): sign-extended, then converted ---- */
#define FN(x) x##_avx2_i8
#define kvreal int8_t
#define V_LOADU_KV(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define KV_TO_REAL(x) ((float)(x))
#include "kern_simd_kv.h"
#include "kern_simd_undef.h"

/* ---- float64 ---- */
#define real double
#define FN(x) x##_avx2_f64
#define VT __m256d
#define VL 4
#define V_LOADU _mm256_loadu_pd
#define V_STOREU _mm256_storeu_pd
#define V_SET1 _mm256_set1_pd
#define V_ZERO _mm256_setzero_pd
#define V_FMA _mm256_fmadd_pd
#define V_MUL _mm256_mul_pd
#define V_DIV _mm256_div_pd
#define V_ADD _mm256_add_pd
#define V_SUB _mm256_sub_pd
#define V_MAX _mm256_max_pd
#define V_MIN _mm256_min_pd
#define V_HMAX hmax_f64
#define V_HSUM hsum_f64
#define VN_T __m256d
#define VN_INIT _mm256_setzero_pd()
#define VN_ACC(acc, v) _mm256_or_pd((acc), _mm256_cmp_pd((v), (v), _CMP_UNORD_Q))
#define VN_ANY(acc) (_mm256_movemask_pd(acc) != 0)
#define V_ROUND(x) _mm256_round_pd((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_EXP_CLAMP(x) V_MIN(V_MAX((x), V_SET1(EXP_LO)), V_SET1(EXP_HI))
#define V_EXP_FINISH exp_finish_f64
#define V_EXP_FAST_OK exp_fast_ok_f64
#define V_EXP_FAST_FINISH exp_fast_finish_f64
#define EXP_LO -708.3964185322641
#define EXP_HI 709.782712893384
#define LN2_HI 6.93147180369123816490e-01
#define LN2_LO 1.90821492927058770002e-10
#define LOG2E 1.44269504088896338700e+00
#define EXP_DEG 13
#define kvreal double
#define V_LOADU_KV V_LOADU
#define KV_TO_REAL(x) (x)
#include "kern_simd_ops.h"
#include "kern_simd_kv.h"

#include "kern_simd_undef.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* Outside the target region: it runs on any x86 CPU, to ask whether this
 * one may run the rest. */
static int avx2_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && ac_cpu_has_f16c();
}

const ac_kernels ac_kernels_avx2 = {
    .name = "avx2",
    .supported = avx2_supported,
    /* 128×128 float32 tiles: the S tile (64 KiB) and a K and a V block at
     * d = 64 (32 KiB each) stay in the 1 MiB L2 while the Q block's rows
     * cycle through L1.  Measured against 64 and 256 on both sides with
     * B=1, H=8, d=64/128, n=1024-4096: 128×128 was within 3% of the best
     * everywhere, 64×64 up to 12% slower. */
    .block_q = 128, .block_k = 128,
    .kt_pad = QK_C * 8,
    .edge_rows = 5 * QK_R,
    AC_KERNEL_SETS(avx2),
    .i8dot = &ac_i8dot_avx2, /* int8 decode by vpmaddwd (kern_avx2_i8dot.c) */
};

#else
#include "internal.h"
const ac_kernels ac_kernels_avx2 = {.name = "avx2"};
#endif
