/* float16.c — the algorithms that read a float16 KV cache: float32 q, the
 * outputs and the arithmetic; K and V IEEE half (stored as uint16),
 * converted as the kernels load them.  Only the loaders differ from
 * float32.c (kern->kv_f16): the algorithm bodies are the same.
 *
 * Defines (each from the body named):
 *   ac_flash_f16     flash_body.h     blockwise attention (decode_body.h for few rows)
 *   ac_naive_f16     table_body.h     materialised attention on the tiled kernels
 *   ac_scores_f16    table_body.h     the score table
 *   ac_from_f16, ac_to_f16  here      whole arrays widened and rounded (at the end)
 */
#define real float                       /* q, the outputs and the arithmetic */
#define kvreal uint16_t                  /* how K and V are stored: IEEE half */
#define KV_TO_REAL(x) ac_half_to_float(x) /* one stored K/V value as a real */
#define OPS f32                          /* kern->f32: the kernels on reals */
#define KV_OPS kv_f16                    /* kern->kv_f16: the kernels that load K and V */
#define KV_WIDEN 1                       /* the blockwise kernel widens V once a call */
#define FN(name) name##_f16              /* the public names */

#include "tiles_body.h"
#include "decode_body.h"
#include "flash_body.h"
#include "table_body.h"

/* ---- whole arrays: a float16 q widened before a call, the output rounded
 * after (NumPy's float16 casts took 1.2 and 2.4 ms for 512 Ki values, a third
 * of a prefill call at n = 1024): one pass, in pieces of AC_CONVERT_PIECE values
 * shared by the team.  Widening is exact anywhere (ac_half_to_float);
 * rounding (to nearest even, overflow to inf, NaN kept quiet) needs F16C's
 * vcvtps2ph, and ac_to_f16 returns 0 without it, for the caller to round. */
void ac_from_f16(const uint16_t *x, float *y, int64_t n, int num_threads) {
    #pragma omp parallel for schedule(static) if (AC_PIECES(n) > 1) num_threads(AC_NUM_THREADS(num_threads))
    for (int64_t p = 0; p < AC_PIECES(n); p++) {
        const int64_t end = ac_piece_end(p, n);
        for (int64_t i = p * AC_CONVERT_PIECE; i < end; i++) y[i] = ac_half_to_float(x[i]);
    }
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#include <string.h>

__attribute__((target("avx,f16c"))) static void to_f16_piece(const float *x, uint16_t *y,
                                                              int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) { /* the last n % 8 through a buffer */
        float in[8] = {0};
        uint16_t out[8];
        memcpy(in, x + i, (size_t)(n - i) * sizeof *in);
        _mm_storeu_si128((__m128i *)out, _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
        memcpy(y + i, out, (size_t)(n - i) * sizeof *out);
    }
}

int ac_to_f16(const float *x, uint16_t *y, int64_t n, int num_threads) {
    if (!ac_cpu_has_f16c()) return 0;
    #pragma omp parallel for schedule(static) if (AC_PIECES(n) > 1) num_threads(AC_NUM_THREADS(num_threads))
    for (int64_t p = 0; p < AC_PIECES(n); p++) {
        const int64_t end = ac_piece_end(p, n);
        to_f16_piece(x + p * AC_CONVERT_PIECE, y + p * AC_CONVERT_PIECE, end - p * AC_CONVERT_PIECE);
    }
    return 1;
}
#else
int ac_to_f16(const float *x, uint16_t *y, int64_t n, int num_threads) {
    (void)x, (void)y, (void)n, (void)num_threads;
    return 0;
}
#endif
