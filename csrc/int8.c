/* int8.c — blockwise and split-KV attention over an int8 KV cache: float32
 * q, outputs and arithmetic; K and V int8, each row (token, kv head) scaled
 * by one float, a->k_scale and a->v_scale (attncore.KVCache(dtype="int8")).
 *
 * A key's scale is a factor of every score it gives, and a value's scale a
 * factor of its weight, so neither is applied to the rows: the kernels read
 * the int8 values as they are (kern->kv_i8, converted as loaded) and the
 * bodies multiply score column j by k_scale[j] after Q·Kᵀ, and weight column
 * j by v_scale[j] before P·V (KV_SCALED, tiles_body.h: scale_cols).
 *   s_ij = scale · (q_i · k8_j) · ks_j,   o_i = Σ_j (p_ij · vs_j) · v8_j / l_i
 * l_i sums the weights before they are scaled.
 *
 * Defines:
 *   ac_flash_i8      flash_body.h     blockwise attention (decode_body.h for few rows)
 */
#define real float                /* q, the outputs and the arithmetic */
#define kvreal int8_t             /* how K and V are stored: int8, unscaled */
#define KV_TO_REAL(x) ((float)(x)) /* one stored K/V value as a real */
#define OPS f32                   /* kern->f32: the kernels on reals */
#define KV_OPS kv_i8              /* kern->kv_i8: the kernels that load K and V */
#define FN(name) name##_i8        /* the public names */
#define KV_SCALED 1               /* the bodies apply a->k_scale and a->v_scale */

#include "tiles_body.h"
#include "decode_body.h"
#include "flash_body.h"
