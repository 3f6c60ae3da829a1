/* kern_avx2_sums.h — the sums and maxima of AVX2 vectors' lanes, for
 * kern_avx2.c and kern_avx2_i8dot.c: included inside their target regions,
 * after <immintrin.h>.
 */
#ifndef AC_KERN_AVX2_SUMS_H
#define AC_KERN_AVX2_SUMS_H

static inline float hsum_f32(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float hmax_f32(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* The sums of eight vectors at once, out[u] = Σ a[u]: two rounds of hadd
 * pair them up within each 128-bit half, then the halves are added. */
static inline void hsum8_f32(const __m256 *a, float *out) {
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 lo4 = _mm256_hadd_ps(h01, h23), hi4 = _mm256_hadd_ps(h45, h67);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(lo4, hi4, 0x20),
                                        _mm256_permute2f128_ps(lo4, hi4, 0x31)));
}

/* The same over int32 lanes, the sums as one vector, exact while they stay
 * under 2^31 (kern_avx2_i8dot.c: each key's integer sum converted once). */
static inline __m256i hsum8_i32(const __m256i *a) {
    const __m256i h01 = _mm256_hadd_epi32(a[0], a[1]), h23 = _mm256_hadd_epi32(a[2], a[3]);
    const __m256i h45 = _mm256_hadd_epi32(a[4], a[5]), h67 = _mm256_hadd_epi32(a[6], a[7]);
    const __m256i lo4 = _mm256_hadd_epi32(h01, h23), hi4 = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(lo4, hi4, 0x20),
                            _mm256_permute2x128_si256(lo4, hi4, 0x31));
}

#endif
