/* template.h — instantiate a file once per element type.
 *
 * A typed file starts with
 *     #ifndef AC_TEMPLATE
 *     #define AC_TEMPLATE "this_file.c"
 *     #include "template.h"
 *     ... code that is not typed ...
 *     #else
 *     ... code written with `real`, `kvreal`, R(name) and RR(name) ...
 *     #endif
 * and template.h includes it back: real = kvreal = float with R(x) = x_f32;
 * real = kvreal = double with R(x) = x_f64; and, if the file defines
 * AC_TEMPLATE_F16, real = float with kvreal = uint16_t (IEEE half) and
 * R(x) = x_f16: float32 queries and arithmetic over a float16 KV cache.
 *
 *   kvreal          the element type of K and V
 *   KV_TO_REAL(x)   one K/V element as a real
 *   RR(x)           the name of a function on reals alone (x_f32 in the half
 *                   pass: the scores, softmax and outputs are float32)
 *   AC_KV_IS_REAL   1 in the first two passes: guard code on reals alone so
 *                   the half pass does not define it twice
 */
#include <stdint.h>

#define real float
#define kvreal float
#define KV_TO_REAL(x) (x)
#define R(x) x##_f32
#define RR(x) x##_f32
#define R_EXP expf
#define R_LOG logf
#define AC_KV_IS_REAL 1
#include AC_TEMPLATE
#undef real
#undef kvreal
#undef R
#undef RR
#undef R_EXP
#undef R_LOG

#define real double
#define kvreal double
#define R(x) x##_f64
#define RR(x) x##_f64
#define R_EXP exp
#define R_LOG log
#include AC_TEMPLATE
#undef real
#undef kvreal
#undef KV_TO_REAL
#undef R
#undef RR
#undef R_EXP
#undef R_LOG
#undef AC_KV_IS_REAL

#ifdef AC_TEMPLATE_F16
#define real float
#define kvreal uint16_t
#define KV_TO_REAL(x) ac_half_to_float(x)
#define R(x) x##_f16
#define RR(x) x##_f32
#define R_EXP expf
#define R_LOG logf
#define AC_KV_IS_REAL 0
#include AC_TEMPLATE
#undef real
#undef kvreal
#undef KV_TO_REAL
#undef R
#undef RR
#undef R_EXP
#undef R_LOG
#undef AC_KV_IS_REAL
#endif
