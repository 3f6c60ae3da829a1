/* tiles.c — masking a tile and the masked P·V, shared by the algorithms and
 * written once over the micro-kernel table. */
#ifndef AC_TEMPLATE
#define AC_TEMPLATE "tiles.c"
#include <string.h>

#include "internal.h"
#define AC_TEMPLATE_F16
#include "template.h"
#else

#if AC_KV_IS_REAL

void R(ac_mask_tile)(const ac_vis *v, int64_t i0, int64_t rows, int64_t period, int64_t j0,
                     int64_t cols, real *s, int64_t lds) {
    for (int64_t r = 0; r < rows; r++) {
        real *sr = s + r * lds; /* (cols) */
        const int64_t i = i0 + r % period;
        int64_t lo = ac_vis_lo(v, i) - j0, hi = ac_vis_hi(v, i) - j0;
        lo = lo < 0 ? 0 : (lo > cols ? cols : lo);
        hi = hi < lo ? lo : (hi > cols ? cols : hi);
        for (int64_t c = 0; c < lo; c++) sr[c] = -INFINITY;
        for (int64_t c = hi; c < cols; c++) sr[c] = -INFINITY;
        if (v->mask) {
            const uint8_t *mr = v->mask + i * v->mask_rs + j0 * v->mask_cs;
            for (int64_t c = lo; c < hi; c++)
                if (!mr[c * v->mask_cs]) sr[c] = -INFINITY;
        }
    }
}

#endif /* AC_KV_IS_REAL */

int R(ac_all_finite)(const kvreal *v, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t j = 0; j < rows; j++)
        for (int64_t c = 0; c < cols; c++)
            if (!isfinite(KV_TO_REAL(v[j * ld + c]))) return 0;
    return 1;
}

/* A masked key has weight exactly 0, and 0 · v is 0 for every finite v, so a
 * tile whose V is finite goes through the fast kernel whole.  Only when V
 * holds inf or NaN (0 · inf = NaN) would a masked key leak into a row that
 * cannot see it: then each row takes only the keys it sees.  v_finite says
 * what the caller knows of this V tile (1 finite, 0 not, -1: look here);
 * the blockwise kernel learns it for every block once per call. */
void R(ac_pv_tile)(const ac_kernels *K, const ac_vis *vis, int64_t i0, int64_t rows,
                   int64_t period, int64_t j0, int64_t cols, int64_t dv, const real *p,
                   int64_t ldp, const kvreal *v, int64_t ldv, real *o, int64_t ldo,
                   int v_finite) {
    const int64_t span = rows < period ? rows : period;
    if (ac_vis_clear(vis, i0, span, j0, cols) ||
        (v_finite < 0 ? R(ac_all_finite)(v, cols, dv, ldv) : v_finite)) {
        K->R(pv)(rows, cols, dv, p, ldp, v, ldv, o, ldo);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = i0 + r % period;
        int64_t lo = ac_vis_lo(vis, i) - j0, hi = ac_vis_hi(vis, i) - j0;
        lo = lo < 0 ? 0 : lo;
        hi = hi > cols ? cols : hi;
        for (int64_t c = lo; c < hi; c++) {
            if (vis->mask && !vis->mask[i * vis->mask_rs + (j0 + c) * vis->mask_cs]) continue;
            K->R(pv)(1, 1, dv, p + r * ldp + c, ldp, v + c * ldv, ldv, o + r * ldo, ldo);
        }
    }
}

/* ---- the online softmax, shared by the blockwise and decode kernels ---- */
#if AC_KV_IS_REAL

void R(ac_online_start)(int64_t rows, real *mi, real *li, real *o, int64_t dv) {
    memset(o, 0, (size_t)(rows * dv) * sizeof(real));
    for (int64_t r = 0; r < rows; r++) {
        mi[r] = -INFINITY;
        li[r] = 0;
    }
}

/* A new score tile s (rows, cols) whose row maxima are bmax: P = exp(S - m')
 * in place, l = α·l + ΣP, O *= α with α = exp(m - m'), m = m'. */
void R(ac_online_update)(const ac_kernels *K, int64_t rows, int64_t cols, real *s, int64_t lds,
                         const real *bmax, real *mi, real *li, real *o, int64_t dv) {
    for (int64_t r = 0; r < rows; r++) {
        real *sr = s + r * lds; /* (cols) */
        real mnew = (bmax[r] > mi[r] || bmax[r] != bmax[r]) ? bmax[r] : mi[r];
        if (mnew == -INFINITY) { /* nothing visible yet in this row */
            memset(sr, 0, (size_t)cols * sizeof(real));
            continue;
        }
        real alpha = R_EXP(mi[r] - mnew); /* 0 on the first visible block */
        li[r] = alpha * li[r] + K->R(expsum)(sr, cols, mnew);
        mi[r] = mnew;
        if (alpha != 1)
            for (int64_t c = 0; c < dv; c++) o[r * dv + c] *= alpha;
    }
}

/* Normalise once; a row that saw nothing stays 0 with lse = -inf. */
void R(ac_online_finish)(int64_t rows, const real *mi, const real *li, real *o, int64_t dv,
                         real *lse) {
    for (int64_t r = 0; r < rows; r++) {
        const int seen = li[r] > 0 || li[r] != li[r];
        real inv = seen ? 1 / li[r] : 0;
        for (int64_t c = 0; c < dv; c++) o[r * dv + c] *= inv;
        if (lse) lse[r] = seen ? mi[r] + R_LOG(li[r]) : -INFINITY;
    }
}
#endif /* AC_KV_IS_REAL */

#endif
