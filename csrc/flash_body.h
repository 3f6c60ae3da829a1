/* flash_body.h — blockwise attention with the online softmax, FlashAttention-2
 * order.  Instantiated by float32.c (ac_flash_f32), float64.c (ac_flash_f64),
 * float16.c (ac_flash_f16), bfloat16.c (ac_flash_bf16) and int8.c (ac_flash_i8).
 *
 * The unit of work is one Q block of one head: Q blocks are independent, so
 * they are what the threads share out.  Inside a task the K/V blocks stream
 * past while each query row keeps three numbers' worth of state:
 *
 *   m_i  running max of the scores seen so far
 *   l_i  running sum of exp(s - m_i)
 *   O_i  running, *unnormalised* sum of exp(s - m_i)·v   (held in `out`)
 *
 * For a new block with row max m' = max(m_i, max_j s_ij):
 *   pass 1: S = Q_blk·K_blkᵀ·scale             (bq, bk) tile, never the n×m table
 *   pass 2: α = exp(m_i - m');  P = exp(S - m');  l_i = α·l_i + Σ_j P_ij
 *           O_i *= α   — the rescale that keeps old terms relative to the new max
 *   pass 3: O_i += P·V_blk
 * and once at the end O_i /= l_i, lse_i = m_i + log l_i.
 *
 * Causal: blocks wholly above the diagonal are never visited (the loop stops
 * at the last key any row of the block can see), nor, with a window, those
 * wholly below the band, so the cost grows as n·w; only blocks crossing an
 * edge of the band (or under a boolean mask) are masked.  Memory: one
 * (bq, bk) tile and 3·bq numbers per thread, and one packed copy (laid out
 * for the micro-kernel) of the K blocks inside the band, per call (and one of
 * the V blocks, widened from 16 bits or, for a V of reals off its cache
 * lines, aligned): O(m·d) in general, O((n + w)·d) under a window, whatever
 * m is.
 *
 * Needs tiles_body.h and decode_body.h included before it.
 */

/* One thread's scratch: the (bq, bk) score tile, then per-row state. */
typedef struct {
    real *s;    /* (bq, bk) scores, then probabilities */
    real *mi;   /* (bq) running max */
    real *li;   /* (bq) running sum */
    real *bmax; /* (bq) this tile's row maxima */
    ac_workspace ws;
} flash_scratch;

static int flash_scratch_carve(flash_scratch *w, int64_t bq, int64_t bk) {
    w->ws = (ac_workspace){0};
    ac_ws_part(&w->ws, &w->s, bq * bk, sizeof(real));
    ac_ws_part(&w->ws, &w->mi, bq, sizeof(real));
    ac_ws_part(&w->ws, &w->li, bq, sizeof(real));
    ac_ws_part(&w->ws, &w->bmax, bq, sizeof(real));
    return ac_ws_carve(&w->ws) == AC_OK;
}

/* One task: a Q block of one head, and where its kv head's K and V lie. */
typedef struct {
    int64_t i0, rows;          /* query rows [i0, i0 + rows) */
    const real *q;             /* (rows, dk), rows a->q_stride[2] apart */
    const real *kp;            /* the kv head's packed band of K blocks, psize values apart */
    const kvreal *v;           /* the kv head's V (m, dv), rows a->v_stride[2] apart */
    const real *vw;            /* V's band widened (16-bit) or copied (v_copy_pays), bk·dv
                                * a block; else NULL */
    const unsigned char *vfin; /* is each V block of the band finite? */
    const float *ks, *vs;      /* an int8 cache: the kv head's key and value scales (m) */
    int64_t kb0;               /* the band's first block: kp and vfin start there */
    real *out, *lse;           /* (rows, dv) and (rows) or NULL */
} flash_task;

/* The tiles a task computed, and how many of them needed a mask. */
typedef struct {
    int64_t tiles, edges;
} flash_counts;

static flash_counts flash_block(const ac_kernels *kern, const ac_attn_args *a,
                                const ac_vis *vis, int64_t bk, int64_t psize,
                                const flash_task *t, flash_scratch *w, ac_stop *stop) {
    const int64_t m = a->m, dv = a->dv, rows = t->rows, i0 = t->i0;
    const int64_t ldq = a->q_stride[2], ldv = a->v_stride[2];
    const real scale = (real)a->scale;
    const int64_t group = kern->edge_rows > 0 ? kern->edge_rows : rows; /* on the diagonal */
    /* the band of keys any row of the block sees: blocks outside it are
     * never visited (above the causal diagonal, below the window, padding) */
    int64_t kv_begin, kv_end;
    ac_vis_keys(vis, i0, rows, bk, &kv_begin, &kv_end);
    flash_counts counts = {0, 0};

    online_start(rows, w->mi, w->li, t->out, dv);
    for (int64_t j0 = kv_begin; j0 < kv_end; j0 += bk) {
        /* a block row at n = 131072 is ~1000 tiles: ask between tiles, so a
         * stop waits for one tile, not one row of them (the output is
         * incomplete then, and the call returns AC_EINTR) */
        if (ac_stop_poll(stop)) break;
        const int64_t cols = kv_end - j0 < bk ? kv_end - j0 : bk;
        const int edge = !ac_vis_clear(vis, i0, rows, j0, cols);
        counts.tiles++;
        counts.edges += edge;
        /* pass 1: the score tile, its row maxima fused into the store */
        for (int64_t r = 0; r < rows; r++) w->bmax[r] = -INFINITY;
        /* the soft-cap acts on each score alone: qk applies it in registers
         * (not over an int8 cache, whose key scales come first) */
        const int added = vis->bias || vis->alibi;
        const int fused = !edge && !added && !KV_SCALES; /* the maxima fused into qk's store */
        const real *kp = t->kp + (j0 / bk - t->kb0) * psize;
        const int64_t pbk = m - j0 < bk ? m - j0 : bk;
        const real cap = KV_SCALES ? 0 : (real)vis->softcap;
        if (!edge) {
            kern->OPS.qk(rows, cols, a->dk, t->q, ldq, kp, pbk, scale, cap, w->s, bk,
                         fused ? w->bmax : NULL);
        } else { /* the diagonal: each group of rows as far as its keys go (the rest
                  * of its row is hidden, and mask_tile sets it to -inf) */
            for (int64_t g0 = 0; g0 < rows; g0 += group) {
                const int64_t gr = rows - g0 < group ? rows - g0 : group;
                const int64_t gc = ac_vis_edge_cols(vis, i0 + g0 + gr - 1, j0, cols);
                if (gc > 0)
                    kern->OPS.qk(gr, gc, a->dk, t->q + g0 * ldq, ldq, kp, pbk, scale, cap,
                                 w->s + g0 * bk, bk, NULL);
            }
        }
        if (!fused) { /* a bias or ALiBi, or a block on the diagonal or the band's edge
                       * (or an int8 cache): the scores modified, masked, then their maxima */
            if (KV_SCALES) scale_cols(kern, w->s, bk, rows, cols, t->ks + j0);
            if (added || (KV_SCALES && vis->softcap > 0))
                modify_tile(kern, vis, i0, rows, rows, j0, cols, w->s, bk, KV_SCALES);
            if (edge) mask_tile(vis, i0, rows, rows, j0, cols, w->s, bk);
            for (int64_t r = 0; r < rows; r++) w->bmax[r] = kern->OPS.rowmax(w->s + r * bk, cols);
        }
        /* pass 2: online softmax update, row by row, while the next block's
         * K and V are fetched */
        const int64_t jn = j0 + bk, ncols = kv_end - jn < bk ? kv_end - jn : bk;
        const int64_t blk = j0 / bk - t->kb0, vsz = bk * dv;
        const ac_ahead_block next = {
            .k = (const char *)(t->kp + (jn / bk - t->kb0) * psize),
            .k_bytes = psize * (int64_t)sizeof(real),
            .v = t->vw ? (const char *)(t->vw + (blk + 1) * vsz) : (const char *)(t->v + jn * ldv),
            .v_rows = ncols,
            .v_row_bytes = dv * (int64_t)(t->vw ? sizeof(real) : sizeof(kvreal)),
            .v_ld_bytes = t->vw ? dv * (int64_t)sizeof(real) : ldv * (int64_t)sizeof(kvreal),
        };
        online_update(kern, rows, cols, w->s, bk, w->bmax, w->mi, w->li, t->out, dv,
                      jn < kv_end ? &next : NULL, edge ? vis : NULL, i0, j0, NULL);
        if (KV_SCALES) scale_cols(kern, w->s, bk, rows, cols, t->vs + j0); /* after l: see int8.c */
        /* pass 3: accumulate P·V (V from its widened or aligned copy where there is
         * one and no hidden key's inf/NaN value can reach a row: the kernel on
         * reals, no conversions) */
        if (edge && t->vfin[blk]) { /* the diagonal, V finite: the weights past
                                     * each group's keys are 0, and left out */
            for (int64_t g0 = 0; g0 < rows; g0 += group) {
                const int64_t gr = rows - g0 < group ? rows - g0 : group;
                const int64_t gc = ac_vis_edge_cols(vis, i0 + g0 + gr - 1, j0, cols);
                if (gc == 0) continue;
                if (t->vw)
                    kern->REAL_KV_OPS.pv(gr, gc, dv, w->s + g0 * bk, bk, t->vw + blk * vsz, dv,
                                         t->out + g0 * dv, dv);
                else
                    kern->KV_OPS.pv(gr, gc, dv, w->s + g0 * bk, bk, t->v + j0 * ldv, ldv,
                                    t->out + g0 * dv, dv);
            }
        } else if (t->vw && (t->vfin[blk] || (!edge && !vis->bias)))
            kern->REAL_KV_OPS.pv(rows, cols, dv, w->s, bk, t->vw + blk * vsz, dv, t->out, dv);
        else
            pv_tile(kern, vis, i0, rows, rows, j0, cols, dv, w->s, bk, t->v + j0 * ldv, ldv,
                    t->out, dv, t->vfin[blk]);
    }
    if (vis->sinks)
        for (int64_t r = 0; r < rows; r++)
            sink_fold((real)vis->sinks[0], w->mi + r, w->li + r, t->out + r * dv, dv);
    online_finish(rows, w->mi, w->li, t->out, dv, t->lse);
    return counts;
}

/* Is a V of reals (not a 16-bit or int8 cache) worth copying into the band,
 * rows dv apart from a cache line on?  Where some row or head does not start
 * on a line and the copy's rows would (dv·sizeof(real) a multiple of 64), the
 * rows are at least AC_VCOPY_MIN_ROW_BYTES long, and each V block is read by
 * at least AC_VCOPY_MIN_READS Q blocks: the copy costs a read and a write of
 * V, each read of a block a P·V over it.  Pairs of calls in one process, the
 * copy against none (Intel Xeon, 2 threads, B = 1, H = 8, a V 16 bytes past
 * its lines as NumPy lays it): d = 128 ran 1.01-1.06x as fast on AVX-512
 * (n = 512-2048, full and causal, MHA and GQA 32/8) and 1.00-1.04x on AVX2;
 * d = 64 0.98-1.01x on both, so rows of 256 bytes are left as they are. */
#ifndef AC_VCOPY_MIN_READS
#define AC_VCOPY_MIN_READS 4
#endif
#ifndef AC_VCOPY_MIN_ROW_BYTES
#define AC_VCOPY_MIN_ROW_BYTES 512
#endif
static int v_copy_pays(const ac_attn_args *a, const kvreal *v, int64_t reads) {
    if (sizeof(kvreal) != sizeof(real)) return 0; /* a 16-bit V (widened anyway) or int8 */
    const int64_t row_bytes = a->dv * (int64_t)sizeof(real);
    if (reads < AC_VCOPY_MIN_READS || row_bytes < AC_VCOPY_MIN_ROW_BYTES || row_bytes % 64 != 0)
        return 0;
    const int64_t line = 64 / (int64_t)sizeof(kvreal);
    return (uintptr_t)v % 64 != 0 || a->v_stride[0] % line != 0 || a->v_stride[1] % line != 0 ||
           a->v_stride[2] % line != 0;
}

int FN(ac_flash)(const ac_attn_args *a, const real *q, const kvreal *k, const kvreal *v,
                 real *out, real *lse) {
    int rc = ac_check_attn(a, q, k, v, out, 1);
    if (rc != AC_OK) return rc;
    if (KV_SCALES && (!a->k_scale || !a->v_scale)) return AC_EINVAL; /* an int8 cache's */
    const int64_t n = a->n, H = a->heads, Hkv = a->kv_heads;
    if (n == 0 || a->batch == 0 || H == 0) return AC_OK;
    if (ac_decode_applies(a)) return decode(a, q, k, v, out, lse);
    const int64_t group = H / Hkv; /* query heads per kv head */
    const ac_kernels *kern = ac_kernels_active();
    int64_t bq, bk;
    ac_tile_sizes(a, (int)sizeof(real), AC_TILES_FLASH, &bq, &bk); /* tiles hold reals */
    const int64_t nqb = (n + bq - 1) / bq, ntasks = a->batch * H * nqb;
    /* The K blocks of each batch's band [kb0, kb1), packed once, up front, by
     * the team: shared by all Q blocks (and all query heads of a GQA group);
     * beside them, whether each V block is finite (pv_tile). */
    const int64_t nband = band_blocks(a, bk, NULL, NULL), nslots = a->batch * Hkv * nband;
    const int64_t psize = ac_kpack_size(kern, bk, a->dk);
    int64_t *kb0, *kb1;
    real *kpack, *vwide = NULL;
    unsigned char *vfin;
    ac_workspace ws = {0};
    ac_ws_part(&ws, &kb0, a->batch, sizeof *kb0);
    ac_ws_part(&ws, &kb1, a->batch, sizeof *kb1);
    ac_ws_part(&ws, &kpack, ac_product(nslots, psize), sizeof *kpack);
    /* A 16-bit V is widened once per call, as K is packed, rather than once per
     * load in every Q block's P·V (a conversion per vector a tile row group
     * reads: bfloat16 prefill 0.84-0.88x the float32 one on AVX2 before).
     * A V of reals is copied so too where its rows do not start on a cache
     * line and each block is read by enough Q blocks to repay the copy
     * (v_copy_pays): NumPy's arrays start 16 bytes past a line, so every
     * 64-byte load of such a V spans two. */
    const int64_t vsz = bk * a->dv;
    const int widen = KV_WIDEN_V || v_copy_pays(a, v, group * nqb);
    if (widen) ac_ws_part(&ws, &vwide, ac_product(nslots, vsz > 0 ? vsz : 1), sizeof *vwide);
    ac_ws_part(&ws, &vfin, nslots, sizeof *vfin);
    if (ac_ws_carve(&ws) != AC_OK) return AC_ENOMEM;
    band_blocks(a, bk, kb0, kb1);
    int failed = 0;
    ac_stop stop;
    ac_stop_init(&stop, a);
    /* threads done with the packing and V checks, and with their tasks:
     * each phase ends in ac_team_finish, where the caller keeps polling */
    _Atomic int arrived_prep = 0, arrived = 0;

    #pragma omp parallel num_threads(AC_NUM_THREADS(a->num_threads))
    {
        pack_band(kern, a, k, a->k_stride, a->dk, bk, psize, kb0, kb1, nband, kpack, &stop);
        finite_band(a, v, bk, kb0, kb1, nband, vfin, &stop);
        if (widen) widen_band(a, v, bk, kb0, kb1, nband, vwide, &stop);
        ac_team_finish(&stop, &arrived_prep);
        flash_scratch w;
        if (!flash_scratch_carve(&w, bq, bk)) ac_team_failed(&failed);
        /* dynamic: causal blocks differ in cost; the last Q blocks (the most
         * keys) are handed out first so no thread is left with them at the end */
        #pragma omp for schedule(dynamic, 1) nowait
        for (int64_t t = 0; t < ntasks; t++) {
            if (!w.ws.base || ac_stop_poll(&stop)) continue;
            const int64_t hb = t / nqb, b = hb / H, h = hb % H, hk = h / group;
            const int64_t i0 = (nqb - 1 - t % nqb) * bq, slot0 = (b * Hkv + hk) * nband;
            const flash_task task = {
                .i0 = i0,
                .rows = n - i0 < bq ? n - i0 : bq,
                .q = q_head(q, a->q_stride, b, h) + i0 * a->q_stride[2],
                .kp = kpack + slot0 * psize,
                .v = kv_head(v, a->v_stride, b, hk),
                .vw = widen ? vwide + slot0 * vsz : NULL,
                .vfin = vfin + slot0,
                .ks = KV_SCALES ? scale_head(a->k_scale, a->kscale_stride, b, hk) : NULL,
                .vs = KV_SCALES ? scale_head(a->v_scale, a->vscale_stride, b, hk) : NULL,
                .kb0 = kb0[b],
                .out = out + (hb * n + i0) * a->dv,
                .lse = lse ? lse + hb * n + i0 : NULL,
            };
            ac_vis vis;
            ac_vis_init(&vis, a, b, h);
            const flash_counts c = flash_block(kern, a, &vis, bk, psize, &task, &w, &stop);
            if (a->block_counts) {
                #pragma omp atomic
                a->block_counts[0] += c.tiles;
                #pragma omp atomic
                a->block_counts[1] += c.edges;
            }
        }
        ac_team_finish(&stop, &arrived);
        ac_ws_release(&w.ws); /* after the team meets: a fixed peak */
    }
    ac_ws_release(&ws);
    return ac_status_of(failed, &stop);
}
