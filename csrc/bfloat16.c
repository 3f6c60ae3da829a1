/* bfloat16.c — the algorithms that read a bfloat16 KV cache: float32 q, the
 * outputs and the arithmetic; K and V bfloat16 (the top 16 bits of a
 * float32, stored as uint16), widened as the kernels load them.  Only the
 * loaders differ from float32.c (kern->kv_bf16): the algorithm bodies are the
 * same.
 *
 * Defines (each from the body named):
 *   ac_flash_bf16    flash_body.h     blockwise attention (decode_body.h for few rows)
 *   ac_naive_bf16    table_body.h     materialised attention on the tiled kernels
 *   ac_scores_bf16   table_body.h     the score table
 */
#define real float                        /* q, the outputs and the arithmetic */
#define kvreal uint16_t                   /* how K and V are stored: bfloat16 bits */
#define KV_TO_REAL(x) ac_bf16_to_float(x) /* one stored K/V value as a real */
#define OPS f32                           /* kern->f32: the kernels on reals */
#define KV_OPS kv_bf16                    /* kern->kv_bf16: the kernels that load K and V */
#define KV_WIDEN 1                       /* the blockwise kernel widens V once a call */
#define FN(name) name##_bf16              /* the public names */

#include "tiles_body.h"
#include "decode_body.h"
#include "flash_body.h"
#include "table_body.h"
