/* template.h — instantiate a file once per element type.
 *
 * A typed file starts with
 *     #ifndef AC_TEMPLATE
 *     #define AC_TEMPLATE "this_file.c"
 *     #include "template.h"
 *     ... code that is not typed ...
 *     #else
 *     ... code written with `real` and R(name) ...
 *     #endif
 * and template.h includes it back twice: real = float with R(x) = x_f32, and
 * real = double with R(x) = x_f64.  One body, two precisions, no copy.
 */
#define real float
#define R(x) x##_f32
#define R_EXP expf
#define R_LOG logf
#include AC_TEMPLATE
#undef real
#undef R
#undef R_EXP
#undef R_LOG

#define real double
#define R(x) x##_f64
#define R_EXP exp
#define R_LOG log
#include AC_TEMPLATE
#undef real
#undef R
#undef R_EXP
#undef R_LOG
