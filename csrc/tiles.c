/* tiles.c — helpers on tiles that the algorithms share, written once over
 * the micro-kernel table. */
#ifndef AC_TEMPLATE
#define AC_TEMPLATE "tiles.c"
#include "internal.h"
#include "template.h"
#else

static int R(all_finite)(const real *v, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t j = 0; j < rows; j++)
        for (int64_t c = 0; c < cols; c++)
            if (!isfinite(v[j * ld + c])) return 0;
    return 1;
}

/* A masked key has weight exactly 0, and 0 · v is 0 for every finite v, so a
 * tile whose V is finite goes through the fast kernel whole.  Only when V
 * holds inf or NaN (0 · inf = NaN) would a masked key leak into a row that
 * cannot see it: then each row is bounded to the keys it sees.  The check
 * reads the (cols, dv) V tile once, next to the rows·cols·dv work it guards. */
void R(ac_pv_causal)(const ac_kernels *K, int64_t rows, int64_t cols, int64_t dv,
                     const real *p, int64_t ldp, const real *v, int64_t ldv, real *o,
                     int64_t ldo, int64_t e0) {
    if (e0 >= cols || R(all_finite)(v, cols, dv, ldv)) {
        K->R(pv)(rows, cols, dv, p, ldp, v, ldv, o, ldo);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        int64_t seen = e0 + r < 0 ? 0 : (e0 + r > cols ? cols : e0 + r);
        K->R(pv)(1, seen, dv, p + r * ldp, ldp, v, ldv, o + r * ldo, ldo);
    }
}

#endif
