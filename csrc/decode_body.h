/* decode_body.h — split-KV attention for a few query rows (flash-decoding).
 * Instantiated by float32.c, float64.c, float16.c, bfloat16.c and int8.c as the
 * static decode(), which the blockwise kernel (flash_body.h) calls when
 * ac_decode_applies.
 *
 * A decode step has one (or a few) new query rows against a long KV cache:
 * the work is reading K and V, about 2·d FLOPs per value read, so it is
 * bandwidth-bound, and a kernel that parallelises over query blocks would
 * leave all but one core idle and read each kv head once per query head.
 *
 *   pass 1: split the keys into chunks; one task per (batch, kv head, chunk)
 *           stacks the rows of every query head of the GQA group, (g·n, d),
 *           and streams its chunk of K and V once for all of them — each
 *           byte of the cache is read once, not H/H_kv times — keeping the
 *           online softmax (m, l, O) per row, then (O_partial, m, l): the
 *           pair, not lse = m + log l, which loses l when m is huge.
 *   pass 2: merge the chunks of each row with the log-sum-exp rule (merge_rows).
 *
 * K rows are read as they lie (qkd: no packing, which would cost a second
 * pass over the cache), AC_DECODE_TILE_KEYS keys a score tile.  Memory: the
 * partials, chunks · g·n · (dv + 2).
 *
 * Needs tiles_body.h included before it.
 */

/* A decode tile's Q·Kᵀ: the kernel set's qkd, unless the unit gives its own
 * (int8.c: integer dot products where the CPU has them). */
#ifndef KV_QKD
#define KV_QKD(kern, ...) (kern)->KV_OPS.qkd(__VA_ARGS__)
#endif
/* and its P·V: tiles_body.h's pv_tile, unless the unit gives its own (int8.c) */
#ifndef KV_PV_TILE
#define KV_PV_TILE pv_tile
#endif

/* One thread's scratch. */
typedef struct {
    real *q;    /* (rows, dk) the group's query rows, stacked */
    real *s;    /* (rows, bk) score tile */
    real *mi;   /* (rows) running max */
    real *li;   /* (rows) running sum */
    real *bmax; /* (rows) this tile's row maxima */
    ac_workspace ws;
} decode_scratch;

static int decode_scratch_carve(decode_scratch *w, int64_t rows, int64_t dk, int64_t bk) {
    w->ws = (ac_workspace){0};
    ac_ws_part(&w->ws, &w->q, ac_product(rows, dk), sizeof(real));
    ac_ws_part(&w->ws, &w->s, ac_product(rows, bk), sizeof(real));
    ac_ws_part(&w->ws, &w->mi, rows, sizeof(real));
    ac_ws_part(&w->ws, &w->li, rows, sizeof(real));
    ac_ws_part(&w->ws, &w->bmax, rows, sizeof(real));
    return ac_ws_carve(&w->ws) == AC_OK;
}

/* Pass 1 for one task: keys [j_begin, j_end) of kv head hk of batch b
 * against the query rows of every head of its GQA group, stacked (g·n rows,
 * row r = head hk·g + r / n, query r % n), with the online softmax, into the
 * partial result o (rows, dv), its row maxima m_out and sums l_out (rows).
 * sinks: fold the rows' sinks in (one chunk of each row does). */
static void decode_chunk(const ac_kernels *kern, const ac_attn_args *a, const real *q,
                         const kvreal *k, const kvreal *v, int64_t b, int64_t hk,
                         int64_t j_begin, int64_t j_end, int sinks, const decode_scratch *w,
                         real *o, real *m_out, real *l_out, ac_stop *stop) {
    const int64_t n = a->n, dk = a->dk, dv = a->dv, g = a->heads / a->kv_heads, rows = g * n;
    const int64_t bk = AC_DECODE_TILE_KEYS, ldk = a->k_stride[2], ldv = a->v_stride[2];
    ac_vis vis;
    ac_vis_init(&vis, a, b, hk * g); /* every head of the group sees alike */
    for (int64_t r = 0; r < rows; r++)
        memcpy(w->q + r * dk, q_head(q, a->q_stride, b, hk * g + r / n) + (r % n) * a->q_stride[2],
               (size_t)dk * sizeof(real));
    const kvreal *kh = kv_head(k, a->k_stride, b, hk), *vh = kv_head(v, a->v_stride, b, hk);
    /* an int8 cache's scales (else unused) */
    const float *ks = KV_SCALES ? scale_head(a->k_scale, a->kscale_stride, b, hk) : NULL;
    const float *vs = KV_SCALES ? scale_head(a->v_scale, a->vscale_stride, b, hk) : NULL;
    /* the chunk's keys, cut to the band any of the rows sees */
    if (j_begin < ac_vis_lo(&vis, 0)) j_begin = ac_vis_lo(&vis, 0);
    if (j_end > ac_vis_hi(&vis, n - 1)) j_end = ac_vis_hi(&vis, n - 1);
    online_start(rows, w->mi, w->li, o, dv);
    for (int64_t j0 = j_begin; j0 < j_end; j0 += bk) {
        if (ac_stop_poll(stop)) break; /* between tiles, as in flash_body.h */
        const int64_t cols = j_end - j0 < bk ? j_end - j0 : bk;
        KV_QKD(kern, rows, cols, dk, w->q, dk, kh + j0 * ldk, ldk, (real)a->scale, w->s, bk);
        if (KV_SCALES) scale_cols(kern, w->s, bk, rows, cols, ks + j0); /* each key's scale */
        if (vis.mods) modify_tile(kern, &vis, 0, rows, n, j0, cols, w->s, bk, 1);
        if (!ac_vis_clear(&vis, 0, n, j0, cols)) mask_tile(&vis, 0, rows, n, j0, cols, w->s, bk);
        for (int64_t r = 0; r < rows; r++) w->bmax[r] = kern->OPS.rowmax(w->s + r * bk, cols);
        online_update(kern, rows, cols, w->s, bk, w->bmax, w->mi, w->li, o, dv, NULL, NULL, 0, 0,
                      NULL);
        if (KV_SCALES) scale_cols(kern, w->s, bk, rows, cols, vs + j0); /* each value's, after l */
        KV_PV_TILE(kern, &vis, 0, rows, n, j0, cols, dv, w->s, bk, vh + j0 * ldv, ldv, o, dv, -1);
    }
    if (sinks && vis.sinks) /* each row's sink, once: in its first chunk only */
        for (int64_t r = 0; r < rows; r++)
            sink_fold((real)vis.sinks[r / n], w->mi + r, w->li + r, o + r * dv, dv);
    online_finish(rows, w->mi, w->li, o, dv, NULL);
    for (int64_t r = 0; r < rows; r++) { /* (max, sum), not lse: see merge_rows */
        m_out[r] = w->li[r] > 0 || w->li[r] != w->li[r] ? w->mi[r] : -INFINITY;
        l_out[r] = w->li[r];
    }
}

static int decode(const ac_attn_args *a, const real *q, const kvreal *k, const kvreal *v,
                  real *out, real *lse) {
    const ac_kernels *kern = ac_kernels_active();
    const int64_t B = a->batch, H = a->heads, Hkv = a->kv_heads, n = a->n, m = a->m;
    const int64_t dv = a->dv, g = H / Hkv, rows = g * n;
    /* chunks: enough tasks to keep AC_DECODE_TASKS threads' worth busy, none
     * shorter than AC_DECODE_MIN_CHUNK keys, at most AC_MERGE_MAX_PARTS.  The
     * split depends on the problem alone, never on the thread count, so the
     * sums are taken in one order and the result is the same bits on any
     * number of threads. */
    int64_t want = (AC_DECODE_TASKS + B * Hkv - 1) / (B * Hkv);
    int64_t most = (m + AC_DECODE_MIN_CHUNK - 1) / AC_DECODE_MIN_CHUNK;
    int64_t nch = want < most ? want : most;
    nch = nch < 1 ? 1 : (nch > AC_MERGE_MAX_PARTS ? AC_MERGE_MAX_PARTS : nch);
    int64_t chunk = (m + nch - 1) / nch;
    chunk = (chunk + 15) / 16 * 16;
    nch = m > 0 ? (m + chunk - 1) / chunk : 1;
    const int64_t ntasks = B * Hkv * nch;
    /* each task's partial output (rows, dv) and log-sum-exp (rows) */
    real *part, *part_max, *part_sum;
    ac_workspace ws = {0};
    ac_ws_part(&ws, &part, ac_product(ntasks, ac_product(rows, dv)), sizeof *part);
    ac_ws_part(&ws, &part_max, ac_product(ntasks, rows), sizeof *part_max);
    ac_ws_part(&ws, &part_sum, ac_product(ntasks, rows), sizeof *part_sum);
    if (ac_ws_carve(&ws) != AC_OK) return AC_ENOMEM;
    int failed = 0;
    ac_stop stop;
    ac_stop_init(&stop, a);
    _Atomic int arrived = 0; /* threads done with pass 1 (ac_team_finish) */

    #pragma omp parallel num_threads(AC_NUM_THREADS(a->num_threads))
    {
        decode_scratch w;
        if (!decode_scratch_carve(&w, rows, a->dk, AC_DECODE_TILE_KEYS)) ac_team_failed(&failed);
        /* pass 1: one task per (batch, kv head, chunk) */
        #pragma omp for schedule(dynamic, 1) nowait
        for (int64_t t = 0; t < ntasks; t++) {
            if (!w.ws.base || ac_stop_poll(&stop)) continue;
            const int64_t j_begin = t % nch * chunk;
            decode_chunk(kern, a, q, k, v, t / (Hkv * nch), t / nch % Hkv, j_begin,
                         j_begin + chunk < m ? j_begin + chunk : m, j_begin == 0, &w,
                         part + t * rows * dv, part_max + t * rows, part_sum + t * rows, &stop);
        }
        ac_team_finish(&stop, &arrived);
        ac_ws_release(&w.ws); /* after the team meets: a fixed peak */

        /* pass 2: the chunks of each (batch, kv head) merged into its rows,
         * which are contiguous in out: heads hk·g … hk·g+g-1, n rows each */
        #pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * Hkv; bh++) {
            if (failed || ac_stopped(&stop)) continue;
            const real *op[AC_MERGE_MAX_PARTS], *mp[AC_MERGE_MAX_PARTS], *sp[AC_MERGE_MAX_PARTS];
            for (int64_t c = 0; c < nch; c++) {
                op[c] = part + (bh * nch + c) * rows * dv;
                mp[c] = part_max + (bh * nch + c) * rows;
                sp[c] = part_sum + (bh * nch + c) * rows;
            }
            const int64_t b = bh / Hkv, hk = bh % Hkv, row0 = (b * H + hk * g) * n;
            merge_rows(nch, rows, dv, op, dv, mp, 1, out + row0 * dv, dv, lse ? lse + row0 : NULL,
                       sp);
        }
    }
    ac_ws_release(&ws);
    return ac_status_of(failed, &stop);
}
