/* float16.c — the algorithms that read a float16 KV cache: float32 q, the
 * outputs and the arithmetic; K and V IEEE half (stored as uint16),
 * converted as the kernels load them.  Only the loaders differ from
 * float32.c (kern->kv_f16): the algorithm bodies are the same.
 *
 * Defines (each from the body named):
 *   ac_flash_f16     flash_body.h     blockwise attention (decode_body.h for few rows)
 *   ac_naive_f16     table_body.h     materialised attention on the tiled kernels
 *   ac_scores_f16    table_body.h     the score table
 */
#define real float                       /* q, the outputs and the arithmetic */
#define kvreal uint16_t                  /* how K and V are stored: IEEE half */
#define KV_TO_REAL(x) ac_half_to_float(x) /* one stored K/V value as a real */
#define OPS f32                          /* kern->f32: the kernels on reals */
#define KV_OPS kv_f16                    /* kern->kv_f16: the kernels that load K and V */
#define KV_WIDEN 1                       /* the blockwise kernel widens V once a call */
#define FN(name) name##_f16              /* the public names */

#include "tiles_body.h"
#include "decode_body.h"
#include "flash_body.h"
#include "table_body.h"
