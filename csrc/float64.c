/* float64.c — every algorithm for float64 q, k and v.
 *
 * Defines (each from the body named):
 *   ac_flash_f64     flash_body.h     blockwise attention (decode_body.h for few rows)
 *   ac_naive_f64     table_body.h     materialised attention on the tiled kernels
 *   ac_scores_f64    table_body.h     the score table
 *   ac_backward_f64  backward_body.h  gradients
 *   ac_softmax_f64   softmax_body.h   row softmax
 *   ac_exp_f64       softmax_body.h   the kernels' exp
 *   ac_merge_f64     merge_body.h     the log-sum-exp merge
 *   ac_linear_f64    linear_body.h    linear attention
 */
#define real double                /* q, the outputs and the arithmetic */
#define kvreal double              /* how K and V are stored */
#define KV_TO_REAL(x) (x)          /* one stored K/V value as a real */
#define OPS f64                    /* kern->f64: the kernels on reals */
#define KV_OPS kv_f64              /* kern->kv_f64: the kernels that load K and V */
#define FN(name) name##_f64        /* the public names */

#include "tiles_body.h"
#include "decode_body.h"
#include "flash_body.h"
#include "table_body.h"
#include "backward_body.h"
#include "softmax_body.h"
#include "merge_body.h"
#include "linear_body.h"
