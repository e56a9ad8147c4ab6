// K/V element types and their widening to f32 vectors. bf16 and f16 (a KV cache's storage) are
// widened as they are loaded; all arithmetic is f32.
#pragma once

#include <cstdint>
#include <cstring>

#include "../../numeric/convert.hpp"
#include "../kernel_table.hpp"
#include "arch.hpp"

namespace attend::kernels {
namespace {

struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
// An 8-bit cache's element: widened to f32 as is; its token's scale is applied by the driver.
struct I8 {
  int8_t bits;
};

inline float to_float(float x) { return x; }
inline float to_float(I8 x) { return static_cast<float>(x.bits); }
inline float to_float(Bf16 x) {
  const uint32_t bits = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline float to_float(F16 x) {
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16;
  uint32_t exp = (x.bits >> 10) & 0x1fu, mant = x.bits & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <class Arch>
inline vfloat<Arch> load_float(const float* p) {
  return vfloat<Arch>::load_unaligned(p);
}

template <class Arch, class T>
inline vfloat<Arch> load_float_scalar(const T* p) {
  alignas(64) float tmp[vfloat<Arch>::size];
  for (int i = 0; i < static_cast<int>(vfloat<Arch>::size); ++i) tmp[i] = to_float(p[i]);
  return vfloat<Arch>::load_aligned(tmp);
}

// bf16 → f32 is a 16-bit left shift of each element.
template <class Arch>
inline vfloat<Arch> load_bf16(const Bf16* p, requires_arch<xsimd::generic>) {
  return load_float_scalar<Arch>(p);
}
template <class Arch>
inline vfloat<Arch> load_f16(const F16* p, requires_arch<xsimd::generic>) {
  return load_float_scalar<Arch>(p);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
template <class Arch>
inline vfloat<Arch> load_bf16(const Bf16* p, requires_arch<xsimd::avx512bw>) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
// 32 bf16 at once (the decode kernels' bf16 V and K, pv_tile_bf16_pairs and blocked_scores): a
// bf16 is the high half of its f32, so the even elements of a 64-byte line (each dword's low half)
// widen by one shift and the odd ones (its high half) by one masked move, with no cross-lane
// shuffle (load_bf16 takes vpmovzxwd, a port-5 shuffle, and vpslld per 16). Their lanes are then
// even/odd: even_lanes and odd_lanes put 32 floats that way, interleave_low and interleave_high
// back in order.
inline __m512 even_lanes(__m512 lo, __m512 hi) {  // columns 0, 2, …, 30 of lo:hi
  return _mm512_permutex2var_ps(lo, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), hi);
}
inline __m512 odd_lanes(__m512 lo, __m512 hi) {  // columns 1, 3, …, 31
  return _mm512_permutex2var_ps(lo, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), hi);
}
inline __m512 interleave_low(__m512 even, __m512 odd) {  // columns 0–15 from the even/odd halves
  return _mm512_permutex2var_ps(even, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), odd);
}
inline __m512 interleave_high(__m512 even, __m512 odd) {  // columns 16–31
  return _mm512_permutex2var_ps(even, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31),
                                odd);
}
// a·b + c as the other kernels compute it (xsimd::fma: x·y + z, one FMA by GCC's contraction; a
// sanitizer build's instrumentation stops the contraction, and there the pairs kernels must still
// give the other kernels' bits, so no FMA intrinsic).
[[gnu::always_inline]] inline __m512 fma_as_xsimd(__m512 a, __m512 b, __m512 c) {
  using F = xsimd::batch<float, xsimd::avx512f>;
  return xsimd::fma(F(a), F(b), F(c));
}
// Whether elements E on Arch take those kernels (a bf16 K or V, 16-lane vectors).
template <class Arch, class E>
constexpr bool bf16_pairs_on() {
  return std::is_same_v<E, Bf16> && vfloat<Arch>::size == 16;
}
// The even and the odd elements of 32 bf16 at p, as f32.
[[gnu::always_inline]] inline __m512 bf16_even(const Bf16* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(p), 16));
}
[[gnu::always_inline]] inline __m512 bf16_odd(const Bf16* p) {
  return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(0xaaaaaaaau, p));
}
#endif
#if defined(__AVX512F__)
template <class Arch>
inline vfloat<Arch> load_f16(const F16* p, requires_arch<xsimd::avx512f>) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
#endif
#if defined(__AVX2__)
template <class Arch>
inline vfloat<Arch> load_bf16(const Bf16* p, requires_arch<xsimd::avx2>) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
#endif
#if defined(__AVX2__) && defined(__F16C__)
template <class Arch>
inline vfloat<Arch> load_f16(const F16* p, requires_arch<xsimd::avx2>) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
#endif
#if defined(__SSE2__)
template <class Arch>
inline vfloat<Arch> load_bf16(const Bf16* p, requires_arch<xsimd::sse2>) {
  const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
}
#endif
#if defined(__aarch64__)
template <class Arch>
inline vfloat<Arch> load_bf16(const Bf16* p, requires_arch<xsimd::neon64>) {
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p)), 16));
}
template <class Arch>
inline vfloat<Arch> load_f16(const F16* p, requires_arch<xsimd::neon64>) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
}
#endif

// i8 → f32: sign-extend, convert.
template <class Arch>
inline vfloat<Arch> load_i8(const I8* p, requires_arch<xsimd::generic>) {
  return load_float_scalar<Arch>(p);
}
#if defined(__AVX512F__)
template <class Arch>
inline vfloat<Arch> load_i8(const I8* p, requires_arch<xsimd::avx512f>) {
  // (Measured against an integer add of 1.5·2^23 and an f32 subtract, which keeps vcvtdq2ps off the
  // FMA pipes: no faster with the last-level cache flushed, D1–D4 of cache/attend-i8.)
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
#endif
#if defined(__AVX2__)
template <class Arch>
inline vfloat<Arch> load_i8(const I8* p, requires_arch<xsimd::avx2>) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
#endif

/// One vector of elements starting at p, widened to f32.
template <class Arch>
inline vfloat<Arch> load_float(const Bf16* p) {
  return load_bf16<Arch>(p, Arch{});
}
template <class Arch>
inline vfloat<Arch> load_float(const F16* p) {
  return load_f16<Arch>(p, Arch{});
}
template <class Arch>
inline vfloat<Arch> load_float(const I8* p) {
  return load_i8<Arch>(p, Arch{});
}

// f32 → bf16/f16, round to nearest even (NaN stays NaN, f16 overflow becomes ±inf): O of a 16-bit
// output, stored once per row.
inline uint16_t from_float_bits(float x, KvType t) {
  return t == KvType::bf16 ? numeric::to_bf16(x) : numeric::to_f16(x);
}

// n elements of type t at p (16-bit: their bit patterns), times `scale`, as f32 at out.
template <class Arch>
inline void row_to_f32(const void* p, KvType t, int64_t n, float scale, float* out) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  int64_t d = 0;
  switch (t) {
    case KvType::f32: {
      const float* s = static_cast<const float*>(p);
      for (; d + W <= n; d += W) (B::load_unaligned(s + d) * B(scale)).store_unaligned(out + d);
      for (; d < n; ++d) out[d] = s[d] * scale;
      return;
    }
    case KvType::bf16: {
      const Bf16* s = static_cast<const Bf16*>(p);
      for (; d + W <= n; d += W) (load_float<Arch>(s + d) * B(scale)).store_unaligned(out + d);
      for (; d < n; ++d) out[d] = to_float(s[d]) * scale;
      return;
    }
    case KvType::f16: {
      const F16* s = static_cast<const F16*>(p);
      for (; d + W <= n; d += W) (load_float<Arch>(s + d) * B(scale)).store_unaligned(out + d);
      for (; d < n; ++d) out[d] = to_float(s[d]) * scale;
      return;
    }
    case KvType::i8: break;  // (never a tensor's type)
  }
}

// One vector of f32 stored as W elements of the 16-bit type t (round to nearest even).
template <class Arch>
inline void store_16(uint16_t* dst, vfloat<Arch> x, KvType t, requires_arch<xsimd::generic>) {
  alignas(64) float tmp[vfloat<Arch>::size];
  x.store_aligned(tmp);
  for (int i = 0; i < static_cast<int>(vfloat<Arch>::size); ++i) dst[i] = from_float_bits(tmp[i], t);
}
#if defined(__AVX512F__)
template <class Arch>
inline void store_16(uint16_t* dst, vfloat<Arch> x, KvType t, requires_arch<xsimd::avx512f>) {
  __m256i h;
  if (t == KvType::f16) {
    h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {  // the integer rounding of numeric::to_bf16, NaN quietened
    const __m512i b = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), odd), 16);
    const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40));
    const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    h = _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, is_nan, nan));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h);
}
#endif
#if defined(__AVX2__) && defined(__F16C__)
template <class Arch>
inline void store_16(uint16_t* dst, vfloat<Arch> x, KvType t, requires_arch<xsimd::avx2>) {
  if (t != KvType::f16) return store_16<Arch>(dst, x, t, xsimd::generic{});
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif

// dst[d] = src[d] · mul for d < n, stored as type t.
template <class Arch>
inline void store_row(void* dst, KvType t, const float* src, float mul, int64_t n) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  int64_t d = 0;
  if (t == KvType::f32) {
    float* o = static_cast<float*>(dst);
    for (; d + W <= n; d += W) (B::load_unaligned(src + d) * B(mul)).store_unaligned(o + d);
    for (; d < n; ++d) o[d] = src[d] * mul;
    return;
  }
  uint16_t* o = static_cast<uint16_t*>(dst);
  for (; d + W <= n; d += W) store_16<Arch>(o + d, B::load_unaligned(src + d) * B(mul), t, Arch{});
  for (; d < n; ++d) o[d] = from_float_bits(src[d] * mul, t);
}

}  // namespace
}  // namespace attend::kernels
