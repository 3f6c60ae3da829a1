/* float32.c — every algorithm for float32 q, k and v.
 *
 * Defines (each from the body named):
 *   ac_flash_f32     flash_body.h     blockwise attention (decode_body.h for few rows)
 *   ac_naive_f32     table_body.h     materialised attention on the tiled kernels
 *   ac_scores_f32    table_body.h     the score table
 *   ac_backward_f32  backward_body.h  gradients
 *   ac_softmax_f32   softmax_body.h   row softmax
 *   ac_exp_f32       softmax_body.h   the kernels' exp
 *   ac_merge_f32     merge_body.h     the log-sum-exp merge
 *   ac_linear_f32    linear_body.h    linear attention
 */
#define real float                 /* q, the outputs and the arithmetic */
#define kvreal float               /* how K and V are stored */
#define KV_TO_REAL(x) (x)          /* one stored K/V value as a real */
#define OPS f32                    /* kern->f32: the kernels on reals */
#define KV_OPS kv_f32              /* kern->kv_f32: the kernels that load K and V */
#define FN(name) name##_f32        /* the public names */

#include "tiles_body.h"
#include "decode_body.h"
#include "flash_body.h"
#include "table_body.h"
#include "backward_body.h"
#include "softmax_body.h"
#include "merge_body.h"
#include "linear_body.h"
