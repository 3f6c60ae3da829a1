/* kern_neon.c — the micro-kernels for AArch64 Advanced SIMD (NEON): 4 floats
 * or 2 doubles a vector, 32 vector registers.
 *
 * NEON and its FMA are part of every AArch64 CPU, so this file needs no
 * target pragma and no runtime check: it is compiled whenever the build
 * targets aarch64 (Apple Silicon, Graviton, Ampere, a Raspberry Pi 4), and
 * chosen there.  The design is the x86 kernels': Q·Kᵀ and P·V both 5 rows × 4
 * vectors (20 accumulators + 4 K or V vectors + 5 row scalars), each step one
 * FMA per accumulator, the row scalars loaded by `ld1r` or `ldr s` and used
 * by FMLA's by-element form.  At 6 × 4, AVX-512's shape (the other
 * 32-register ISA), gcc 12 loads all six scalars before the FMAs, runs out
 * of registers and keeps the accumulators in memory, storing 20–24 of them a
 * step (tools/inner_loops.py); 5 × 4 has no spill with gcc or clang.
 * Like AVX2, NEON has no scalef, so exp builds 2^n from exponent bits: for a
 * softmax's vectors (every exponent small) by one add to p's exponent field,
 * otherwise in two halves so that n = 128 (x near ln FLT_MAX) does not
 * overflow early.  NEON's float→int conversion saturates, and gives 0 for a
 * NaN, so an unclamped lane cannot trap, only give bits the mask then clears.
 *
 * The bodies are kern_simd_ops.h (the kernels on reals: exp, expsum, rowmax,
 * qk, the probes) and kern_simd_kv.h (the loaders of K and V: pack, qkd,
 * pv), included below once per element type, and kern_simd_kv.h twice more
 * for the 16-bit caches (float16, bfloat16) and once for the int8 cache;
 * kern_simd_undef.h ends each
 * element type's section.  The table at the end takes every function they
 * define (qk_neon_f32, pack_neon_f16, ...) by AC_KERNEL_SETS (internal.h).
 */
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#include <arm_neon.h>

#include "internal.h"

#define QK_R 5
#define QK_C 4
#define PV_R 5
#define PV_C 4
#define PROBE_CHAINS 16
#define QKD_ACC 16    /* accumulators of qkd's register tile: few rows × keys */
#define PV_FEW_ACC 20 /* accumulators of pv's tile for a few rows (decode) */

/* 2^n for integral n in [-126, 127] (float) / [-1022, 1023] (double), from bits */
static inline float32x4_t pow2_f32(float32x4_t n) {
    const int32x4_t e = vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127));
    return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
}
static inline float64x2_t pow2_f64(float64x2_t n) {
    const int64x2_t e = vaddq_s64(vcvtnq_s64_f64(n), vdupq_n_s64(1023));
    return vreinterpretq_f64_s64(vshlq_n_s64(e, 52));
}

/* p·2^n by adding n to p's exponent field: exact, and one integer add, while
 * the result is a normal number — n <= 126 (float) / 1022 (double), which
 * x <= fast_hi ensures (p's own exponent is 0 or -1). */
static inline float32x4_t ldexp_bits_f32(float32x4_t p, float32x4_t n) {
    return vreinterpretq_f32_s32(
        vaddq_s32(vreinterpretq_s32_f32(p), vshlq_n_s32(vcvtnq_s32_f32(n), 23)));
}
static inline float64x2_t ldexp_bits_f64(float64x2_t p, float64x2_t n) {
    return vreinterpretq_f64_s64(
        vaddq_s64(vreinterpretq_s64_f64(p), vshlq_n_s64(vcvtnq_s64_f64(n), 52)));
}

/* whether any lane of a compare's mask is set */
/* r[0..3] = the rows of a 4×4 block, transposed in place, for packing Kᵀ. */
static inline void transpose4_f32(float32x4_t r[4]) {
    const float32x4x2_t a = vtrnq_f32(r[0], r[1]), b = vtrnq_f32(r[2], r[3]);
    r[0] = vcombine_f32(vget_low_f32(a.val[0]), vget_low_f32(b.val[0]));
    r[1] = vcombine_f32(vget_low_f32(a.val[1]), vget_low_f32(b.val[1]));
    r[2] = vcombine_f32(vget_high_f32(a.val[0]), vget_high_f32(b.val[0]));
    r[3] = vcombine_f32(vget_high_f32(a.val[1]), vget_high_f32(b.val[1]));
}

static inline int mask_any_u32(uint32x4_t m) { return vmaxvq_u32(m) != 0; }
static inline int mask_any_u64(uint64x2_t m) { return vmaxvq_u32(vreinterpretq_u32_u64(m)) != 0; }

/* The general finish: p·2^n, then the lanes out of range: x > hi -> inf,
 * x < lo -> 0, NaN -> NaN (the compares are false for a NaN lane, which
 * the last select then takes from x). */
#define AC_EXP_FINISH(suf, VT_, q, u, lo, hi)                                                 \
    static inline VT_ exp_finish_##suf(VT_ p, VT_ n, VT_ x) {                                 \
        const VT_ n1 = vrndmq_##q(vmulq_n_##q(n, 0.5));                                       \
        VT_ y = vmulq_##q(vmulq_##q(p, pow2_##suf(n1)), pow2_##suf(vsubq_##q(n, n1)));        \
        y = vbslq_##q(vcgtq_##q(x, vdupq_n_##q(hi)), vdupq_n_##q(INFINITY), y);               \
        y = vbslq_##q(vcltq_##q(x, vdupq_n_##q(lo)), vdupq_n_##q(0), y);                       \
        return vbslq_##q(vceqq_##q(x, x), y, x);                                              \
    }
/* The fast way, for a vector whose every lane is <= fast_hi (87 / 708): every
 * vector of a softmax, whose exponents are <= 0.  No clamp before the
 * reduction and p·2^n in one add; a lane below lo (or -inf) is then cleared
 * by the mask, whatever bits its unclamped n made, and a NaN lane, for which
 * the compare is false, is NaN already. */
#define AC_EXP_FAST(suf, VT_, q, u, lo, fast_hi)                                              \
    static inline int exp_fast_ok_##suf(VT_ x) {                                              \
        return !mask_any_##u(vcgtq_##q(x, vdupq_n_##q(fast_hi)));                              \
    }                                                                                         \
    static inline VT_ exp_fast_finish_##suf(VT_ p, VT_ n, VT_ x) {                            \
        return vreinterpretq_##q##_##u(vbicq_##u(vreinterpretq_##u##_##q(ldexp_bits_##suf(p, n)), \
                                                 vcltq_##q(x, vdupq_n_##q(lo))));               \
    }
AC_EXP_FINISH(f32, float32x4_t, f32, u32, -87.33654f, 88.72283f)
AC_EXP_FINISH(f64, float64x2_t, f64, u64, -708.3964185322641, 709.782712893384)
AC_EXP_FAST(f32, float32x4_t, f32, u32, -87.33654f, 87.0f)
AC_EXP_FAST(f64, float64x2_t, f64, u64, -708.3964185322641, 708.0)

/* "has a NaN been seen": the lanes where v != v, or-ed into a mask */
static inline uint32x4_t nan_acc_f32(uint32x4_t acc, float32x4_t v) {
    return vorrq_u32(acc, vmvnq_u32(vceqq_f32(v, v)));
}
static inline uint32x4_t nan_acc_f64(uint32x4_t acc, float64x2_t v) {
    return vorrq_u32(acc, vmvnq_u32(vreinterpretq_u32_u64(vceqq_f64(v, v))));
}

/* ---- float32 ---- */
#define real float
#define FN(x) x##_neon_f32
#define VT float32x4_t
#define VL 4
#define V_LOADU vld1q_f32
#define V_STOREU vst1q_f32
#define V_SET1 vdupq_n_f32
#define V_ZERO() vdupq_n_f32(0)
#define V_FMA(a, b, c) vfmaq_f32((c), (a), (b))
#define V_MUL vmulq_f32
#define V_DIV vdivq_f32
#define V_ADD vaddq_f32
#define V_SUB vsubq_f32
#define V_MAX vmaxq_f32
#define V_MIN vminq_f32
#define V_HMAX vmaxvq_f32
#define V_HSUM vaddvq_f32
#define V_TRANSPOSE transpose4_f32
#define VN_T uint32x4_t
#define VN_INIT vdupq_n_u32(0)
#define VN_ACC nan_acc_f32
#define VN_ANY(acc) mask_any_u32(acc)
#define V_ROUND vrndnq_f32
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
#define FN(x) x##_neon_f16
#define kvreal uint16_t
#define V_LOADU_KV(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(p))))
#define KV_TO_REAL(x) ac_half_to_float(x)
#include "kern_simd_kv.h"
#undef V_LOADU_KV
#undef KV_TO_REAL
#undef FN

/* ---- bfloat16 K/V: the top half of a float32, widened by a shift ---- */
#define FN(x) x##_neon_bf16
#define V_LOADU_KV(p) vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)(p)), 16))
#define KV_TO_REAL(x) ac_bf16_to_float(x)
#include "kern_simd_kv.h"
#undef V_LOADU_KV
#undef KV_TO_REAL
#undef FN
#undef kvreal

/* ---- int8 K/V (an int8 cache, unscaled): four bytes widened twice, then converted ---- */
static inline float32x4_t load4_i8(const int8_t *p) {
    int32_t bits;
    __builtin_memcpy(&bits, p, sizeof bits); /* any alignment */
    const int16x8_t w = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(bits)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(w)));
}
#define FN(x) x##_neon_i8
#define kvreal int8_t
#define V_LOADU_KV(p) load4_i8((const int8_t *)(p))
#define KV_TO_REAL(x) ((float)(x))
#include "kern_simd_kv.h"
#include "kern_simd_undef.h"

/* ---- float64 ---- */
#define real double
#define FN(x) x##_neon_f64
#define VT float64x2_t
#define VL 2
#define V_LOADU vld1q_f64
#define V_STOREU vst1q_f64
#define V_SET1 vdupq_n_f64
#define V_ZERO() vdupq_n_f64(0)
#define V_FMA(a, b, c) vfmaq_f64((c), (a), (b))
#define V_MUL vmulq_f64
#define V_DIV vdivq_f64
#define V_ADD vaddq_f64
#define V_SUB vsubq_f64
#define V_MAX vmaxq_f64
#define V_MIN vminq_f64
#define V_HMAX vmaxvq_f64
#define V_HSUM vaddvq_f64
#define VN_T uint32x4_t
#define VN_INIT vdupq_n_u32(0)
#define VN_ACC nan_acc_f64
#define VN_ANY(acc) mask_any_u32(acc)
#define V_ROUND vrndnq_f64
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

/* NEON is part of every AArch64 CPU. */
static int neon_supported(void) { return 1; }

const ac_kernels ac_kernels_neon = {
    .name = "neon",
    .supported = neon_supported,
    /* 128×128 float32 tiles, as on x86: the S tile (64 KiB) and a K and a V
     * block at d = 64 (32 KiB each) fit the 1 MiB L2 of a Neoverse N1 and
     * the larger ones of Apple's cores.  Not tuned on ARM hardware. */
    .block_q = 128, .block_k = 128,
    .kt_pad = QK_C * 4,
    .edge_rows = 6 * QK_R,
    AC_KERNEL_SETS(neon),
};

#else /* not aarch64: the table exists but the CPU check never picks it */
#include "internal.h"
const ac_kernels ac_kernels_neon = {.name = "neon"};
#endif
