// Microkernels of the bf16-math wide path (SdpaOptions::fpmath = FpMath::bf16) on AVX512_BF16:
// `vdpbf16ps` multiplies pairs of bf16 and accumulates both products into an f32 lane, so every
// operand is packed as 32-bit pairs along the reduced dimension — depth for Sᵀ = K·Qᵀ, keys for
// O += P·V. Rounding to bf16 happens only where the operands are packed (round to nearest even);
// accumulation, the softmax and the output stay f32. Compiled only into the avx512_bf16 table.
#pragma once

#if defined(__AVX512BF16__)

#include <array>
#include <cstring>
#include <utility>

#include "../simd/arch.hpp"

namespace attend::kernels {
namespace {

// Lane i of the result = (a_i, b_i) as bf16, a in the low half: a pair whose first element is a.
inline __m512i pack_bf16_pairs(__m512 a, __m512 b) {
  // cvtne2ps gives [a0..a15, b0..b15]; the permute interleaves them.
  alignas(64) static constexpr uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i ab = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), ab);
}

// 32 consecutive f32 → 32 consecutive bf16 (round to nearest even).
inline void store_bf16x32(uint16_t* out, __m512 lo, __m512 hi) {
  _mm512_storeu_si512(out, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
}
inline void store_bf16x16(uint16_t* out, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)));
}

// Sᵀ[R keys][NV·16 rows] = K·Qᵀ in bf16 pairs. krow[r]: key r's depth as bf16 (pairs read as one
// 32-bit word each); qt: Qᵀ as pairs, `ldq` words per depth pair. Writes f32 Sᵀ like score_tile.
struct ScoreBf16Args {
  const uint32_t* const* krow;
  const uint32_t* qt;
  int64_t ldq;
  int64_t pairs;
  float* out;
  int64_t ldo;
  float* colmax = nullptr;
};

template <int R, int NV>
void score_tile_bf16(const ScoreBf16Args& a) {
  __m512 acc[R][NV];
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n] = _mm512_setzero_ps();
  const uint32_t* kr[R];
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r) kr[r] = a.krow[r];
  const uint32_t* qt = a.qt;
  for (int64_t p = 0; p < a.pairs; ++p, qt += a.ldq) {
    __m512bh q[NV];
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) q[n] = reinterpret_cast<__m512bh>(_mm512_load_si512(qt + n * 16));
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r) {
      const __m512bh kb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(kr[r][p])));
      ATTEND_UNROLL
      for (int n = 0; n < NV; ++n) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], kb, q[n]);
    }
  }
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) _mm512_store_ps(a.out + r * a.ldo + n * 16, acc[r][n]);
  if (a.colmax) {
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) {
      __m512 mx = _mm512_load_ps(a.colmax + n * 16);
      ATTEND_UNROLL
      for (int r = 0; r < R; ++r) mx = _mm512_max_ps(mx, acc[r][n]);
      _mm512_store_ps(a.colmax + n * 16, mx);
    }
  }
}

// O[R rows][NV·16] = alpha[r]·O + Σ_pairs P·V: p[jp·ldp + r] is row r's pair of weights for keys
// (2jp, 2jp+1), v[jp·ldv + c] the pair of V values of column c. No masked variant: a tile with
// masked keys and a non-finite V goes to the f32 P·V (a masked weight must skip it exactly).
struct PvBf16Args {
  float* o;
  int64_t ldo;
  const float* alpha;
  const uint32_t* p;
  int64_t ldp;
  const uint32_t* v;
  int64_t ldv;
  int64_t pairs;
};

template <int R, int NV>
void pv_tile_bf16(const PvBf16Args& a) {
  __m512 acc[R][NV];
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r) {
    const __m512 al = _mm512_set1_ps(a.alpha[r]);
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) acc[r][n] = _mm512_mul_ps(_mm512_load_ps(a.o + r * a.ldo + n * 16), al);
  }
  const uint32_t* p = a.p;
  const uint32_t* v = a.v;
  for (int64_t jp = 0; jp < a.pairs; ++jp, p += a.ldp, v += a.ldv) {
    __m512bh vv[NV];
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) vv[n] = reinterpret_cast<__m512bh>(_mm512_load_si512(v + n * 16));
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r) {
      const __m512bh pb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(p[r])));
      ATTEND_UNROLL
      for (int n = 0; n < NV; ++n) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], pb, vv[n]);
    }
  }
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) _mm512_store_ps(a.o + r * a.ldo + n * 16, acc[r][n]);
}

// Specialisations by (R, NV) for the runtime remainders, as for the f32 microkernels.
constexpr int kBf16MaxR = 6, kBf16MaxNV = 4;

template <int... I>
constexpr auto make_score_bf16_table(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const ScoreBf16Args&), sizeof...(I)>{
      &score_tile_bf16<I / kBf16MaxNV + 1, I % kBf16MaxNV + 1>...};
}
template <int... I>
constexpr auto make_pv_bf16_table(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const PvBf16Args&), sizeof...(I)>{
      &pv_tile_bf16<I / kBf16MaxNV + 1, I % kBf16MaxNV + 1>...};
}

inline void score_bf16_dispatch(int r, int nv, const ScoreBf16Args& a) {
  static constexpr auto table = make_score_bf16_table(std::make_integer_sequence<int, kBf16MaxR * kBf16MaxNV>{});
  table[(r - 1) * kBf16MaxNV + (nv - 1)](a);
}
inline void pv_bf16_dispatch(int r, int nv, const PvBf16Args& a) {
  static constexpr auto table = make_pv_bf16_table(std::make_integer_sequence<int, kBf16MaxR * kBf16MaxNV>{});
  table[(r - 1) * kBf16MaxNV + (nv - 1)](a);
}

}  // namespace
}  // namespace attend::kernels

#endif  // __AVX512BF16__
