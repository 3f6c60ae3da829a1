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

static void FN(softcap)(real *x, int64_t n, real cap);

static void FN(qk)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq,
                   const real *k, int64_t pbk, real scale, real cap, real *s, int64_t lds,
                   real *rmax) {
    (void)pbk; /* packed rows are d values apart whatever the block's size */
    FN(qkd)(bq, bk, d, q, ldq, k, d, scale, s, lds);
    if (cap > 0)
        for (int64_t r = 0; r < bq; r++) FN(softcap)(s + r * lds, bk, cap);
    if (rmax)
        for (int64_t r = 0; r < bq; r++) {
            real mx = FN(rowmax)(s + r * lds, bk);
            if (mx > rmax[r] || mx != mx) rmax[r] = mx;
        }
}

/* Below ln(smallest normal) the weight is 0, as in the SIMD kernels: a
 * subnormal weight counts for nothing next to the row's largest (1), and the
 * library exp is slow there (ALiBi's far keys: half the row). */
static real FN(expsum)(real *x, int64_t n, real shift) {
    const real lo = sizeof(real) == 4 ? (real)-87.33654 : (real)-708.3964185322641;
    real sum = 0;
    for (int64_t i = 0; i < n; i++) {
        const real t = x[i] - shift;
        x[i] = t < lo ? 0 : exp(t);
        sum += x[i];
    }
    return sum;
}

/* x = cap·tanh(x / cap) in place: the logit soft-cap, as the SIMD kernels
 * write it, tanh(y) = 1 - 2/(e^(2y) + 1) (e^(2y) = inf or 0 gives ±1, NaN
 * stays NaN): the library tanh costs twice its exp. */
static void FN(softcap)(real *x, int64_t n, real cap) {
    const real two_over_c = 2 / cap;
    for (int64_t i = 0; i < n; i++) x[i] = cap - 2 * cap / (exp(x[i] * two_over_c) + 1);
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

/* x[c] *= b[c]: an int8 cache's scales on a row. */
static void FN(mulrow)(real *x, const real *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] *= b[i];
}
