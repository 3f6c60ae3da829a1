/* softmax_body.h — the numerically stable softmax of each row of an array,
 * and the exp it uses, exposed for testing.  Instantiated by float32.c
 * (ac_softmax_f32, ac_exp_f32) and float64.c (ac_softmax_f64, ac_exp_f64).
 *
 * The row itself is softmax_row (tiles_body.h): max, exp(x - max) with its
 * sum, divide.  Subtracting the max is what lets scores of 1e4 through.
 *
 * Needs tiles_body.h included before it.
 */

int FN(ac_exp)(int64_t count, const real *x, real *y) {
    if (count < 0 || (count > 0 && (!x || !y))) return AC_EINVAL;
    if (y != x) memcpy(y, x, (size_t)count * sizeof(real));
    const ac_kernels *kern = ac_kernels_active();
    kern->OPS.expsum(y, count, 0);
    return AC_OK;
}

int FN(ac_softmax)(int64_t rows, int64_t cols, const real *x, real *y, real *lse,
                   int num_threads) {
    int64_t total;
    if (rows < 0 || cols < 0 || !ac_mul(rows, cols, &total)) return AC_EINVAL;
    if (total > 0 && (!x || !y)) return AC_EINVAL;
    if (rows > 0 && cols == 0) { /* every row empty */
        if (lse)
            for (int64_t r = 0; r < rows; r++) lse[r] = -INFINITY;
        return AC_OK;
    }
    const ac_kernels *kern = ac_kernels_active();
    #pragma omp parallel for schedule(static) num_threads(AC_NUM_THREADS(num_threads))
    for (int64_t r = 0; r < rows; r++) {
        real *yr = y + r * cols; /* (cols) */
        if (yr != x + r * cols) memcpy(yr, x + r * cols, (size_t)cols * sizeof(real));
        real l = softmax_row(kern, yr, cols, -INFINITY);
        if (lse) lse[r] = l;
    }
    return AC_OK;
}
