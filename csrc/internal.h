/* internal.h — what every part of the core shares: the micro-kernel table
 * that each ISA fills in, the visibility rules, workspace, interruption and
 * the tile sizes.
 *
 * The algorithms are written once each as a body (flash_body.h, ...) over an
 * element type `real` and a K/V storage type `kvreal`; the per-type units
 * float32.c, float64.c, float16.c, bfloat16.c and int8.c instantiate them
 * and list the names they define (bf16dot.c, bfloat16 q, k and v by dot
 * products, has its own blockwise body over the same row steps).  An ISA file (kern_scalar.c, kern_avx2.c, ...)
 * fills in the kernel table below, its own supported() check included;
 * adding an ISA means that one file and one entry in runtime.c's list
 * (AC_ISA_LIST), which is also the list Python reads (attncore._isa).
 */
#ifndef ATTNCORE_INTERNAL_H
#define ATTNCORE_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include "attncore.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* The inner loops one ISA provides.  Each set is written for one element
 * type; the algorithm bodies reach them as kern->OPS (the kernels on reals
 * alone: scores and softmax) and kern->KV_OPS (the loaders of K and V), where
 * `kern` is the kernel table in use and the per-type unit names OPS and
 * KV_OPS.  A float16 or bfloat16 cache is nothing but another KV_OPS set:
 * the algorithm reads "a K row as float32" either way.
 *
 * qk:     s[r*lds + c] = scale * <q_r, k_c> for the first bk keys of a block
 *         packed from pbk keys (bk <= pbk)                       S tile (bq, bk)
 *         then, if cap > 0, the soft-cap (below) on each score,
 *         and, if rmax is not NULL, rmax[r] = max(rmax[r], max_c s[r, c]),
 *         NaN-propagating: the scale, the soft-cap and the running max are
 *         fused into the store of the tile.
 * rowmax: the NaN-propagating max of x[0..n), -inf for n == 0.
 * expsum: x[i] = exp(x[i] - shift) in place; returns the sum.
 * softcap: x[i] = cap·tanh(x[i] / cap) in place (cap > 0).
 * alibi:  x[i] -= slope·|dist - i| in place (ALiBi, dist the distance at i = 0).
 * addrow: x[i] += b[i] (a row of the additive bias, contiguous).
 * mulrow: x[i] *= b[i] (an int8 cache's per-token scales on a row of scores
 *         or weights).
 */
typedef struct {
    void (*qk)(int64_t bq, int64_t bk, int64_t d, const float *q, int64_t ldq, const float *kp,
               int64_t pbk, float scale, float cap, float *s, int64_t lds, float *rmax);
    float (*rowmax)(const float *x, int64_t n);
    float (*expsum)(float *x, int64_t n, float shift);
    void (*softcap)(float *x, int64_t n, float cap);
    void (*alibi)(float *x, int64_t n, float dist, float slope);
    void (*addrow)(float *x, const float *b, int64_t n);
    void (*mulrow)(float *x, const float *b, int64_t n);
} ac_ops_f32;

typedef struct {
    void (*qk)(int64_t bq, int64_t bk, int64_t d, const double *q, int64_t ldq,
               const double *kp, int64_t pbk, double scale, double cap, double *s, int64_t lds,
               double *rmax);
    double (*rowmax)(const double *x, int64_t n);
    double (*expsum)(double *x, int64_t n, double shift);
    void (*softcap)(double *x, int64_t n, double cap);
    void (*alibi)(double *x, int64_t n, double dist, double slope);
    void (*addrow)(double *x, const double *b, int64_t n);
    void (*mulrow)(double *x, const double *b, int64_t n);
} ac_ops_f64;

/* pack:   kp = a K block (bk, d) in the layout qk reads (Kᵀ for the SIMD
 *         kernels); kp holds ac_kpack_size(K, bk, d) values.  Done once per
 *         block and call, so its cost is spread over every Q block.
 * qkd:    qk straight from K rows (ldk apart), no packing, for a few query
 *         rows against many keys (decode): each K row is read once for all rows.
 * pv:     o[r*ldo + c] += sum_j p[r*ldp + j] * v[j*ldv + c]  O tile (bq, dv),
 *         plain IEEE arithmetic (0 · NaN is NaN): the algorithms keep masked
 *         keys out where that matters.
 * The float16 and bfloat16 sets convert K and V as they load them (exactly:
 * F16C, AVX-512 or NEON conversions for float16, a 16-bit shift for
 * bfloat16) and compute in float32; the int8 set converts each value to
 * float32 as it is (int8.c applies the cache's scales). */
typedef struct {
    void (*pack)(int64_t bk, int64_t d, const float *k, int64_t ldk, float *kp);
    void (*qkd)(int64_t bq, int64_t bk, int64_t d, const float *q, int64_t ldq, const float *k,
                int64_t ldk, float scale, float *s, int64_t lds);
    void (*pv)(int64_t bq, int64_t bk, int64_t dv, const float *p, int64_t ldp, const float *v,
               int64_t ldv, float *o, int64_t ldo);
} ac_kv_ops_f32;

typedef struct {
    void (*pack)(int64_t bk, int64_t d, const double *k, int64_t ldk, double *kp);
    void (*qkd)(int64_t bq, int64_t bk, int64_t d, const double *q, int64_t ldq,
                const double *k, int64_t ldk, double scale, double *s, int64_t lds);
    void (*pv)(int64_t bq, int64_t bk, int64_t dv, const double *p, int64_t ldp,
               const double *v, int64_t ldv, double *o, int64_t ldo);
} ac_kv_ops_f64;

typedef struct { /* 16-bit K and V (float16 or bfloat16, as uint16), float32 arithmetic */
    void (*pack)(int64_t bk, int64_t d, const uint16_t *k, int64_t ldk, float *kp);
    void (*qkd)(int64_t bq, int64_t bk, int64_t d, const float *q, int64_t ldq,
                const uint16_t *k, int64_t ldk, float scale, float *s, int64_t lds);
    void (*pv)(int64_t bq, int64_t bk, int64_t dv, const float *p, int64_t ldp,
               const uint16_t *v, int64_t ldv, float *o, int64_t ldo);
} ac_kv_ops_f16;

typedef struct { /* int8 K and V, float32 arithmetic; the values as they are, unscaled */
    void (*pack)(int64_t bk, int64_t d, const int8_t *k, int64_t ldk, float *kp);
    void (*qkd)(int64_t bq, int64_t bk, int64_t d, const float *q, int64_t ldq,
                const int8_t *k, int64_t ldk, float scale, float *s, int64_t lds);
    void (*pv)(int64_t bq, int64_t bk, int64_t dv, const float *p, int64_t ldp,
               const int8_t *v, int64_t ldv, float *o, int64_t ldo);
} ac_kv_ops_i8;

/* The bfloat16 dot-product kernels (kern_avx512_bf16.c, vdpbf16ps) that
 * bf16dot.c runs for bfloat16 q, k and v, with float32 results and state:
 * pack_q: Q rows as d-pairs (rows, ⌈d/2⌉);  pack_k: a K block as d-pairs,
 * (⌈d/2⌉, AC_BF16DOT_LDKT(bk));  pack_v: a V block as key pairs
 * (⌈bk/2⌉, AC_BF16DOT_LDVP(dv));  qk: the float32 qk (no soft-cap) over
 * them;  exp_pairs: a row's weights exp(s − shift) as bfloat16 key pairs,
 * returning their float32 sum;  pv: O = α·O + P·V
 * over them (α a row; NULL: 1);  dot_probe: the vdpbf16ps roof.  supported:
 * can this CPU run them (NULL: not built for this target). */
typedef struct {
    int (*supported)(void);
    void (*pack_q)(int64_t rows, int64_t d, const uint16_t *q, int64_t ldq, uint32_t *qp);
    void (*pack_k)(int64_t bk, int64_t d, const uint16_t *k, int64_t ldk, uint32_t *kp);
    void (*pack_v)(int64_t bk, int64_t dv, const uint16_t *v, int64_t ldv, uint32_t *vp);
    void (*qk)(int64_t bq, int64_t bk, int64_t dp, const uint32_t *qp, int64_t ldq,
               const uint32_t *kp, int64_t pbk, float scale, float *s, int64_t lds, float *rmax);
    float (*exp_pairs)(const float *s, int64_t seen, int64_t cols, float shift, uint32_t *pp);
    void (*pv)(int64_t bq, int64_t bk2, int64_t dv, const uint32_t *pp, int64_t ldpp,
               const uint32_t *vp, int64_t ldvp, float *o, int64_t ldo, const float *alpha);
    float (*dot_probe)(int64_t iters, int64_t *flops);
} ac_bf16dot_ops;
#define AC_BF16DOT_LDKT(bk) (((bk) + 63) / 64 * 64) /* keys a packed K pair row holds */
#define AC_BF16DOT_LDVP(dv) (((dv) + 15) / 16 * 16) /* columns a packed V pair row holds */
extern const ac_bf16dot_ops ac_bf16dot_avx512;

/* A decode step's Q·Kᵀ and P·V over an int8 cache as 16-bit integer dot
 * products (kern_avx512_i8dot.c by AVX512_VNNI, kern_avx2_i8dot.c by AVX2's
 * vpmaddwd): as kv_i8.qkd, with each query
 * row rounded to 16 bits, and kv_i8.pv, with each row's weights rounded to
 * 16 bits per block of keys; each returns 0 where it declines (a non-finite
 * or extreme row, d > AC_I8DOT_MAX_D; s unreliable, o untouched) and the
 * widening kernel must run.  supported: can this CPU run them (NULL: not
 * built for it; cheap, asked every tile). */
typedef struct {
    int (*supported)(void);
    int (*qkd)(int64_t bq, int64_t bk, int64_t d, const float *q, int64_t ldq, const int8_t *k,
               int64_t ldk, float scale, float *s, int64_t lds);
    int (*pv)(int64_t bq, int64_t bk, int64_t dv, const float *p, int64_t ldp, const int8_t *v,
              int64_t ldv, float *o, int64_t ldo);
} ac_i8dot_ops;
#define AC_I8DOT_MAX_D 4096 /* the int32 lanes' sums stay exact up to it */
/* and a key's whole sum, |Σ q16·k8| ≤ 32767·128·d < 2^31, up to this: the
 * lanes then summed as integers, converted once */
#define AC_I8DOT_EXACT_D 512
extern const ac_i8dot_ops ac_i8dot_avx512, ac_i8dot_avx2;

typedef struct {
    const char *name;
    /* Can this CPU run the set?  NULL where the set is not compiled for this
     * target (an x86 set in an aarch64 build): never chosen.  Compiled
     * without the set's own target flags, so it runs on any CPU. */
    int (*supported)(void);
    int64_t block_q, block_k; /* default tile sizes for this ISA (float32) */
    int64_t kt_pad;           /* a packed block holds d * round_up(bk, kt_pad) values */
    int64_t edge_rows;        /* rows a group on the causal diagonal (ac_vis_edge_cols);
                               * 0: the diagonal tile whole */
    ac_ops_f32 f32;
    ac_ops_f64 f64;
    ac_kv_ops_f32 kv_f32;
    ac_kv_ops_f64 kv_f64;
    ac_kv_ops_f16 kv_f16;  /* float16 K/V */
    ac_kv_ops_f16 kv_bf16; /* bfloat16 K/V: the same signatures, other loads */
    ac_kv_ops_i8 kv_i8;    /* int8 K/V (unscaled: int8.c applies the scales) */
    /* the probes behind the benchmarks' roofs (probes.c), in float32 */
    float (*fma_probe)(int64_t iters, int64_t *flops); /* independent FMA chains */
    float (*read_probe)(const float *x, int64_t n);    /* streaming sum */
    const ac_bf16dot_ops *bf16dot; /* bfloat16 dot products (AVX512_BF16), or NULL */
    const ac_i8dot_ops *i8dot;     /* int8-cache decode Q·Kᵀ, P·V (AVX512_VNNI, AVX2), or NULL */
} ac_kernels;

/* The kernel sets of a table whose ISA file names its functions
 * <kernel>_<isa>_<type>, as every kern_*.c does: AC_KERNEL_SETS(avx2) fills
 * .f32 with qk_avx2_f32, rowmax_avx2_f32, expsum_avx2_f32, and so on. */
#define AC_KERNEL_SETS(isa)                                                                 \
    .f32 = {.qk = qk_##isa##_f32, .rowmax = rowmax_##isa##_f32, .expsum = expsum_##isa##_f32,   \
            .softcap = softcap_##isa##_f32, .alibi = alibi_##isa##_f32,                     \
            .addrow = addrow_##isa##_f32, .mulrow = mulrow_##isa##_f32},                    \
    .f64 = {.qk = qk_##isa##_f64, .rowmax = rowmax_##isa##_f64, .expsum = expsum_##isa##_f64,   \
            .softcap = softcap_##isa##_f64, .alibi = alibi_##isa##_f64,                     \
            .addrow = addrow_##isa##_f64, .mulrow = mulrow_##isa##_f64},                    \
    .kv_f32 = {.pack = pack_##isa##_f32, .qkd = qkd_##isa##_f32, .pv = pv_##isa##_f32},       \
    .kv_f64 = {.pack = pack_##isa##_f64, .qkd = qkd_##isa##_f64, .pv = pv_##isa##_f64},       \
    .kv_f16 = {.pack = pack_##isa##_f16, .qkd = qkd_##isa##_f16, .pv = pv_##isa##_f16},       \
    .kv_bf16 = {.pack = pack_##isa##_bf16, .qkd = qkd_##isa##_bf16, .pv = pv_##isa##_bf16},   \
    .kv_i8 = {.pack = pack_##isa##_i8, .qkd = qkd_##isa##_i8, .pv = pv_##isa##_i8},           \
    .fma_probe = fma_probe_##isa##_f32, .read_probe = read_probe_##isa##_f32

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
/* F16C (the float16 conversions the x86 sets use), read from CPUID: clang's
 * __builtin_cpu_supports does not know it. */
int ac_cpu_has_f16c(void);
#endif

/* IEEE half -> float, exactly (subnormals, inf and NaN included), without
 * branches, so that a loop of conversions vectorises (the scalar kernels
 * widen float16 rows so).  A normal half is its bits moved into place with
 * the exponent rebiased (15 -> 127); inf and NaN rebias to float's all-ones
 * exponent; zero and the subnormals are their mantissa times 2^-24, an
 * integer's conversion and a power of two, both exact (no subnormal float is
 * formed, so a denormals-are-zero mode cannot change it).  The same bits as
 * the case-by-case conversion for all 65536 halves. */
static inline float ac_half_to_float(uint16_t h) {
    const uint32_t em = h & 0x7fffu, sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t special = 0u - (uint32_t)(em >= 0x7c00u); /* masks, not branches */
    const uint32_t small = 0u - (uint32_t)(em < 0x400u);
    const uint32_t normal = (em << 13) + (112u << 23) + (special & (112u << 23));
    const float tiny = (float)(int32_t)em * 0x1p-24f;
    uint32_t tiny_bits;
    __builtin_memcpy(&tiny_bits, &tiny, sizeof tiny_bits);
    const uint32_t bits = (tiny_bits & small) | (normal & ~small) | sign;
    float f;
    __builtin_memcpy(&f, &bits, sizeof f);
    return f;
}

/* The whole-array conversions (bf16dot.c, float16.c: a 16-bit q widened
 * before a call, the output rounded after) share an array of n values among
 * the team in pieces of AC_CONVERT_PIECE: piece p is [p · AC_CONVERT_PIECE,
 * ac_piece_end(p, n)), AC_PIECES(n) of them. */
#define AC_CONVERT_PIECE 65536
#define AC_PIECES(n) (((n) + AC_CONVERT_PIECE - 1) / AC_CONVERT_PIECE)
static inline int64_t ac_piece_end(int64_t p, int64_t n) {
    return n - p * AC_CONVERT_PIECE < AC_CONVERT_PIECE ? n : (p + 1) * AC_CONVERT_PIECE;
}

/* A bfloat16 is the top half of a float32: the conversion is exact, a shift. */
static inline float ac_bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    __builtin_memcpy(&f, &bits, sizeof f);
    return f;
}

/* The next K/V block, to be brought toward L2 while this tile's exp pass
 * runs: the packed K panel (contiguous) and the V rows (ld apart). */
typedef struct {
    const char *k;
    int64_t k_bytes;
    const char *v;
    int64_t v_rows, v_row_bytes, v_ld_bytes;
} ac_ahead_block;

static inline void ac_prefetch_bytes(const char *p, int64_t bytes) {
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 2);
    if (bytes > 0) __builtin_prefetch(p + bytes - 1, 0, 2); /* an unaligned row's last line */
}

/* Share r of `parts` of the next block's lines.  Spread over the exp pass,
 * which leaves the load ports idle, the lines arrive before the next tile
 * needs them; issued all at once (measured on Zen 3) they swamp the miss
 * queue and do not.  tools/kernel_timing.c streams a head with and without
 * these shares: a d = 64 tile from 73% to 77% of the FMA roof on Zen 4 AVX2,
 * 66% to 72% on Zen 3 AVX2, 81% to 84% on Zen 4 AVX-512. */
static inline void ac_prefetch_share(const ac_ahead_block *nx, int64_t r, int64_t parts) {
    const int64_t k0 = nx->k_bytes * r / parts / 64 * 64, k1 = nx->k_bytes * (r + 1) / parts;
    ac_prefetch_bytes(nx->k + k0, k1 - k0);
    for (int64_t j = nx->v_rows * r / parts; j < nx->v_rows * (r + 1) / parts; j++)
        ac_prefetch_bytes(nx->v + j * nx->v_ld_bytes, nx->v_row_bytes);
}

/* Values in one packed K (or V) block of up to bk keys of dimension d. */
static inline int64_t ac_kpack_size(const ac_kernels *kern, int64_t bk, int64_t d) {
    int64_t pad = kern->kt_pad > 0 ? kern->kt_pad : 1;
    return ((bk + pad - 1) / pad) * pad * (d > 0 ? d : 1);
}

/* The table in use (never NULL). */
const ac_kernels *ac_kernels_active(void);

/* ---- workspace -----------------------------------------------------------
 * Every buffer the core allocates for itself is counted, so that callers can
 * read the peak (ac_workspace_peak).  ac_ws_alloc returns NULL on overflow or
 * failure; ac_ws_free takes the size it was given.
 *
 * A driver that needs several buffers names them as the parts of one
 * workspace, allocated together: one check for every size, one free.
 *
 *     ac_workspace ws = {0};
 *     real *kpack;
 *     unsigned char *vfin;
 *     ac_ws_part(&ws, &kpack, npack * psize, sizeof *kpack);
 *     ac_ws_part(&ws, &vfin, npack, sizeof *vfin);
 *     if (ac_ws_carve(&ws) != AC_OK) return AC_ENOMEM;
 *     ...
 *     ac_ws_release(&ws);
 *
 * ac_ws_part takes the address of the pointer to set; ac_ws_carve makes one
 * allocation and points each part at its share, every part on a 64-byte
 * boundary (the SIMD kernels may use aligned tiles).  A size that overflows,
 * or a failed allocation, makes ac_ws_carve return AC_ENOMEM and hold
 * nothing; ac_ws_release is then harmless. */
void *ac_ws_alloc(int64_t count, int64_t elem_size);
void ac_ws_free(void *p, int64_t count, int64_t elem_size);

#define AC_WS_MAX_PARTS 8
typedef struct {
    void *dst[AC_WS_MAX_PARTS]; /* where each part's pointer goes (a `T **`) */
    int64_t offset[AC_WS_MAX_PARTS];
    int parts;
    int overflow;  /* a size did not fit in int64_t, or too many parts */
    int64_t bytes; /* the total so far, each part rounded up to 64 bytes */
    void *base;
} ac_workspace;
void ac_ws_part(ac_workspace *ws, void *ptr_addr, int64_t count, int64_t elem_size);
int ac_ws_carve(ac_workspace *ws);
void ac_ws_release(ac_workspace *ws);

/* Shared checks of an ac_attn_args; need_v = 0 for the score table alone. */
int ac_check_attn(const ac_attn_args *a, const void *q, const void *k, const void *v,
                  const void *out, int need_v);

/* ---- interruption ------------------------------------------------------
 * Each task loop asks ac_stop_poll before a task (and the long ones before
 * each tile): 1 = skip it.  Only the
 * calling thread (thread 0 of the team) calls the hook, and at most every
 * AC_POLL_SECONDS; once it says stop, every thread sees the flag.  Loops
 * that every thread of a team must run alike (those around an omp for) run
 * on and only skip the work inside. */
typedef struct {
    int (*fn)(void *ctx);
    void *ctx;
    _Atomic int stop;
    double next; /* when the hook may next be called (seconds) */
} ac_stop;
void ac_stop_init(ac_stop *s, const ac_attn_args *a);
int ac_stop_poll(ac_stop *s);
/* The end of a task loop run `nowait`, called by every thread of the team:
 * thread 0, the one that may call the hook, keeps polling (50 us without
 * sleeping, then in naps that grow to 0.2 ms) until every thread has
 * arrived, instead of waiting deaf at the loop's barrier while the others
 * finish their last tasks; then the team meets at a barrier, as the loop's
 * own would have.  `arrived` is a counter shared by the team, 0 before the
 * loop. */
void ac_team_finish(ac_stop *s, _Atomic int *arrived);
static inline int ac_stopped(ac_stop *s) {
    return atomic_load_explicit(&s->stop, memory_order_relaxed);
}

/* a*b into *r, 0 on overflow or a negative operand. */
static inline int ac_mul(int64_t a, int64_t b, int64_t *r) {
    if (a < 0 || b < 0) return 0;
    return !__builtin_mul_overflow(a, b, r);
}

/* a*b, or -1 (which ac_ws_part refuses) on overflow or a negative operand. */
static inline int64_t ac_product(int64_t a, int64_t b) {
    int64_t r;
    return ac_mul(a, b, &r) ? r : -1;
}

/* a*b + c into *r, 0 on overflow or a negative operand. */
static inline int ac_muladd(int64_t a, int64_t b, int64_t c, int64_t *r) {
    if (c < 0 || !ac_mul(a, b, r)) return 0;
    return !__builtin_add_overflow(*r, c, r);
}

/* ---- which keys a row sees ---------------------------------------------
 * The one definition of visibility, which every kernel uses.
 * For one (batch, head): row i sees the keys [lo(i), hi(i)) that the boolean
 * mask also allows.  Causal compares positions: row i at q_offset + i, key j
 * at k_offset + j (bottom-right aligned by default), so a block of queries
 * and a block of keys from anywhere in a sequence get the band right.  hi
 * and lo never decrease with i, which is what lets the blockwise kernel skip
 * whole blocks outside the band.  An additive bias of -inf hides a key too,
 * as the mask does (pv_tile, plain.c), though the band does not know it. */
typedef struct {
    int64_t n, m;             /* query rows; keys in play (key_lengths applied) */
    int64_t delta;            /* query position - key position at i = j = 0: row i sees
                                 keys j <= i + delta (bottom-right by default: m - n) */
    int causal;
    int64_t window;           /* 0: none */
    const uint8_t *mask;      /* (n, m) view for this (batch, head), or NULL */
    int64_t mask_rs, mask_cs; /* its strides in bytes */
    /* The score modifiers (attncore.h) from head h on: decode stacks the rows
     * of several heads, which step through them by the head strides. */
    const void *bias;         /* the bias array, or NULL; head h's plane at bias_off */
    int64_t bias_off, bias_hs, bias_rs, bias_cs; /* elements */
    const double *alibi;      /* slopes, from head h on, or NULL */
    const double *sinks;      /* sink logits, from head h on, or NULL */
    double softcap;           /* 0: none */
    int mods;                 /* bias, alibi or softcap: the scores go through modify_tile */
} ac_vis;

/* Where batch b's mask starts (the mask must not be NULL). */
static inline const uint8_t *ac_mask_plane(const ac_attn_args *a, int64_t b) {
    return a->mask + (a->mask_batch ? a->mask_batch[b] : b * a->mask_stride[0]);
}

static inline void ac_vis_init(ac_vis *v, const ac_attn_args *a, int64_t b, int64_t h) {
    v->n = a->n;
    v->m = a->m;
    if (a->key_lengths) {
        int64_t len = a->key_lengths[b];
        v->m = len < 0 ? 0 : (len < a->m ? len : a->m);
    }
    v->delta = (a->q_offset ? a->q_offset[b] : v->m - v->n) - (a->k_offset ? a->k_offset[b] : 0);
    v->causal = a->causal;
    v->window = a->causal ? a->window : 0;
    v->mask = a->mask ? ac_mask_plane(a, b) + h * a->mask_stride[1] : NULL;
    v->mask_rs = a->mask_stride[2];
    v->mask_cs = a->mask_stride[3];
    v->bias = a->bias;
    v->bias_off = a->bias ? a->bias_batch[b] + h * a->bias_stride[0] : 0;
    v->bias_hs = a->bias_stride[0];
    v->bias_rs = a->bias_stride[1];
    v->bias_cs = a->bias_stride[2];
    v->alibi = a->alibi ? a->alibi + h : NULL;
    v->sinks = a->sinks ? a->sinks + h : NULL;
    v->softcap = a->softcap;
    v->mods = a->bias || a->alibi || a->softcap > 0;
}

static inline int64_t ac_vis_hi(const ac_vis *v, int64_t i) {
    if (!v->causal) return v->m;
    int64_t e = i + 1 + v->delta;
    return e < 0 ? 0 : (e > v->m ? v->m : e);
}

static inline int64_t ac_vis_lo(const ac_vis *v, int64_t i) {
    if (v->window <= 0) return 0;
    int64_t lo = i + 1 + v->delta - v->window, hi = ac_vis_hi(v, i);
    return lo < 0 ? 0 : (lo > hi ? hi : lo);
}

/* The keys rows [i0, i0+rows) visit blockwise: [*begin, *end), begin on a
 * block boundary.  Empty when no row sees a key (a window that ends before
 * the keys do, say): rounding lo down must not bring such rows a tile. */
static inline void ac_vis_keys(const ac_vis *v, int64_t i0, int64_t rows, int64_t bk,
                               int64_t *begin, int64_t *end) {
    const int64_t lo = ac_vis_lo(v, i0), hi = ac_vis_hi(v, i0 + rows - 1);
    *begin = lo / bk * bk;
    *end = hi > lo ? hi : *begin;
}

/* A tile crossing the band's upper edge (the causal diagonal) is taken in
 * groups of kern->edge_rows rows, each group's products only as far as the
 * last of the tile's cols keys (from j0) its last row sees, rounded up to 16
 * columns (whole vectors on every ISA): 0 when it sees none.  The keys past
 * that are hidden from every row of the group, so the mask sets their scores
 * to -inf and their weights are 0 whether computed or not.  At bq = bk = 128
 * and 30 rows a group this computes 10624 of a diagonal tile's 16384 cells. */
static inline int64_t ac_vis_edge_cols(const ac_vis *v, int64_t last_row, int64_t j0,
                                       int64_t cols) {
    int64_t c = ac_vis_hi(v, last_row) - j0;
    c = c <= 0 ? 0 : (c + 15) / 16 * 16;
    return c > cols ? cols : c;
}

/* Rows [i0, i0+rows) see every key of [j0, j0+cols): nothing to mask. */
static inline int ac_vis_clear(const ac_vis *v, int64_t i0, int64_t rows, int64_t j0,
                               int64_t cols) {
    return !v->mask && j0 >= ac_vis_lo(v, i0 + rows - 1) && j0 + cols <= ac_vis_hi(v, i0);
}

/* A thread of a team that could not get its scratch: it skips its tasks, and
 * the call returns AC_ENOMEM. */
static inline void ac_team_failed(int *failed) {
    #pragma omp atomic write
    *failed = 1;
}

/* The status a kernel returns once its parallel region is over: a failed
 * allocation first, then a stop asked by the interrupt hook. */
static inline int ac_status_of(int failed, ac_stop *stop) {
    return failed ? AC_ENOMEM : ac_stopped(stop) ? AC_EINTR : AC_OK;
}

/* ---- tile sizes ----------------------------------------------------------
 * The blockwise and table tiles are decided in runtime.c; the split-KV
 * decode and the merge have fixed ones (AC_DECODE_TILE_KEYS,
 * AC_MERGE_CHUNK_ROWS below).  A caller's block_q /
 * block_k of 0 means "the tuned default": the ISA table's, with float64
 * keys per tile halved (a tile holds half the values in the same bytes);
 * AC_TILES_FLASH also halves both for a narrow window, and both blockwise
 * uses clamp to n and m.  AC_TILES_TABLE is the fixed tiling of the score
 * table (scores, naive): the ISA table's, whatever the call asked. */
typedef enum { AC_TILES_FLASH, AC_TILES_BACKWARD, AC_TILES_TABLE } ac_tiles_use;
void ac_tile_sizes(const ac_attn_args *a, int real_bytes, ac_tiles_use use, int64_t *bq,
                   int64_t *bk);

/* Split-KV decode (decode_body.h): used by the blockwise kernel when a GQA
 * group stacks at most AC_DECODE_MAX_ROWS query rows and there are keys for
 * two chunks. */
#define AC_DECODE_MAX_ROWS 32
#define AC_DECODE_MIN_CHUNK 256
#define AC_DECODE_TASKS 16 /* tasks a decode step aims for (4 each for 4 threads) */
#define AC_DECODE_TILE_KEYS 512 /* keys per score tile inside a decode chunk */
int ac_decode_applies(const ac_attn_args *a);

/* Rows a thread merges at a time in ac_merge (merge_body.h). */
#define AC_MERGE_CHUNK_ROWS 256

/* The team a parallel region asks for: nt, or the OpenMP default for nt <= 0,
 * and 1 in a child made by fork() after this process ran a team of several
 * threads (runtime.c: GNU OpenMP's pool does not survive fork). */
int ac_team_size(int nt);
#define AC_NUM_THREADS(nt) ac_team_size(nt)

#endif
