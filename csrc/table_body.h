/* table_body.h — the score table and materialised ("naive") attention on the
 * tiled micro-kernels.  Instantiated by float32.c (ac_scores_f32,
 * ac_naive_f32), float64.c (ac_scores_f64, ac_naive_f64), float16.c
 * (ac_scores_f16, ac_naive_f16) and bfloat16.c (ac_scores_bf16,
 * ac_naive_bf16).  plain.c (ac_plain_*) holds the same algorithm as plain
 * loops, to read first; this is the fast one that method="naive" runs.
 *
 * Naive attention does what the formula says, one pass at a time, and keeps
 * the whole n×m table in memory between passes:
 *
 *   pass 1: S = Q·Kᵀ·scale          (n, m)  every cell, masked ones included,
 *           then the score modifiers (soft-cap, bias, ALiBi: modify_tile)
 *   pass 2: S[i, j] = -inf where the mask hides key j from query i
 *   pass 3: A = softmax(S) by rows   (n, m)  in place
 *   pass 4: O = A·V                  (n, dv)
 *
 * Its memory is O(n·m) per head — the n² that the blockwise kernel removes.
 * Heads run one after another; all threads share the rows of one table, so
 * the peak is one table however many heads there are.
 *
 * Needs tiles_body.h included before it.
 */

/* Passes 1 and 2 for one head into s (n, m), inside a parallel region: the
 * team packs the head's K blocks into kp (one block every psize values), then
 * splits the rows. */
static void score_table(const ac_kernels *kern, const ac_attn_args *a, const ac_vis *vis,
                        const real *qh, const kvreal *kh, real *s, real *kp, int64_t psize,
                        ac_stop *stop) {
    const int64_t n = a->n, m = a->m;
    int64_t bq, bk;
    ac_tile_sizes(a, (int)sizeof(real), AC_TILES_TABLE, &bq, &bk);
    const int64_t ldq = a->q_stride[2], ldk = a->k_stride[2];
    const real scale = (real)a->scale;
    const int64_t nqb = (n + bq - 1) / bq, nkb = (m + bk - 1) / bk;
    #pragma omp for schedule(static)
    for (int64_t kb = 0; kb < nkb; kb++) {
        if (ac_stopped(stop)) continue;
        pack_block(kern, kh, ldk, m, a->dk, bk, kb, kp + kb * psize);
    }
    #pragma omp for schedule(static)
    for (int64_t qb = 0; qb < nqb; qb++) {
        const int64_t i0 = qb * bq, rows = n - i0 < bq ? n - i0 : bq;
        if (ac_stop_poll(stop)) continue;
        for (int64_t kb = 0; kb < nkb; kb++) {
            const int64_t j0 = kb * bk, cols = m - j0 < bk ? m - j0 : bk;
            kern->OPS.qk(rows, cols, a->dk, qh + i0 * ldq, ldq, kp + kb * psize, cols, scale,
                         0, s + i0 * m + j0, m, NULL);
        }
        if (vis->mods) modify_tile(kern, vis, i0, rows, rows, 0, m, s + i0 * m, m, 1);
        if (!ac_vis_clear(vis, i0, rows, 0, m))
            mask_tile(vis, i0, rows, rows, 0, m, s + i0 * m, m);
    }
}

/* Room for one head's packed K blocks; -1 (refused by ac_ws_alloc) when
 * the count would overflow. */
static int64_t pack_size(const ac_kernels *kern, const ac_attn_args *a, int64_t *psize) {
    int64_t total, bq, bk;
    ac_tile_sizes(a, (int)sizeof(real), AC_TILES_TABLE, &bq, &bk);
    *psize = ac_kpack_size(kern, bk, a->dk);
    return ac_mul((a->m + bk - 1) / bk, *psize, &total) ? total : -1;
}

int FN(ac_scores)(const ac_attn_args *a, const real *q, const kvreal *k, real *s) {
    int rc = ac_check_attn(a, q, k, NULL, s, 0);
    if (rc != AC_OK) return rc;
    if (a->n == 0 || a->m == 0 || a->batch * a->heads == 0) return AC_OK;
    const ac_kernels *kern = ac_kernels_active();
    const int64_t group = a->heads / a->kv_heads, nm = a->n * a->m;
    int64_t psize, npack = pack_size(kern, a, &psize);
    real *kp = ac_ws_alloc(npack, sizeof(real));
    if (!kp) return AC_ENOMEM;
    ac_stop stop;
    ac_stop_init(&stop, a);
    #pragma omp parallel num_threads(AC_NUM_THREADS(a->num_threads))
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t h = 0; h < a->heads; h++) {
            ac_vis vis;
            ac_vis_init(&vis, a, b, h);
            score_table(kern, a, &vis, q_head(q, a->q_stride, b, h),
                        kv_head(k, a->k_stride, b, h / group), s + (b * a->heads + h) * nm, kp,
                        psize, &stop);
        }
    ac_ws_free(kp, npack, sizeof(real));
    return ac_status_of(0, &stop);
}

int FN(ac_naive)(const ac_attn_args *a, const real *q, const kvreal *k, const kvreal *v,
                 real *out, real *lse, real *weights) {
    int rc = ac_check_attn(a, q, k, v, out, 1);
    if (rc != AC_OK) return rc;
    const int64_t n = a->n, m = a->m, dv = a->dv, bh = a->batch * a->heads;
    if (n == 0 || bh == 0) return AC_OK;
    if (m == 0) { /* no keys at all: every row sees nothing */
        memset(out, 0, (size_t)(bh * n * dv) * sizeof(real));
        if (lse) /* a sink is the one term left */
            for (int64_t i = 0; i < bh * n; i++)
                lse[i] = a->sinks ? (real)a->sinks[i / n % a->heads] : -INFINITY;
        return AC_OK;
    }
    const ac_kernels *kern = ac_kernels_active();
    const int64_t group = a->heads / a->kv_heads, nm = n * m;
    int64_t bq, bk;
    ac_tile_sizes(a, (int)sizeof(real), AC_TILES_TABLE, &bq, &bk);
    const int64_t nqb = (n + bq - 1) / bq;
    int64_t psize, npack = pack_size(kern, a, &psize);
    const int64_t nkv = a->batch * a->kv_heads;
    real *kp, *table;
    unsigned char *vfin;
    ac_workspace ws = {0};
    ac_ws_part(&ws, &kp, npack, sizeof *kp); /* one head's packed K blocks */
    ac_ws_part(&ws, &table, weights ? 0 : nm, sizeof *table); /* (n, m), every head */
    ac_ws_part(&ws, &vfin, nkv, sizeof *vfin); /* is each kv head's V finite? */
    if (ac_ws_carve(&ws) != AC_OK) return AC_ENOMEM;
    ac_stop stop;
    ac_stop_init(&stop, a);
    #pragma omp parallel num_threads(AC_NUM_THREADS(a->num_threads))
    {
    #pragma omp for schedule(static)
    for (int64_t t = 0; t < nkv; t++)
        vfin[t] = (unsigned char)all_finite(kv_head(v, a->v_stride, t / a->kv_heads,
                                                    t % a->kv_heads), m, dv, a->v_stride[2]);
    for (int64_t b = 0; b < a->batch; b++) {
        for (int64_t h = 0; h < a->heads; h++) {
            const int64_t hb = b * a->heads + h;
            const real *qh = q_head(q, a->q_stride, b, h);
            const kvreal *kh = kv_head(k, a->k_stride, b, h / group);
            const kvreal *vh = kv_head(v, a->v_stride, b, h / group);
            real *s = weights ? weights + hb * nm : table; /* (n, m) */
            real *oh = out + hb * n * dv;                  /* (n, dv) */
            ac_vis vis;
            ac_vis_init(&vis, a, b, h);
            /* passes 1-2: the masked score table */
            score_table(kern, a, &vis, qh, kh, s, kp, psize, &stop);
            /* pass 3: row softmax in place (omp for ends with a barrier) */
            #pragma omp for schedule(static)
            for (int64_t i = 0; i < n; i++) {
                if (ac_stop_poll(&stop)) continue;
                real l = softmax_row(kern, s + i * m, m,
                                     vis.sinks ? (real)vis.sinks[0] : -INFINITY);
                if (lse) lse[hb * n + i] = l;
            }
            /* pass 4: O = A·V */
            const int v_finite = vfin[b * a->kv_heads + h / group];
            #pragma omp for schedule(static)
            for (int64_t qb = 0; qb < nqb; qb++) {
                const int64_t i0 = qb * bq, rows = n - i0 < bq ? n - i0 : bq;
                if (ac_stop_poll(&stop)) continue;
                memset(oh + i0 * dv, 0, (size_t)(rows * dv) * sizeof(real));
                pv_tile(kern, &vis, i0, rows, rows, 0, m, dv, s + i0 * m, m, vh, a->v_stride[2],
                        oh + i0 * dv, dv, v_finite);
            }
        }
    }
    }
    ac_ws_release(&ws);
    return ac_status_of(0, &stop);
}
