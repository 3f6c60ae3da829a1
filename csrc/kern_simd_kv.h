/* kern_simd_kv.h — the SIMD micro-kernels that load K and V: packing Kᵀ,
 * Q·Kᵀ straight from K's rows (decode), and P·V.  Included by an ISA file
 * once per (element type, K/V storage type) with the vocabulary of
 * kern_simd_ops.h plus kvreal, V_LOADU_KV (a vector of K/V values loaded as
 * reals) and KV_TO_REAL (one value): a float16 cache differs from a float32
 * one only in those two loads.
 */

#define QK_W (QK_C * VL) /* keys per register tile of qk: the packed panel's width */
#define PV_WIDE 8        /* most vectors of one row a P·V tile holds (decode) */
/* vectors of K/V values in a 64-byte cache line (at least 1) */
#define LINE_V (64 / (VL * (int)sizeof(kvreal)) > 0 ? 64 / (VL * (int)sizeof(kvreal)) : 1)

/* kp = Kᵀ (d, ldkt), zero-padded to whole register tiles (and converted to
 * float32 from a float16 cache: once per call, not once per use). */
static void FN(pack)(int64_t bk, int64_t d, const kvreal *k, int64_t ldk, real *kt) {
    const int64_t ldkt = (bk + QK_W - 1) / QK_W * QK_W;
    for (int64_t t = 0; t < d; t++)
        for (int64_t c = bk; c < ldkt; c++) kt[t * ldkt + c] = 0;
    int64_t c0 = 0;
#ifdef V_TRANSPOSE
    /* VL keys at a time: VL × VL blocks loaded as rows, transposed in
     * registers, stored as rows of Kᵀ (the same values: the conversions of
     * V_LOADU_KV and KV_TO_REAL are both exact).  One value at a time, the
     * store to a new line of Kᵀ for each was 6 % of a prefill call's time
     * (AVX-512, n = 1024, d = 128). */
    const int64_t dvec = d / VL * VL;
    for (; c0 + VL <= bk; c0 += VL) {
        for (int64_t t0 = 0; t0 < dvec; t0 += VL) {
            VT x[VL];
            for (int i = 0; i < VL; i++) x[i] = V_LOADU_KV(k + (c0 + i) * ldk + t0);
            V_TRANSPOSE(x);
            for (int i = 0; i < VL; i++) V_STOREU(kt + (t0 + i) * ldkt + c0, x[i]);
        }
        for (int64_t c = c0; c < c0 + VL; c++)
            for (int64_t t = dvec; t < d; t++) kt[t * ldkt + c] = KV_TO_REAL(k[c * ldk + t]);
    }
#endif
    for (int64_t c = c0; c < bk; c++)
        for (int64_t t = 0; t < d; t++) kt[t * ldkt + c] = KV_TO_REAL(k[c * ldk + t]);
}

/* S = scale · Q·Kᵀ read straight from K's rows, for few query rows (decode):
 * each K row is loaded once and multiplied into up to 4 query rows.  Several
 * keys go at a time, each with its own accumulators, so that their loads are
 * in flight together — as many as QKD_ACC accumulators allow for these rows
 * (with 16 registers, 8 keys for one row but 2 for four) — then each dot
 * product is summed across its vector. */
#define QKD_AHEAD 16 /* keys ahead that the K stream is prefetched into L1 */
#define QKD_FAR 64   /* and into L2 (below) */
#define QKD_KEYS(rows) (QKD_ACC / (rows) >= 8 ? 8 : QKD_ACC / (rows) >= 4 ? 4 : 2)
static inline __attribute__((always_inline)) void FN(qkd_keys)(
    int rows, int keys, int64_t d, const real *q, int64_t ldq, const kvreal *k, int64_t ldk,
    real scale, real *s, int64_t lds) {
    const int64_t dvec = d / VL * VL;
    VT acc[8][4];
    for (int u = 0; u < keys; u++)
        for (int i = 0; i < rows; i++) acc[u][i] = V_ZERO();
    /* a cache line of each key a step (LINE_V vectors), prefetched once */
    const int64_t dline = d / (LINE_V * VL) * (LINE_V * VL);
    int64_t t = 0;
    /* The stream is prefetched twice: into L1 QKD_AHEAD keys ahead, and into
     * L2 QKD_FAR keys ahead.  The L1 distance alone (4 KB of float16 rows at
     * d = 128) is about one miss's latency of a stream read at the roof; the
     * L2 prefetch puts the misses in flight earlier.  On a Xeon (AVX-512 and
     * AVX2; paired calls in one process, tools/cache_speed.py's m = 32768
     * steps), the L2 prefetch here and in pv_block took a float16 or
     * bfloat16 step 1.08-1.21x faster by the median, a float32 one
     * 1.05-1.17x.  When K's rows lie back to back (ldk = d, as in a cache)
     * the lines of these keys' rows there are one run, walked by a single
     * pointer — one register, not one offset per key, which would not fit
     * beside the accumulators. */
    const char *pf = (const char *)(k + QKD_AHEAD * ldk);
    const int64_t far = (QKD_FAR - QKD_AHEAD) * ldk * (int64_t)sizeof(kvreal);
    const int run = ldk == d;
    for (; t < dline; t += LINE_V * VL) {
        if (run) {
            for (int u = 0; u < keys; u++) {
                __builtin_prefetch(pf + u * 64);
                __builtin_prefetch(pf + far + u * 64, 0, 1);
            }
            pf += keys * 64;
        } else {
            for (int u = 0; u < keys; u++) {
                __builtin_prefetch(k + (u + QKD_AHEAD) * ldk + t);
                __builtin_prefetch(k + (u + QKD_FAR) * ldk + t, 0, 1);
            }
        }
        for (int l = 0; l < LINE_V; l++) {
            VT qv[4];
            for (int i = 0; i < rows; i++) qv[i] = V_LOADU(q + i * ldq + t + l * VL);
            for (int u = 0; u < keys; u++) {
                VT kv = V_LOADU_KV(k + u * ldk + t + l * VL);
                for (int i = 0; i < rows; i++) acc[u][i] = V_FMA(qv[i], kv, acc[u][i]);
            }
        }
    }
    for (; t < dvec; t += VL) { /* the vectors past the last whole line */
        VT qv[4];
        for (int i = 0; i < rows; i++) qv[i] = V_LOADU(q + i * ldq + t);
        for (int u = 0; u < keys; u++) {
            VT kv = V_LOADU_KV(k + u * ldk + t);
            for (int i = 0; i < rows; i++) acc[u][i] = V_FMA(qv[i], kv, acc[u][i]);
        }
    }
    /* each accumulator summed across its vector: sixteen or eight at once
     * where the ISA has a transposing reduction (V_HSUM16, V_HSUM8), else
     * one by one */
    real sum[8][4];
    int summed = 0;
#if defined(V_HSUM16) || defined(V_HSUM8)
    if (0
#ifdef V_HSUM16
        || keys * rows == 16
#endif
#ifdef V_HSUM8
        || keys * rows == 8
#endif
    ) {
        VT flat[16];
        real out[16];
        for (int u = 0; u < keys; u++)
            for (int i = 0; i < rows; i++) flat[u * rows + i] = acc[u][i];
#ifdef V_HSUM16
        if (keys * rows == 16) V_HSUM16(flat, out);
#endif
#ifdef V_HSUM8
        if (keys * rows == 8) V_HSUM8(flat, out);
#endif
        for (int u = 0; u < keys; u++)
            for (int i = 0; i < rows; i++) sum[u][i] = out[u * rows + i];
        summed = 1;
    }
#endif
    if (!summed)
        for (int u = 0; u < keys; u++)
            for (int i = 0; i < rows; i++) sum[u][i] = V_HSUM(acc[u][i]);
    for (int u = 0; u < keys; u++)
        for (int i = 0; i < rows; i++) {
            real x = sum[u][i];
            for (int64_t t = dvec; t < d; t++) x += q[i * ldq + t] * KV_TO_REAL(k[u * ldk + t]);
            s[i * lds + u] = x * scale;
        }
}

static inline __attribute__((always_inline)) void FN(qkd_rows)(
    int rows, int keys, int64_t bk, int64_t d, const real *q, int64_t ldq, const kvreal *k,
    int64_t ldk, real scale, real *s, int64_t lds) {
    int64_t c = 0;
    for (; c + keys <= bk; c += keys)
        FN(qkd_keys)(rows, keys, d, q, ldq, k + c * ldk, ldk, scale, s + c, lds);
    for (; c < bk; c++) FN(qkd_keys)(rows, 1, d, q, ldq, k + c * ldk, ldk, scale, s + c, lds);
}

static void FN(qkd)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq,
                    const kvreal *k, int64_t ldk, real scale, real *s, int64_t lds) {
#define QKD_ROWS(r, r0) \
    FN(qkd_rows)(r, QKD_KEYS(r), bk, d, q + (r0) * ldq, ldq, k, ldk, scale, s + (r0) * lds, lds)
    int64_t r0 = 0;
    for (; r0 + 4 <= bq; r0 += 4) QKD_ROWS(4, r0);
    switch (bq - r0) { /* the last rows, each count its own unrolled copy */
    case 3: QKD_ROWS(3, r0); break;
    case 2: QKD_ROWS(2, r0); break;
    case 1: QKD_ROWS(1, r0); break;
    default: break;
    }
#undef QKD_ROWS
}

/* ---- O += P·V ------------------------------------------------------------ */

static inline __attribute__((always_inline)) void FN(pv_tile)(
    int rows, int nvec, int64_t bk, const real *p, int64_t ldp, const kvreal *v, int64_t ldv,
    real *o, int64_t ldo) {
    VT acc[PV_R][PV_C];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < nvec; j++) acc[i][j] = V_LOADU(o + i * ldo + j * VL);
    for (int64_t t = 0; t < bk; t++) {
        VT vv[PV_C];
        for (int j = 0; j < nvec; j++) {
            __builtin_prefetch(v + (t + 16) * ldv + j * VL);
            vv[j] = V_LOADU_KV(v + t * ldv + j * VL);
        }
        for (int i = 0; i < rows; i++) {
            VT pb = V_SET1(p[i * ldp + t]);
            for (int j = 0; j < nvec; j++) acc[i][j] = V_FMA(pb, vv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < nvec; j++) V_STOREU(o + i * ldo + j * VL, acc[i][j]);
}

/* A few rows (decode): V is taken PV_FEW_T rows at a time, and each block's
 * rows are read whole — every column chunk of them, while the block sits in
 * L1 — so that memory sees one stream, row after row, as it does for K.
 * (Column chunk first, all of V, then the next chunk, would read each V row
 * in pieces, one cache line per pass, and stream at a fraction of the roof.)
 * A chunk is as many vectors as fit in PV_FEW_ACC accumulators for these
 * rows; `rows` and `nvec` are constants where this is inlined. */
#define PV_FEW_T 32
#define PV_FEW_FAR 128
static inline __attribute__((always_inline)) void FN(pv_block)(
    int rows, int nvec, int64_t bk, const real *p, int64_t ldp, const kvreal *v, int64_t ldv,
    real *o, int64_t ldo) {
    VT acc[4][PV_WIDE];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < nvec; j++) acc[i][j] = V_LOADU(o + i * ldo + j * VL);
    for (int64_t t = 0; t < bk; t++) {
        VT pb[4];
        for (int i = 0; i < rows; i++) pb[i] = V_SET1(p[i * ldp + t]);
        for (int j = 0; j < nvec; j++) {
            if (j % LINE_V == 0) { /* the rows PV_FEW_T and PV_FEW_FAR on, a cache line
                                      at a time, into L1 and L2 (as qkd_keys) */
                __builtin_prefetch(v + (t + PV_FEW_T) * ldv + j * VL);
                __builtin_prefetch(v + (t + PV_FEW_FAR) * ldv + j * VL, 0, 1);
            }
            VT vv = V_LOADU_KV(v + t * ldv + j * VL);
            for (int i = 0; i < rows; i++) acc[i][j] = V_FMA(pb[i], vv, acc[i][j]);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < nvec; j++) V_STOREU(o + i * ldo + j * VL, acc[i][j]);
}

static inline __attribute__((always_inline)) void FN(pv_few_rows)(
    int rows, int chunk, int64_t bk, int64_t dvec, const real *p, int64_t ldp, const kvreal *v,
    int64_t ldv, real *o, int64_t ldo) {
    for (int64_t t0 = 0; t0 < bk; t0 += PV_FEW_T) {
        const int64_t bt = bk - t0 < PV_FEW_T ? bk - t0 : PV_FEW_T;
        int64_t c0 = 0;
        for (; c0 + chunk * VL <= dvec; c0 += chunk * VL)
            FN(pv_block)(rows, chunk, bt, p + t0, ldp, v + t0 * ldv + c0, ldv, o + c0, ldo);
        for (; c0 < dvec; c0 += VL)
            FN(pv_block)(rows, 1, bt, p + t0, ldp, v + t0 * ldv + c0, ldv, o + c0, ldo);
    }
}

/* the widest power-of-two chunk (≤ PV_WIDE vectors) whose accumulators fit */
#define PV_FEW_CHUNK(rows)                                                                    \
    (PV_FEW_ACC / (rows) >= 8 ? 8 : PV_FEW_ACC / (rows) >= 4 ? 4 : PV_FEW_ACC / (rows) >= 2 ? 2 : 1)

static void FN(pv)(int64_t bq, int64_t bk, int64_t dv, const real *p, int64_t ldp,
                   const kvreal *v, int64_t ldv, real *o, int64_t ldo) {
    const int64_t dvec = dv / VL * VL; /* columns in whole vectors */
    switch (bq) {
    case 1: FN(pv_few_rows)(1, PV_FEW_CHUNK(1), bk, dvec, p, ldp, v, ldv, o, ldo); break;
    case 2: FN(pv_few_rows)(2, PV_FEW_CHUNK(2), bk, dvec, p, ldp, v, ldv, o, ldo); break;
    case 3: FN(pv_few_rows)(3, PV_FEW_CHUNK(3), bk, dvec, p, ldp, v, ldv, o, ldo); break;
    case 4: FN(pv_few_rows)(4, PV_FEW_CHUNK(4), bk, dvec, p, ldp, v, ldv, o, ldo); break;
    default:
        for (int64_t c0 = 0; c0 < dvec; c0 += PV_C * VL) {
            const int nvec = (int)((dvec - c0) / VL < PV_C ? (dvec - c0) / VL : PV_C);
            int64_t r0 = 0;
            if (nvec == PV_C)
                for (; r0 + PV_R <= bq; r0 += PV_R)
                    FN(pv_tile)(PV_R, PV_C, bk, p + r0 * ldp, ldp, v + c0, ldv, o + r0 * ldo + c0,
                                ldo);
            for (; r0 < bq; r0 += PV_R) {
                const int rows = (int)(bq - r0 < PV_R ? bq - r0 : PV_R);
                FN(pv_tile)(rows, nvec, bk, p + r0 * ldp, ldp, v + c0, ldv, o + r0 * ldo + c0, ldo);
            }
        }
    }
    for (int64_t r = 0; r < bq; r++) /* the last dv % VL columns */
        for (int64_t t = 0; t < bk; t++)
            for (int64_t c = dvec; c < dv; c++)
                o[r * ldo + c] += p[r * ldp + t] * KV_TO_REAL(v[t * ldv + c]);
}

#undef QK_W
#undef PV_WIDE
#undef PV_FEW_T
#undef PV_FEW_CHUNK
#undef QKD_KEYS
#undef LINE_V
