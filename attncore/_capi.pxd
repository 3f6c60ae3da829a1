# Declarations of csrc/attncore.h, mirrored one to one.  Every function is
# nogil and returns a status code (or a plain value); none raises.
from libc.stdint cimport int8_t, int64_t, uint8_t, uint16_t

cdef extern from "attncore.h" nogil:
    ctypedef enum ac_status:
        AC_OK
        AC_EINVAL
        AC_ENOMEM
        AC_EISA
        AC_EINTR

    ctypedef struct ac_attn_args:
        int64_t batch, heads, kv_heads
        int64_t n, m
        int64_t dk, dv
        int64_t q_stride[3]
        int64_t k_stride[3]
        int64_t v_stride[3]
        double scale
        int causal
        int64_t window
        const int64_t *key_lengths
        const int64_t *q_offset
        const int64_t *k_offset
        const uint8_t *mask
        int64_t mask_stride[4]
        const int64_t *mask_batch
        const void *bias
        int64_t bias_stride[3]
        const int64_t *bias_batch
        const double *alibi
        double softcap
        const double *sinks
        const float *k_scale
        const float *v_scale
        int64_t kscale_stride[2]
        int64_t vscale_stride[2]
        int64_t block_q, block_k
        int64_t *block_counts
        int split_kv
        int num_threads
        int (*interrupt)(void *ctx) noexcept nogil
        void *interrupt_ctx

    int ac_flash_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                     float *out, float *lse)
    int ac_flash_f64(const ac_attn_args *a, const double *q, const double *k, const double *v,
                     double *out, double *lse)
    int ac_flash_f16(const ac_attn_args *a, const float *q, const uint16_t *k, const uint16_t *v,
                     float *out, float *lse)
    int ac_flash_bf16(const ac_attn_args *a, const float *q, const uint16_t *k, const uint16_t *v,
                      float *out, float *lse)
    int ac_flash_bf16in(const ac_attn_args *a, const uint16_t *q, const uint16_t *k,
                        const uint16_t *v, float *out, uint16_t *out16, float *lse)
    void ac_to_bf16(const float *x, uint16_t *y, int64_t n, int num_threads)
    void ac_from_bf16(const uint16_t *x, float *y, int64_t n, int num_threads)
    void ac_from_f16(const uint16_t *x, float *y, int64_t n, int num_threads)
    int ac_to_f16(const float *x, uint16_t *y, int64_t n, int num_threads)
    int ac_bf16dot_supported()
    void ac_bf16dot_choose(int choice)
    int ac_i8dot_supported()
    void ac_i8dot_choose(int choice)
    int ac_flash_i8(const ac_attn_args *a, const float *q, const int8_t *k, const int8_t *v,
                    float *out, float *lse)
    int ac_naive_f16(const ac_attn_args *a, const float *q, const uint16_t *k, const uint16_t *v,
                     float *out, float *lse, float *weights)
    int ac_naive_bf16(const ac_attn_args *a, const float *q, const uint16_t *k, const uint16_t *v,
                      float *out, float *lse, float *weights)
    int ac_scores_f16(const ac_attn_args *a, const float *q, const uint16_t *k, float *s)
    int ac_scores_bf16(const ac_attn_args *a, const float *q, const uint16_t *k, float *s)
    int ac_naive_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                     float *out, float *lse, float *weights)
    int ac_naive_f64(const ac_attn_args *a, const double *q, const double *k, const double *v,
                     double *out, double *lse, double *weights)
    int ac_plain_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                     float *out, float *lse)
    int ac_plain_f64(const ac_attn_args *a, const double *q, const double *k, const double *v,
                     double *out, double *lse)
    int ac_scores_f32(const ac_attn_args *a, const float *q, const float *k, float *s)
    int ac_scores_f64(const ac_attn_args *a, const double *q, const double *k, double *s)
    int ac_softmax_f32(int64_t rows, int64_t cols, const float *x, float *y, float *lse,
                       int num_threads)
    int ac_softmax_f64(int64_t rows, int64_t cols, const double *x, double *y, double *lse,
                       int num_threads)

    int ac_backward_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                        const float *out, const float *lse, const float *dout, float *dq,
                        float *dk, float *dv, float *dbias)
    int ac_backward_f64(const ac_attn_args *a, const double *q, const double *k,
                        const double *v, const double *out, const double *lse,
                        const double *dout, double *dq, double *dk, double *dv,
                        double *dbias)
    int ac_linear_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                      float *out)
    int ac_linear_f64(const ac_attn_args *a, const double *q, const double *k,
                      const double *v, double *out)
    int ac_merge_f32(int64_t parts, int64_t rows, int64_t dv, const float *const *o,
                     const float *const *lse, float *out, float *lse_out, int num_threads)
    int ac_merge_f64(int64_t parts, int64_t rows, int64_t dv, const double *const *o,
                     const double *const *lse, double *out, double *lse_out, int num_threads)
    enum: AC_MERGE_MAX_PARTS  # a compile-time constant: it sizes merge's arrays

    int ac_exp_f32(int64_t count, const float *x, float *y)
    int ac_exp_f64(int64_t count, const double *x, double *y)

    int64_t ac_probe_fma(int64_t iters, int num_threads)
    int64_t ac_probe_bf16dot(int64_t iters, int num_threads)
    int64_t ac_probe_read(const float *x, int64_t n, int num_threads)

    const char *ac_isa()
    int ac_set_isa(const char *name)
    int ac_isa_supported(const char *name)
    int ac_isa_count()
    const char *ac_isa_name(int i)
    void ac_default_blocks(int dtype_bytes, int64_t *block_q, int64_t *block_k)
    int ac_openmp()
    int ac_max_threads()
    int ac_single_after_fork()
    int64_t ac_workspace_peak()
    void ac_workspace_reset_peak()

    const char *ATTNCORE_CFLAGS
