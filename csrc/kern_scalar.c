/* kern_scalar.c — the portable micro-kernels: plain C, no intrinsics.
 *
 * They are the fallback on any CPU and the baseline the SIMD files are
 * measured and tested against.  Loop order keeps the innermost loop over a
 * contiguous axis (d for Q·Kᵀ, dv for P·V) so a compiler can vectorise it
 * with the baseline instruction set.
 *
 * Defines the table ac_kernels_scalar and, static, from the bodies:
 *   pack_scalar_f32, qkd_scalar_f32, pv_scalar_f32      kern_scalar_kv.h
 *   pack_scalar_f64, qkd_scalar_f64, pv_scalar_f64      kern_scalar_kv.h
 *   pack_scalar_f16, qkd_scalar_f16, pv_scalar_f16      kern_scalar_kv.h (float16 K/V)
 *   pack_scalar_bf16, qkd_scalar_bf16, pv_scalar_bf16   kern_scalar_kv.h (bfloat16 K/V)
 *   pack_scalar_i8, qkd_scalar_i8, pv_scalar_i8         kern_scalar_kv.h (int8 K/V)
 *   qk_scalar_f32, rowmax_scalar_f32, expsum_scalar_f32  kern_scalar_ops.h
 *   qk_scalar_f64, rowmax_scalar_f64, expsum_scalar_f64  kern_scalar_ops.h
 */
#include <tgmath.h>

#include "internal.h"

/* ---- float32 ---- */
#define real float
#define kvreal float
#define KV_TO_REAL(x) (x)
#define FN(x) x##_scalar_f32
#include "kern_scalar_kv.h"
#include "kern_scalar_ops.h"
#undef real
#undef kvreal
#undef KV_TO_REAL
#undef FN

/* ---- float64 ---- */
#define real double
#define kvreal double
#define KV_TO_REAL(x) (x)
#define FN(x) x##_scalar_f64
#include "kern_scalar_kv.h"
#include "kern_scalar_ops.h"
#undef real
#undef kvreal
#undef KV_TO_REAL
#undef FN

/* ---- float16 K/V, float32 arithmetic: the loaders only ---- */
#define real float
#define kvreal uint16_t
#define KV_WIDENS 1 /* kern_scalar_kv.h: rows converted into a buffer, then used */
#define KV_TO_REAL(x) ac_half_to_float(x)
#define FN(x) x##_scalar_f16
#include "kern_scalar_kv.h"
#undef KV_TO_REAL
#undef FN

/* bfloat16 K/V: the same, each value widened by a shift */
#define KV_TO_REAL(x) ac_bf16_to_float(x)
#define FN(x) x##_scalar_bf16
#include "kern_scalar_kv.h"
#undef kvreal
#undef KV_TO_REAL
#undef FN

/* int8 K/V (an int8 cache, unscaled: int8.c applies the scales) */
#define kvreal int8_t
#define KV_TO_REAL(x) ((float)(x))
#define FN(x) x##_scalar_i8
#include "kern_scalar_kv.h"
#undef KV_WIDENS
#undef real
#undef kvreal
#undef KV_TO_REAL
#undef FN

/* The probes in plain C: eight chains / accumulators, which is what a
 * compiler without vector instructions can keep in flight.  Multiply and
 * add, not fmaf: the baseline instruction set has no FMA, and fmaf would be
 * a library call. */
static float fma_probe_scalar_f32(int64_t iters, int64_t *flops) {
    float acc[8];
    for (int c = 0; c < 8; c++) acc[c] = (float)c;
    for (int64_t i = 0; i < iters; i++)
        for (int c = 0; c < 8; c++) acc[c] = acc[c] * 0.999999f + 1e-7f;
    *flops = iters * 8 * 2;
    float s = 0;
    for (int c = 0; c < 8; c++) s += acc[c];
    return s;
}

static float read_probe_scalar_f32(const float *x, int64_t n) {
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int c = 0; c < 8; c++) s[c] += x[i + c];
    for (; i < n; i++) s[0] += x[i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* Plain C runs anywhere. */
static int scalar_supported(void) { return 1; }

const ac_kernels ac_kernels_scalar = {
    .name = "scalar",
    .supported = scalar_supported,
    .block_q = 64, .block_k = 64,
    .kt_pad = 1,
    /* the diagonal tile whole: groups of 30 rows did 5 % fewer instructions
     * (callgrind, causal n = 512) but ran 5-8 % slower (one thread,
     * by the median of 40 calls, 2-4 % by the fastest; six paired runs) */
    .edge_rows = 0,
    AC_KERNEL_SETS(scalar),
};
