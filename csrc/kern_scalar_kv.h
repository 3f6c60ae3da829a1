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
