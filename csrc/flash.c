/* flash.c — blockwise attention with the online softmax, FlashAttention-2 order.
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
 * edge of the band (or under a boolean mask) are masked.  Memory: one (bq, bk) tile and 3·bq numbers per
 * thread, and one packed copy of K (laid out for the micro-kernel) per call.
 */
#ifndef AC_TEMPLATE
#define AC_TEMPLATE "flash.c"
#include <string.h>

#include "internal.h"
#define AC_TEMPLATE_F16
#include "template.h"
#else

/* One Q block [i0, i0 + rows) of one head against its kv head's packed K
 * blocks kp (psize values apart) and V (vfin: is each V block finite?);
 * vis says which keys each row sees;
 * s is the (rows, bk) tile, mi/li/bmax per-row state, o the (rows, dv) rows
 * of the output.  Returns (tiles computed) · 2^32 + (of them masked). */
static int64_t R(flash_block)(const ac_kernels *K, const ac_attn_args *a, const ac_vis *vis,
                           int64_t bk, const real *qb, const real *kp, int64_t psize,
                           const kvreal *vh, const unsigned char *vfin, int64_t i0, int64_t rows, real *s, real *mi, real *li,
                           real *bmax, real *o, real *lse, ac_stop *stop) {
    const int64_t m = a->m, dv = a->dv;
    const int64_t ldq = a->q_stride[2], ldv = a->v_stride[2];
    const real scale = (real)a->scale;
    /* the band of keys any row of the block sees: blocks outside it are
     * never visited (above the causal diagonal, below the window, padding) */
    const int64_t kv_begin = ac_vis_lo(vis, i0) / bk * bk, kv_end = ac_vis_hi(vis, i0 + rows - 1);

    RR(ac_online_start)(rows, mi, li, o, dv);
    int64_t tiles = 0, edges = 0;
    for (int64_t j0 = kv_begin; j0 < kv_end; j0 += bk) {
        /* a block row at n = 131072 is ~1000 tiles: ask between tiles, so a
         * stop waits for one tile, not one row of them (the output is
         * incomplete then, and the call returns AC_EINTR) */
        if (ac_stop_poll(stop)) break;
        const int64_t cols = kv_end - j0 < bk ? kv_end - j0 : bk;
        const int edge = !ac_vis_clear(vis, i0, rows, j0, cols);
        tiles++;
        edges += edge;
        /* pass 1: the score tile, its row maxima fused into the store */
        for (int64_t r = 0; r < rows; r++) bmax[r] = -INFINITY;
        K->RR(qk)(rows, cols, a->dk, qb, ldq, kp + (j0 / bk) * psize, m - j0 < bk ? m - j0 : bk,
                 scale, s, bk, edge ? NULL : bmax);
        if (edge) { /* a block on the diagonal or the band's edge: mask, then take the maxima */
            RR(ac_mask_tile)(vis, i0, rows, rows, j0, cols, s, bk);
            for (int64_t r = 0; r < rows; r++) bmax[r] = K->RR(rowmax)(s + r * bk, cols);
        }
        /* pass 2: online softmax update, row by row */
        RR(ac_online_update)(K, rows, cols, s, bk, bmax, mi, li, o, dv);
        /* pass 3: accumulate P·V */
        R(ac_pv_tile)(K, vis, i0, rows, rows, j0, cols, dv, s, bk, vh + j0 * ldv, ldv, o, dv,
                      vfin[j0 / bk]);
    }
    RR(ac_online_finish)(rows, mi, li, o, dv, lse);
    return (tiles << 32) + edges;
}

int R(ac_flash)(const ac_attn_args *a, const real *q, const kvreal *k, const kvreal *v, real *out,
                real *lse) {
    int rc = ac_check_attn(a, q, k, v, out, 1);
    if (rc != AC_OK) return rc;
    const int64_t n = a->n, m = a->m, dv = a->dv, H = a->heads;
    if (n == 0 || a->batch == 0 || H == 0) return AC_OK;
    if (ac_decode_applies(a)) return R(ac_decode)(a, q, k, v, out, lse);
    const ac_kernels *K = ac_kernels_active();
    int64_t bq = a->block_q, bk = a->block_k;
    if (bq == 0 || bk == 0) {
        int64_t dq, dk;
        ac_default_blocks((int)sizeof(real), &dq, &dk); /* tiles hold reals */
        /* A narrow window: half-size tiles waste fewer cells outside the band
         * (measured at w=256, n=16384: 8% faster than the default tiles). */
        if (a->window > 0 && a->window <= 2 * dk) {
            dq = dq / 2 > 8 ? dq / 2 : 8;
            dk = dk / 2 > 8 ? dk / 2 : 8;
        }
        if (bq == 0) bq = dq;
        if (bk == 0) bk = dk;
    }
    if (bq > n) bq = n;
    if (bk > m) bk = m > 0 ? m : 1;
    const int64_t Hkv = a->kv_heads, group = H / Hkv, nqb = (n + bq - 1) / bq;
    const int64_t nkb = (m + bk - 1) / bk, ntasks = a->batch * H * nqb;
    int64_t scratch, packed;
    /* Every K block packed once, up front: a copy the size of K, O(m·d), that
     * all Q blocks (and all query heads of a GQA group) then share. */
    const int64_t psize = ac_kpack_size(K, bk, a->dk), npack = a->batch * Hkv * nkb;
    if (!ac_muladd(bq, bk, 3 * bq, &scratch) || !ac_mul(npack > 0 ? npack : 1, psize, &packed))
        return AC_ENOMEM;
    real *kpack = ac_ws_alloc(packed, sizeof(real));
    unsigned char *vfin = ac_ws_alloc(npack > 0 ? npack : 1, 1); /* is V block t finite? */
    if (!kpack || !vfin) {
        ac_ws_free(kpack, packed, sizeof(real));
        ac_ws_free(vfin, npack > 0 ? npack : 1, 1);
        return AC_ENOMEM;
    }
    int failed = 0;
    ac_stop stop;
    ac_stop_init(&stop, a);

    #pragma omp parallel num_threads(AC_NUM_THREADS(a->num_threads))
    {
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < npack; t++) {
            const int64_t b = t / (Hkv * nkb), hk = t / nkb % Hkv, j0 = t % nkb * bk;
            const int64_t cols = m - j0 < bk ? m - j0 : bk;
            K->R(pack)(cols, a->dk,
                       k + b * a->k_stride[0] + hk * a->k_stride[1] + j0 * a->k_stride[2],
                       a->k_stride[2], kpack + t * psize);
            vfin[t] = (unsigned char)R(ac_all_finite)(
                v + b * a->v_stride[0] + hk * a->v_stride[1] + j0 * a->v_stride[2], cols, a->dv,
                a->v_stride[2]);
        }
        /* (bq, bk) tile, then m_i, l_i and the block maxima */
        real *s = ac_ws_alloc(scratch, sizeof(real));
        if (!s) {
            #pragma omp atomic write
            failed = 1;
        }
        /* dynamic: causal blocks differ in cost; the last Q blocks (the most
         * keys) are handed out first so no thread is left with them at the end */
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < ntasks; t++) {
            if (!s || ac_stop_poll(&stop)) continue;
            const int64_t hb = t / nqb, qblk = nqb - 1 - t % nqb;
            const int64_t b = hb / H, h = hb % H, i0 = qblk * bq;
            const int64_t rows = n - i0 < bq ? n - i0 : bq;
            const int64_t hk = h / group;
            ac_vis vis;
            ac_vis_init(&vis, a, b, h);
            const int64_t counted = R(flash_block)(K, a, &vis, bk, q + b * a->q_stride[0] + h * a->q_stride[1] + i0 * a->q_stride[2],
                           kpack + (b * Hkv + hk) * nkb * psize, psize,
                           v + b * a->v_stride[0] + hk * a->v_stride[1],
                           vfin + (b * Hkv + hk) * nkb, i0, rows, s,
                           s + bq * bk, s + bq * bk + bq, s + bq * bk + 2 * bq,
                           out + (hb * n + i0) * dv, lse ? lse + hb * n + i0 : NULL, &stop);
            if (a->block_counts) {
                #pragma omp atomic
                a->block_counts[0] += counted >> 32;
                #pragma omp atomic
                a->block_counts[1] += counted & 0xffffffff;
            }
        }
        ac_ws_free(s, scratch, sizeof(real));
    }
    ac_ws_free(kpack, packed, sizeof(real));
    ac_ws_free(vfin, npack > 0 ? npack : 1, 1);
    return failed ? AC_ENOMEM : ac_stopped(&stop) ? AC_EINTR : AC_OK;
}

#endif
