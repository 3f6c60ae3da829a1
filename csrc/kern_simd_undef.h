/* kern_simd_undef.h — forgets the vocabulary of one element type's section
 * (kern_simd_ops.h lists it), so that the next section of an ISA file must
 * define every macro itself and none carries over unseen from the last one
 * (a float32 constant in the float64 exp, say).  Included at the end of each
 * section of kern_avx2.c, kern_avx512.c and kern_neon.c; no include guard.
 * The tile sizes (QK_R, QK_C, PV_R, PV_C, ...) are the file's, and stay. */
#undef real
#undef FN
#undef VT
#undef VL
#undef V_LOADU
#undef V_STOREU
#undef V_SET1
#undef V_ZERO
#undef V_FMA
#undef V_MUL
#undef V_DIV
#undef V_RECIP
#undef V_ADD
#undef V_SUB
#undef V_MAX
#undef V_MIN
#undef V_HMAX
#undef V_HSUM
#undef V_HSUM8
#undef V_HSUM16
#undef V_TRANSPOSE
#undef VN_T
#undef VN_INIT
#undef VN_ACC
#undef VN_ANY
#undef V_ROUND
#undef V_EXP_CLAMP
#undef V_EXP_SCALE
#undef V_EXP_FINISH
#undef V_EXP_FAST_OK
#undef V_EXP_FAST_FINISH
#undef EXP_LO
#undef EXP_HI
#undef LN2_HI
#undef LN2_LO
#undef LOG2E
#undef EXP_DEG
#undef kvreal
#undef V_LOADU_KV
#undef KV_TO_REAL
