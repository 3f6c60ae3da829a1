/* merge_body.h — the public log-sum-exp merge of partial attention results.
 * Instantiated by float32.c (ac_merge_f32) and float64.c (ac_merge_f64).
 *
 * If O_c is attention over a part of the keys and lse_c its log-sum-exp,
 * attention over all the parts together is
 *
 *   M   = max_c lse_c
 *   w_c = exp(lse_c - M)                      (<= 1: no overflow)
 *   O   = sum_c w_c · O_c / sum_c w_c,   lse = M + log sum_c w_c
 *
 * It is exact algebra, commutative and associative, and it is what lets
 * blocks, threads (split-KV decode) and machines share one softmax.  The
 * rows themselves are merge_rows (tiles_body.h); this splits them among
 * threads in chunks.
 *
 * Needs tiles_body.h included before it.
 */

int FN(ac_merge)(int64_t parts, int64_t rows, int64_t dv, const real *const *o,
                 const real *const *lse, real *out, real *lse_out, int num_threads) {
    int64_t t;
    if (parts < 1 || parts > AC_MERGE_MAX_PARTS || rows < 0 || dv < 0 || !ac_mul(rows, dv, &t) ||
        !o || !lse)
        return AC_EINVAL;
    if (rows == 0) return AC_OK;
    for (int64_t c = 0; c < parts; c++)
        if (!lse[c] || (dv > 0 && !o[c])) return AC_EINVAL;
    if (dv > 0 && !out) return AC_EINVAL;
    const int64_t chunk = AC_MERGE_CHUNK_ROWS;
    #pragma omp parallel for schedule(static) num_threads(AC_NUM_THREADS(num_threads))
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t nr = rows - r0 < chunk ? rows - r0 : chunk;
        const real *op[AC_MERGE_MAX_PARTS], *lp[AC_MERGE_MAX_PARTS];
        for (int64_t c = 0; c < parts; c++) {
            op[c] = dv > 0 ? o[c] + r0 * dv : NULL;
            lp[c] = lse[c] + r0;
        }
        merge_rows(parts, nr, dv, op, dv, lp, 1, dv > 0 ? out + r0 * dv : NULL, dv,
                   lse_out ? lse_out + r0 : NULL, NULL);
    }
    return AC_OK;
}
