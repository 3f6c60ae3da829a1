/* backward_body.h — gradients of attention by recomputation, FlashAttention-2
 * style.  Instantiated by float32.c (ac_backward_f32) and float64.c
 * (ac_backward_f64); K and V are of the queries' type here.
 *
 * Given q, k, v, the forward's out and lse, and dout:
 *   D_i  = Σ_c dout_ic · out_ic                       (once per row)
 *   P    = exp(S - lse),  S = Q·Kᵀ·scale              (recomputed per tile,
 *                                                      modifiers and mask too)
 *   dV  += Pᵀ·dO,   dP = dO·Vᵀ,   dS = P ∘ (dP − D)   (= d bias, when asked)
 *   dZ   = dS, or dS ∘ (1 − tanh²(z/cap)) under a soft-cap
 *   dK  += dZᵀ·Q·scale,   dQ += dZ·K·scale
 * A sink changes none of this but lse (which holds it); its own gradient,
 * −Σ_i exp(sink − lse_i)·D_i, is the caller's (attncore._api).
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
    real *p;   /* (bq, bk) probabilities P */
    real *ds;  /* (bq, bk) dP, then dS in place */
    real *tr;  /* (bk, bq) Pᵀ or dSᵀ */
    real *cap; /* (bq, bk) with a soft-cap: the capped scores t, for dt/dz */
    ac_workspace ws;
} bwd_scratch;

static int bwd_scratch_carve(bwd_scratch *w, int64_t bq, int64_t bk, int softcap) {
    w->ws = (ac_workspace){0};
    ac_ws_part(&w->ws, &w->p, bq * bk, sizeof(real));
    ac_ws_part(&w->ws, &w->ds, bq * bk, sizeof(real));
    ac_ws_part(&w->ws, &w->tr, bq * bk, sizeof(real));
    ac_ws_part(&w->ws, &w->cap, softcap ? bq * bk : 0, sizeof(real));
    return ac_ws_carve(&w->ws) == AC_OK;
}

/* s (rows, bk) = the tile of probabilities P for rows [i0, i0+rows), keys
 * [j0, j0+cols): recomputed scores, modified, masked, exp(S − lse).  With a
 * soft-cap, the capped scores go to w->cap first. */
static void bwd_p(const ac_kernels *kern, const ac_attn_args *a, const ac_vis *vis,
                  const real *qb, const real *kp, int64_t pbk, const real *lse, int64_t i0,
                  int64_t rows, int64_t j0, int64_t cols, int64_t bk, real *s,
                  const bwd_scratch *w) {
    kern->OPS.qk(rows, cols, a->dk, qb, a->q_stride[2], kp, pbk, (real)a->scale, 0, s, bk, NULL);
    if (vis->softcap > 0)
        for (int64_t r = 0; r < rows; r++) {
            kern->OPS.softcap(s + r * bk, cols, (real)vis->softcap);
            memcpy(w->cap + r * bk, s + r * bk, (size_t)cols * sizeof(real));
        }
    if (vis->mods) modify_tile(kern, vis, i0, rows, rows, j0, cols, s, bk, 0);
    if (!ac_vis_clear(vis, i0, rows, j0, cols)) mask_tile(vis, i0, rows, rows, j0, cols, s, bk);
    for (int64_t r = 0; r < rows; r++) {
        if (lse[r] == -INFINITY) { /* the row saw nothing: no gradient */
            memset(s + r * bk, 0, (size_t)cols * sizeof(real));
            continue;
        }
        kern->OPS.expsum(s + r * bk, cols, lse[r]);
    }
}

/* dp (rows, bk) = dO·Vᵀ, then dS = P ∘ (dP − D) in place of dp: the gradient
 * of the scores S, which dbias (if not NULL: rows ldb apart) receives.  Then,
 * with a soft-cap, the gradient of the raw scores z: dS ∘ (1 − (t/cap)²). */
static void bwd_ds(const ac_kernels *kern, const ac_attn_args *a, const ac_vis *vis,
                   const real *dob, const real *vp, int64_t pbk, const real *Drow, int64_t rows,
                   int64_t cols, int64_t bk, const real *p, real *dp, const bwd_scratch *w,
                   real *dbias, int64_t ldb) {
    kern->OPS.qk(rows, cols, a->dv, dob, a->dv, vp, pbk, 1, 0, dp, bk, NULL);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dp[r * bk + c] = p[r * bk + c] * (dp[r * bk + c] - Drow[r]);
    if (dbias)
        for (int64_t r = 0; r < rows; r++)
            memcpy(dbias + r * ldb, dp + r * bk, (size_t)cols * sizeof(real));
    if (vis->softcap > 0) {
        const real inv = 1 / (real)vis->softcap;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                const real u = w->cap[r * bk + c] * inv;
                dp[r * bk + c] *= 1 - u * u;
            }
    }
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
    real *dbias;                    /* NULL, or (B, H, n, m): dS, written by pass A */
    const int64_t *kb0, *kb1;       /* each batch's band of K blocks */
    int64_t bq, bk, nqb, nband, kblock_vals, vblock_vals;
} bwd_plan;

/* Pass A, slot t: the rows of dK and dV of one (batch, kv head, K block of
 * the band), summed over every Q block of every query head of its GQA group.
 * (The rows of K outside every band keep the zero gradient they start with.)
 * dq non-NULL (one pass): dQ += dS·K for those Q blocks too — the caller
 * owns their rows and brings the K blocks in order. */
static void dkdv_block(const ac_kernels *kern, const ac_attn_args *a, const bwd_plan *plan,
                       int64_t t, const bwd_scratch *w, real *dk, real *dv, real *dq,
                       ac_stop *stop) {
    const int64_t H = a->heads, Hkv = a->kv_heads, n = a->n, m = a->m, g = H / Hkv;
    const int64_t dim_k = a->dk, dim_v = a->dv, bq = plan->bq, bk = plan->bk;
    const int64_t nband = plan->nband, ldq = a->q_stride[2], ldk = a->k_stride[2];
    const int64_t b = t / (Hkv * nband), hk = t / nband % Hkv, kb = plan->kb0[b] + t % nband;
    if (kb >= plan->kb1[b]) return; /* an unused slot */
    const int64_t j0 = kb * bk;
    const int64_t cols = m - j0 < bk ? m - j0 : bk;
    const real *kp = plan->kpack + t * plan->kblock_vals; /* this block, packed */
    const real *vp = plan->vpack + t * plan->vblock_vals;
    const real *k_rows = kv_head(plan->k, a->k_stride, b, hk) + j0 * ldk; /* (cols, dk) */
    real *dkb = dk + ((b * Hkv + hk) * m + j0) * dim_k;                  /* (cols, dk) */
    real *dvb = dv + ((b * Hkv + hk) * m + j0) * dim_v;                  /* (cols, dv) */
    for (int64_t hg = 0; hg < g; hg++) {
        const int64_t h = hk * g + hg, hb = b * H + h;
        ac_vis vis;
        ac_vis_init(&vis, a, b, h);
        for (int64_t qb = 0; qb < plan->nqb; qb++) {
            const int64_t i0 = qb * bq, rows = n - i0 < bq ? n - i0 : bq, r0 = hb * n + i0;
            if (ac_stop_poll(stop)) break; /* a task spans every Q block */
            /* only Q blocks whose band meets this K block */
            if (ac_vis_hi(&vis, i0 + rows - 1) <= j0 || ac_vis_lo(&vis, i0) >= j0 + cols)
                continue;
            const real *q_tile = q_head(plan->q, a->q_stride, b, h) + i0 * ldq; /* (rows, dk) */
            const real *dob = plan->dout + r0 * dim_v;                           /* (rows, dv) */
            bwd_p(kern, a, &vis, q_tile, kp, cols, plan->lse + r0, i0, rows, j0, cols, bk, w->p,
                  w);
            transpose(w->p, rows, cols, bk, w->tr); /* Pᵀ (cols, rows) */
            /* dV += Pᵀ·dO */
            kern->KV_OPS.pv(cols, rows, dim_v, w->tr, rows, dob, dim_v, dvb, dim_v);
            bwd_ds(kern, a, &vis, dob, vp, cols, plan->D + r0, rows, cols, bk, w->p, w->ds, w,
                   plan->dbias ? plan->dbias + r0 * m + j0 : NULL, m);
            transpose(w->ds, rows, cols, bk, w->tr); /* dSᵀ (cols, rows) */
            /* dK += dSᵀ·Q (the scale once, at the end) */
            kern->KV_OPS.pv(cols, rows, dim_k, w->tr, rows, q_tile, ldq, dkb, dim_k);
            if (dq) /* dQ += dS·K (the scale once, at the end) */
                kern->KV_OPS.pv(rows, cols, dim_k, w->ds, bk, k_rows, ldk, dq + r0 * dim_k, dim_k);
        }
    }
    for (int64_t x = 0; x < cols * dim_k; x++) dkb[x] *= (real)a->scale;
}

/* Pass B, task t: the rows of dQ of one (batch, head, Q block), over the K
 * blocks of its band. */
static void dq_block(const ac_kernels *kern, const ac_attn_args *a, const bwd_plan *plan,
                     int64_t t, const bwd_scratch *w, real *dq, ac_stop *stop) {
    const int64_t H = a->heads, Hkv = a->kv_heads, n = a->n, m = a->m, g = H / Hkv;
    const int64_t dim_k = a->dk, dim_v = a->dv, bq = plan->bq, bk = plan->bk;
    const int64_t ldk = a->k_stride[2];
    const int64_t hb = t / plan->nqb, b = hb / H, h = hb % H, hk = h / g;
    const int64_t i0 = t % plan->nqb * bq, rows = n - i0 < bq ? n - i0 : bq, r0 = hb * n + i0;
    ac_vis vis;
    ac_vis_init(&vis, a, b, h);
    const real *q_tile = q_head(plan->q, a->q_stride, b, h) + i0 * a->q_stride[2];
    const real *dob = plan->dout + r0 * dim_v; /* (rows, dv) */
    real *dqb = dq + r0 * dim_k;               /* (rows, dk) */
    const real *kh = kv_head(plan->k, a->k_stride, b, hk);
    int64_t kv_begin, kv_end;
    ac_vis_keys(&vis, i0, rows, bk, &kv_begin, &kv_end);
    for (int64_t j0 = kv_begin; j0 < kv_end; j0 += bk) {
        if (ac_stop_poll(stop)) break; /* between tiles, as in flash_body.h */
        const int64_t cols = m - j0 < bk ? m - j0 : bk;
        const int64_t slot = (b * Hkv + hk) * plan->nband + j0 / bk - plan->kb0[b];
        bwd_p(kern, a, &vis, q_tile, plan->kpack + slot * plan->kblock_vals, cols,
              plan->lse + r0, i0, rows, j0, cols, bk, w->p, w);
        bwd_ds(kern, a, &vis, dob, plan->vpack + slot * plan->vblock_vals, cols, plan->D + r0,
               rows, cols, bk, w->p, w->ds, w, NULL, 0);
        /* dQ += dS·K */
        kern->KV_OPS.pv(rows, cols, dim_k, w->ds, bk, kh + j0 * ldk, ldk, dqb, dim_k);
    }
    for (int64_t x = 0; x < rows * dim_k; x++) dqb[x] *= (real)a->scale;
}

/* D = rowsum(dO ∘ O), the rows shared by the team (inside a region). */
static void rowsum_product(int64_t rows, int64_t cols, const real *x, const real *y, real *D) {
    #pragma omp for schedule(static) nowait /* the caller meets at ac_team_finish */
    for (int64_t r = 0; r < rows; r++) {
        real acc = 0;
        for (int64_t c = 0; c < cols; c++) acc += x[r * cols + c] * y[r * cols + c];
        D[r] = acc;
    }
}

int FN(ac_backward)(const ac_attn_args *a, const real *q, const real *k, const real *v,
                    const real *o, const real *lse, const real *dout, real *dq, real *dk,
                    real *dv, real *dbias) {
    int rc = ac_check_attn(a, q, k, v, o, 1);
    if (rc != AC_OK) return rc;
    const int64_t B = a->batch, H = a->heads, Hkv = a->kv_heads, n = a->n, m = a->m;
    const int64_t dim_k = a->dk, dim_v = a->dv;
    if (B * Hkv * m > 0 && (!dk || !dv)) return AC_EINVAL;
    if (B * H * n > 0 && (!dq || !lse || !dout)) return AC_EINVAL;
    if (dk) memset(dk, 0, (size_t)(B * Hkv * m * dim_k) * sizeof(real));
    if (dv) memset(dv, 0, (size_t)(B * Hkv * m * dim_v) * sizeof(real));
    if (dq) memset(dq, 0, (size_t)(B * H * n * dim_k) * sizeof(real));
    if (n == 0 || m == 0 || B * H == 0) return AC_OK;
    const ac_kernels *kern = ac_kernels_active();
    int64_t bq, bk;
    ac_tile_sizes(a, (int)sizeof(real), AC_TILES_BACKWARD, &bq, &bk);
    /* K and V blocks of each batch's band [kb0, kb1), packed once; D per row */
    const int64_t nband = band_blocks(a, bk, NULL, NULL), nslots = B * Hkv * nband;
    const int64_t kblock_vals = ac_kpack_size(kern, bk, dim_k);
    const int64_t vblock_vals = ac_kpack_size(kern, bk, dim_v);
    int64_t *kb0, *kb1;
    real *kpack, *vpack, *D;
    ac_workspace ws = {0};
    ac_ws_part(&ws, &kb0, B, sizeof *kb0);
    ac_ws_part(&ws, &kb1, B, sizeof *kb1);
    ac_ws_part(&ws, &kpack, ac_product(nslots, kblock_vals), sizeof *kpack);
    ac_ws_part(&ws, &vpack, ac_product(nslots, vblock_vals), sizeof *vpack);
    ac_ws_part(&ws, &D, B * H * n, sizeof *D);
    if (ac_ws_carve(&ws) != AC_OK) return AC_ENOMEM;
    band_blocks(a, bk, kb0, kb1);
    const bwd_plan plan = {q, k, lse, dout, kpack, vpack, D, dbias, kb0, kb1, bq, bk,
                           (n + bq - 1) / bq, nband, kblock_vals, vblock_vals};
    int failed = 0;
    ac_stop stop;
    ac_stop_init(&stop, a);
    const int team = AC_NUM_THREADS(a->num_threads);
    const int one_pass = team == 1 || B * Hkv >= 2 * (int64_t)team; /* see the top */
    /* each phase ends in ac_team_finish, where the caller keeps polling */
    _Atomic int arrived_prep = 0, arrived_a = 0, arrived_b = 0;

    #pragma omp parallel num_threads(team)
    {
        pack_band(kern, a, k, a->k_stride, dim_k, bk, kblock_vals, kb0, kb1, nband, kpack, &stop);
        pack_band(kern, a, v, a->v_stride, dim_v, bk, vblock_vals, kb0, kb1, nband, vpack, &stop);
        rowsum_product(B * H * n, dim_v, dout, o, D);
        ac_team_finish(&stop, &arrived_prep);
        bwd_scratch w;
        if (!bwd_scratch_carve(&w, bq, bk, a->softcap > 0)) ac_team_failed(&failed);
        if (one_pass) {
            /* dK, dV and dQ, one (batch, kv head) a task, its K blocks in order */
            #pragma omp for schedule(dynamic, 1) nowait
            for (int64_t bh = 0; bh < B * Hkv; bh++) {
                for (int64_t i = 0; i < nband; i++)
                    if (w.ws.base && !ac_stop_poll(&stop))
                        dkdv_block(kern, a, &plan, bh * nband + i, &w, dk, dv, dq, &stop);
                real *dqg = dq + bh * (H / Hkv) * n * dim_k; /* the group's rows of dQ */
                for (int64_t x = 0; x < H / Hkv * n * dim_k; x++) dqg[x] *= (real)a->scale;
            }
            ac_team_finish(&stop, &arrived_a);
        } else {
            /* pass A: dK and dV, one (batch, kv head, K block of the band) a task */
            #pragma omp for schedule(dynamic, 1) nowait
            for (int64_t t = 0; t < nslots; t++)
                if (w.ws.base && !ac_stop_poll(&stop))
                    dkdv_block(kern, a, &plan, t, &w, dk, dv, NULL, &stop);
            ac_team_finish(&stop, &arrived_a);
            /* pass B: dQ, one (batch, head, Q block) a task */
            #pragma omp for schedule(dynamic, 1) nowait
            for (int64_t t = 0; t < B * H * plan.nqb; t++)
                if (w.ws.base && !ac_stop_poll(&stop)) dq_block(kern, a, &plan, t, &w, dq, &stop);
            ac_team_finish(&stop, &arrived_b);
        }
        ac_ws_release(&w.ws);
    }
    ac_ws_release(&ws);
    return ac_status_of(failed, &stop);
}
