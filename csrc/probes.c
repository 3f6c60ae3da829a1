/* probes.c — what this machine can do at best, measured with the same
 * instructions the kernels use: the roofs the benchmarks place results under.
 *
 *   ac_probe_fma:  every thread runs independent FMA chains; FLOPs done.
 *   ac_probe_bf16dot: the same with bfloat16 dot products (vdpbf16ps, 4 FLOPs
 *                  a lane), where the kernels in use have them and the CPU
 *                  runs them (whether attention takes them or not); else 0.
 *   ac_probe_read: every thread sums its share of a buffer far larger than
 *                  the caches; bytes read.
 * The caller times them (the wall clock around the call, all threads in).
 */
#include "internal.h"

volatile float ac_probe_sink; /* keeps the probes' results alive */

int64_t ac_probe_fma(int64_t iters, int num_threads) {
    const ac_kernels *kern = ac_kernels_active();
    int64_t total = 0;
    #pragma omp parallel num_threads(AC_NUM_THREADS(num_threads)) reduction(+ : total)
    {
        int64_t flops = 0;
        ac_probe_sink = kern->fma_probe(iters, &flops);
        total += flops;
    }
    return total;
}

int64_t ac_probe_bf16dot(int64_t iters, int num_threads) {
    const ac_bf16dot_ops *dot = ac_kernels_active()->bf16dot;
    if (!dot || !dot->supported || !dot->supported()) return 0; /* (used or not) */
    int64_t total = 0;
    #pragma omp parallel num_threads(AC_NUM_THREADS(num_threads)) reduction(+ : total)
    {
        int64_t flops = 0;
        ac_probe_sink = dot->dot_probe(iters, &flops);
        total += flops;
    }
    return total;
}

int64_t ac_probe_read(const float *x, int64_t n, int num_threads) {
    if (n <= 0 || !x) return 0;
    const ac_kernels *kern = ac_kernels_active();
    float sum = 0;
    #pragma omp parallel num_threads(AC_NUM_THREADS(num_threads)) reduction(+ : sum)
    {
        int64_t t = 0, nt = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
        sum += kern->read_probe(x + lo, hi - lo);
    }
    ac_probe_sink = sum;
    return n * (int64_t)sizeof(float);
}
