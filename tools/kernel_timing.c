/* kernel_timing.c — the micro-kernels of one ISA timed on one blockwise tile,
 * one thread, against the same thread's FMA roof: what each pass of a tile
 * costs, and so what bounds the whole kernel on this machine.
 *
 *   tools/kernel-timing.sh [bq bk d]     builds this beside csrc/ and runs it
 *                                        for every ISA the CPU has
 *
 * A tile is the three passes of flash_body.h for one (bq, bk) block:
 *   qk   S = scale·Q·Kᵀ on the packed K panel, the row maxima fused in
 *   exp  P = exp(S − m) with the row sums (expsum, row by row)
 *   pv   O += P·V
 * Each is timed on its own with its operands resident in cache (the best of
 * interleaved rounds, so that a slow moment of the machine hits all alike),
 * then the three in sequence over K/V blocks streamed from a whole head
 * (n keys), as the kernel does, once without and once with its prefetch of
 * the next block during the exp pass.  The gap between cache and stream is the cost of
 * reaching K and V beyond L1/L2.  (perf counters are not available on every
 * machine; this needs none.)  Where the CPU has AVX512_BF16, the bfloat16
 * dot-product kernels (kern_avx512_bf16.c) on the same tile follow, with P
 * rounded to pairs as a fourth pass, against the vdpbf16ps roof.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *randoms(int64_t count) {
    float *x = aligned_alloc(64, (size_t)((count * 4 + 63) / 64 * 64));
    for (int64_t i = 0; i < count; i++) x[i] = (float)(rand() % 1000) / 1000.0f - 0.5f;
    return x;
}

static void one_isa(const char *isa, int bq, int bk, int d, int n) {
    if (ac_set_isa(isa) != AC_OK) return;
    const ac_kernels *kern = ac_kernels_active();
    const int64_t pad = kern->kt_pad, ldkt = (bk + pad - 1) / pad * pad, nkb = n / bk;
    float *q = randoms((int64_t)bq * d), *k = randoms((int64_t)n * d), *v = randoms((int64_t)n * d);
    float *kp = randoms(nkb * d * ldkt), *s = randoms((int64_t)bq * bk);
    float *o = randoms((int64_t)bq * d), *rmax = randoms(bq);
    for (int64_t j = 0; j < nkb; j++)
        kern->kv_f32.pack(bk, d, k + j * bk * d, d, kp + j * d * ldkt);
    int64_t flops;
    kern->fma_probe(1000, &flops);
    double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9}, roof = 0;
    const int reps = 200;
    for (int round = 0; round < 5; round++) {
        double t0 = now();
        kern->fma_probe(20000000, &flops);
        double t1 = now();
        if (flops / (t1 - t0) > roof) roof = flops / (t1 - t0);
        t0 = now();
        for (int r = 0; r < reps; r++) {
            for (int i = 0; i < bq; i++) rmax[i] = -INFINITY;
            kern->f32.qk(bq, bk, d, q, d, kp, bk, 0.125f, 0.0f, s, bk, rmax);
        }
        t1 = now();
        for (int r = 0; r < reps; r++)
            for (int i = 0; i < bq; i++) kern->f32.expsum(s + i * bk, bk, rmax[i] + 1.0f);
        double t2 = now();
        for (int r = 0; r < reps; r++) kern->kv_f32.pv(bq, bk, d, s, bk, v, d, o, d);
        double t3 = now();
        /* the three in sequence, K and V blocks streamed from the whole head:
         * without, then with the prefetch of the next block that the kernel
         * issues during the exp pass (flash_body.h) */
        double ts[3] = {t3, 0, 0};
        for (int prefetch = 0; prefetch < 2; prefetch++) {
            for (int64_t j = 0; j < nkb; j++) {
                for (int i = 0; i < bq; i++) rmax[i] = -INFINITY;
                kern->f32.qk(bq, bk, d, q, d, kp + j * d * ldkt, bk, 0.125f, 0.0f, s, bk, rmax);
                const int64_t jn = j + 1 < nkb ? j + 1 : j;
                const ac_ahead_block next = {(const char *)(kp + jn * d * ldkt),
                                             d * ldkt * (int64_t)sizeof(float),
                                             (const char *)(v + jn * bk * d), bk,
                                             d * (int64_t)sizeof(float), d * (int64_t)sizeof(float)};
                for (int i = 0; i < bq; i++) {
                    if (prefetch) ac_prefetch_share(&next, i, bq);
                    kern->f32.expsum(s + i * bk, bk, rmax[i]);
                }
                kern->kv_f32.pv(bq, bk, d, s, bk, v + j * bk * d, d, o, d);
            }
            ts[prefetch + 1] = now();
        }
        const double phase[5] = {(t1 - t0) / reps, (t2 - t1) / reps, (t3 - t2) / reps,
                                 (ts[1] - ts[0]) / (double)nkb, (ts[2] - ts[1]) / (double)nkb};
        for (int p = 0; p < 5; p++)
            if (phase[p] < best[p]) best[p] = phase[p];
    }
    const double fl = 2.0 * bq * bk * d, tile = best[0] + best[1] + best[2];
    printf("%-7s roof %6.1f GFLOP/s (1 thread) | qk %5.1f us %3.0f%% | exp %5.1f us | pv %5.1f us "
           "%3.0f%% | tile %3.0f%% of roof, exp %2.0f%% of it | streamed from n=%d: %3.0f%%, "
           "prefetched %3.0f%%\n",
           isa, roof / 1e9, best[0] * 1e6, 100 * fl / best[0] / roof, best[1] * 1e6,
           best[2] * 1e6, 100 * fl / best[2] / roof, 100 * 2 * fl / tile / roof,
           100 * best[1] / tile, n, 100 * 2 * fl / best[3] / roof, 100 * 2 * fl / best[4] / roof);
    free(q), free(k), free(v), free(kp), free(s), free(o), free(rmax);
}

/* The bfloat16 dot-product kernels (kern_avx512_bf16.c) on the same tile,
 * against the one-thread vdpbf16ps roof: qk, the weights as bfloat16 pairs
 * (exp_pairs), pv; and, for comparison, the float32 kernels' exp pass
 * (expsum) over the same tile, which the dot products do not run. */
static void bf16dot_tile(int bq, int bk, int d) {
    const ac_bf16dot_ops *dot = ac_kernels_active()->bf16dot;
    if (!dot || !dot->supported || !dot->supported()) return;
    const int64_t dp = (d + 1) / 2, ldkt = AC_BF16DOT_LDKT(bk), ldvp = AC_BF16DOT_LDVP(d);
    const int64_t ldpp = (bk + 1) / 2;
    float *q = randoms((int64_t)bq * d), *k = randoms((int64_t)bk * d);
    float *v = randoms((int64_t)bk * d);
    uint16_t *q16 = malloc((size_t)bq * d * 2), *k16 = malloc((size_t)bk * d * 2);
    uint16_t *v16 = malloc((size_t)bk * d * 2);
    ac_to_bf16(q, q16, (int64_t)bq * d, 1);
    ac_to_bf16(k, k16, (int64_t)bk * d, 1);
    ac_to_bf16(v, v16, (int64_t)bk * d, 1);
    uint32_t *qp = aligned_alloc(64, (size_t)(bq * dp * 4 + 63) / 64 * 64);
    uint32_t *kp = aligned_alloc(64, (size_t)(dp * ldkt * 4 + 63) / 64 * 64);
    uint32_t *vp = aligned_alloc(64, (size_t)(ldpp * ldvp * 4 + 63) / 64 * 64);
    uint32_t *pp = aligned_alloc(64, (size_t)(bq * ldpp * 4 + 63) / 64 * 64);
    float *s = randoms((int64_t)bq * bk), *o = randoms((int64_t)bq * d), *rmax = randoms(bq);
    float *s2 = randoms((int64_t)bq * bk);
    dot->pack_q(bq, d, q16, d, qp);
    dot->pack_k(bk, d, k16, d, kp);
    dot->pack_v(bk, d, v16, d, vp);
    const ac_kernels *kern = ac_kernels_active();
    int64_t flops;
    double best[4] = {1e9, 1e9, 1e9, 1e9}, roof = 0;
    const int reps = 200;
    for (int round = 0; round < 5; round++) {
        double t[5];
        t[0] = now();
        dot->dot_probe(10000000, &flops);
        const double tr = now();
        if (flops / (tr - t[0]) > roof) roof = flops / (tr - t[0]);
        t[0] = now();
        for (int r = 0; r < reps; r++) {
            for (int i = 0; i < bq; i++) rmax[i] = -INFINITY;
            dot->qk(bq, bk, dp, qp, dp, kp, bk, 0.125f, s, bk, rmax);
        }
        t[1] = now();
        for (int r = 0; r < reps; r++)
            for (int i = 0; i < bq; i++) kern->f32.expsum(s2 + i * bk, bk, rmax[i] + 1.0f);
        t[2] = now();
        for (int r = 0; r < reps; r++)
            for (int i = 0; i < bq; i++) dot->exp_pairs(s + i * bk, bk, bk, rmax[i], pp + i * ldpp);
        t[3] = now();
        for (int r = 0; r < reps; r++) dot->pv(bq, ldpp, d, pp, ldpp, vp, ldvp, o, d, NULL);
        t[4] = now();
        for (int p = 0; p < 4; p++)
            if ((t[p + 1] - t[p]) / reps < best[p]) best[p] = (t[p + 1] - t[p]) / reps;
    }
    const double fl = 2.0 * bq * bk * d, tile = best[0] + best[2] + best[3];
    printf("bf16dot roof %6.1f GFLOP/s (1 thread) | qk %5.1f us %3.0f%% | exp_pairs %5.1f us | "
           "pv %5.1f us %3.0f%% | tile %3.0f%% of roof, exp_pairs %2.0f%% of it | "
           "(float32 expsum %5.1f us)\n",
           roof / 1e9, best[0] * 1e6, 100 * fl / best[0] / roof, best[2] * 1e6, best[3] * 1e6,
           100 * fl / best[3] / roof, 100 * 2 * fl / tile / roof, 100 * best[2] / tile,
           best[1] * 1e6);
    free(q), free(k), free(v), free(q16), free(k16), free(v16), free(qp), free(kp), free(vp);
    free(pp), free(s), free(s2), free(o), free(rmax);
}

int main(int argc, char **argv) {
    const int bq = argc > 1 ? atoi(argv[1]) : 128, bk = argc > 2 ? atoi(argv[2]) : 128;
    const int d = argc > 3 ? atoi(argv[3]) : 64, n = argc > 4 ? atoi(argv[4]) : 4096;
    if (bq < 1 || bk < 1 || d < 1 || n < bk) {
        fprintf(stderr, "usage: kernel_timing [bq bk d n]  (n >= bk)\n");
        return 2;
    }
    printf("one (bq=%d, bk=%d, d=%d) float32 tile; %% of the one-thread FMA roof\n", bq, bk, d);
    const char *isas[] = {"avx512", "avx2", "scalar"};
    for (int i = 0; i < 3; i++)
        if (ac_isa_supported(isas[i])) one_isa(isas[i], bq, bk, d, n);
    if (ac_set_isa("avx512") == AC_OK) bf16dot_tile(bq, bk, d);
    return 0;
}
