/* softmax.c — the numerically stable row softmax.
 *
 *   pass 1: mx  = max_j x_j                 (NaN-propagating)
 *   pass 2: y_j = exp(x_j - mx), l = sum y  (every exponent <= 0: no overflow)
 *   pass 3: y_j /= l;  lse = mx + log(l)
 *
 * Subtracting the max is what lets scores of 1e4 through; a row of all -inf
 * (nothing visible) is answered with zeros and lse = -inf instead of 0/0.
 */
#ifndef AC_TEMPLATE
#define AC_TEMPLATE "softmax.c"
#include <string.h>

#include "internal.h"
#include "template.h"
#else

/* Softmax of one row in place; returns its log-sum-exp. */
real R(ac_softmax_row)(const ac_kernels *K, real *y, int64_t n) {
    real mx = K->R(rowmax)(y, n);
    if (mx == -INFINITY) { /* empty or fully masked */
        for (int64_t j = 0; j < n; j++) y[j] = 0;
        return -INFINITY;
    }
    real l = K->R(expsum)(y, n, mx);
    real inv = 1 / l;
    for (int64_t j = 0; j < n; j++) y[j] *= inv;
    return mx + R_LOG(l);
}

int R(ac_exp)(int64_t count, const real *x, real *y) {
    if (count < 0 || (count > 0 && (!x || !y))) return AC_EINVAL;
    if (y != x) memcpy(y, x, (size_t)count * sizeof(real));
    const ac_kernels *K = ac_kernels_active();
    K->R(expsum)(y, count, 0);
    return AC_OK;
}

int R(ac_softmax)(int64_t rows, int64_t cols, const real *x, real *y, real *lse,
                  int num_threads) {
    int64_t total;
    if (rows < 0 || cols < 0 || !ac_mul(rows, cols, &total)) return AC_EINVAL;
    if (total > 0 && (!x || !y)) return AC_EINVAL;
    if (rows > 0 && cols == 0) { /* every row empty */
        if (lse)
            for (int64_t r = 0; r < rows; r++) lse[r] = -INFINITY;
        return AC_OK;
    }
    const ac_kernels *K = ac_kernels_active();
    #pragma omp parallel for schedule(static) num_threads(AC_NUM_THREADS(num_threads))
    for (int64_t r = 0; r < rows; r++) {
        real *yr = y + r * cols; /* (cols) */
        if (yr != x + r * cols) memcpy(yr, x + r * cols, (size_t)cols * sizeof(real));
        real l = R(ac_softmax_row)(K, yr, cols);
        if (lse) lse[r] = l;
    }
    return AC_OK;
}

#endif
