/* kern_simd_ops.h — the SIMD micro-kernels on reals alone (exp, expsum,
 * rowmax, Q·Kᵀ on packed K, the probes), written once over a small vector
 * vocabulary.  An ISA file (kern_avx2.c, kern_avx512.c, kern_neon.c) defines the
 * vocabulary for one element type and includes this body once per type,
 * under that ISA's target pragma; kern_simd_kv.h holds the kernels that load
 * K and V, included once per K/V storage type.
 *
 * The vocabulary:
 *   real, FN(x)         element type, and the name (x_avx512_f32, ...)
 *   VT, VL              vector type, lanes
 *   V_LOADU V_STOREU V_SET1 V_ZERO V_FMA(a,b,c)=a*b+c V_MUL V_DIV V_ADD V_SUB V_MAX V_MIN
 *   V_RECIP(d)          optional: 1/d to the type's precision, cheaper than V_DIV
 *                       (an estimate and Newton steps); otherwise 1/d is V_DIV
 *   V_HMAX V_HSUM       horizontal max / sum to a scalar
 *   VN_T VN_INIT VN_ACC(acc, v) VN_ANY(acc)   "has a NaN been seen" accumulator
 *   V_ROUND(x)          round to nearest integer (as a real vector)
 *   V_EXP_FINISH(p, n, x)  p·2^n, then x > EXP_HI -> inf, x < EXP_LO -> 0, NaN -> NaN
 *   V_EXP_CLAMP(x)      what the reduction sees (a clamp where 2^n is built from bits,
 *                       or where a far-out lane would make a subnormal)
 *   V_EXP_FAST_OK(x), V_EXP_FAST_FINISH(p, n, x)   optional: a vector for which
 *                       ok is true may skip the clamp and finish the cheap way
 *   V_EXP_SCALE(p, n)   optional: p·2^n where the result is normal (a hardware scale)
 *   EXP_LO EXP_HI LN2_HI LN2_LO LOG2E EXP_DEG
 *   QK_R QK_C PV_R PV_C register tile: rows × vectors of the two products
 *   V_HSUM8(a, out)     optional: out[u] = the sums of eight vectors at once
 *   V_TRANSPOSE(r)      optional: r[0..VL-1], VL vectors, transposed in place
 *                       (packing Kᵀ; float32 sections only)
 *   kvreal, V_LOADU_KV, KV_TO_REAL   (kern_simd_kv.h) the K/V storage type,
 *                       and a vector / scalar of it loaded as reals
 * Every section defines the whole vocabulary (the optional macros where it
 * has them) and ends with kern_simd_undef.h, which forgets it: nothing
 * passes from one element type's section to the next.
 *
 * Register tiling.  Both products are written as an outer-product loop over
 * the reduction axis: a tile of R rows × C vectors of accumulators stays in
 * registers while each step loads C vectors and broadcasts R scalars, so one
 * load feeds R FMAs.  For Q·Kᵀ the reduction axis d is contiguous in both
 * operands, so each K block is first packed into Kᵀ (d, bk) — once per call,
 * by the algorithm, so the bk·d moves are shared by every Q block.  V needs
 * no packing: P·V already reduces over V's rows.
 */

/* ---- exp ----------------------------------------------------------------
 * exp(x) = 2^n · e^r with n = round(x·log2 e) and r = x − n·ln 2 (ln 2 split
 * in two, Cody–Waite, so r is exact to a few ulp); e^r by its Taylor series on
 * |r| <= ln2/2, where degree 7 (float) / 13 (double) leaves a truncation error
 * under 0.1 ulp.  Below EXP_LO = ln(smallest normal) the result is 0, not a
 * denormal: softmax exponents that small carry no weight, and denormal
 * arithmetic is what makes such tails slow.  -inf -> 0, NaN -> NaN exactly. */
#ifndef AC_INV_FACT_DEFINED
#define AC_INV_FACT_DEFINED
/* 1/k!, each rounded once, at compile time */
static const double ac_inv_fact[14] = {
    1.0,          1.0,           1.0 / 2,         1.0 / 6,          1.0 / 24,
    1.0 / 120,    1.0 / 720,     1.0 / 5040,      1.0 / 40320,      1.0 / 362880,
    1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800.0};
#endif

/* e^r on the reduced range, and n: exp(x) = p·2^n */
static inline VT FN(exp_reduced)(VT x, VT *n) {
    *n = V_ROUND(V_MUL(x, V_SET1(LOG2E)));
    VT r = V_FMA(*n, V_SET1(-LN2_HI), x);
    r = V_FMA(*n, V_SET1(-LN2_LO), r);
    /* Horner on the Taylor coefficients, from the top down */
    VT p = V_SET1((real)ac_inv_fact[EXP_DEG]);
    for (int k = EXP_DEG - 1; k >= 0; k--) p = V_FMA(p, r, V_SET1((real)ac_inv_fact[k]));
    return p;
}

static inline VT FN(vexp)(VT x) {
    VT n, p;
#ifdef V_EXP_FAST_OK /* the ISA has a cheaper way for the common vector */
    if (V_EXP_FAST_OK(x)) {
        p = FN(exp_reduced)(x, &n);
        return V_EXP_FAST_FINISH(p, n, x);
    }
#endif
    p = FN(exp_reduced)(V_EXP_CLAMP(x), &n);
    return V_EXP_FINISH(p, n, x);
}

/* exp(y) where every lane's result is a normal number (|y| <= 80 float,
 * 700 double) or NaN: no clamp, no range fixes (the soft-cap's exp). */
static inline VT FN(vexp_normal)(VT y) {
#if defined(V_EXP_SCALE) || defined(V_EXP_FAST_FINISH)
    VT n;
    const VT p = FN(exp_reduced)(y, &n);
#if defined(V_EXP_SCALE)
    return V_EXP_SCALE(p, n);
#else
    return V_EXP_FAST_FINISH(p, n, y);
#endif
#else
    return FN(vexp)(y);
#endif
}

/* x = exp(x - shift), returning the sum: the exponential and the row sum in
 * one pass.  A partial last vector goes through a full one, so every element
 * gets the same arithmetic wherever it sits in the row. */
static real FN(expsum)(real *x, int64_t n, real shift) {
    const VT vs = V_SET1(shift);
    VT acc = V_ZERO();
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        VT e = FN(vexp)(V_SUB(V_LOADU(x + i), vs));
        V_STOREU(x + i, e);
        acc = V_ADD(acc, e);
    }
    real sum = V_HSUM(acc);
    if (i < n) {
        real tmp[VL];
        for (int64_t t = 0; t < VL; t++) tmp[t] = i + t < n ? x[i + t] - shift : -INFINITY;
        V_STOREU(tmp, FN(vexp)(V_LOADU(tmp)));
        for (int64_t t = 0; i + t < n; t++) {
            x[i + t] = tmp[t];
            sum += tmp[t];
        }
    }
    return sum;
}

/* x = cap·tanh(x / cap) in place (Gemma 2's logit soft-cap), by the same exp:
 * tanh(y) = 1 - 2 / (e + 1) with e = exp(2y), 2y held to [-40, 40] where
 * tanh is ±1 to the last bit in either type (the clamp keeps NaN: V_MIN and
 * V_MAX with the constant first return the other operand when it is NaN).
 * Near 0 the subtraction costs relative accuracy, not absolute: the error is
 * a few ulp of cap, which is what softmax sees.  The reciprocal is V_RECIP
 * where the ISA has an estimate: a vector division has a long reciprocal
 * throughput (with the in-range exp, the estimate took the soft-capped kernel
 * from 1.23x to 1.20x the plain one on AVX-512 at d = 64). */
#ifdef V_RECIP
#define SOFTCAP_RECIP(d) V_RECIP(d)
#else
#define SOFTCAP_RECIP(d) V_DIV(V_SET1(1), (d))
#endif
static inline VT FN(vsoftcap)(VT x, VT c, VT two_over_c) {
    VT y = V_MUL(x, two_over_c);
    y = V_MAX(V_SET1(-40), V_MIN(V_SET1(40), y));
    const VT e = FN(vexp_normal)(y);
    const VT r = SOFTCAP_RECIP(V_ADD(e, V_SET1(1)));
    return V_FMA(V_MUL(V_SET1(-2), c), r, c); /* c·(1 - 2r) */
}
#undef SOFTCAP_RECIP

static void FN(softcap)(real *x, int64_t n, real cap) {
    const VT c = V_SET1(cap), two_over_c = V_SET1(2 / cap);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) V_STOREU(x + i, FN(vsoftcap)(V_LOADU(x + i), c, two_over_c));
    if (i < n) { /* the last partial vector through a full one, as in expsum */
        real tmp[VL];
        for (int64_t t = 0; t < VL; t++) tmp[t] = i + t < n ? x[i + t] : 0;
        V_STOREU(tmp, FN(vsoftcap)(V_LOADU(tmp), c, two_over_c));
        for (int64_t t = 0; i + t < n; t++) x[i + t] = tmp[t];
    }
}

/* x[c] += b[c]: a row of the additive bias, in this ISA's vectors. */
static void FN(addrow)(real *x, const real *b, int64_t n) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) V_STOREU(x + i, V_ADD(V_LOADU(x + i), V_LOADU(b + i)));
    for (; i < n; i++) x[i] += b[i];
}

/* x[c] *= b[c]: an int8 cache's scales on a row (tiles_body.h, scale_cols). */
static void FN(mulrow)(real *x, const real *b, int64_t n) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) V_STOREU(x + i, V_MUL(V_LOADU(x + i), V_LOADU(b + i)));
    for (; i < n; i++) x[i] *= b[i];
}

/* x[c] -= slope·|dist - c|: ALiBi's linear penalty on the distance between a
 * query and key j0 + c, dist being that distance at c = 0 (as a real: exact
 * for distances under 2^24 in float, 2^53 in double). */
static void FN(alibi)(real *x, int64_t n, real dist, real slope) {
    real iota[VL];
    for (int t = 0; t < VL; t++) iota[t] = (real)t;
    const VT vs = V_SET1(slope), step = V_SET1((real)VL), zero = V_ZERO();
    VT d = V_SUB(V_SET1(dist), V_LOADU(iota)); /* dist - c, lane by lane */
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        const VT ad = V_MAX(d, V_SUB(zero, d));
        V_STOREU(x + i, V_SUB(V_LOADU(x + i), V_MUL(vs, ad)));
        d = V_SUB(d, step);
    }
    for (; i < n; i++) {
        const real di = dist - (real)i;
        x[i] -= slope * (di < 0 ? -di : di);
    }
}

static real FN(rowmax)(const real *x, int64_t n) {
    VT mx = V_SET1(-INFINITY);
    VN_T nan = VN_INIT;
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        VT v = V_LOADU(x + i);
        mx = V_MAX(mx, v);
        nan = VN_ACC(nan, v);
    }
    real m = V_HMAX(mx);
    if (VN_ANY(nan)) return NAN;
    for (; i < n; i++) {
        if (x[i] > m || x[i] != x[i]) m = x[i];
        if (m != m) break;
    }
    return m;
}

/* ---- S = scale · Q·Kᵀ --------------------------------------------------- */

#define QK_W (QK_C * VL) /* keys per register tile */

/* One register tile: `rows` query rows × `nvec` vectors of keys from the
 * packed Kᵀ panel kt (d, ldkt); `valid` of the nvec·VL columns are real keys
 * (the rest is zero padding and must not reach s or the row max).  The row
 * maxima stay vectors (mx, with nan recording any NaN seen) across the tiles
 * of a row; the horizontal reduction happens once per row and K block. */
static inline __attribute__((always_inline)) void FN(qk_tile)(
    int rows, int nvec, int64_t d, const real *q, int64_t ldq, const real *kt, int64_t ldkt,
    real scale, const int capped, real cap, real *s, int64_t lds, VT *mx, VN_T *nan,
    real *tail_max, int64_t valid) {
    VT acc[QK_R][QK_C];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < nvec; j++) acc[i][j] = V_ZERO();
    for (int64_t t = 0; t < d; t++) {
        VT kv[QK_C];
        for (int j = 0; j < nvec; j++) kv[j] = V_LOADU(kt + t * ldkt + j * VL);
        for (int i = 0; i < rows; i++) {
            VT qb = V_SET1(q[i * ldq + t]);
            for (int j = 0; j < nvec; j++) acc[i][j] = V_FMA(qb, kv[j], acc[i][j]);
        }
    }
    const VT vs = V_SET1(scale);
    if (capped) { /* the soft-cap on the tile in registers, before store and max */
        const VT c = V_SET1(cap), two_over_c = V_SET1(2 / cap);
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < nvec; j++)
                acc[i][j] = FN(vsoftcap)(V_MUL(acc[i][j], vs), c, two_over_c);
    } else {
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < nvec; j++) acc[i][j] = V_MUL(acc[i][j], vs);
    }
    for (int i = 0; i < rows; i++) {
        real *si = s + i * lds;
        if (valid == (int64_t)nvec * VL) { /* a full tile: store and reduce in registers */
            for (int j = 0; j < nvec; j++) {
                const VT v = acc[i][j];
                V_STOREU(si + j * VL, v);
                mx[i] = V_MAX(mx[i], v);
                nan[i] = VN_ACC(nan[i], v);
            }
        } else { /* the last keys of the block: through a buffer */
            real tmp[QK_W];
            for (int j = 0; j < nvec; j++) V_STOREU(tmp + j * VL, acc[i][j]);
            /* valid <= nvec·VL, said so that the compiler sees what tmp holds */
            const int64_t nv = valid < (int64_t)nvec * VL ? valid : (int64_t)nvec * VL;
            for (int64_t c = 0; c < nv; c++) si[c] = tmp[c];
            tail_max[i] = FN(rowmax)(tmp, nv);
        }
    }
}

/* All key tiles for `rows` (<= QK_R) query rows, then their row maxima. */
static inline __attribute__((always_inline)) void FN(qk_rows)(
    int rows, int64_t bk, int64_t d, const real *q, int64_t ldq, const real *kt, int64_t ldkt,
    real scale, const int capped, real cap, real *s, int64_t lds, real *rmax) {
    VT mx[QK_R];
    VN_T nan[QK_R];
    real tail[QK_R];
    for (int i = 0; i < rows; i++) {
        mx[i] = V_SET1(-INFINITY);
        nan[i] = VN_INIT;
        tail[i] = -INFINITY;
    }
    int64_t c0 = 0;
    for (; c0 + QK_W <= bk; c0 += QK_W)
        FN(qk_tile)(rows, QK_C, d, q, ldq, kt + c0, ldkt, scale, capped, cap, s + c0, lds, mx, nan,
                    tail, QK_W);
    if (c0 < bk) { /* the last keys: a tile of fewer vectors, their count a constant in
                    * each call, so that its accumulators stay in registers (a count
                    * known only at run time put them in memory: the diagonal's
                    * shortened rows ran 1.15x slower in Q·Kᵀ) */
        const int64_t valid = bk - c0;
        const int nvec = (int)((valid + VL - 1) / VL);
#define QK_TAIL(k)                                                                             \
    case k:                                                                                    \
        FN(qk_tile)(rows, k < QK_C ? k : QK_C, d, q, ldq, kt + c0, ldkt, scale, capped, cap,   \
                    s + c0, lds, mx, nan, tail, valid);                                        \
        break;
        switch (nvec) { /* 1 .. QK_C (<= 4): valid < QK_W */
            QK_TAIL(1)
            QK_TAIL(2)
            QK_TAIL(3)
        default:
            FN(qk_tile)(rows, QK_C, d, q, ldq, kt + c0, ldkt, scale, capped, cap, s + c0, lds,
                        mx, nan, tail, valid);
        }
#undef QK_TAIL
    }
    if (!rmax) return;
    for (int i = 0; i < rows; i++) {
        real m = VN_ANY(nan[i]) ? (real)NAN : V_HMAX(mx[i]);
        if (tail[i] > m || tail[i] != tail[i]) m = tail[i];
        if (m > rmax[i] || m != m) rmax[i] = m;
    }
}

/* Row tiles outer, key tiles inner: the row maxima stay in registers, and the
 * (d, bk) Kᵀ block is read from L1/L2 once per row tile.  Written out twice,
 * with and without the soft-cap (a constant there), so that the plain
 * kernel's store is the same code it would be without one. */
#define QK_ALL_ROWS(capped)                                                                   \
    do {                                                                                      \
        int64_t r0 = 0;                                                                       \
        for (; r0 + QK_R <= bq; r0 += QK_R)                                                   \
            FN(qk_rows)(QK_R, bk, d, q + r0 * ldq, ldq, kt, ldkt, scale, capped, cap,         \
                        s + r0 * lds, lds, rmax ? rmax + r0 : NULL);                          \
        if (r0 < bq)                                                                          \
            FN(qk_rows)((int)(bq - r0), bk, d, q + r0 * ldq, ldq, kt, ldkt, scale, capped,    \
                        cap, s + r0 * lds, lds, rmax ? rmax + r0 : NULL);                     \
    } while (0)
static void FN(qk)(int64_t bq, int64_t bk, int64_t d, const real *q, int64_t ldq, const real *kt,
                   int64_t pbk, real scale, real cap, real *s, int64_t lds, real *rmax) {
    const int64_t ldkt = (pbk + QK_W - 1) / QK_W * QK_W; /* as packed */
    if (cap > 0)
        QK_ALL_ROWS(1);
    else
        QK_ALL_ROWS(0);
}
#undef QK_ALL_ROWS

#undef QK_W

/* ---- the probes (float32 only is wired up) -------------------------------- */

/* FMA throughput: PROBE_CHAINS independent accumulator chains, enough to
 * cover the FMA latency on every pipe; returns a value so nothing is elided.
 * Each chain is acc += a·b, the accumulator the addend as in the kernels: NEON's
 * FMLA overwrites its addend, so acc = acc·a + b would cost a move an FMA. */
__attribute__((unused)) static real FN(fma_probe)(int64_t iters, int64_t *flops) {
    VT acc[PROBE_CHAINS];
    const VT a = V_SET1((real)0.999999), b = V_SET1((real)1e-7);
    for (int c = 0; c < PROBE_CHAINS; c++) acc[c] = V_SET1((real)c);
    for (int64_t i = 0; i < iters; i++)
        for (int c = 0; c < PROBE_CHAINS; c++) acc[c] = V_FMA(a, b, acc[c]);
    VT s = V_ZERO();
    for (int c = 0; c < PROBE_CHAINS; c++) s = V_ADD(s, acc[c]);
    *flops = iters * PROBE_CHAINS * VL * 2;
    return V_HSUM(s);
}

/* Streaming read: a sum over x with four accumulators, so the loads, not
 * the adds, set the pace. */
__attribute__((unused)) static real FN(read_probe)(const real *x, int64_t n) {
    VT s0 = V_ZERO(), s1 = V_ZERO(), s2 = V_ZERO(), s3 = V_ZERO();
    int64_t i = 0;
    for (; i + 4 * VL <= n; i += 4 * VL) {
        s0 = V_ADD(s0, V_LOADU(x + i));
        s1 = V_ADD(s1, V_LOADU(x + i + VL));
        s2 = V_ADD(s2, V_LOADU(x + i + 2 * VL));
        s3 = V_ADD(s3, V_LOADU(x + i + 3 * VL));
    }
    real s = V_HSUM(V_ADD(V_ADD(s0, s1), V_ADD(s2, s3)));
    for (; i < n; i++) s += x[i];
    return s;
}
