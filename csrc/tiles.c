/* tiles.c — masking a tile and the masked P·V, shared by the algorithms and
 * written once over the micro-kernel table. */
#ifndef AC_TEMPLATE
#define AC_TEMPLATE "tiles.c"
#include "internal.h"
#include "template.h"
#else

void R(ac_mask_tile)(const ac_vis *v, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                     real *s, int64_t lds) {
    for (int64_t r = 0; r < rows; r++) {
        real *sr = s + r * lds; /* (cols) */
        int64_t lo = ac_vis_lo(v, i0 + r) - j0, hi = ac_vis_hi(v, i0 + r) - j0;
        lo = lo < 0 ? 0 : (lo > cols ? cols : lo);
        hi = hi < lo ? lo : (hi > cols ? cols : hi);
        for (int64_t c = 0; c < lo; c++) sr[c] = -INFINITY;
        for (int64_t c = hi; c < cols; c++) sr[c] = -INFINITY;
        if (v->mask) {
            const uint8_t *mr = v->mask + (i0 + r) * v->mask_rs + j0 * v->mask_cs;
            for (int64_t c = lo; c < hi; c++)
                if (!mr[c * v->mask_cs]) sr[c] = -INFINITY;
        }
    }
}

static int R(all_finite)(const real *v, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t j = 0; j < rows; j++)
        for (int64_t c = 0; c < cols; c++)
            if (!isfinite(v[j * ld + c])) return 0;
    return 1;
}

/* A masked key has weight exactly 0, and 0 · v is 0 for every finite v, so a
 * tile whose V is finite goes through the fast kernel whole.  Only when V
 * holds inf or NaN (0 · inf = NaN) would a masked key leak into a row that
 * cannot see it: then each row takes only the keys it sees.  The check reads
 * the (cols, dv) V tile once, next to the rows·cols·dv work it guards. */
void R(ac_pv_tile)(const ac_kernels *K, const ac_vis *vis, int64_t i0, int64_t j0,
                   int64_t rows, int64_t cols, int64_t dv, const real *p, int64_t ldp,
                   const real *v, int64_t ldv, real *o, int64_t ldo) {
    if (ac_vis_clear(vis, i0, rows, j0, cols) || R(all_finite)(v, cols, dv, ldv)) {
        K->R(pv)(rows, cols, dv, p, ldp, v, ldv, o, ldo);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = i0 + r;
        int64_t lo = ac_vis_lo(vis, i) - j0, hi = ac_vis_hi(vis, i) - j0;
        lo = lo < 0 ? 0 : lo;
        hi = hi > cols ? cols : hi;
        for (int64_t c = lo; c < hi; c++) {
            if (vis->mask && !vis->mask[i * vis->mask_rs + (j0 + c) * vis->mask_cs]) continue;
            K->R(pv)(1, 1, dv, p + r * ldp + c, ldp, v + c * ldv, ldv, o + r * ldo, ldo);
        }
    }
}

#endif
