/* kern_scalar_ops.h — the portable kernels on reals alone (qk, rowmax,
 * expsum, softcap, alibi, addrow), for one element type: included by
 * kern_scalar.c for float32 and float64, after kern_scalar_kv.h for the same
 * type (qk reuses its qkd).
 * <tgmath.h> makes exp the float or double function. */

static real FN(rowmax)(const real *x, int64_t n) {
    real mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        /* NaN wins and stays: a NaN score must poison its row, not vanish. */
        if (x[i] > mx || x[i] != x[i]) mx = x[i];
        if (mx != mx) break;
    }
    return mx;
}

static void FN(qk)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq,
                   const real *k, int64_t pbk, real scale, real *s, int64_t lds, real *rmax) {
    (void)pbk; /* packed rows are d values apart whatever the block's size */
    FN(qkd)(bq, bk, d, q, ldq, k, d, scale, s, lds);
    if (rmax)
        for (int64_t r = 0; r < bq; r++) {
            real mx = FN(rowmax)(s + r * lds, bk);
            if (mx > rmax[r] || mx != mx) rmax[r] = mx;
        }
}

static real FN(expsum)(real *x, int64_t n, real shift) {
    real sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = exp(x[i] - shift);
        sum += x[i];
    }
    return sum;
}

/* x = cap·tanh(x / cap) in place: the logit soft-cap. */
static void FN(softcap)(real *x, int64_t n, real cap) {
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanh(x[i] / cap);
}

/* x[c] -= slope·|dist - c|: ALiBi's penalty by distance. */
static void FN(alibi)(real *x, int64_t n, real dist, real slope) {
    for (int64_t i = 0; i < n; i++) {
        const real di = dist - (real)i;
        x[i] -= slope * (di < 0 ? -di : di);
    }
}

/* x[c] += b[c]: a row of the additive bias. */
static void FN(addrow)(real *x, const real *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += b[i];
}
