/* decode.c — split-KV attention for a few query rows (flash-decoding).
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
 *           online softmax (m, l, O) per row, then (O_partial, lse_partial).
 *   pass 2: merge the chunks of each row with the log-sum-exp rule (merge.c).
 *
 * K rows are read as they lie (qkd: no packing, which would cost a second
 * pass over the cache).  Memory: the partials, chunks · g·n · (dv + 1).
 */
#ifndef AC_TEMPLATE
#define AC_TEMPLATE "decode.c"
#include <string.h>

#include "internal.h"

int ac_decode_applies(const ac_attn_args *a) {
    const int64_t g = a->kv_heads ? a->heads / a->kv_heads : 1;
    if (a->split_kv == 0) return 0;
    /* a head-dependent mask would differ between the rows a task stacks */
    if (a->mask && a->mask_stride[1] != 0 && g > 1) return 0;
    if (a->split_kv > 0) return 1;
    return g * a->n <= AC_DECODE_MAX_ROWS && a->m >= 2 * AC_DECODE_MIN_CHUNK;
}

#define AC_TEMPLATE_F16
#include "template.h"
#else

int R(ac_decode)(const ac_attn_args *a, const real *q, const kvreal *k, const kvreal *v,
                 real *out, real *lse) {
    const ac_kernels *K = ac_kernels_active();
    const int64_t B = a->batch, H = a->heads, Hkv = a->kv_heads, n = a->n, m = a->m;
    const int64_t dk = a->dk, dv = a->dv, g = H / Hkv, rows = g * n;
    const int nt = AC_NUM_THREADS(a->num_threads);
    (void)nt; /* the team size only: the split below never depends on it */
    const real scale = (real)a->scale;
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
    const int64_t bk = 512; /* keys per score tile inside a chunk */
    const int64_t ntasks = B * Hkv * nch;

    int64_t per_task, npart, scratch;
    if (!ac_muladd(rows, dv, rows, &per_task) || !ac_mul(ntasks, per_task, &npart) ||
        !ac_mul(rows, dk + bk + 3, &scratch))
        return AC_ENOMEM;
    real *part = ac_ws_alloc(npart > 0 ? npart : 1, sizeof(real)); /* O then lse, per task */
    if (!part) return AC_ENOMEM;
    real *part_lse = part + ntasks * rows * dv;
    int failed = 0;
    ac_stop stop;
    ac_stop_init(&stop, a);

    #pragma omp parallel num_threads(nt)
    {
        real *qg = ac_ws_alloc(scratch, sizeof(real)); /* (rows, dk), then S, m, l, bmax */
        if (!qg) {
            #pragma omp atomic write
            failed = 1;
        }
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < ntasks; t++) {
            if (!qg || ac_stop_poll(&stop)) continue;
            const int64_t b = t / (Hkv * nch), hk = t / nch % Hkv, c = t % nch;
            real *s = qg + rows * dk, *mi = s + rows * bk, *li = mi + rows, *bmax = li + rows;
            real *o = part + t * rows * dv, *l_out = part_lse + t * rows;
            ac_vis vis;
            ac_vis_init(&vis, a, b, hk * g); /* every head of the group sees alike */
            /* the group's query rows, stacked: row r = (head hk·g + r / n, query r % n) */
            for (int64_t r = 0; r < rows; r++)
                memcpy(qg + r * dk,
                       q + b * a->q_stride[0] + (hk * g + r / n) * a->q_stride[1] +
                           (r % n) * a->q_stride[2],
                       (size_t)dk * sizeof(real));
            const kvreal *kh = k + b * a->k_stride[0] + hk * a->k_stride[1];
            const kvreal *vh = v + b * a->v_stride[0] + hk * a->v_stride[1];
            /* this chunk's keys, cut to the band any of the rows sees */
            int64_t j_begin = c * chunk, j_end = j_begin + chunk < m ? j_begin + chunk : m;
            if (j_begin < ac_vis_lo(&vis, 0)) j_begin = ac_vis_lo(&vis, 0);
            if (j_end > ac_vis_hi(&vis, n - 1)) j_end = ac_vis_hi(&vis, n - 1);
            RR(ac_online_start)(rows, mi, li, o, dv);
            for (int64_t j0 = j_begin; j0 < j_end; j0 += bk) {
                if (ac_stop_poll(&stop)) break; /* between tiles, as in flash.c */
                const int64_t cols = j_end - j0 < bk ? j_end - j0 : bk;
                K->R(qkd)(rows, cols, dk, qg, dk, kh + j0 * a->k_stride[2], a->k_stride[2], scale,
                          s, bk);
                if (!ac_vis_clear(&vis, 0, n, j0, cols))
                    RR(ac_mask_tile)(&vis, 0, rows, n, j0, cols, s, bk);
                for (int64_t r = 0; r < rows; r++) bmax[r] = K->RR(rowmax)(s + r * bk, cols);
                RR(ac_online_update)(K, rows, cols, s, bk, bmax, mi, li, o, dv);
                R(ac_pv_tile)(K, &vis, 0, rows, n, j0, cols, dv, s, bk, vh + j0 * a->v_stride[2],
                              a->v_stride[2], o, dv, -1);
            }
            RR(ac_online_finish)(rows, mi, li, o, dv, l_out);
        }
        ac_ws_free(qg, scratch, sizeof(real));

        /* pass 2: the chunks of each (batch, kv head) merged into its rows,
         * which are contiguous in out: heads hk·g … hk·g+g-1, n rows each */
        #pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * Hkv; bh++) {
            if (failed || ac_stopped(&stop)) continue;
            const real *op[AC_MERGE_MAX_PARTS], *lp[AC_MERGE_MAX_PARTS];
            for (int64_t c = 0; c < nch; c++) {
                op[c] = part + (bh * nch + c) * rows * dv;
                lp[c] = part_lse + (bh * nch + c) * rows;
            }
            const int64_t b = bh / Hkv, hk = bh % Hkv, row0 = (b * H + hk * g) * n;
            RR(ac_merge_rows)(nch, rows, dv, op, dv, lp, 1, out + row0 * dv, dv,
                             lse ? lse + row0 : NULL);
        }
    }
    ac_ws_free(part, npart > 0 ? npart : 1, sizeof(real));
    return failed ? AC_ENOMEM : ac_stopped(&stop) ? AC_EINTR : AC_OK;
}

#endif
