/* attncore.h — the one public header of the attncore C core.
 *
 * Scaled dot-product attention, softmax(Q·Kᵀ·scale)·V, as plain C loops.
 *
 * Layout.  Every tensor is addressed as (batch, head, row, column) with the
 * last axis contiguous and the other three strided (strides in *elements*,
 * any sign, 0 allowed for broadcast).  Outputs are dense and C-contiguous.
 *
 *   q   (B, H,    n, dk)      out (B, H, n, dv)
 *   k   (B, Hkv,  m, dk)      lse (B, H, n)         (may be NULL)
 *   v   (B, Hkv,  m, dv)      s/w (B, H, n, m)      (score / weight tables)
 *
 * GQA/MQA: query head h reads kv head h / (H / Hkv).
 *
 * Causal is bottom-right aligned: query i sees key j iff j <= i + (m - n).
 * With key_lengths, m is the batch's own key count (right padding is never
 * seen, and causal aligns to the last real key).  A window keeps the w keys
 * ending at the diagonal; a boolean mask hides what it marks 0.
 * A row that sees no key gives output 0 and lse -inf, never NaN.
 *
 * Every entry point validates its arguments, returns an ac_status, never
 * aborts, can be stopped between tiles (interrupt, below), and never reads
 * or writes outside the extents it was given.
 * Index arithmetic is 64-bit throughout.
 */
#ifndef ATTNCORE_H
#define ATTNCORE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    AC_OK = 0,
    AC_EINVAL = 1, /* a bad argument: negative size, heads not dividing, NULL data, ... */
    AC_ENOMEM = 2, /* an allocation failed or its size would overflow */
    AC_EISA = 3,   /* the requested instruction set is not available */
    AC_EINTR = 4   /* stopped by the interrupt hook; the outputs are incomplete */
} ac_status;

typedef struct {
    int64_t batch, heads, kv_heads; /* B, H, Hkv (H % Hkv == 0) */
    int64_t n, m;                   /* query rows, key rows */
    int64_t dk, dv;                 /* head dims of q/k and of v */
    int64_t q_stride[3];            /* element strides of q over (batch, head, row) */
    int64_t k_stride[3];
    int64_t v_stride[3];
    double scale;                   /* > 0 and finite */
    int causal;                     /* causal mask by positions: kpos <= qpos */
    int64_t window;                 /* > 0 (with causal): qpos - window < kpos <= qpos */
    const int64_t *key_lengths;     /* (batch): keys j >= key_lengths[b] hidden; or NULL */
    const int64_t *q_offset;        /* (batch): query i sits at position q_offset[b] + i; or
                                       NULL = m_b - n, bottom-right (m_b: batch b's keys) */
    const int64_t *k_offset;        /* (batch): key j sits at position k_offset[b] + j; or
                                       NULL = 0.  The causal and window rules compare these
                                       positions: key visible iff kpos <= qpos (and
                                       kpos > qpos - window) */
    const uint8_t *mask;            /* boolean (batch, head, n, m) view, 1 = may attend; or NULL */
    int64_t mask_stride[4];         /* its strides in bytes (0 where it broadcasts) */
    const int64_t *mask_batch;      /* NULL, or (batch) byte offsets of each batch's plane from
                                       `mask`, replacing b * mask_stride[0]: a mask broadcast
                                       over some of several batch dims, read in place */
    /* Score modifiers (tiles_body.h: modify_tile).  Row i's score for key j is
     *   s = t + bias[b, h, i, j] - alibi[h]·|qpos - kpos|,  t = softcap·tanh(z/softcap)
     *   (or t = z without a soft-cap), z = scale · q_i·k_j,
     * then the mask; sinks[h] adds exp(sinks[h]) to each row's denominator. */
    const void *bias;               /* NULL, or an additive bias of the queries' type (float
                                       for float32 and 16-bit caches, double for float64):
                                       -inf hides a key exactly as the mask does */
    int64_t bias_stride[3];         /* its element strides over (head, row, key); 0 where it
                                       broadcasts */
    const int64_t *bias_batch;      /* (batch) element offsets of each batch's plane from
                                       `bias` (required with bias) */
    const double *alibi;            /* NULL, or (heads) ALiBi slopes, finite */
    double softcap;                 /* 0 = none, else > 0 and finite */
    const double *sinks;            /* NULL, or (heads) sink logits, finite or -inf */
    /* An int8 cache (ac_flash_i8 only; NULL elsewhere): key j of kv head hk of
     * batch b is k_scale[b·kscale_stride[0] + hk·kscale_stride[1] + j] times its
     * int8 row, and likewise for values: one float scale per token and head. */
    const float *k_scale, *v_scale;
    int64_t kscale_stride[2], vscale_stride[2]; /* element strides over (batch, head) */
    int64_t block_q, block_k;       /* blockwise tile sizes; 0 = the tuned default */
    int64_t *block_counts;          /* NULL, or 2 counters the blockwise kernel adds to:
                                       [0] (Q block, K block) tiles computed, [1] of them
                                       masked (on an edge of the band) — for teaching */
    int split_kv;                   /* few query rows: split the keys (decode_body.h)?
                                       -1 = when it pays, 0 = never, 1 = always */
    int num_threads;                /* OpenMP threads; <= 0 = the OpenMP default */
    int (*interrupt)(void *ctx);    /* NULL, or polled by the calling thread between tasks
                                       and tiles (at most every AC_POLL_SECONDS): nonzero =
                                       stop; the other threads finish the tile in hand, skip
                                       the rest, and the call returns AC_EINTR */
    void *interrupt_ctx;
} ac_attn_args;

#define AC_POLL_SECONDS 0.02
#define AC_MAX_POSITION ((int64_t)1 << 60) /* |q_offset|, |k_offset| at most this */

/* Blockwise online-softmax attention (FlashAttention-2 order). O(n·d) memory.
 * With few query rows (decode) it splits the keys instead (split_kv). */
int ac_flash_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                 float *out, float *lse);
int ac_flash_f64(const ac_attn_args *a, const double *q, const double *k, const double *v,
                 double *out, double *lse);
/* float32 queries and outputs over float16 (IEEE half, as uint16) K and V:
 * the values are converted as they are loaded, the arithmetic is float32.
 * _bf16: the same over bfloat16 K and V (the top 16 bits of a float32). */
int ac_flash_f16(const ac_attn_args *a, const float *q, const uint16_t *k, const uint16_t *v,
                 float *out, float *lse);
int ac_flash_bf16(const ac_attn_args *a, const float *q, const uint16_t *k, const uint16_t *v,
                  float *out, float *lse);
/* bfloat16 q, K and V (bits, as uint16), float32 state and sums: the
 * products by bfloat16 dot products where the CPU has AVX512_BF16 and the
 * avx512 kernels are in use (bf16dot.c), else q widened and ac_flash_bf16.
 * The output goes to out (float32) or, where out is NULL, to out16 rounded
 * to bfloat16 bits as ac_to_bf16 rounds (one of the two; lse float32). */
int ac_flash_bf16in(const ac_attn_args *a, const uint16_t *q, const uint16_t *k,
                    const uint16_t *v, float *out, uint16_t *out16, float *lse);
/* y = x rounded to the nearest bfloat16 (ties to even; NaN stays a quiet NaN,
 * ±inf stays ±inf), as bits; ac_from_bf16: bfloat16 bits widened, exactly.
 * num_threads as in ac_attn_args (<= 0: the OpenMP default). */
void ac_to_bf16(const float *x, uint16_t *y, int64_t n, int num_threads);
void ac_from_bf16(const uint16_t *x, float *y, int64_t n, int num_threads);
/* The same for IEEE half: ac_from_f16 widens exactly; ac_to_f16 rounds to
 * nearest even (overflow to inf, NaN kept) where the CPU has F16C and returns
 * 1, else returns 0 with y untouched. */
void ac_from_f16(const uint16_t *x, float *y, int64_t n, int num_threads);
int ac_to_f16(const float *x, uint16_t *y, int64_t n, int num_threads);
/* Does ac_flash_bf16in run by bfloat16 dot products here: the kernel set in
 * use has them, this CPU runs them, and they are faster than its FMAs (measured
 * once per process) or ATTNCORE_BF16DOT=1 says to?  ac_bf16dot_choose: 1 use
 * them (where supported), 0 do not, -1 decide again as described. */
int ac_bf16dot_supported(void);
void ac_bf16dot_choose(int choice);
/* Does a decode step over an int8 cache take its Q·Kᵀ and P·V as 16-bit integer
 * dot products here (AVX512_VNNI; each query row, and each row's weights per
 * block of 64 keys, rounded to 16 bits, docs/usage.md):
 * the kernel set in use has them, this CPU runs them, and neither
 * ATTNCORE_I8DOT=0 nor ac_i8dot_choose(0) turned them off?  ac_i8dot_choose:
 * 1 use them (where supported), 0 do not, -1 as the environment says. */
int ac_i8dot_supported(void);
void ac_i8dot_choose(int choice);
/* float32 queries and outputs over an int8 cache: K and V int8, each row
 * (token, kv head) times its float scale, a->k_scale / a->v_scale (required).
 * The scales are applied to the score and weight columns, not to the rows. */
int ac_flash_i8(const ac_attn_args *a, const float *q, const int8_t *k, const int8_t *v,
                float *out, float *lse);

/* Materialised attention: S = Q·Kᵀ·scale, mask, row softmax, A·V.  The n×m
 * table is allocated per head unless `weights` (B, H, n, m) is given, in
 * which case the softmax weights are left there.  O(n·m) memory. */
int ac_naive_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                 float *out, float *lse, float *weights);
int ac_naive_f64(const ac_attn_args *a, const double *q, const double *k, const double *v,
                 double *out, double *lse, double *weights);
int ac_naive_f16(const ac_attn_args *a, const float *q, const uint16_t *k, const uint16_t *v,
                 float *out, float *lse, float *weights);
int ac_naive_bf16(const ac_attn_args *a, const float *q, const uint16_t *k, const uint16_t *v,
                  float *out, float *lse, float *weights);

/* The same materialised attention as plain C loops, one thread, one row of
 * the score table at a time (plain.c): the readable definition, for
 * students and tests.  Reads every field of `a` but the block sizes,
 * block_counts, split_kv and num_threads. */
int ac_plain_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                 float *out, float *lse);
int ac_plain_f64(const ac_attn_args *a, const double *q, const double *k, const double *v,
                 double *out, double *lse);

/* The scaled score table (B, H, n, m), -inf where the causal mask hides a key.
 * Only the q/k fields of `a` are read (dv and v_stride are ignored). */
int ac_scores_f32(const ac_attn_args *a, const float *q, const float *k, float *s);
int ac_scores_f64(const ac_attn_args *a, const double *q, const double *k, double *s);
int ac_scores_f16(const ac_attn_args *a, const float *q, const uint16_t *k, float *s);
int ac_scores_bf16(const ac_attn_args *a, const float *q, const uint16_t *k, float *s);

/* Stable softmax of each row of a dense (rows, cols) array; y may alias x.
 * lse (rows) may be NULL.  A row of all -inf gives zeros and lse -inf. */
int ac_softmax_f32(int64_t rows, int64_t cols, const float *x, float *y, float *lse,
                   int num_threads);
int ac_softmax_f64(int64_t rows, int64_t cols, const double *x, double *y, double *lse,
                   int num_threads);

/* Gradients (dq, dk, dv) of attention from (q, k, v, out, lse, dout), by
 * recomputation in blocks (backward_body.h).  out, lse, dout dense (B, H, n, ·);
 * dq (B, H, n, dk), dk (B, Hkv, m, dk), dv (B, Hkv, m, dv) dense outputs.
 * dbias: NULL, or a dense (B, H, n, m) output, zeroed by the caller, that gets
 * dS, the gradient of the scores (the caller sums it over the dims its bias
 * broadcasts).  lse must be the forward's, sinks included. */
int ac_backward_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                    const float *out, const float *lse, const float *dout, float *dq, float *dk,
                    float *dv, float *dbias);
int ac_backward_f64(const ac_attn_args *a, const double *q, const double *k, const double *v,
                    const double *out, const double *lse, const double *dout, double *dq,
                    double *dk, double *dv, double *dbias);

/* Linear (kernelised) attention with φ(x) = elu(x) + 1: O(n·d·dv) time,
 * O(d·dv) state; causal by running prefix sums (linear_body.h).  Reads the q/k/v
 * and causal fields of `a`. */
int ac_linear_f32(const ac_attn_args *a, const float *q, const float *k, const float *v,
                  float *out);
int ac_linear_f64(const ac_attn_args *a, const double *q, const double *k, const double *v,
                  double *out);

/* The log-sum-exp merge of `parts` partial results over disjoint sets of
 * keys: o[c] (rows, dv) and lse[c] (rows), dense, into out (rows, dv) and
 * lse_out (rows, may be NULL).  At most AC_MERGE_MAX_PARTS parts a call
 * (merge the merged results for more: the rule is associative). */
#define AC_MERGE_MAX_PARTS 64
int ac_merge_f32(int64_t parts, int64_t rows, int64_t dv, const float *const *o,
                 const float *const *lse, float *out, float *lse_out, int num_threads);
int ac_merge_f64(int64_t parts, int64_t rows, int64_t dv, const double *const *o,
                 const double *const *lse, double *out, double *lse_out, int num_threads);

/* y = exp(x) elementwise, by the exp inside the active micro-kernels (the one
 * the softmax uses); exposed so that it can be tested against libm. */
int ac_exp_f32(int64_t count, const float *x, float *y);
int ac_exp_f64(int64_t count, const double *x, double *y);

/* Probes for the benchmarks' roofs (probes.c): FLOPs / bytes done; time them. */
int64_t ac_probe_fma(int64_t iters, int num_threads);
int64_t ac_probe_bf16dot(int64_t iters, int num_threads); /* 0 without bfloat16 dot products */
int64_t ac_probe_read(const float *x, int64_t n, int num_threads);

/* Runtime: the micro-kernel set in use, chosen at first use by CPU feature
 * detection ("avx512", "avx2", "neon" or "scalar"); ac_set_isa forces one.
 * ac_isa_name(i), for 0 <= i < ac_isa_count(), lists every set this build
 * knows, best first (NULL past the end); ac_isa_supported says whether this
 * CPU can run one. */
const char *ac_isa(void);
int ac_set_isa(const char *name);
int ac_isa_supported(const char *name);
int ac_isa_count(void);
const char *ac_isa_name(int i);
void ac_default_blocks(int dtype_bytes, int64_t *block_q, int64_t *block_k);
int ac_openmp(void);         /* 1 when built with OpenMP */
int ac_max_threads(void);    /* omp_get_max_threads(), or 1 */
/* 1 in a child made by fork() after this process ran a team of several
 * threads: every call there runs on one thread (runtime.c says why). */
int ac_single_after_fork(void);

/* Workspace accounting: every buffer the core allocates for itself (score
 * tables, per-thread tiles) is counted, so callers can read the peak. */
int64_t ac_workspace_peak(void);
void ac_workspace_reset_peak(void);

#ifdef __cplusplus
}
#endif
#endif
