/* tiles_body.h — the row and tile steps every algorithm shares: masking a
 * tile, the masked P·V, the online softmax, the softmax of one row, the
 * log-sum-exp merge of rows, and K packing.
 *
 * Included once by each per-type unit (float32.c, float64.c, float16.c,
 * bfloat16.c, int8.c, bf16dot.c) before the algorithm bodies, so these are static functions of
 * that unit over its `real` (the arithmetic) and `kvreal` (how K and V are
 * stored), reaching the kernels as kern->OPS and kern->KV_OPS through the
 * kernel table `kern`.  <tgmath.h> makes exp and log the float or the
 * double function, whichever `real` is.
 */
#include <string.h>
#include <tgmath.h>

#include "internal.h"

/* The (row, column) plane of head h of batch b. */
static inline const real *q_head(const real *x, const int64_t stride[3], int64_t b, int64_t h) {
    return x + b * stride[0] + h * stride[1];
}
static inline const kvreal *kv_head(const kvreal *x, const int64_t stride[3], int64_t b,
                                    int64_t h) {
    return x + b * stride[0] + h * stride[1];
}

/* A 16-bit V widened once per call for the blockwise kernel (float16.c and
 * bfloat16.c define KV_WIDEN: flash_body.h, widen_band). */
#ifdef KV_WIDEN
#define KV_WIDEN_V 1
#else
#define KV_WIDEN_V 0
#endif
/* the loaders of a V that holds reals: kern->kv_f32 under OPS f32, kv_f64 under f64 */
#define REAL_KV_OPS_(ops) kv_##ops
#define REAL_KV_OPS_X(ops) REAL_KV_OPS_(ops)
#define REAL_KV_OPS REAL_KV_OPS_X(OPS)

/* ---- an int8 cache's scales (int8.c defines KV_SCALED) ------------------ */
#ifdef KV_SCALED
#define KV_SCALES 1
#else
#define KV_SCALES 0
#endif

/* The per-token scales of kv head hk of batch b: (m) floats. */
static inline const float *scale_head(const float *x, const int64_t stride[2], int64_t b,
                                      int64_t hk) {
    return x + b * stride[0] + hk * stride[1];
}

/* s[r, c] *= sc[c]: a key's scale on its score column, or a value's on its
 * weight column, a row at a time in the ISA's vectors (real is float where
 * the scales are; elsewhere this is never called). */
static inline void scale_cols(const ac_kernels *kern, real *s, int64_t lds, int64_t rows,
                              int64_t cols, const float *sc) {
#ifdef KV_SCALED
    for (int64_t r = 0; r < rows; r++) kern->OPS.mulrow(s + r * lds, sc, cols);
#else
    (void)kern;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) s[r * lds + c] *= sc[c];
#endif
}

/* ---- masks ------------------------------------------------------------- */

/* Set s[r, c] = -inf where tile row r cannot see key j0 + c.  Row r is query
 * i0 + r % period: period = rows for a plain Q block; decode stacks the n
 * rows of every query head of a GQA group, period = n. */
static inline void mask_tile(const ac_vis *v, int64_t i0, int64_t rows, int64_t period,
                             int64_t j0, int64_t cols, real *s, int64_t lds) {
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

/* ---- score modifiers ----------------------------------------------------
 * The raw tile s = scale·Q·Kᵀ becomes softcap·tanh(s/softcap) + bias +
 * ALiBi (attncore.h), before the mask.  Rows as in mask_tile: row r is query
 * i0 + r % period of head h + r / period (decode stacks a GQA group's heads).
 * with_softcap 0: the caller applied the soft-cap itself (backward keeps the
 * capped tile for its gradient). */
static inline void modify_tile(const ac_kernels *kern, const ac_vis *v, int64_t i0, int64_t rows,
                               int64_t period, int64_t j0, int64_t cols, real *s, int64_t lds,
                               int with_softcap) {
    for (int64_t r = 0; r < rows; r++) {
        real *sr = s + r * lds; /* (cols) */
        const int64_t i = i0 + r % period, hh = r / period;
        if (with_softcap && v->softcap > 0) kern->OPS.softcap(sr, cols, (real)v->softcap);
        if (v->bias) {
            const real *br = (const real *)v->bias + v->bias_off + hh * v->bias_hs +
                             i * v->bias_rs + j0 * v->bias_cs;
            if (v->bias_cs == 1)
                kern->OPS.addrow(sr, br, cols);
            else
                for (int64_t c = 0; c < cols; c++) sr[c] += br[c * v->bias_cs];
        }
        if (v->alibi) /* distance qpos - kpos = i + delta - j */
            kern->OPS.alibi(sr, cols, (real)(i + v->delta - j0), (real)v->alibi[hh]);
    }
}

/* Does the bias hide key j from row i of head h + hh (a -inf entry)? */
static inline int bias_hides(const ac_vis *v, int64_t hh, int64_t i, int64_t j) {
    return v->bias && ((const real *)v->bias)[v->bias_off + hh * v->bias_hs + i * v->bias_rs +
                                               j * v->bias_cs] == -INFINITY;
}

/* A sink (gpt-oss): one more term exp(sink) in the row's denominator, with no
 * value — folded into the online state (m, l, O) of a row as a key of its
 * own.  Once per row: decode folds it into one chunk of the row only. */
static inline void sink_fold(real sink, real *mi, real *li, real *o, int64_t dv) {
    if (sink == -INFINITY) return;
    const real mnew = *mi > sink || *mi != *mi ? *mi : sink;
    const real alpha = exp(*mi - mnew); /* 0 when the row saw nothing */
    *li = alpha * *li + exp(sink - mnew);
    *mi = mnew;
    if (alpha != 1)
        for (int64_t c = 0; c < dv; c++) o[c] *= alpha;
}

/* Is every value of a (rows, cols) block of V finite?  A row's test has no
 * branch (x - x is NaN for inf and NaN, 0 otherwise), so the compiler takes
 * it in vectors: a test and a branch a value made this scan, once per call
 * over all of V, 3 % of a causal prefill call (AVX-512, n = 1024, d = 64). */
static inline int all_finite(const kvreal *v, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t j = 0; j < rows; j++) {
        int bad = 0;
        for (int64_t c = 0; c < cols; c++) {
            const real x = KV_TO_REAL(v[j * ld + c]);
            bad |= x - x != 0;
        }
        if (bad) return 0;
    }
    return 1;
}

/* Does any bias entry of the tile (rows as in modify_tile) hide its key? */
static inline int bias_tile_hides(const ac_vis *v, int64_t i0, int64_t rows, int64_t period,
                                  int64_t j0, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const real *br = (const real *)v->bias + v->bias_off + (r / period) * v->bias_hs +
                         (i0 + r % period) * v->bias_rs + j0 * v->bias_cs;
        for (int64_t c = 0; c < cols; c++)
            if (br[c * v->bias_cs] == -INFINITY) return 1;
    }
    return 0;
}

/* O += P·V for a tile of rows (as in mask_tile) and keys from j0.
 *
 * A masked key (or one a -inf bias hides) has weight exactly 0, and 0 · v is
 * 0 for every finite v, so a tile whose V is finite goes through the fast
 * kernel whole.  Only when V
 * holds inf or NaN (0 · inf = NaN) would a masked key leak into a row that
 * cannot see it: then each row takes only the keys it sees.  v_finite says
 * what the caller knows of this V tile (1 finite, 0 not, -1: look here);
 * the blockwise kernel learns it for every block once per call. */
static inline void pv_tile(const ac_kernels *kern, const ac_vis *vis, int64_t i0, int64_t rows,
                           int64_t period, int64_t j0, int64_t cols, int64_t dv, const real *p,
                           int64_t ldp, const kvreal *v, int64_t ldv, real *o, int64_t ldo,
                           int v_finite) {
    const int64_t span = rows < period ? rows : period;
    /* every key seen (no mask edge, no -inf in the bias tile), or V finite:
     * the whole tile at once.  The bias is looked at first: it is rows·cols
     * values, V's finiteness cols·dv (decode: 4 rows, 128 values a key) */
    if ((ac_vis_clear(vis, i0, span, j0, cols) &&
         (!vis->bias || v_finite > 0 || !bias_tile_hides(vis, i0, rows, period, j0, cols))) ||
        (v_finite < 0 ? all_finite(v, cols, dv, ldv) : v_finite)) {
        kern->KV_OPS.pv(rows, cols, dv, p, ldp, v, ldv, o, ldo);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = i0 + r % period;
        int64_t lo = ac_vis_lo(vis, i) - j0, hi = ac_vis_hi(vis, i) - j0;
        lo = lo < 0 ? 0 : lo;
        hi = hi > cols ? cols : hi;
        for (int64_t c = lo; c < hi; c++) {
            if (vis->mask && !vis->mask[i * vis->mask_rs + (j0 + c) * vis->mask_cs]) continue;
            if (bias_hides(vis, r / period, i, j0 + c)) continue; /* -inf: hidden as by a mask */
            kern->KV_OPS.pv(1, 1, dv, p + r * ldp + c, ldp, v + c * ldv, ldv, o + r * ldo, ldo);
        }
    }
}

/* ---- the online softmax, shared by the blockwise and decode kernels ----
 * Per row: m (running max), l (running sum of exp(s - m)) and O (the running,
 * unnormalised sum of exp(s - m)·v).  start zeroes O and sets m = -inf,
 * l = 0; update folds in one tile; finish divides by l once. */

static inline void online_start(int64_t rows, real *mi, real *li, real *o, int64_t dv) {
    memset(o, 0, (size_t)(rows * dv) * sizeof(real));
    for (int64_t r = 0; r < rows; r++) {
        mi[r] = -INFINITY;
        li[r] = 0;
    }
}

/* online_update's first step: bmax becomes each row's m' and mi its
 * α = exp(m − m') (0 on the first visible block), until the caller sets
 * mi = m' row by row. */
static inline void online_alpha(const ac_kernels *kern, int64_t rows, real *bmax, real *mi) {
    for (int64_t r = 0; r < rows; r++) {
        const real mnew = (bmax[r] > mi[r] || bmax[r] != bmax[r]) ? bmax[r] : mi[r];
        mi[r] = mi[r] - mnew; /* <= 0 or NaN; -inf on the first visible block */
        bmax[r] = mnew;
    }
    kern->OPS.expsum(mi, rows, 0);
}

/* How many of a tile's cols keys row r sees: all of them, or on the upper
 * edge (not NULL) those up to the row's last. */
static inline int64_t online_seen(const ac_vis *edge, int64_t i0, int64_t r, int64_t j0,
                                  int64_t cols) {
    if (!edge) return cols;
    const int64_t seen = ac_vis_hi(edge, i0 + r) - j0;
    return seen < 0 ? 0 : (seen > cols ? cols : seen);
}

/* A new score tile s (rows, cols) whose row maxima are bmax: P = exp(S - m')
 * in place, l = α·l + ΣP, O *= α with α = exp(m - m'), m = m'.  next, if not
 * NULL, is the block to prefetch meanwhile.  edge, if not NULL, is the band
 * of a tile on its upper edge (row r is query i0 + r, column c key j0 + c):
 * the keys past a row's last are masked, their weights 0 without an exp
 * (a NaN row is NaN through the keys it sees either way).
 * The rows' α are taken together, by the kernels' vector exp over m - m' (held
 * in mi meanwhile): one libm exp a row and tile was 2 % of a causal prefill
 * call (AVX-512, n = 1024, d = 64).  bmax becomes m'.  alpha, if not NULL,
 * takes each row's α (1 for a row with nothing visible yet) and O is left
 * for the caller to scale (the bfloat16 dot products' P·V does it as it
 * loads O). */
static inline void online_update(const ac_kernels *kern, int64_t rows, int64_t cols, real *s,
                                 int64_t lds, real *bmax, real *mi, real *li, real *o,
                                 int64_t dv, const ac_ahead_block *next, const ac_vis *edge,
                                 int64_t i0, int64_t j0, real *alpha_out) {
    online_alpha(kern, rows, bmax, mi);
    for (int64_t r = 0; r < rows; r++) {
        if (next) ac_prefetch_share(next, r, rows);
        real *sr = s + r * lds; /* (cols) */
        const real mnew = bmax[r], alpha = mi[r];
        mi[r] = mnew;
        if (alpha_out) alpha_out[r] = mnew == -INFINITY ? 1 : alpha;
        if (mnew == -INFINITY) { /* nothing visible yet in this row */
            memset(sr, 0, (size_t)cols * sizeof(real));
            continue;
        }
        const int64_t seen = online_seen(edge, i0, r, j0, cols);
        if (seen < cols) memset(sr + seen, 0, (size_t)(cols - seen) * sizeof(real));
        li[r] = alpha * li[r] + kern->OPS.expsum(sr, seen, mnew);
        if (alpha != 1 && !alpha_out)
            for (int64_t c = 0; c < dv; c++) o[r * dv + c] *= alpha;
    }
}

/* Normalise once; a row that saw nothing stays 0 with lse = -inf. */
static inline void online_finish(int64_t rows, const real *mi, const real *li, real *o,
                                 int64_t dv, real *lse) {
    for (int64_t r = 0; r < rows; r++) {
        const int seen = li[r] > 0 || li[r] != li[r];
        real inv = seen ? 1 / li[r] : 0;
        for (int64_t c = 0; c < dv; c++) o[r * dv + c] *= inv;
        if (lse) lse[r] = seen ? mi[r] + log(li[r]) : -INFINITY;
    }
}

/* ---- the softmax of one row ----------------------------------------------
 *   pass 1: mx  = max_j x_j                 (NaN-propagating)
 *   pass 2: y_j = exp(x_j - mx), l = sum y  (every exponent <= 0: no overflow)
 *   pass 3: y_j /= l;  lse = mx + log(l)
 * In place; returns the row's log-sum-exp.  A row of all -inf (nothing
 * visible) is answered with zeros and lse = -inf instead of 0/0.  sink, if
 * not -inf, adds exp(sink) to l (sink_fold). */
static inline real softmax_row(const ac_kernels *kern, real *y, int64_t n, real sink) {
    real mx = kern->OPS.rowmax(y, n);
    if (sink > mx && mx == mx) mx = sink; /* a sink (-inf: none) is one more term */
    if (mx == -INFINITY) { /* empty or fully masked */
        for (int64_t j = 0; j < n; j++) y[j] = 0;
        return -INFINITY;
    }
    real l = kern->OPS.expsum(y, n, mx) + (sink == -INFINITY ? 0 : exp(sink - mx));
    real inv = 1 / l;
    for (int64_t j = 0; j < n; j++) y[j] *= inv;
    return mx + log(l);
}

/* ---- the log-sum-exp merge of partial results ----------------------------
 * If O_c is attention over a part of the keys and lse_c its log-sum-exp,
 * attention over all the parts together is
 *   M = max_c lse_c,  w_c = exp(lse_c - M) (<= 1: no overflow),
 *   O = Σ_c w_c·O_c / Σ_c w_c,  lse = M + log Σ_c w_c.
 * Parts c of row r at o[c] + r·o_stride and lse[c] + r·lse_stride; out rows
 * ldo apart.  A part that saw no key (lse = -inf) carries no weight; if none
 * did, the row is 0 with lse = -inf.
 * sum, if not NULL, gives each part as (max, sum) rather than lse = max +
 * log(sum): lse[c] holds the max, and the weight is sum·exp(max - M).  Where
 * the scores are huge (a bias of finfo.min) max + log(sum) rounds to max and
 * loses the count; the pair keeps it. */
static inline void merge_rows(int64_t parts, int64_t rows, int64_t dv, const real *const *o,
                              int64_t o_stride, const real *const *lse, int64_t lse_stride,
                              real *out, int64_t ldo, real *lse_out, const real *const *sum) {
    for (int64_t r = 0; r < rows; r++) {
        real mx = -INFINITY;
        for (int64_t c = 0; c < parts; c++) {
            real l = lse[c][r * lse_stride];
            if (l > mx || l != l) mx = l;
            if (mx != mx) break;
        }
        real *orow = out + r * ldo; /* (dv) */
        for (int64_t t = 0; t < dv; t++) orow[t] = 0;
        if (mx == -INFINITY) {
            if (lse_out) lse_out[r] = -INFINITY;
            continue;
        }
        real total = 0;
        for (int64_t c = 0; c < parts; c++) {
            real w = exp(lse[c][r * lse_stride] - mx);
            if (w == 0 && lse[c][r * lse_stride] == -INFINITY) continue; /* saw nothing */
            if (sum) w *= sum[c][r * lse_stride];
            total += w;
            const real *oc = o[c] + r * o_stride; /* (dv) */
            for (int64_t t = 0; t < dv; t++) orow[t] += w * oc[t];
        }
        real inv = 1 / total;
        for (int64_t t = 0; t < dv; t++) orow[t] *= inv;
        if (lse_out) lse_out[r] = mx + log(total);
    }
}

/* ---- packing -------------------------------------------------------------
 * The SIMD kernels read K blocks transposed (Kᵀ, d × keys) so that the
 * reduction over d streams both operands: each block is packed once per call
 * and shared by every Q block (and every query head of a GQA group). */

/* Block kb of one kv head x (m rows, ld apart; d values a row): keys
 * [kb·bk, kb·bk + bk), the last block shorter, into dst. */
static inline void pack_block(const ac_kernels *kern, const kvreal *x, int64_t ld, int64_t m,
                              int64_t d, int64_t bk, int64_t kb, real *dst) {
    const int64_t j0 = kb * bk;
    kern->KV_OPS.pack(m - j0 < bk ? m - j0 : bk, d, x + j0 * ld, ld, dst);
}

/* The K blocks some query row of batch b can see: [kb0[b], kb1[b]), the
 * causal and window band (a boolean mask does not narrow it; key_lengths
 * does).  Returns the most blocks any batch has: the slots to pack per kv
 * head (kb0 and kb1 may be NULL to ask only that, to size the workspace).
 * Only these are packed, so a narrow window over a long K costs and holds
 * O(band), not O(m). */
static inline int64_t band_blocks(const ac_attn_args *a, int64_t bk, int64_t *kb0,
                                  int64_t *kb1) {
    int64_t most = 0;
    for (int64_t b = 0; b < a->batch; b++) {
        ac_vis vis;
        ac_vis_init(&vis, a, b, 0); /* the band is the same for every head */
        int64_t lo, hi;
        ac_vis_keys(&vis, 0, a->n, bk, &lo, &hi);
        const int64_t first = lo / bk, end = (hi + bk - 1) / bk;
        if (kb0) {
            kb0[b] = first;
            kb1[b] = end;
        }
        if (end - first > most) most = end - first;
    }
    return most;
}

/* Inside a parallel region, the team packs the band of every (batch, kv
 * head) of x (strides as in ac_attn_args): slot t = (b·Hkv + hk)·nband + i
 * holds block kb0[b] + i, at dst + t·psize; slots past kb1[b] stay unused.
 * Polled, as a long K takes a while to pack. */
static inline void pack_band(const ac_kernels *kern, const ac_attn_args *a, const kvreal *x,
                             const int64_t stride[3], int64_t d, int64_t bk, int64_t psize,
                             const int64_t *kb0, const int64_t *kb1, int64_t nband, real *dst,
                             ac_stop *stop) {
    const int64_t Hkv = a->kv_heads;
    #pragma omp for schedule(static) nowait /* the caller meets at ac_team_finish */
    for (int64_t t = 0; t < a->batch * Hkv * nband; t++) {
        const int64_t b = t / (Hkv * nband), kb = kb0[b] + t % nband;
        if (kb >= kb1[b] || ac_stop_poll(stop)) continue;
        pack_block(kern, kv_head(x, stride, b, t / nband % Hkv), stride[2], a->m, d, bk, kb,
                   dst + t * psize);
    }
}

/* Beside pack_band, in the same region: each V block of the band (slots as
 * pack_band numbers them) widened to reals, bk·dv values a slot, rows dv apart. */
static inline void widen_band(const ac_attn_args *a, const kvreal *v, int64_t bk,
                              const int64_t *kb0, const int64_t *kb1, int64_t nband, real *dst,
                              ac_stop *stop) {
    const int64_t Hkv = a->kv_heads, ldv = a->v_stride[2], dv = a->dv;
    #pragma omp for schedule(static) nowait /* the caller meets at ac_team_finish */
    for (int64_t t = 0; t < a->batch * Hkv * nband; t++) {
        const int64_t b = t / (Hkv * nband), j0 = (kb0[b] + t % nband) * bk;
        if (j0 >= kb1[b] * bk || ac_stop_poll(stop)) continue;
        const int64_t rows = a->m - j0 < bk ? a->m - j0 : bk;
        const kvreal *vh = kv_head(v, a->v_stride, b, t / nband % Hkv) + j0 * ldv;
        real *out = dst + t * bk * dv;
        for (int64_t j = 0; j < rows; j++)
            for (int64_t c = 0; c < dv; c++) out[j * dv + c] = KV_TO_REAL(vh[j * ldv + c]);
    }
}

/* Beside pack_band, in the same region: finite[t] = is the V block of slot t
 * (numbered as pack_band numbers them) free of inf and NaN?  What pv_tile
 * needs to know of a masked tile, learnt once per call.  Unused slots are
 * left as they are. */
static inline void finite_band(const ac_attn_args *a, const kvreal *v, int64_t bk,
                               const int64_t *kb0, const int64_t *kb1, int64_t nband,
                               unsigned char *finite, ac_stop *stop) {
    const int64_t Hkv = a->kv_heads, ldv = a->v_stride[2];
    #pragma omp for schedule(static) nowait /* the caller meets at ac_team_finish */
    for (int64_t t = 0; t < a->batch * Hkv * nband; t++) {
        const int64_t b = t / (Hkv * nband), j0 = (kb0[b] + t % nband) * bk;
        if (j0 >= kb1[b] * bk || ac_stop_poll(stop)) continue;
        const int64_t cols = a->m - j0 < bk ? a->m - j0 : bk;
        const kvreal *vh = kv_head(v, a->v_stride, b, t / nband % Hkv);
        finite[t] = (unsigned char)all_finite(vh + j0 * ldv, cols, a->dv, ldv);
    }
}
