/* bf16dot.c — blockwise attention over bfloat16 q, k and v, the two
 * products by bfloat16 dot products (AVX512_BF16's vdpbf16ps,
 * kern_avx512_bf16.c); the scores, the softmax state, the row sums and the
 * output float32.
 *
 * The algorithm is flash_body.h's (FlashAttention-2 order, one task a Q
 * block of one head, the online softmax of tiles_body.h); what differs is
 * the layout of the operands, in pairs along the axis each product sums
 * over (kern_avx512_bf16.c):
 *
 *   per call:  K blocks packed as d-pairs and V blocks as key pairs, once,
 *              for every Q block (and query head of a GQA group);
 *   per task:  the Q block as d-pairs (read as it lies where its rows are
 *              whole pairs on 4-byte boundaries, else packed);
 *   per tile:  S = scale · Q·Kᵀ (vdpbf16ps; products exact, float32 sums)
 *              → soft-cap, bias, ALiBi, masks on S as elsewhere
 *              → P = exp(S − m') as bfloat16 key pairs, l = α·l + ΣP (the
 *                float32 P, before rounding; one pass, exp_pairs)
 *              → O = α·O + P·V (vdpbf16ps; O scaled by α as the kernel loads it).
 *
 * The rounding of P is the one error this adds to the widening kernels':
 * each weight within 2⁻⁹ of itself (relative), so each output within
 * 2⁻⁹ · Σ_j p_j |v_j| / l ≤ 2⁻⁹ · max |v| of theirs (l sums the float32 P).
 * (exp_pairs's exp is not the float32 kernels' but within 2·10⁻⁷ of e^x,
 * relative: its part of that bound is 10⁴ times smaller.)
 * A tile whose V holds inf or NaN and whose mask or bias hides a key goes
 * through the widening P·V instead (pv_tile), so a hidden key's value never
 * reaches a row, as everywhere.
 *
 * Without the kernels (another ISA in use, a CPU without AVX512_BF16), for a
 * few rows (decode: bandwidth-bound, split-KV) and when the caller counts
 * tiles, q is widened to float32 and the bfloat16-cache kernel runs
 * (bfloat16.c): the same result up to the order of the sums and P's rounding.
 *
 * Defines:
 *   ac_flash_bf16in   blockwise attention, bfloat16 q, k, v; float32 lse, and out
 *                     float32 or rounded to bfloat16 (each task its rows, while
 *                     they are in cache: a pass over the whole float32 output
 *                     afterwards was 3-5 % of a call)
 */
#define real float                        /* the arithmetic and the outputs */
#define kvreal uint16_t                   /* how K and V are stored: bfloat16 bits */
#define KV_TO_REAL(x) ac_bf16_to_float(x) /* one stored K/V value as a real */
#define OPS f32                           /* kern->f32: the kernels on reals */
#define KV_OPS kv_bf16                    /* kern->kv_bf16: the widening loaders (fallbacks) */
#define FN(name) name##_bf16in

#include "tiles_body.h"

#include <stdlib.h>
#include <time.h>

volatile float ac_probe_sink_bf16; /* keeps the calibration probes' results alive */

/* x (n) rounded to bfloat16 bits y: nearest even, NaN a quiet NaN. */
static inline void round_bf16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        __builtin_memcpy(&u, x + i, sizeof u);
        const int nan = (u & 0x7fffffffu) > 0x7f800000u;
        const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        y[i] = (uint16_t)(nan ? (u >> 16) | 0x40u : r);
    }
}

/* q widened to float32 (B, H, n, dk) and the bfloat16-cache kernel; out16
 * (out NULL): its float32 output then rounded. */
static int widened(const ac_attn_args *a, const uint16_t *q, const uint16_t *k,
                   const uint16_t *v, float *out, uint16_t *out16, float *lse) {
    const int64_t B = a->batch, H = a->heads, n = a->n, dk = a->dk;
    const int64_t nout = ac_product(ac_product(B * H, n), a->dv);
    float *qw, *ow = out;
    ac_workspace ws = {0};
    ac_ws_part(&ws, &qw, ac_product(ac_product(B * H, n), dk > 0 ? dk : 1), sizeof *qw);
    if (!out) ac_ws_part(&ws, &ow, nout > 0 ? nout : 1, sizeof *ow);
    if (ac_ws_carve(&ws) != AC_OK) return AC_ENOMEM;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < n; i++) {
                const uint16_t *src = q + b * a->q_stride[0] + h * a->q_stride[1] + i * a->q_stride[2];
                float *dst = qw + ((b * H + h) * n + i) * dk;
                for (int64_t t = 0; t < dk; t++) dst[t] = ac_bf16_to_float(src[t]);
            }
    ac_attn_args w = *a;
    w.q_stride[0] = H * n * dk;
    w.q_stride[1] = n * dk;
    w.q_stride[2] = dk;
    const int rc = ac_flash_bf16(&w, qw, k, v, ow, lse);
    if (rc == AC_OK && !out) ac_to_bf16(ow, out16, nout, a->num_threads);
    ac_ws_release(&ws);
    return rc;
}

/* One thread's scratch. */
typedef struct {
    float *s, *mi, *li, *bmax; /* (bq, bk) scores then weights; per-row state */
    float *alpha;              /* per row: the tile's α = exp(m - m'), for O */
    uint32_t *qp;              /* (bq, dp) the Q block as d-pairs */
    uint32_t *pp;              /* (bq, ⌈bk/2⌉) the weights as bfloat16 key pairs */
    float *o;                  /* (bq, dv) the block's O, where the output is bfloat16 */
    ac_workspace ws;
} dot_scratch;

static int dot_scratch_carve(dot_scratch *w, int64_t bq, int64_t bk, int64_t dp, int64_t dv) {
    w->ws = (ac_workspace){0};
    ac_ws_part(&w->ws, &w->s, bq * bk, sizeof(float));
    ac_ws_part(&w->ws, &w->mi, bq, sizeof(float));
    ac_ws_part(&w->ws, &w->li, bq, sizeof(float));
    ac_ws_part(&w->ws, &w->bmax, bq, sizeof(float));
    ac_ws_part(&w->ws, &w->alpha, bq, sizeof(float));
    ac_ws_part(&w->ws, &w->qp, bq * (dp > 0 ? dp : 1), sizeof(uint32_t));
    ac_ws_part(&w->ws, &w->pp, bq * ((bk + 1) / 2), sizeof(uint32_t));
    ac_ws_part(&w->ws, &w->o, bq * (dv > 0 ? dv : 1), sizeof(float));
    return ac_ws_carve(&w->ws) == AC_OK;
}

/* Sizes of one packed block, in uint32 (pairs). */
typedef struct {
    int64_t bk, dp, psize, ldvp, vsize;
} dot_layout;

typedef struct {
    int64_t i0, rows;
    const uint16_t *q;         /* (rows, dk), rows a->q_stride[2] apart */
    const uint32_t *kp, *vp;   /* the kv head's packed band of K and V blocks */
    const uint16_t *v;         /* its V as it lies (the widening fallback) */
    const unsigned char *vfin; /* is each V block of the band finite? */
    int64_t kb0;
    float *out, *lse;          /* out: (rows, dv) float32, or NULL and then */
    uint16_t *out16;           /* (rows, dv) bfloat16 */
} dot_task;

/* o (rows, dv) *= α, a row at a time (where P·V does not do it). */
static void scale_rows(int64_t rows, const float *alpha, float *o, int64_t dv) {
    for (int64_t r = 0; r < rows; r++)
        if (alpha[r] != 1)
            for (int64_t c = 0; c < dv; c++) o[r * dv + c] *= alpha[r];
}

/* online_update (tiles_body.h) for the dot products: the maxima and α the
 * same, then each row's weights exp(S − m') straight to bfloat16 pairs
 * (exp_pairs; S is left as it was), l = α·l + their float32 sum, and each
 * row's α handed to P·V, which scales O as it loads it. */
static void online_pairs(const ac_kernels *kern, const ac_bf16dot_ops *dot, int64_t rows,
                         int64_t cols, const float *s, int64_t lds, float *bmax, float *mi,
                         float *li, uint32_t *pp, int64_t ldpp, const ac_ahead_block *next,
                         const ac_vis *edge, int64_t i0, int64_t j0, float *alpha) {
    online_alpha(kern, rows, bmax, mi);
    for (int64_t r = 0; r < rows; r++) {
        if (next) ac_prefetch_share(next, r, rows);
        const float mnew = bmax[r], a = mi[r];
        mi[r] = mnew;
        alpha[r] = mnew == -INFINITY ? 1 : a;
        const int64_t seen = mnew == -INFINITY ? 0 : online_seen(edge, i0, r, j0, cols);
        const float l = dot->exp_pairs(s + r * lds, seen, cols, mnew, pp + r * ldpp);
        if (mnew != -INFINITY) li[r] = a * li[r] + l;
    }
}

static void dot_block(const ac_kernels *kern, const ac_bf16dot_ops *dot, const ac_attn_args *a,
                      const ac_vis *vis, const dot_layout *L, const dot_task *t, dot_scratch *w,
                      ac_stop *stop) {
    const int64_t m = a->m, dv = a->dv, rows = t->rows, i0 = t->i0, bk = L->bk;
    const int64_t ldv = a->v_stride[2], ldpp = (bk + 1) / 2;
    const float scale = (float)a->scale;
    float *o = t->out ? t->out : w->o; /* O: the output, or to be rounded into it */
    const int64_t group = kern->edge_rows > 0 ? kern->edge_rows : rows; /* on the diagonal */
    int64_t kv_begin, kv_end;
    ac_vis_keys(vis, i0, rows, bk, &kv_begin, &kv_end);
    /* Q as d-pairs: read as it lies where its rows are whole pairs on 4-byte
     * boundaries (a copy a task was 1 % of a causal call at d = 64), else packed */
    const uint32_t *qp = w->qp;
    int64_t ldq = L->dp;
    if (a->dk % 2 == 0 && a->q_stride[2] % 2 == 0 && ((uintptr_t)t->q & 3) == 0) {
        qp = (const uint32_t *)(const void *)t->q;
        ldq = a->q_stride[2] / 2;
    } else {
        dot->pack_q(rows, a->dk, t->q, a->q_stride[2], w->qp);
    }
    online_start(rows, w->mi, w->li, o, dv);
    for (int64_t j0 = kv_begin; j0 < kv_end; j0 += bk) {
        if (ac_stop_poll(stop)) break;
        const int64_t cols = kv_end - j0 < bk ? kv_end - j0 : bk, blk = j0 / bk - t->kb0;
        const int edge = !ac_vis_clear(vis, i0, rows, j0, cols);
        const int added = vis->bias || vis->alibi || vis->softcap > 0;
        const int fused = !edge && !added;
        const uint32_t *kp = t->kp + blk * L->psize;
        const int64_t pbk = m - j0 < bk ? m - j0 : bk;
        for (int64_t r = 0; r < rows; r++) w->bmax[r] = -INFINITY;
        if (!edge) {
            dot->qk(rows, cols, L->dp, qp, ldq, kp, pbk, scale, w->s, bk,
                    fused ? w->bmax : NULL);
        } else { /* the diagonal, as flash_body.h: each group of rows as far as its
                  * keys go (mask_tile hides the rest) */
            for (int64_t g0 = 0; g0 < rows; g0 += group) {
                const int64_t gr = rows - g0 < group ? rows - g0 : group;
                const int64_t gc = ac_vis_edge_cols(vis, i0 + g0 + gr - 1, j0, cols);
                if (gc > 0)
                    dot->qk(gr, gc, L->dp, qp + g0 * ldq, ldq, kp, pbk, scale,
                            w->s + g0 * bk, bk, NULL);
            }
        }
        if (!fused) {
            if (added) modify_tile(kern, vis, i0, rows, rows, j0, cols, w->s, bk, 1);
            if (edge) mask_tile(vis, i0, rows, rows, j0, cols, w->s, bk);
            for (int64_t r = 0; r < rows; r++) w->bmax[r] = kern->OPS.rowmax(w->s + r * bk, cols);
        }
        const int64_t jn = j0 + bk, ncols = kv_end - jn < bk ? kv_end - jn : bk;
        const ac_ahead_block next = {
            .k = (const char *)(t->kp + (blk + 1) * L->psize),
            .k_bytes = L->psize * (int64_t)sizeof(uint32_t),
            .v = (const char *)(t->vp + (blk + 1) * L->vsize),
            .v_rows = (ncols + 1) / 2,
            .v_row_bytes = L->ldvp * (int64_t)sizeof(uint32_t),
            .v_ld_bytes = L->ldvp * (int64_t)sizeof(uint32_t),
        };
        /* the weights go straight to bfloat16 pairs, unless a hidden key's V is
         * inf or NaN: then the widening P·V takes them as float32 (pv_tile) */
        const int pairs = t->vfin[blk] || (!edge && !vis->bias);
        if (pairs)
            online_pairs(kern, dot, rows, cols, w->s, bk, w->bmax, w->mi, w->li, w->pp, ldpp,
                         jn < kv_end ? &next : NULL, edge ? vis : NULL, i0, j0, w->alpha);
        else /* O *= α here, P·V below does not */
            online_update(kern, rows, cols, w->s, bk, w->bmax, w->mi, w->li, o, dv,
                          jn < kv_end ? &next : NULL, edge ? vis : NULL, i0, j0, NULL);
        if (pairs && edge) { /* the diagonal: each group's weights past its keys
                              * are 0, and left out */
            for (int64_t g0 = 0; g0 < rows; g0 += group) {
                const int64_t gr = rows - g0 < group ? rows - g0 : group;
                const int64_t gc = ac_vis_edge_cols(vis, i0 + g0 + gr - 1, j0, cols);
                if (gc > 0)
                    dot->pv(gr, (gc + 1) / 2, dv, w->pp + g0 * ldpp, ldpp,
                            t->vp + blk * L->vsize, L->ldvp, o + g0 * dv, dv, w->alpha + g0);
                else
                    scale_rows(gr, w->alpha + g0, o + g0 * dv, dv);
            }
        } else if (pairs) { /* P·V scales O by α as it loads it */
            dot->pv(rows, (cols + 1) / 2, dv, w->pp, ldpp, t->vp + blk * L->vsize, L->ldvp, o,
                    dv, w->alpha);
        } else {
            pv_tile(kern, vis, i0, rows, rows, j0, cols, dv, w->s, bk, t->v + j0 * ldv, ldv,
                    o, dv, 0);
        }
    }
    if (vis->sinks)
        for (int64_t r = 0; r < rows; r++)
            sink_fold((float)vis->sinks[0], w->mi + r, w->li + r, o + r * dv, dv);
    online_finish(rows, w->mi, w->li, o, dv, t->lse);
    if (!t->out) round_bf16(o, t->out16, rows * dv);
}

/* The conversions of whole arrays (a 16-bit q widened, the output rounded):
 * one pass of integer operations, vectorised, in pieces of AC_CONVERT_PIECE
 * values shared by the team (a serial pass cost a bfloat16 prefill at
 * n = 1024 several per cent of its time). */
void ac_to_bf16(const float *x, uint16_t *y, int64_t n, int num_threads) {
    #pragma omp parallel for schedule(static) if (AC_PIECES(n) > 1) num_threads(AC_NUM_THREADS(num_threads))
    for (int64_t p = 0; p < AC_PIECES(n); p++) {
        const int64_t i = p * AC_CONVERT_PIECE;
        round_bf16(x + i, y + i, ac_piece_end(p, n) - i);
    }
}

void ac_from_bf16(const uint16_t *x, float *y, int64_t n, int num_threads) {
    #pragma omp parallel for schedule(static) if (AC_PIECES(n) > 1) num_threads(AC_NUM_THREADS(num_threads))
    for (int64_t p = 0; p < AC_PIECES(n); p++) {
        const int64_t end = ac_piece_end(p, n);
        for (int64_t i = p * AC_CONVERT_PIECE; i < end; i++) {
            const uint32_t u = (uint32_t)x[i] << 16; /* exact: the top half of a float32 */
            __builtin_memcpy(y + i, &u, sizeof u);
        }
    }
}

static int dot_usable(const ac_bf16dot_ops *dot) {
    return dot && dot->supported && dot->supported();
}

/* ---- which way: the dot products only where they are faster --------------
 * vdpbf16ps does twice an FMA's multiply-adds per instruction, but how many
 * it issues a cycle is the CPU's: on the Intel Xeon (AVX512_BF16) these
 * kernels were written on it issues one every two cycles, so its FLOP rate
 * is half the FMA's (probes: 201 against 401 GFLOP/s on 2 threads) and the
 * dot-product kernel ran at 0.6x the float32 one; on an AMD Zen 4 it issues
 * one a cycle, twice the FMA's FLOPs (450-462 against 227-230 GFLOP/s), and
 * the kernel runs at 1.4-1.7x the float32 one.  So the choice is measured,
 * once per process, on this core: the two probes, best of three runs of a
 * few milliseconds each, and the dot products are taken only when they do
 * at least 1.25x the FMA's FLOPs (a margin far wider than the probes' noise,
 * so that the choice, and with it P's rounding, does not flip from run to
 * run).  ATTNCORE_BF16DOT=1 or 0 decides instead (1 only where supported). */
static _Atomic int dot_choice = -1; /* -1: not decided yet; then 0 or 1 */

static double probe_seconds(float (*probe)(int64_t, int64_t *), int64_t iters, int64_t *flops) {
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        struct timespec t0, t1;
        timespec_get(&t0, TIME_UTC);
        ac_probe_sink_bf16 = probe(iters, flops);
        timespec_get(&t1, TIME_UTC);
        const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (s < best) best = s;
    }
    return best;
}

static int dot_measured_faster(const ac_kernels *kern) {
    int64_t fflops = 0, dflops = 0;
    const double fs = probe_seconds(kern->fma_probe, 1000000, &fflops);
    const double ds = probe_seconds(kern->bf16dot->dot_probe, 500000, &dflops);
    return fs > 0 && ds > 0 && (double)dflops / ds >= 1.25 * ((double)fflops / fs);
}

int ac_bf16dot_supported(void) {
    const ac_kernels *kern = ac_kernels_active();
    if (!dot_usable(kern->bf16dot)) return 0;
    int c = atomic_load(&dot_choice);
    if (c < 0) {
        const char *env = getenv("ATTNCORE_BF16DOT");
        c = env && env[0] == '1' ? 1 : env && env[0] == '0' ? 0 : dot_measured_faster(kern);
        atomic_store(&dot_choice, c);
    }
    return c;
}

void ac_bf16dot_choose(int choice) { atomic_store(&dot_choice, choice < 0 ? -1 : choice != 0); }

int ac_flash_bf16in(const ac_attn_args *a, const uint16_t *q, const uint16_t *k,
                    const uint16_t *v, float *out, uint16_t *out16, float *lse) {
    int rc = ac_check_attn(a, q, k, v, out ? (const void *)out : (const void *)out16, 1);
    if (rc != AC_OK) return rc;
    const int64_t n = a->n, H = a->heads, Hkv = a->kv_heads;
    if (n == 0 || a->batch == 0 || H == 0) return AC_OK;
    const ac_kernels *kern = ac_kernels_active();
    const ac_bf16dot_ops *dot = kern->bf16dot;
    if (!ac_bf16dot_supported() || ac_decode_applies(a) || a->block_counts)
        return widened(a, q, k, v, out, out16, lse);
    const int64_t group = H / Hkv;
    int64_t bq, bk;
    ac_tile_sizes(a, (int)sizeof(float), AC_TILES_FLASH, &bq, &bk);
    /* Unless the caller chose: twice float32's keys a block, the same bytes of
     * K and V (the scores' tile, float32, twice as large, 128 KiB at 128 ×
     * 256, still in L2): the per-tile costs (O loaded and stored by P·V, the
     * row state) over twice the products.  At n = 1024 and 4096, d = 64 and
     * 128, 2 threads on a Zen 4: 0.94-0.98 the time of 128 × 128. */
    if (a->block_k == 0) bk = 2 * bk < a->m ? 2 * bk : (a->m > 0 ? a->m : 1);
    const int64_t nqb = (n + bq - 1) / bq, ntasks = a->batch * H * nqb;
    const int64_t nband = band_blocks(a, bk, NULL, NULL), nslots = a->batch * Hkv * nband;
    dot_layout L = {.bk = bk, .dp = (a->dk + 1) / 2, .ldvp = AC_BF16DOT_LDVP(a->dv)};
    L.psize = (L.dp > 0 ? L.dp : 1) * AC_BF16DOT_LDKT(bk);
    L.vsize = (bk + 1) / 2 * L.ldvp;
    int64_t *kb0, *kb1;
    uint32_t *kpack, *vpack;
    unsigned char *vfin;
    ac_workspace ws = {0};
    ac_ws_part(&ws, &kb0, a->batch, sizeof *kb0);
    ac_ws_part(&ws, &kb1, a->batch, sizeof *kb1);
    ac_ws_part(&ws, &kpack, ac_product(nslots, L.psize), sizeof *kpack);
    ac_ws_part(&ws, &vpack, ac_product(nslots, L.vsize > 0 ? L.vsize : 1), sizeof *vpack);
    ac_ws_part(&ws, &vfin, nslots, sizeof *vfin);
    if (ac_ws_carve(&ws) != AC_OK) return AC_ENOMEM;
    band_blocks(a, bk, kb0, kb1);
    int failed = 0;
    ac_stop stop;
    ac_stop_init(&stop, a);
    _Atomic int arrived_prep = 0, arrived = 0;

    #pragma omp parallel num_threads(AC_NUM_THREADS(a->num_threads))
    {
        /* the band's K and V blocks, packed as pairs, once */
        #pragma omp for schedule(static) nowait
        for (int64_t t = 0; t < nslots; t++) {
            const int64_t b = t / (Hkv * nband), hk = t / nband % Hkv, kb = kb0[b] + t % nband;
            if (kb >= kb1[b] || ac_stop_poll(&stop)) continue;
            const int64_t j0 = kb * bk, cols = a->m - j0 < bk ? a->m - j0 : bk;
            const uint16_t *kh = kv_head(k, a->k_stride, b, hk), *vh = kv_head(v, a->v_stride, b, hk);
            dot->pack_k(cols, a->dk, kh + j0 * a->k_stride[2], a->k_stride[2], kpack + t * L.psize);
            dot->pack_v(cols, a->dv, vh + j0 * a->v_stride[2], a->v_stride[2], vpack + t * L.vsize);
        }
        finite_band(a, v, bk, kb0, kb1, nband, vfin, &stop);
        ac_team_finish(&stop, &arrived_prep);
        dot_scratch w;
        if (!dot_scratch_carve(&w, bq, bk, L.dp, a->dv)) ac_team_failed(&failed);
        #pragma omp for schedule(dynamic, 1) nowait
        for (int64_t t = 0; t < ntasks; t++) {
            if (!w.ws.base || ac_stop_poll(&stop)) continue;
            const int64_t hb = t / nqb, b = hb / H, h = hb % H, hk = h / group;
            const int64_t i0 = (nqb - 1 - t % nqb) * bq, slot0 = (b * Hkv + hk) * nband;
            const dot_task task = {
                .i0 = i0,
                .rows = n - i0 < bq ? n - i0 : bq,
                .q = q + b * a->q_stride[0] + h * a->q_stride[1] + i0 * a->q_stride[2],
                .kp = kpack + slot0 * L.psize,
                .vp = vpack + slot0 * L.vsize,
                .v = kv_head(v, a->v_stride, b, hk),
                .vfin = vfin + slot0,
                .kb0 = kb0[b],
                .out = out ? out + (hb * n + i0) * a->dv : NULL,
                .out16 = out16 ? out16 + (hb * n + i0) * a->dv : NULL,
                .lse = lse ? lse + hb * n + i0 : NULL,
            };
            ac_vis vis;
            ac_vis_init(&vis, a, b, h);
            dot_block(kern, dot, a, &vis, &L, &task, &w, &stop);
        }
        ac_team_finish(&stop, &arrived);
        ac_ws_release(&w.ws);
    }
    ac_ws_release(&ws);
    return ac_status_of(failed, &stop);
}
