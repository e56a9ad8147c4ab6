// In-register transposes: Q rows into the wide path's Qᵀ panel, and the narrow path's
// transpose-sum of dot-product accumulators.
#pragma once

#include <utility>

#include "arch.hpp"

namespace attend::kernels {
namespace {

// Portable: no column is handled in registers (transpose_rows_scaled goes element by element).
template <class Arch>
inline int64_t transpose_blocks_scaled(const float* const*, int64_t, float, float*, int64_t,
                                       requires_arch<xsimd::generic>) {
  return 0;
}

#if defined(__AVX512F__)
// AVX-512: 16×16 blocks in registers (unpack, then 128-bit lane shuffles). Returns the columns done.
template <class Arch>
inline int64_t transpose_blocks_scaled(const float* const* src, int64_t cols, float scale, float* dst, int64_t ldd,
                                       requires_arch<xsimd::avx512f>) {
  int64_t c = 0;
  const __m512 sv = _mm512_set1_ps(scale);
  for (; c + 16 <= cols; c += 16) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = src[i] ? _mm512_mul_ps(_mm512_loadu_ps(src[i] + c), sv) : _mm512_setzero_ps();
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
      r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
      r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
      r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
      r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    // r[4q + k] now holds, in each 128-bit lane L, column 4L + k of rows 4q..4q+3.
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);      // lanes 0,2 of rows 0-3 | 4-7
      t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);  // lanes 1,3
      t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
      t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; ++i) {
      // columns i (lane 0), 4 + i (lane 1), 8 + i (lane 2), 12 + i (lane 3)
      _mm512_storeu_ps(dst + (c + i) * ldd, _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88));
      _mm512_storeu_ps(dst + (c + 8 + i) * ldd, _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd));
      _mm512_storeu_ps(dst + (c + 4 + i) * ldd, _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88));
      _mm512_storeu_ps(dst + (c + 12 + i) * ldd, _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd));
    }
  }
  return c;
}
#endif

// Writes W rows of `cols` floats (row pointers `src`, null = a zero row) times `scale` transposed
// into `dst`: dst[c·ldd + r] = src[r][c] · scale. AVX-512 transposes 16×16 blocks in registers;
// other targets (and a column remainder) go element by element.
template <class Arch>
inline void transpose_rows_scaled(const float* const* src, int64_t cols, float scale, float* dst, int64_t ldd) {
  constexpr int W = vfloat<Arch>::size;
  int64_t c = transpose_blocks_scaled<Arch>(src, cols, scale, dst, ldd, Arch{});
  for (; c < cols; ++c)
    for (int r = 0; r < W; ++r) dst[c * ldd + r] = src[r] ? src[r][c] * scale : 0.0f;
}

// Lane k of the result is the sum of acc[k]'s lanes. xsimd 8.1's AVX-512 haddp returns its sums
// in the lane order 0,1,4,5,2,3,6,7,8,9,12,13,10,11,14,15; that order is an involution, so
// swapping the inputs the same way puts every sum in its own lane (register renames, free). The
// narrow-path tests fail if a later xsimd changes this.
template <class Arch>
inline vfloat<Arch> transpose_sum(vfloat<Arch>* acc) {
  if constexpr (vfloat<Arch>::size == 16) {
    std::swap(acc[2], acc[4]);
    std::swap(acc[3], acc[5]);
    std::swap(acc[10], acc[12]);
    std::swap(acc[11], acc[13]);
  }
  return xsimd::haddp(acc);
}

template <class Arch>
inline float horizontal_max(vfloat<Arch> v) {
  alignas(64) float lanes[vfloat<Arch>::size];
  v.store_aligned(lanes);
  float m = lanes[0];
  for (int i = 1; i < static_cast<int>(vfloat<Arch>::size); ++i) m = lanes[i] > m ? lanes[i] : m;
  return m;
}

}  // namespace
}  // namespace attend::kernels
