/* kern_scalar_kv.h — the portable kernels that load K and V (pack, qkd, pv),
 * for one (real, kvreal) pair: included by kern_scalar.c once per K/V type
 * with FN(x) naming x_scalar_<type>.  KV_TO_REAL turns one stored value into
 * a real (a float16 cache is converted here, exactly). */

/* The scalar kernels read K as it is: packing makes the rows dense (bk, d)
 * (and, for a float16 cache, float32). */
static void FN(pack)(int64_t bk, int64_t d, const kvreal *k, int64_t ldk, real *kp) {
    for (int64_t c = 0; c < bk; c++)
        for (int64_t t = 0; t < d; t++) kp[c * d + t] = KV_TO_REAL(k[c * ldk + t]);
}

#ifdef KV_WIDENS
/* A stored K/V type other than the reals (float16, bfloat16, int8): each K or
 * V row is converted a chunk at a time into a buffer of reals, in a loop of
 * its own, which the compiler vectorises, and the products then read that
 * buffer.  Converted inside the products' loops, one value at a time (the
 * float16 conversion has its cases), a float16 cache decoded at a quarter of
 * a float32 one's speed.  Each sum is still taken in the same order, so the
 * results are the same bits either way. */
#define KV_CHUNK 256
static void FN(widen)(const kvreal *x, int64_t n, real *out) {
    for (int64_t t = 0; t < n; t++) out[t] = KV_TO_REAL(x[t]);
}

static void FN(qkd)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq,
                    const kvreal *k, int64_t ldk, real scale, real *s, int64_t lds) {
    real row[KV_CHUNK];
    for (int64_t c = 0; c < bk; c++) {
        const kvreal *kc = k + c * ldk; /* (d) */
        for (int64_t t0 = 0; t0 < d || t0 == 0; t0 += KV_CHUNK) {
            const int64_t len = d - t0 < KV_CHUNK ? d - t0 : KV_CHUNK;
            FN(widen)(kc + t0, len, row);
            for (int64_t r = 0; r < bq; r++) {
                const real *qr = q + r * ldq + t0;
                real acc = t0 == 0 ? 0 : s[r * lds + c];
                for (int64_t t = 0; t < len; t++) acc += qr[t] * row[t];
                s[r * lds + c] = acc;
            }
        }
        for (int64_t r = 0; r < bq; r++) s[r * lds + c] *= scale;
    }
}

static void FN(pv)(int64_t bq, int64_t bk, int64_t dv, const real *p, int64_t ldp,
                   const kvreal *v, int64_t ldv, real *o, int64_t ldo) {
    real row[KV_CHUNK];
    for (int64_t j = 0; j < bk; j++) {
        const kvreal *vj = v + j * ldv; /* (dv) */
        for (int64_t c0 = 0; c0 < dv; c0 += KV_CHUNK) {
            const int64_t len = dv - c0 < KV_CHUNK ? dv - c0 : KV_CHUNK;
            FN(widen)(vj + c0, len, row);
            for (int64_t r = 0; r < bq; r++) {
                const real w = p[r * ldp + j];
                real *orow = o + r * ldo + c0;
                for (int64_t c = 0; c < len; c++) orow[c] += w * row[c];
            }
        }
    }
}
#undef KV_CHUNK
#else
static void FN(qkd)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq,
                    const kvreal *k, int64_t ldk, real scale, real *s, int64_t lds) {
    for (int64_t r = 0; r < bq; r++) {
        const real *qr = q + r * ldq; /* (d) */
        real *sr = s + r * lds;       /* (bk) */
        for (int64_t c = 0; c < bk; c++) {
            const kvreal *kc = k + c * ldk; /* (d) */
            real acc = 0;
            for (int64_t t = 0; t < d; t++) acc += qr[t] * KV_TO_REAL(kc[t]);
            sr[c] = acc * scale;
        }
    }
}

static void FN(pv)(int64_t bq, int64_t bk, int64_t dv, const real *p, int64_t ldp,
                   const kvreal *v, int64_t ldv, real *o, int64_t ldo) {
    for (int64_t r = 0; r < bq; r++) {
        const real *pr = p + r * ldp; /* (bk) */
        real *orow = o + r * ldo;     /* (dv) */
        for (int64_t j = 0; j < bk; j++) {
            const real w = pr[j];
            const kvreal *vj = v + j * ldv; /* (dv) */
            for (int64_t c = 0; c < dv; c++) orow[c] += w * KV_TO_REAL(vj[c]);
        }
    }
}
#endif
