/* int8.c — blockwise and split-KV attention over an int8 KV cache: float32
 * q, outputs and arithmetic; K and V int8, each row (token, kv head) scaled
 * by one float, a->k_scale and a->v_scale (attncore.KVCache(dtype="int8")).
 *
 * A key's scale is a factor of every score it gives, and a value's scale a
 * factor of its weight, so neither is applied to the rows: the kernels read
 * the int8 values as they are (kern->kv_i8, converted as loaded) and the
 * bodies multiply score column j by k_scale[j] after Q·Kᵀ, and weight column
 * j by v_scale[j] before P·V (KV_SCALED, tiles_body.h: scale_cols).
 *   s_ij = scale · (q_i · k8_j) · ks_j,   o_i = Σ_j (p_ij · vs_j) · v8_j / l_i
 * l_i sums the weights before they are scaled.
 *
 * A decode step's Q·Kᵀ and P·V run as 16-bit integer dot products where the
 * CPU has them (kern->i8dot: kern_avx512_i8dot.c by AVX512_VNNI,
 * kern_avx2_i8dot.c by AVX2's vpmaddwd; each query row, and each row's
 * weights per block of keys, rounded to 16 bits) and by the widening
 * kernels elsewhere, or where they decline a tile (KV_QKD, KV_PV_TILE below).
 *
 * Defines:
 *   ac_flash_i8         flash_body.h   blockwise attention (decode_body.h for few rows)
 *   ac_i8dot_supported  here           are the integer dot products in use
 *   ac_i8dot_choose     here           turn them on or off (tests; tools/cache_speed.py and
 *                                      tools/int8_error.py read a cache both ways)
 */
#define real float                /* q, the outputs and the arithmetic */
#define kvreal int8_t             /* how K and V are stored: int8, unscaled */
#define KV_TO_REAL(x) ((float)(x)) /* one stored K/V value as a real */
#define OPS f32                   /* kern->f32: the kernels on reals */
#define KV_OPS kv_i8              /* kern->kv_i8: the kernels that load K and V */
#define FN(name) name##_i8        /* the public names */
#define KV_SCALED 1               /* the bodies apply a->k_scale and a->v_scale */
#define KV_QKD qkd_i8             /* decode's Q·Kᵀ: below */

#include <stdatomic.h>
#include <stdlib.h>

#include "internal.h"

static _Atomic int i8dot_choice = -1; /* -1: as ATTNCORE_I8DOT says (on unless "0"); 0; 1 */

int ac_i8dot_supported(void) {
    const ac_i8dot_ops *dot = ac_kernels_active()->i8dot;
    if (!dot || !dot->supported || !dot->supported()) return 0; /* each table's own answer */
    int c = atomic_load(&i8dot_choice);
    if (c < 0) {
        const char *env = getenv("ATTNCORE_I8DOT");
        c = !(env && env[0] == '0');
        atomic_store(&i8dot_choice, c);
    }
    return c;
}

void ac_i8dot_choose(int choice) { atomic_store(&i8dot_choice, choice < 0 ? -1 : choice != 0); }

/* The integer dot products where they are in use and take the tile, else
 * the widening kernel. */
static void qkd_i8(const ac_kernels *kern, int64_t bq, int64_t bk, int64_t d, const float *q,
                   int64_t ldq, const int8_t *k, int64_t ldk, float scale, float *s, int64_t lds) {
    if (ac_i8dot_supported() && kern->i8dot->qkd(bq, bk, d, q, ldq, k, ldk, scale, s, lds)) return;
    kern->kv_i8.qkd(bq, bk, d, q, ldq, k, ldk, scale, s, lds);
}

#include "tiles_body.h"

/* decode's P·V: the integer dot products where they are in use and take the
 * tile (the whole tile is right: V of an int8 cache is finite, so pv_tile
 * would take it whole too), else pv_tile. */
static inline void pv_tile_i8(const ac_kernels *kern, const ac_vis *vis, int64_t i0, int64_t rows,
                              int64_t period, int64_t j0, int64_t cols, int64_t dv, const real *p,
                              int64_t ldp, const kvreal *v, int64_t ldv, real *o, int64_t ldo,
                              int v_finite) {
    if (ac_i8dot_supported() && kern->i8dot->pv(rows, cols, dv, p, ldp, v, ldv, o, ldo)) return;
    pv_tile(kern, vis, i0, rows, period, j0, cols, dv, p, ldp, v, ldv, o, ldo, v_finite);
}
#define KV_PV_TILE pv_tile_i8

#include "decode_body.h"
#include "flash_body.h"
