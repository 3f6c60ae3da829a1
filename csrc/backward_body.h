/* backward_body.h — gradients of attention by recomputation, FlashAttention-2
 * style.  Instantiated by float32.c (ac_backward_f32) and float64.c
 * (ac_backward_f64); K and V are of the queries' type here.
 *
 * Given q, k, v, the forward's out and lse, and dout:
 *   D_i  = Σ_c dout_ic · out_ic                       (once per row)
 *   P    = exp(S - lse),  S = Q·Kᵀ·scale              (recomputed per tile)
 *   dV  += Pᵀ·dO,   dP = dO·Vᵀ,   dS = P ∘ (dP − D)
 *   dK  += dSᵀ·Q·scale,   dQ += dS·K·scale
 *
 * No race and no atomics, in one of two ways.
 *
 *   one pass, when there are (batch, kv head) pairs enough for every thread
 *   (at least two a thread): a task owns one pair — the rows of dK and dV
 *   of its kv head and the rows of dQ of every query head of its GQA group
 *   — and walks its K blocks in order, each against every Q block of the
 *   group: five products a tile (S, dP, dV, dK, dQ).
 *
 *   two passes, when there are not (one long sequence, few heads): pass A
 *   gives each (batch, kv head, K block) task its own rows of dK and dV and
 *   walks every Q block of every query head of the group; pass B gives each
 *   (batch, head, Q block) task its rows of dQ and walks the K blocks.  S, P
 *   and dP are computed twice — seven products a tile, 1.4× the FLOPs —
 *   the price of sharing one head's work among threads without atomics.
 *
 * dQ sums its K blocks in the same order either way, so the two give the
 * same bits.  Extra memory O(n·d): packed K and V, D, per-thread tiles.
 * Blocks outside the band are skipped, as in the forward.
 *
 * Needs tiles_body.h included before it.
 */

/* One thread's scratch. */
typedef struct {
    real *p;  /* (bq, bk) probabilities P */
    real *ds; /* (bq, bk) dP, then dS in place */
    real *tr; /* (bk, bq) Pᵀ or dSᵀ */
} bwd_scratch;

/* s (rows, bk) = the tile of probabilities P for rows [i0, i0+rows), keys
 * [j0, j0+cols): recomputed scores, masked, exp(S − lse). */
static void bwd_p(const ac_kernels *K, const ac_attn_args *a, const ac_vis *vis,
                  const real *qb, const real *kp, int64_t pbk, const real *lse, int64_t i0,
                  int64_t rows, int64_t j0, int64_t cols, int64_t bk, real *s) {
    K->OPS.qk(rows, cols, a->dk, qb, a->q_stride[2], kp, pbk, (real)a->scale, s, bk, NULL);
    if (!ac_vis_clear(vis, i0, rows, j0, cols)) mask_tile(vis, i0, rows, rows, j0, cols, s, bk);
    for (int64_t r = 0; r < rows; r++) {
        if (lse[r] == -INFINITY) { /* the row saw nothing: no gradient */
            memset(s + r * bk, 0, (size_t)cols * sizeof(real));
            continue;
        }
        K->OPS.expsum(s + r * bk, cols, lse[r]);
    }
}

/* dp (rows, bk) = dO·Vᵀ, then dS = P ∘ (dP − D) in place of dp. */
static void bwd_ds(const ac_kernels *K, const ac_attn_args *a, const real *dob, const real *vp,
                   int64_t pbk, const real *Drow, int64_t rows, int64_t cols, int64_t bk,
                   const real *p, real *dp) {
    K->OPS.qk(rows, cols, a->dv, dob, a->dv, vp, pbk, 1, dp, bk, NULL);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dp[r * bk + c] = p[r * bk + c] * (dp[r * bk + c] - Drow[r]);
}

static void transpose(const real *x, int64_t rows, int64_t cols, int64_t ldx, real *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[c * rows + r] = x[r * ldx + c];
}

/* What both passes read.  Only the K blocks inside the band are packed
 * (pack_band): slot t = (b·Hkv + hk)·nband + i holds block kb0[b] + i, the
 * packed K and V slots pk and pv values apart. */
typedef struct {
    const real *q, *k, *lse, *dout; /* the inputs (out is only in D) */
    const real *kpack, *vpack;      /* packed K and V blocks of the band */
    const real *D;                  /* (B, H, n) rowsum(dO ∘ O) */
    const int64_t *kb0, *kb1;       /* each batch's band of K blocks */
    int64_t bq, bk, nqb, nband, pk, pv;
} bwd_plan;

/* Pass A, slot t: the rows of dK and dV of one (batch, kv head, K block of
 * the band), summed over every Q block of every query head of its GQA group.
 * (The rows of K outside every band keep the zero gradient they start with.)
 * dq non-NULL (one pass): dQ += dS·K for those Q blocks too — the caller
 * owns their rows and brings the K blocks in order. */
static void dkdv_block(const ac_kernels *K, const ac_attn_args *a, const bwd_plan *P, int64_t t,
                       const bwd_scratch *w, real *dk, real *dv, real *dq, ac_stop *stop) {
    const int64_t H = a->heads, Hkv = a->kv_heads, n = a->n, m = a->m, g = H / Hkv;
    const int64_t dkk = a->dk, dvv = a->dv, bq = P->bq, bk = P->bk, nband = P->nband;
    const int64_t b = t / (Hkv * nband), hk = t / nband % Hkv, kb = P->kb0[b] + t % nband;
    if (kb >= P->kb1[b]) return; /* an unused slot */
    const int64_t j0 = kb * bk;
    const int64_t cols = m - j0 < bk ? m - j0 : bk;
    real *dkb = dk + ((b * Hkv + hk) * m + j0) * dkk; /* (cols, dk) */
    real *dvb = dv + ((b * Hkv + hk) * m + j0) * dvv; /* (cols, dv) */
    for (int64_t hg = 0; hg < g; hg++) {
        const int64_t h = hk * g + hg, hb = b * H + h;
        ac_vis vis;
        ac_vis_init(&vis, a, b, h);
        for (int64_t qb = 0; qb < P->nqb; qb++) {
            const int64_t i0 = qb * bq, rows = n - i0 < bq ? n - i0 : bq;
            if (ac_stop_poll(stop)) break; /* a task spans every Q block */
            /* only Q blocks whose band meets this K block */
            if (ac_vis_hi(&vis, i0 + rows - 1) <= j0 || ac_vis_lo(&vis, i0) >= j0 + cols)
                continue;
            const real *qb_ = q_head(P->q, a->q_stride, b, h) + i0 * a->q_stride[2];
            const real *dob = P->dout + (hb * n + i0) * dvv; /* (rows, dv) */
            bwd_p(K, a, &vis, qb_, P->kpack + t * P->pk, cols, P->lse + hb * n + i0, i0, rows,
                  j0, cols, bk, w->p);
            transpose(w->p, rows, cols, bk, w->tr); /* Pᵀ (cols, rows) */
            K->KV_OPS.pv(cols, rows, dvv, w->tr, rows, dob, dvv, dvb, dvv); /* dV += Pᵀ·dO */
            bwd_ds(K, a, dob, P->vpack + t * P->pv, cols, P->D + hb * n + i0, rows, cols, bk,
                   w->p, w->ds);
            transpose(w->ds, rows, cols, bk, w->tr); /* dSᵀ (cols, rows) */
            /* dK += dSᵀ·Q (the scale once, at the end) */
            K->KV_OPS.pv(cols, rows, dkk, w->tr, rows, qb_, a->q_stride[2], dkb, dkk);
            if (dq) /* dQ += dS·K (the scale once, at the end) */
                K->KV_OPS.pv(rows, cols, dkk, w->ds, bk,
                             kv_head(P->k, a->k_stride, b, hk) + j0 * a->k_stride[2],
                             a->k_stride[2], dq + (hb * n + i0) * dkk, dkk);
        }
    }
    for (int64_t x = 0; x < cols * dkk; x++) dkb[x] *= (real)a->scale;
}

/* Pass B, task t: the rows of dQ of one (batch, head, Q block), over the K
 * blocks of its band. */
static void dq_block(const ac_kernels *K, const ac_attn_args *a, const bwd_plan *P, int64_t t,
                     const bwd_scratch *w, real *dq, ac_stop *stop) {
    const int64_t H = a->heads, Hkv = a->kv_heads, n = a->n, m = a->m, g = H / Hkv;
    const int64_t dkk = a->dk, dvv = a->dv, bq = P->bq, bk = P->bk;
    const int64_t hb = t / P->nqb, b = hb / H, h = hb % H, hk = h / g;
    const int64_t i0 = t % P->nqb * bq, rows = n - i0 < bq ? n - i0 : bq;
    ac_vis vis;
    ac_vis_init(&vis, a, b, h);
    const real *qb_ = q_head(P->q, a->q_stride, b, h) + i0 * a->q_stride[2];
    const real *dob = P->dout + (hb * n + i0) * dvv; /* (rows, dv) */
    real *dqb = dq + (hb * n + i0) * dkk;            /* (rows, dk) */
    const int64_t kv_begin = ac_vis_lo(&vis, i0) / bk * bk;
    const int64_t kv_end = ac_vis_hi(&vis, i0 + rows - 1);
    for (int64_t j0 = kv_begin; j0 < kv_end; j0 += bk) {
        if (ac_stop_poll(stop)) break; /* between tiles, as in flash_body.h */
        const int64_t cols = m - j0 < bk ? m - j0 : bk;
        const int64_t pt = (b * Hkv + hk) * P->nband + j0 / bk - P->kb0[b];
        bwd_p(K, a, &vis, qb_, P->kpack + pt * P->pk, cols, P->lse + hb * n + i0, i0, rows, j0,
              cols, bk, w->p);
        bwd_ds(K, a, dob, P->vpack + pt * P->pv, cols, P->D + hb * n + i0, rows, cols, bk, w->p,
               w->ds);
        K->KV_OPS.pv(rows, cols, dkk, w->ds, bk, /* dQ += dS·K */
                     kv_head(P->k, a->k_stride, b, hk) + j0 * a->k_stride[2], a->k_stride[2],
                     dqb, dkk);
    }
    for (int64_t x = 0; x < rows * dkk; x++) dqb[x] *= (real)a->scale;
}

int FN(ac_backward)(const ac_attn_args *a, const real *q, const real *k, const real *v,
                    const real *o, const real *lse, const real *dout, real *dq, real *dk,
                    real *dv) {
    int rc = ac_check_attn(a, q, k, v, o, 1);
    if (rc != AC_OK) return rc;
    const int64_t B = a->batch, H = a->heads, Hkv = a->kv_heads, n = a->n, m = a->m;
    const int64_t dkk = a->dk, dvv = a->dv;
    if (B * Hkv * m > 0 && (!dk || !dv)) return AC_EINVAL;
    if (B * H * n > 0 && (!dq || !lse || !dout)) return AC_EINVAL;
    if (dk) memset(dk, 0, (size_t)(B * Hkv * m * dkk) * sizeof(real));
    if (dv) memset(dv, 0, (size_t)(B * Hkv * m * dvv) * sizeof(real));
    if (dq) memset(dq, 0, (size_t)(B * H * n * dkk) * sizeof(real));
    if (n == 0 || m == 0 || B * H == 0) return AC_OK;
    const ac_kernels *K = ac_kernels_active();
    int64_t bq, bk;
    ac_tile_sizes(a, (int)sizeof(real), AC_TILES_BACKWARD, &bq, &bk);
    const int64_t nqb = (n + bq - 1) / bq;
    int64_t *kb0 = ac_ws_alloc(2 * B, sizeof(int64_t)); /* each batch's band of K blocks */
    if (!kb0) return AC_ENOMEM;
    int64_t *kb1 = kb0 + B;
    const int64_t nband = band_blocks(a, bk, kb0, kb1);
    const int64_t pk = ac_kpack_size(K, bk, dkk), pv = ac_kpack_size(K, bk, dvv);
    const int64_t npack = B * Hkv * nband, nD = B * H * n;
    int64_t nkp = 0, nvp = 0, scratch = 0;
    real *kpack = NULL, *vpack = NULL, *D = NULL;
    if (ac_mul(npack, pk, &nkp) && ac_mul(npack, pv, &nvp) && ac_mul(3 * bq, bk, &scratch)) {
        kpack = ac_ws_alloc(nkp, sizeof(real));
        vpack = ac_ws_alloc(nvp, sizeof(real));
        D = ac_ws_alloc(nD, sizeof(real));
    }
    int failed = !kpack || !vpack || !D;
    ac_stop stop;
    ac_stop_init(&stop, a);
    const bwd_plan plan = {q, k, lse, dout, kpack, vpack, D, kb0, kb1, bq, bk, nqb, nband, pk,
                           pv};
    const int team = AC_NUM_THREADS(a->num_threads);
    const int one_pass = team == 1 || B * Hkv >= 2 * (int64_t)team; /* see the top */
    /* each phase ends in ac_team_finish, where the caller keeps polling */
    _Atomic int arrived_prep = 0, arrived_a = 0, arrived_b = 0;
    if (failed) goto done;

    #pragma omp parallel num_threads(AC_NUM_THREADS(a->num_threads))
    {
        pack_band(K, a, k, a->k_stride, dkk, bk, pk, kb0, kb1, nband, kpack, &stop);
        pack_band(K, a, v, a->v_stride, dvv, bk, pv, kb0, kb1, nband, vpack, &stop);
        #pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < nD; r++) { /* D = rowsum(dO ∘ O) */
            real acc = 0;
            for (int64_t c = 0; c < dvv; c++) acc += dout[r * dvv + c] * o[r * dvv + c];
            D[r] = acc;
        }
        ac_team_finish(&stop, &arrived_prep);
        real *ws = ac_ws_alloc(scratch, sizeof(real));
        if (!ws) {
            #pragma omp atomic write
            failed = 1;
        }
        const bwd_scratch w = {ws, ws ? ws + bq * bk : NULL, ws ? ws + 2 * bq * bk : NULL};
        if (one_pass) {
            /* dK, dV and dQ, one (batch, kv head) a task, its K blocks in order */
            #pragma omp for schedule(dynamic, 1) nowait
            for (int64_t bh = 0; bh < B * Hkv; bh++) {
                for (int64_t i = 0; i < nband; i++)
                    if (ws && !ac_stop_poll(&stop))
                        dkdv_block(K, a, &plan, bh * nband + i, &w, dk, dv, dq, &stop);
                real *dqg = dq + bh * (H / Hkv) * n * dkk; /* the group's rows of dQ */
                for (int64_t x = 0; x < H / Hkv * n * dkk; x++) dqg[x] *= (real)a->scale;
            }
            ac_team_finish(&stop, &arrived_a);
        } else {
            /* pass A: dK and dV, one (batch, kv head, K block of the band) a task */
            #pragma omp for schedule(dynamic, 1) nowait
            for (int64_t t = 0; t < npack; t++)
                if (ws && !ac_stop_poll(&stop)) dkdv_block(K, a, &plan, t, &w, dk, dv, NULL, &stop);
            ac_team_finish(&stop, &arrived_a);
            /* pass B: dQ, one (batch, head, Q block) a task */
            #pragma omp for schedule(dynamic, 1) nowait
            for (int64_t t = 0; t < B * H * nqb; t++)
                if (ws && !ac_stop_poll(&stop)) dq_block(K, a, &plan, t, &w, dq, &stop);
            ac_team_finish(&stop, &arrived_b);
        }
        ac_ws_free(ws, scratch, sizeof(real));
    }
done:
    ac_ws_free(kpack, nkp, sizeof(real));
    ac_ws_free(vpack, nvp, sizeof(real));
    ac_ws_free(D, nD, sizeof(real));
    ac_ws_free(kb0, 2 * B, sizeof(int64_t));
    return ac_status_of(failed, &stop);
}
