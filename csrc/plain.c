/* plain.c — attention exactly as the formula reads, in plain C loops.
 *
 *     out = softmax(Q·Kᵀ·scale, modified, masked) · V
 *
 * Read this file first.  It is the whole algorithm in one function per
 * element type (ac_plain_f32, ac_plain_f64; the two differ only in `float`
 * against `double`, written out so that each reads top to bottom): no SIMD,
 * no tiles, no threads, no helpers from other files.
 *
 * The names: "naive" attention is the materialising algorithm, the one that
 * computes the score table and keeps it (method="naive", ac_naive_* in
 * table_body.h, on the tiled SIMD kernels and threads); "plain" is this
 * file, the same algorithm written as plainly as C allows
 * (attncore.plain_attention); "flash" is the blockwise one that never
 * keeps the table (flash_body.h).  Every buffer says its
 * shape; the passes are numbered as on paper:
 *
 *   pass 1: scores   s_j = scale · q_i·k_j        for the keys row i sees,
 *            then the modifiers: s_j = cap·tanh(s_j/cap) (soft-cap), + bias_ij,
 *            − slope·|qpos_i − kpos_j| (ALiBi)
 *   pass 2: max      mx  = max_j s_j              (so no exp overflows)
 *   pass 3: exp, sum p_j = exp(s_j - mx), l = Σ p_j  (+ exp(sink − mx): a sink)
 *   pass 4: output   out_i = Σ_j (p_j / l) · v_j, lse_i = mx + log l
 *
 * Which keys row i sees (ac_vis in internal.h, shared by every kernel): causal
 * compares positions, key j <= i + (m - n) by default (bottom-right aligned;
 * q_offset and k_offset place both anywhere), and it is the loop's upper
 * bound (hi), not a branch; a window of w keys moves the lower bound (lo);
 * key_lengths shorten m per batch; a boolean
 * mask skips single keys.  A row that sees no key gives 0 and lse = -inf
 * (never 0/0 = NaN), and a masked key never reaches a row, even if its
 * value is inf or NaN; a visible key's value always does, even at weight 0.
 * A NaN score makes its row NaN.
 *
 * It materialises one row of the n×m score table at a time: memory O(m).
 * The fast kernels compute the same thing (table_body.h: the whole table
 * with SIMD tiles; flash_body.h: never the table, the online softmax).
 * Python: attncore.plain_attention.  Single-threaded, by design.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "internal.h"

int ac_plain_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                 float *out, float *lse) {
    int rc = ac_check_attn(a, q, k, v, out, 1);
    if (rc != AC_OK) return rc;
    const int64_t B = a->batch, H = a->heads, n = a->n, dk = a->dk, dv = a->dv;
    const int64_t group = a->kv_heads > 0 ? H / a->kv_heads : 1; /* query heads per kv head */
    float *s = ac_ws_alloc(a->m > 0 ? a->m : 1, sizeof(float)); /* (m) one row of scores */
    if (!s) return AC_ENOMEM;
    ac_stop stop;
    ac_stop_init(&stop, a);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) {
            /* which keys each row sees (internal.h, the one definition every kernel
             * uses): keys [0, vis.m) are real (key_lengths), and row i sees [lo, hi) */
            ac_vis vis;
            ac_vis_init(&vis, a, b, h);
            const float *qh = q + b * a->q_stride[0] + h * a->q_stride[1];           /* (n, dk) */
            const float *kh = k + b * a->k_stride[0] + h / group * a->k_stride[1];   /* (m, dk) */
            const float *vh = v + b * a->v_stride[0] + h / group * a->v_stride[1];   /* (m, dv) */
            const uint8_t *mh = a->mask ? ac_mask_plane(a, b) + h * a->mask_stride[1]
                                        : NULL;                                     /* (n, m) */
            const float *bh = a->bias ? (const float *)a->bias + a->bias_batch[b] +
                                          h * a->bias_stride[0]
                                    : NULL;                                     /* (n, m) */
            const float cap = (float)a->softcap;
            float *oh = out + (b * H + h) * n * dv;                                 /* (n, dv) */
            for (int64_t i = 0; i < n; i++) {
                if (ac_stop_poll(&stop)) goto stopped;
                const float *qi = qh + i * a->q_stride[2]; /* (dk) */
                float *oi = oh + i * dv;                   /* (dv) */
                /* the keys row i sees: [lo, hi) */
                const int64_t hi = ac_vis_hi(&vis, i), lo = ac_vis_lo(&vis, i);

                /* pass 1: the scores, and pass 2: their max */
                float mx = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    if (mh && !mh[i * a->mask_stride[2] + j * a->mask_stride[3]]) {
                        s[j] = -INFINITY; /* hidden by the mask: weight exactly 0 */
                        continue;
                    }
                    const float *kj = kh + j * a->k_stride[2]; /* (dk) */
                    float dot = 0.0f;
                    for (int64_t t = 0; t < dk; t++) dot += qi[t] * kj[t];
                    s[j] = dot * (float)a->scale;
                    /* the score modifiers, in their order (attncore.h) */
                    if (a->softcap > 0) s[j] = cap * tanhf(s[j] / cap);
                    if (bh) s[j] += bh[i * a->bias_stride[1] + j * a->bias_stride[2]];
                    if (a->alibi) {
                        const int64_t dist = i + vis.delta - j; /* qpos - kpos */
                        s[j] -= (float)a->alibi[h] * (float)(dist < 0 ? -dist : dist);
                    }
                    if (s[j] > mx || s[j] != s[j]) mx = s[j]; /* NaN wins */
                }
                /* a sink is one more term in the sum, exp(sink), with no value */
                const float sink = a->sinks ? (float)a->sinks[h] : -INFINITY;
                if (sink > mx && mx == mx) mx = sink;
                /* pass 3: exponentials relative to the max (all <= 1) and their sum;
                 * when every score is -inf (or there is no key) every weight is 0 */
                float l = 0.0f;
                for (int64_t j = lo; j < hi; j++) {
                    s[j] = mx == -INFINITY ? 0.0f : expf(s[j] - mx); /* a masked key: 0 */
                    l += s[j];
                }
                if (sink != -INFINITY && mx != -INFINITY) l += expf(sink - mx);
                /* pass 4: out_i = Σ_j (p_j / l)·v_j over the keys the row sees.  A hidden
                 * key is skipped; a visible one counts even at weight 0, so that its inf
                 * or NaN value reaches the row (0·inf is NaN), as in every kernel. */
                for (int64_t c = 0; c < dv; c++) oi[c] = 0.0f;
                for (int64_t j = lo; j < hi; j++) {
                    if (mh && !mh[i * a->mask_stride[2] + j * a->mask_stride[3]])
                        continue; /* hidden: its value, even inf or NaN, never reaches the row */
                    if (bh && bh[i * a->bias_stride[1] + j * a->bias_stride[2]] == -INFINITY)
                        continue; /* a bias of -inf hides a key as the mask does */
                    const float p = l != 0.0f ? s[j] / l : 0.0f;
                    const float *vj = vh + j * a->v_stride[2]; /* (dv) */
                    for (int64_t c = 0; c < dv; c++) oi[c] += p * vj[c];
                }
                /* a row that sees no key (or only -inf scores): lse = -inf, not log 0 */
                if (lse) lse[(b * H + h) * n + i] = l != 0.0f ? mx + logf(l) : -INFINITY;
            }
        }
    }
stopped:
    ac_ws_free(s, a->m > 0 ? a->m : 1, sizeof(float));
    return ac_status_of(0, &stop);
}

int ac_plain_f64(const ac_attn_args *a, const double *q, const double *k, const double *v,
                 double *out, double *lse) {
    int rc = ac_check_attn(a, q, k, v, out, 1);
    if (rc != AC_OK) return rc;
    const int64_t B = a->batch, H = a->heads, n = a->n, dk = a->dk, dv = a->dv;
    const int64_t group = a->kv_heads > 0 ? H / a->kv_heads : 1; /* query heads per kv head */
    double *s = ac_ws_alloc(a->m > 0 ? a->m : 1, sizeof(double)); /* (m) one row of scores */
    if (!s) return AC_ENOMEM;
    ac_stop stop;
    ac_stop_init(&stop, a);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) {
            /* which keys each row sees (internal.h, the one definition every kernel
             * uses): keys [0, vis.m) are real (key_lengths), and row i sees [lo, hi) */
            ac_vis vis;
            ac_vis_init(&vis, a, b, h);
            const double *qh = q + b * a->q_stride[0] + h * a->q_stride[1];          /* (n, dk) */
            const double *kh = k + b * a->k_stride[0] + h / group * a->k_stride[1];  /* (m, dk) */
            const double *vh = v + b * a->v_stride[0] + h / group * a->v_stride[1];  /* (m, dv) */
            const uint8_t *mh = a->mask ? ac_mask_plane(a, b) + h * a->mask_stride[1]
                                        : NULL;                                     /* (n, m) */
            const double *bh = a->bias ? (const double *)a->bias + a->bias_batch[b] +
                                          h * a->bias_stride[0]
                                    : NULL;                                     /* (n, m) */
            const double cap = (double)a->softcap;
            double *oh = out + (b * H + h) * n * dv;                                /* (n, dv) */
            for (int64_t i = 0; i < n; i++) {
                if (ac_stop_poll(&stop)) goto stopped;
                const double *qi = qh + i * a->q_stride[2]; /* (dk) */
                double *oi = oh + i * dv;                   /* (dv) */
                /* the keys row i sees: [lo, hi) */
                const int64_t hi = ac_vis_hi(&vis, i), lo = ac_vis_lo(&vis, i);

                /* pass 1: the scores, and pass 2: their max */
                double mx = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    if (mh && !mh[i * a->mask_stride[2] + j * a->mask_stride[3]]) {
                        s[j] = -INFINITY; /* hidden by the mask: weight exactly 0 */
                        continue;
                    }
                    const double *kj = kh + j * a->k_stride[2]; /* (dk) */
                    double dot = 0.0;
                    for (int64_t t = 0; t < dk; t++) dot += qi[t] * kj[t];
                    s[j] = dot * a->scale;
                    /* the score modifiers, in their order (attncore.h) */
                    if (a->softcap > 0) s[j] = cap * tanh(s[j] / cap);
                    if (bh) s[j] += bh[i * a->bias_stride[1] + j * a->bias_stride[2]];
                    if (a->alibi) {
                        const int64_t dist = i + vis.delta - j; /* qpos - kpos */
                        s[j] -= (double)a->alibi[h] * (double)(dist < 0 ? -dist : dist);
                    }
                    if (s[j] > mx || s[j] != s[j]) mx = s[j]; /* NaN wins */
                }
                /* a sink is one more term in the sum, exp(sink), with no value */
                const double sink = a->sinks ? (double)a->sinks[h] : -INFINITY;
                if (sink > mx && mx == mx) mx = sink;
                /* pass 3: exponentials relative to the max (all <= 1) and their sum;
                 * when every score is -inf (or there is no key) every weight is 0 */
                double l = 0.0;
                for (int64_t j = lo; j < hi; j++) {
                    s[j] = mx == -INFINITY ? 0.0 : exp(s[j] - mx); /* a masked key: 0 */
                    l += s[j];
                }
                if (sink != -INFINITY && mx != -INFINITY) l += exp(sink - mx);
                /* pass 4: out_i = Σ_j (p_j / l)·v_j over the keys the row sees.  A hidden
                 * key is skipped; a visible one counts even at weight 0, so that its inf
                 * or NaN value reaches the row (0·inf is NaN), as in every kernel. */
                for (int64_t c = 0; c < dv; c++) oi[c] = 0.0;
                for (int64_t j = lo; j < hi; j++) {
                    if (mh && !mh[i * a->mask_stride[2] + j * a->mask_stride[3]])
                        continue; /* hidden: its value, even inf or NaN, never reaches the row */
                    if (bh && bh[i * a->bias_stride[1] + j * a->bias_stride[2]] == -INFINITY)
                        continue; /* a bias of -inf hides a key as the mask does */
                    const double p = l != 0.0 ? s[j] / l : 0.0;
                    const double *vj = vh + j * a->v_stride[2]; /* (dv) */
                    for (int64_t c = 0; c < dv; c++) oi[c] += p * vj[c];
                }
                /* a row that sees no key (or only -inf scores): lse = -inf, not log 0 */
                if (lse) lse[(b * H + h) * n + i] = l != 0.0 ? mx + log(l) : -INFINITY;
            }
        }
    }
stopped:
    ac_ws_free(s, a->m > 0 ? a->m : 1, sizeof(double));
    return ac_status_of(0, &stop);
}
