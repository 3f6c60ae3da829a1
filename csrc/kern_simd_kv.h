/* kern_simd_kv.h — the SIMD micro-kernels that load K and V: packing Kᵀ,
 * Q·Kᵀ straight from K's rows (decode), and P·V.  Included by an ISA file
 * once per (element type, K/V storage type) with the vocabulary of
 * kern_simd_ops.h plus kvreal, V_LOADU_KV (a vector of K/V values loaded as
 * reals) and KV_TO_REAL (one value): a float16 cache differs from a float32
 * one only in those two loads.
 */

#define QK_W (QK_C * VL) /* keys per register tile of qk: the packed panel's width */

/* kp = Kᵀ (d, ldkt), zero-padded to whole register tiles (and converted to
 * float32 from a float16 cache: once per call, not once per use). */
static void FN(pack)(int64_t bk, int64_t d, const kvreal *k, int64_t ldk, real *kt) {
    const int64_t ldkt = (bk + QK_W - 1) / QK_W * QK_W;
    for (int64_t t = 0; t < d; t++)
        for (int64_t c = bk; c < ldkt; c++) kt[t * ldkt + c] = 0;
    for (int64_t c = 0; c < bk; c++)
        for (int64_t t = 0; t < d; t++) kt[t * ldkt + c] = KV_TO_REAL(k[c * ldk + t]);
}

/* S = scale · Q·Kᵀ read straight from K's rows, for few query rows (decode):
 * each K row is loaded once and multiplied into up to 4 query rows.  Four
 * keys go at a time, each with its own accumulators, so that their loads
 * are in flight together; then each dot product is summed across its vector. */
static inline __attribute__((always_inline)) void FN(qkd_keys)(
    int rows, int keys, int64_t d, const real *q, int64_t ldq, const kvreal *k, int64_t ldk,
    real scale, real *s, int64_t lds) {
    const int64_t dvec = d / VL * VL;
    VT acc[4][4];
    for (int u = 0; u < keys; u++)
        for (int i = 0; i < rows; i++) acc[u][i] = V_ZERO();
    for (int64_t t = 0; t < dvec; t += VL) {
        VT qv[4];
        for (int i = 0; i < rows; i++) qv[i] = V_LOADU(q + i * ldq + t);
        for (int u = 0; u < keys; u++) {
            /* the same place 16 keys on: the stream is read well ahead */
            __builtin_prefetch(k + (u + 16) * ldk + t);
            VT kv = V_LOADU_KV(k + u * ldk + t);
            for (int i = 0; i < rows; i++) acc[u][i] = V_FMA(qv[i], kv, acc[u][i]);
        }
    }
    for (int u = 0; u < keys; u++)
        for (int i = 0; i < rows; i++) {
            real x = V_HSUM(acc[u][i]);
            for (int64_t t = dvec; t < d; t++) x += q[i * ldq + t] * KV_TO_REAL(k[u * ldk + t]);
            s[i * lds + u] = x * scale;
        }
}

static inline __attribute__((always_inline)) void FN(qkd_rows)(
    int rows, int64_t bk, int64_t d, const real *q, int64_t ldq, const kvreal *k, int64_t ldk,
    real scale, real *s, int64_t lds) {
    int64_t c = 0;
    for (; c + 4 <= bk; c += 4)
        FN(qkd_keys)(rows, 4, d, q, ldq, k + c * ldk, ldk, scale, s + c, lds);
    for (; c < bk; c++) FN(qkd_keys)(rows, 1, d, q, ldq, k + c * ldk, ldk, scale, s + c, lds);
}

static void FN(qkd)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq,
                    const kvreal *k, int64_t ldk, real scale, real *s, int64_t lds) {
    int64_t r0 = 0;
    for (; r0 + 4 <= bq; r0 += 4)
        FN(qkd_rows)(4, bk, d, q + r0 * ldq, ldq, k, ldk, scale, s + r0 * lds, lds);
    switch (bq - r0) { /* the last rows, each count its own unrolled copy */
    case 3: FN(qkd_rows)(3, bk, d, q + r0 * ldq, ldq, k, ldk, scale, s + r0 * lds, lds); break;
    case 2: FN(qkd_rows)(2, bk, d, q + r0 * ldq, ldq, k, ldk, scale, s + r0 * lds, lds); break;
    case 1: FN(qkd_rows)(1, bk, d, q + r0 * ldq, ldq, k, ldk, scale, s + r0 * lds, lds); break;
    default: break;
    }
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

/* One or two rows (decode): a tile as wide as PV_WIDE vectors, so that each
 * V row is read once, start to end, instead of once per column chunk. */
#define PV_WIDE 8
static inline __attribute__((always_inline)) void FN(pv_wide)(
    int rows, int nvec, int64_t bk, const real *p, int64_t ldp, const kvreal *v, int64_t ldv,
    real *o, int64_t ldo) {
    VT acc[2][PV_WIDE];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < nvec; j++) acc[i][j] = V_LOADU(o + i * ldo + j * VL);
    for (int64_t t = 0; t < bk; t++) {
        VT pb[2];
        for (int i = 0; i < rows; i++) pb[i] = V_SET1(p[i * ldp + t]);
        for (int j = 0; j < nvec; j++) {
            __builtin_prefetch(v + (t + 16) * ldv + j * VL);
            VT vv = V_LOADU_KV(v + t * ldv + j * VL);
            for (int i = 0; i < rows; i++) acc[i][j] = V_FMA(pb[i], vv, acc[i][j]);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < nvec; j++) V_STOREU(o + i * ldo + j * VL, acc[i][j]);
}

static void FN(pv)(int64_t bq, int64_t bk, int64_t dv, const real *p, int64_t ldp,
                   const kvreal *v, int64_t ldv, real *o, int64_t ldo) {
    const int64_t dvec = dv / VL * VL; /* columns in whole vectors */
    if (bq <= 2 && dvec == (int64_t)PV_WIDE * VL) {
        if (bq == 2)
            FN(pv_wide)(2, PV_WIDE, bk, p, ldp, v, ldv, o, ldo);
        else if (bq == 1)
            FN(pv_wide)(1, PV_WIDE, bk, p, ldp, v, ldv, o, ldo);
    } else {
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
