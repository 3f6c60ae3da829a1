/* kern_avx512.c — the micro-kernels for AVX-512 (F, DQ): 16 floats or 8
 * doubles a vector, 32 vector registers.
 *
 * Every kernel in this file is compiled for AVX-512 by the target pragma
 * and is only ever called after avx512_supported (at the end, outside the
 * pragma) has seen the CPU support it.
 * Register tiles: Q·Kᵀ and P·V both 6 rows × 4 vectors (24 accumulators + 4
 * K or V vectors + 1 broadcast).  Q·Kᵀ at 8 rows × 2 vectors, one broadcast a
 * pair of FMAs, ran at 77 % of a Zen 4 core's FMA roof (tools/kernel_timing.c,
 * d = 64) against 93 % at 6 × 4, one broadcast for four.
 *
 * The bodies are kern_simd_ops.h (the kernels on reals: exp, expsum, rowmax,
 * qk, the probes) and kern_simd_kv.h (the loaders of K and V: pack, qkd,
 * pv), included below once per element type, and kern_simd_kv.h twice more
 * for the 16-bit caches (float16, bfloat16) and once for the int8 cache;
 * kern_simd_undef.h ends each
 * element type's section.  The table at the end takes every function they
 * define (qk_avx512_f32, pack_avx512_f16, ...) by AC_KERNEL_SETS (internal.h).
 */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#if defined(__clang__) /* clang has no target pragma, but applies an attribute to a region */
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma,f16c")
#endif
#include <immintrin.h>

#include "internal.h"

#define QK_R 6
#define QK_C 4
#define PV_R 6
#define PROBE_CHAINS 16
#define QKD_ACC 16   /* accumulators of qkd's register tile: few rows × keys */
#define PV_FEW_ACC 24 /* accumulators of pv's tile for a few rows (decode) */
#define PV_C 4

/* One Newton step on r ≈ 1/d: r + r·(1 − d·r), which squares the relative
 * error.  d = ±inf or 0 are not given (the soft-cap's d lies in [1, e^40]). */
static inline __m512 recip_nr_f32(__m512 d) {
    const __m512 r = _mm512_rcp14_ps(d);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1)), r);
}

static inline __m512d recip_nr_f64(__m512d d) {
    __m512d r = _mm512_rcp14_pd(d);
    r = _mm512_fmadd_pd(r, _mm512_fnmadd_pd(d, r, _mm512_set1_pd(1)), r);
    return _mm512_fmadd_pd(r, _mm512_fnmadd_pd(d, r, _mm512_set1_pd(1)), r);
}

#include "kern_avx512_sums.h"

/* r[0..15] = the rows of a 16×16 block, transposed in place: three rounds of
 * shuffles (pairs of floats, 128-bit lanes, then lanes across registers),
 * 64 instructions where the scalar transpose moves 256 floats one by one.
 * For packing Kᵀ (kern_simd_kv.h). */
static inline void transpose16_f32(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) { /* lane L: (r_i, r_i+1) at columns 4L, 4L+1 | 4L+2, 4L+3 */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* r[4g + j], lane L: rows 4g..4g+3 at column 4L + j */
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int j = 0; j < 4; j++) { /* lanes (g, L): 0x88 takes lanes 0 and 2 of each, 0xdd 1 and 3 */
        t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
        t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    }
    for (int j = 0; j < 4; j++) { /* column c = 4L + j: lane g from r[4g + j]'s lane L */
        r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
        r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
    }
}

/* ---- float32 ---- */
#define real float
#define FN(x) x##_avx512_f32
#define VT __m512
#define VL 16
#define V_LOADU _mm512_loadu_ps
#define V_STOREU _mm512_storeu_ps
#define V_SET1 _mm512_set1_ps
#define V_ZERO _mm512_setzero_ps
#define V_FMA _mm512_fmadd_ps
#define V_MUL _mm512_mul_ps
#define V_DIV _mm512_div_ps
/* 1/d: the 14-bit estimate and one Newton step (2^-28, under float's ulp),
 * for the soft-cap, where a division would cost as much as the rest */
#define V_RECIP(d) recip_nr_f32(d)
#define V_ADD _mm512_add_ps
#define V_SUB _mm512_sub_ps
#define V_MAX _mm512_max_ps
#define V_MIN _mm512_min_ps
#define V_HMAX _mm512_reduce_max_ps
#define V_HSUM _mm512_reduce_add_ps
#define V_TRANSPOSE transpose16_f32 /* optional: VL vectors of VL lanes, transposed */
#define V_HSUM8 hsum8_f32
#define V_HSUM16 hsum16_f32
#define VN_T __mmask16
#define VN_INIT ((__mmask16)0)
#define VN_ACC(acc, v) ((acc) | _mm512_cmp_ps_mask((v), (v), _CMP_UNORD_Q))
#define VN_ANY(acc) ((acc) != 0)
#define V_ROUND(x) _mm512_roundscale_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* Held at EXP_LO from below (max with the constant first keeps NaN): a lane
 * far below it would make scalef produce a subnormal, a microcode assist that
 * doubled the exp pass under ALiBi's large negative scores; the mask below
 * sets such lanes to 0 either way, so no result changes. */
#define V_EXP_CLAMP(x) V_MAX(V_SET1(EXP_LO), (x))
/* scalef is p·2^n with the exponent handled in hardware: no bit tricks, no
 * overflow at n = 128; the two masks then set the out-of-range lanes. */
#define V_EXP_FINISH(p, n, x)                                                                 \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask((x), V_SET1(EXP_LO), _CMP_LT_OQ),                 \
                         _mm512_mask_blend_ps(_mm512_cmp_ps_mask((x), V_SET1(EXP_HI), _CMP_GT_OQ), \
                                              _mm512_scalef_ps((p), (n)), V_SET1(INFINITY)),   \
                         V_ZERO())
/* The fast way, for a vector whose every lane lies in [EXP_LO, 87] or is NaN
 * (every vector of a softmax whose keys are all visible: exponents <= 0, and
 * not far below): no clamp and no range masks, scalef alone; the same bits
 * as the full way there (the clamp and masks change no such lane). */
#define V_EXP_FAST_OK(x)                                                                      \
    (!(_mm512_cmp_ps_mask((x), V_SET1(EXP_LO), _CMP_LT_OQ) |                                  \
       _mm512_cmp_ps_mask((x), V_SET1(87.0f), _CMP_GT_OQ)))
#define V_EXP_FAST_FINISH(p, n, x) _mm512_scalef_ps((p), (n))
#define EXP_LO -87.33654f /* ln(FLT_MIN) */
#define EXP_HI 88.72283f  /* ln(FLT_MAX) */
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define LOG2E 1.44269504088896341f
#define EXP_DEG 7
#define V_EXP_SCALE _mm512_scalef_ps
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
#define FN(x) x##_avx512_f16
#define kvreal uint16_t
#define V_LOADU_KV(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define KV_TO_REAL(x) _cvtsh_ss(x)
#include "kern_simd_kv.h"
#undef V_LOADU_KV
#undef KV_TO_REAL
#undef FN

/* ---- bfloat16 K/V: the top half of a float32, widened by a shift ---- */
#define FN(x) x##_avx512_bf16
#define V_LOADU_KV(p) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define KV_TO_REAL(x) ac_bf16_to_float(x)
#include "kern_simd_kv.h"
#undef V_LOADU_KV
#undef KV_TO_REAL
#undef FN
#undef kvreal

/* ---- int8 K/V (an int8 cache, unscaled): sign-extended, then converted ---- */
#define FN(x) x##_avx512_i8
#define kvreal int8_t
#define V_LOADU_KV(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p))))
#define KV_TO_REAL(x) ((float)(x))
#include "kern_simd_kv.h"
#include "kern_simd_undef.h"

/* ---- float64 ---- */
#define real double
#define FN(x) x##_avx512_f64
#define VT __m512d
#define VL 8
#define V_LOADU _mm512_loadu_pd
#define V_STOREU _mm512_storeu_pd
#define V_SET1 _mm512_set1_pd
#define V_ZERO _mm512_setzero_pd
#define V_FMA _mm512_fmadd_pd
#define V_MUL _mm512_mul_pd
#define V_DIV _mm512_div_pd
#define V_RECIP(d) recip_nr_f64(d) /* the estimate and two Newton steps: 2^-56 */
#define V_ADD _mm512_add_pd
#define V_SUB _mm512_sub_pd
#define V_MAX _mm512_max_pd
#define V_MIN _mm512_min_pd
#define V_HMAX _mm512_reduce_max_pd
#define V_HSUM _mm512_reduce_add_pd
#define VN_T __mmask8
#define VN_INIT ((__mmask8)0)
#define VN_ACC(acc, v) ((acc) | _mm512_cmp_pd_mask((v), (v), _CMP_UNORD_Q))
#define VN_ANY(acc) ((acc) != 0)
#define V_ROUND(x) _mm512_roundscale_pd((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_EXP_CLAMP(x) V_MAX(V_SET1(EXP_LO), (x)) /* as for float: no subnormal scalef */
#define V_EXP_FINISH(p, n, x)                                                                 \
    _mm512_mask_blend_pd(_mm512_cmp_pd_mask((x), V_SET1(EXP_LO), _CMP_LT_OQ),                 \
                         _mm512_mask_blend_pd(_mm512_cmp_pd_mask((x), V_SET1(EXP_HI), _CMP_GT_OQ), \
                                              _mm512_scalef_pd((p), (n)), V_SET1(INFINITY)),   \
                         V_ZERO())
#define V_EXP_FAST_OK(x) /* as for float */                                                 \
    (!(_mm512_cmp_pd_mask((x), V_SET1(EXP_LO), _CMP_LT_OQ) |                                  \
       _mm512_cmp_pd_mask((x), V_SET1(708.0), _CMP_GT_OQ)))
#define V_EXP_FAST_FINISH(p, n, x) _mm512_scalef_pd((p), (n))
#define EXP_LO -708.3964185322641 /* ln(DBL_MIN) */
#define EXP_HI 709.782712893384   /* ln(DBL_MAX) */
#define LN2_HI 6.93147180369123816490e-01
#define LN2_LO 1.90821492927058770002e-10
#define LOG2E 1.44269504088896338700e+00
#define EXP_DEG 13
#define V_EXP_SCALE _mm512_scalef_pd
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
static int avx512_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && ac_cpu_has_f16c();
}

const ac_kernels ac_kernels_avx512 = {
    .name = "avx512",
    .supported = avx512_supported,
    /* 128×128 float32 tiles: the S tile (64 KiB) and a K and a V block at
     * d = 64 (32 KiB each) stay in the 1 MiB L2 while the Q block's rows
     * cycle through L1.  Measured against 64 and 256 on both sides with
     * B=1, H=8, d=64/128, n=1024-4096: 128×128 was within 3% of the best
     * everywhere, 64×64 up to 12% slower. */
    .block_q = 128, .block_k = 128,
    .kt_pad = QK_C * 16,
    .edge_rows = 5 * QK_R,
    AC_KERNEL_SETS(avx512),
    .bf16dot = &ac_bf16dot_avx512, /* where the CPU has AVX512_BF16 (its own supported()) */
    .i8dot = &ac_i8dot_avx512,     /* where the CPU has AVX512_VNNI (its own supported()) */
};

#else /* not x86 with GCC/Clang: the table exists but the CPU check never picks it */
#include "internal.h"
const ac_kernels ac_kernels_avx512 = {.name = "avx512"};
#endif
