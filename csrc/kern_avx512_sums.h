/* kern_avx512_sums.h — sums of several AVX-512 vectors at once (each
 * vector's lanes added), for kern_avx512.c and kern_avx512_i8dot.c: included
 * inside their target regions, after <immintrin.h>.
 */
#ifndef AC_KERN_AVX512_SUMS_H
#define AC_KERN_AVX512_SUMS_H

/* The sums of sixteen vectors at once, out[u] = Σ a[u]: a transposing tree,
 * each level adding pairs of vectors after a shuffle that lines up their
 * partial sums (within 128-bit lanes, then across them): 15 adds and 30
 * shuffles for the sixteen, where one reduction each takes 4 adds and 4
 * shuffles. */
static inline __m512 hsum_pairs_f32(__m512 a, __m512 b) { /* [a02 b02 a13 b13] per lane */
    return _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
}
static inline __m512 hsum_quads_f32(__m512 a, __m512 b) { /* 4 vectors' sums per lane */
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
}
static inline __m512 hsum_lanes_f32(__m512 a, __m512 b) { /* [a0+a1 a2+a3 b0+b1 b2+b3] */
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
}
static inline void hsum16_f32(const __m512 *a, float *out) {
    __m512 q[4];
    for (int i = 0; i < 4; i++)
        q[i] = hsum_quads_f32(hsum_pairs_f32(a[4 * i], a[4 * i + 1]),
                              hsum_pairs_f32(a[4 * i + 2], a[4 * i + 3]));
    _mm512_storeu_ps(out, hsum_lanes_f32(hsum_lanes_f32(q[0], q[1]), hsum_lanes_f32(q[2], q[3])));
}
static inline void hsum8_f32(const __m512 *a, float *out) {
    const __m512 q0 = hsum_quads_f32(hsum_pairs_f32(a[0], a[1]), hsum_pairs_f32(a[2], a[3]));
    const __m512 q1 = hsum_quads_f32(hsum_pairs_f32(a[4], a[5]), hsum_pairs_f32(a[6], a[7]));
    const __m512 h = hsum_lanes_f32(q0, q1); /* [a0-3: lanes 0+1, 2+3; a4-7: 0+1, 2+3] */
    const __m512 t = _mm512_add_ps(h, _mm512_shuffle_f32x4(h, h, 0xB1));
    _mm_storeu_ps(out, _mm512_castps512_ps128(t));
    _mm_storeu_ps(out + 4, _mm512_extractf32x4_ps(t, 2));
}

/* The same trees over int32 lanes, the sums as one vector (lane u: Σ a[u];
 * of eight, lanes 0-3 and 8-11), exact while they stay under 2^31.  A decode
 * step's Q·Kᵀ over an int8 cache (kern_avx512_i8dot.c) ends in sixteen such
 * sums per four keys of four query rows, about as many instructions as its
 * dot products: summed as integers, each key's sum is converted to float32
 * once instead of every lane before the adds. */
static inline __m512i hsum_pairs_i32(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
static inline __m512i hsum_quads_i32(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}
static inline __m512i hsum_lanes_i32(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xDD));
}
static inline __m512i hsum16_i32(const __m512i *a) {
    __m512i q[4];
    for (int i = 0; i < 4; i++)
        q[i] = hsum_quads_i32(hsum_pairs_i32(a[4 * i], a[4 * i + 1]),
                              hsum_pairs_i32(a[4 * i + 2], a[4 * i + 3]));
    return hsum_lanes_i32(hsum_lanes_i32(q[0], q[1]), hsum_lanes_i32(q[2], q[3]));
}
static inline __m512i hsum8_i32(const __m512i *a) {
    const __m512i q0 = hsum_quads_i32(hsum_pairs_i32(a[0], a[1]), hsum_pairs_i32(a[2], a[3]));
    const __m512i q1 = hsum_quads_i32(hsum_pairs_i32(a[4], a[5]), hsum_pairs_i32(a[6], a[7]));
    const __m512i h = hsum_lanes_i32(q0, q1); /* [a0-3: lanes 0+1, 2+3; a4-7: 0+1, 2+3] */
    return _mm512_add_epi32(h, _mm512_shuffle_i32x4(h, h, 0xB1));
}

#endif
