// The fused attention kernels, written once and templated on the xsimd architecture.
//
// Included only by runtime/kernels/arch/*.cpp, each compiled with its own ISA flags. Everything
// here lives in an anonymous namespace or is a template on Arch, so every ISA translation unit owns
// its copy: a non-template inline function compiled with -mavx512f could otherwise be picked by the
// linker for the whole program and crash an AVX2-only machine (see GUIDE.md).
//
// Algorithm (flash attention, online softmax): Q is scaled once by `scale`; for each tile of keys the
// scores S are computed, masked, their running row max m and sum l updated, and the output
// accumulator rescaled by e^(m_old − m_new) while it is reloaded for P·V. Exponentials are
// 2^((s − m)·log2 e): log2 e is applied after the max is subtracted, so finite logits up to
// ±FLT_MAX never overflow (folding it into Q would turn logits above 2.4e38 into inf and then NaN).
// The n×n score matrix never exists; scratch is O(tile).
//
// Two score layouts:
//  * wide (prefill): Sᵀ = K·Qᵀ, keys × query rows. Q is transposed into a [D × rows] panel once per
//    row block, K is read in place (its elements are broadcast), so nothing per key tile is packed.
//    The softmax then runs down columns, vectorised across query rows.
//  * narrow (decode, a handful of rows): S = Q·Kᵀ as dot products along D with haddp reductions, so
//    one query row does not pay for a full vector of padded rows. D must be a multiple of the
//    vector width. A KV cache stores K blocked ([D][16] per 16 keys, FlashWork::k_blocked): then
//    each query element is broadcast against a vector of keys and no reductions are needed.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <xsimd/xsimd.hpp>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "kernel_table.hpp"

namespace attend::kernels {
namespace {

template <class Arch>
using vfloat = xsimd::batch<float, Arch>;
template <class Arch>
using vint = xsimd::batch<int32_t, Arch>;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Tile geometry per architecture. Register budgets: AVX-512 has 32 vector registers, so the
// microkernels keep up to 24 accumulators; AVX2 and SSE/NEON-class targets keep 12.
template <class Arch>
struct Tiles {
  static constexpr int W = vfloat<Arch>::size;
  static constexpr bool kWideRegs = (W == 16);
  static constexpr int kMaxRowVectors = 4;                // Sᵀ tile: ≤ 4 vectors of query rows
  static constexpr int kBlockRows = kMaxRowVectors * W;   // query rows per wide block
  static constexpr int kBlockKeys = kWideRegs ? 96 : 64;  // keys per wide tile
  static constexpr int kScoreKeys = kWideRegs ? 6 : 3;    // keys per score microkernel call
  static constexpr int kAccRegs = kWideRegs ? 24 : 12;    // accumulator budget of the P·V microkernel
  static constexpr int kPvRows = kWideRegs ? 6 : 3;       // rows per P·V microkernel call
  static constexpr int kNarrowMaxRows = W / 2 > 1 ? W / 2 : 1;
  static constexpr int kNarrowBlockKeys = 256;
  static_assert(kNarrowMaxRows <= 16, "narrow path keeps per-row ranges in arrays of 16");
};

// 2^x for x ≤ 0 (NaN propagates): degree-5 polynomial on the fraction after rounding, relative
// error ≤ 1.1e-7 on [-0.5, 0.5]; the exponent is applied with integer arithmetic (AVX-512: one
// vscalefps). Inputs below −127 (−160 with scalef; including −inf from masks) give exactly 0,
// which is what a masked score must contribute.
template <class Arch>
inline vfloat<Arch> exp2_nonpositive(vfloat<Arch> x) {
  using B = vfloat<Arch>;
  using I = vint<Arch>;
#if defined(__x86_64__)
  // AVX-512 scales by 2^n in one instruction; below −160 the result rounds to exactly 0.
  constexpr bool kScalef = std::is_same_v<Arch, xsimd::avx512bw>;
#else
  constexpr bool kScalef = false;
#endif
  x = xsimd::max(B(kScalef ? -160.0f : -127.0f), x);  // operand order: x86 max returns the 2nd operand on NaN
  const B n = xsimd::nearbyint(x);
  const B f = x - n;
  B p = B(1.321867225e-03f);
  p = xsimd::fma(p, f, B(9.671698324e-03f));
  p = xsimd::fma(p, f, B(5.550893024e-02f));
  p = xsimd::fma(p, f, B(2.402223796e-01f));
  p = xsimd::fma(p, f, B(6.931468844e-01f));
  p = xsimd::fma(p, f, B(1.0f));
#if defined(__x86_64__)
  if constexpr (kScalef) return _mm512_scalef_ps(p, n);
#endif
  const I e = (xsimd::to_int(n) + I(127)) << 23;
  return p * xsimd::bitwise_cast<B>(e);
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

// ---------------------------------------------------------------------------------------------
// K/V element types. bf16 and f16 are widened to f32 as they are loaded.

struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

inline float to_float(float x) { return x; }
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

template <class Arch>
inline vfloat<Arch> load_float(const Bf16* p) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<Arch, xsimd::avx512bw>) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  } else if constexpr (std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  } else if constexpr (std::is_same_v<Arch, xsimd::sse2>) {
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
  }
#elif defined(__aarch64__)
  if constexpr (std::is_same_v<Arch, xsimd::neon64>)
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p)), 16));
#endif
  return load_float_scalar<Arch>(p);
}

template <class Arch>
inline vfloat<Arch> load_float(const F16* p) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<Arch, xsimd::avx512bw>) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else if constexpr (std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));  // F16C
  }
#elif defined(__aarch64__)
  if constexpr (std::is_same_v<Arch, xsimd::neon64>)
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
#endif
  return load_float_scalar<Arch>(p);
}

// Writes W rows of `cols` floats (row pointers `src`, null = a zero row) times `scale` transposed
// into `dst`: dst[c·ldd + r] = src[r][c] · scale. AVX-512 transposes 16×16 blocks in registers;
// other targets (and a column remainder) go element by element.
template <class Arch>
inline void transpose_rows_scaled(const float* const* src, int64_t cols, float scale, float* dst, int64_t ldd) {
  constexpr int W = vfloat<Arch>::size;
  int64_t c = 0;
#if defined(__x86_64__)
  if constexpr (std::is_same_v<Arch, xsimd::avx512bw>) {
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
  }
#endif
  for (; c < cols; ++c)
    for (int r = 0; r < W; ++r) dst[c * ldd + r] = src[r] ? src[r][c] * scale : 0.0f;
}

// ---------------------------------------------------------------------------------------------
// Microkernels. Each keeps an R × NV block of accumulators in registers.
//
// In score_tile and pv_tile every loop over a compile-time extent (R, NV) is marked ATTEND_UNROLL:
// GCC otherwise unrolls the outer of two nested loops only after scalar replacement has run, so the
// accumulator array stays in memory around the hot loop (zeroed, stored and reloaded on the stack
// every call). Unrolled early, the accumulators live in registers from start to end: +8% on P1,
// +5% on P2 (alternating runs of both builds). The narrow-path kernels' accumulators were checked
// (objdump) to stay in registers without it.
#define ATTEND_UNROLL _Pragma("GCC unroll 32")

// Sᵀ[R keys][NV·W rows] = K[R keys]·Qᵀ panel. `krow[r]` points at key r's D values (read in place,
// broadcast one element at a time); the panel holds Q transposed, `ldq` floats per d.
struct ScoreArgs {
  const float* const* krow;
  const float* qt;
  int64_t ldq;
  int64_t depth;
  float* out;  // Sᵀ rows, `ldo` floats apart
  int64_t ldo;
  float* colmax = nullptr;  // optional: running max over keys of each query row (column of Sᵀ)
};

template <class Arch, int R, int NV>
void score_tile(const ScoreArgs& a) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  B acc[R][NV];
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n] = B(0.0f);
  const float* kr[R];
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r) kr[r] = a.krow[r];
  const float* qt = a.qt;
  for (int64_t d = 0; d < a.depth; ++d, qt += a.ldq) {
    B q[NV];
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) q[n] = B::load_aligned(qt + n * W);
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r) {
      const B kb(kr[r][d]);
      ATTEND_UNROLL
      for (int n = 0; n < NV; ++n) acc[r][n] = xsimd::fma(kb, q[n], acc[r][n]);
    }
  }
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n].store_aligned(a.out + r * a.ldo + n * W);
  if (a.colmax) {
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) {
      B mx = B::load_aligned(a.colmax + n * W);
      ATTEND_UNROLL
      for (int r = 0; r < R; ++r) mx = xsimd::max(mx, acc[r][n]);
      mx.store_aligned(a.colmax + n * W);
    }
  }
}

// O[R rows][NV·W] = alpha[r]·O + Σ_j P[r][j]·V[j]. P is addressed with two strides so the same
// kernel reads the wide path's Sᵀ (row stride 1) and the narrow path's S (key stride 1). The
// rescale by alpha is folded into the reload of O, so the online softmax costs no extra pass.
struct PvArgs {
  float* o;
  int64_t ldo;
  const float* alpha;
  const float* p;
  int64_t p_row_stride, p_key_stride;
  const void* v;  // elements of the kernel's T
  int64_t ldv;
  int64_t keys;
  // Optional software prefetch (decode): while key j is accumulated, the first `pf_bytes` of V row
  // j + pf_keys are requested, for rows below `pf_limit` (rows past `v` that exist). 0 = none.
  int64_t pf_keys = 0, pf_limit = 0, pf_bytes = 0;
};

// Masked: the tile had masked keys. Their p is exactly 0, but 0 · V is NaN where V holds NaN or
// inf, so a masked position would leak into rows that never saw it; the masked variant skips p == 0.
// AVX-512 skips with a write-masked FMA (kMaskedFma); other targets select.
#if defined(__x86_64__)
template <class Arch>
constexpr bool kMaskedFma = std::is_same_v<Arch, xsimd::avx512bw>;
#else
template <class Arch>
constexpr bool kMaskedFma = false;
#endif

template <class Arch, int R, int NV, class T, bool Masked>
void pv_tile(const PvArgs& a) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  B acc[R][NV];
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r) {
    const B al(a.alpha[r]);
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) acc[r][n] = B::load_aligned(a.o + r * a.ldo + n * W) * al;
  }
  const T* v = static_cast<const T*>(a.v);
  const float* p = a.p;
  for (int64_t j = 0; j < a.keys; ++j, v += a.ldv, p += a.p_key_stride) {
    if (a.pf_bytes && j + a.pf_keys < a.pf_limit) {
      const char* next = reinterpret_cast<const char*>(v + a.pf_keys * a.ldv);
      for (int64_t o = 0; o < a.pf_bytes; o += 64) __builtin_prefetch(next + o, 0, 3);
    }
    B vv[NV];
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) vv[n] = load_float<Arch>(v + n * W);
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r) {
      const B pb(p[r * a.p_row_stride]);
      if constexpr (Masked && kMaskedFma<Arch>) {
#if defined(__x86_64__)
        // One masked FMA per accumulator (GCC turns the generic select below into move, FMA, blend).
        // Unordered ≠: a NaN weight is live, as below.
        const __mmask16 live = _mm512_cmp_ps_mask(pb, _mm512_setzero_ps(), _CMP_NEQ_UQ);
        ATTEND_UNROLL
        for (int n = 0; n < NV; ++n) acc[r][n] = _mm512_mask3_fmadd_ps(pb, vv[n], acc[r][n], live);
#endif
      } else if constexpr (Masked) {
        // Skip exactly p == 0 (an ordered compare: a NaN weight is not skipped and poisons its row).
        const auto dead = pb == B(0.0f);
        ATTEND_UNROLL
        for (int n = 0; n < NV; ++n) acc[r][n] = xsimd::select(dead, acc[r][n], xsimd::fma(pb, vv[n], acc[r][n]));
      } else {
        ATTEND_UNROLL
        for (int n = 0; n < NV; ++n) acc[r][n] = xsimd::fma(pb, vv[n], acc[r][n]);
      }
    }
  }
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n].store_aligned(a.o + r * a.ldo + n * W);
}

// Function-pointer tables so a runtime (rows, vectors) remainder picks the right specialisation.
constexpr int kMaxScoreR = 6, kMaxScoreNV = 4;
constexpr int kMaxPvR = 6, kMaxPvNV = 8;

template <class Arch, int... I>
constexpr auto make_score_table(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const ScoreArgs&), sizeof...(I)>{
      &score_tile<Arch, I / kMaxScoreNV + 1, I % kMaxScoreNV + 1>...};
}
template <class Arch, class T, bool Masked, int... I>
constexpr auto make_pv_table(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const PvArgs&), sizeof...(I)>{
      &pv_tile<Arch, I / kMaxPvNV + 1, I % kMaxPvNV + 1, T, Masked>...};
}

template <class Arch>
inline void score_dispatch(int r, int nv, const ScoreArgs& a) {
  static constexpr auto table = make_score_table<Arch>(std::make_integer_sequence<int, kMaxScoreR * kMaxScoreNV>{});
  table[(r - 1) * kMaxScoreNV + (nv - 1)](a);
}

template <class Arch, class T>
inline void pv_dispatch(int r, int nv, bool masked, const PvArgs& a) {
  static constexpr auto plain = make_pv_table<Arch, T, false>(std::make_integer_sequence<int, kMaxPvR * kMaxPvNV>{});
  static constexpr auto guarded = make_pv_table<Arch, T, true>(std::make_integer_sequence<int, kMaxPvR * kMaxPvNV>{});
  (masked ? guarded : plain)[(r - 1) * kMaxPvNV + (nv - 1)](a);
}

// How far ahead decode's P·V prefetches V, in bytes (the hardware prefetcher alone lags the V
// stream after each switch from scoring K). Measured on D1–D4 against a plain read of the same
// bytes, in one process: +5–10 points of stream for bf16/f16 and for f32 with several rows (GQA),
// sdpa and cache alike; 1–2 KB ahead were worse, 8 KB no better. One f32 row (MHA) lost 2–5 points
// on D1 (the extra requests, with 8 FMAs per 512-byte row to hide them), so it does not prefetch.
constexpr int64_t kVPrefetchBytes = 4096;

// O[rows][Dvp] = alpha·O + P·V over one key tile, split into register blocks. V holds elements of E.
// `pf_limit` > 0 turns on V prefetching (see kVPrefetchBytes): rows [0, pf_limit) from `v` exist.
template <class Arch, class E>
void pv_block(float* oacc, int64_t ldo, const float* alpha, const float* p, int64_t p_row_stride, int64_t p_key_stride,
              const E* v, int64_t ldv, int64_t rows, int64_t value_vectors, int64_t keys, bool masked,
              int64_t pf_limit = 0) {
  using T = Tiles<Arch>;
  constexpr int W = T::W;
  const int64_t row_bytes = value_vectors * W * static_cast<int64_t>(sizeof(E));
  const int64_t pf_keys = max64(1, kVPrefetchBytes / row_bytes);
  for (int64_t r0 = 0; r0 < rows; r0 += T::kPvRows) {
    const int R = static_cast<int>(min64(T::kPvRows, rows - r0));
    const int nv_max = static_cast<int>(min64(kMaxPvNV, T::kAccRegs / R));
    for (int64_t c = 0; c < value_vectors; c += nv_max) {
      const int nv = static_cast<int>(min64(nv_max, value_vectors - c));
      PvArgs a{oacc + r0 * ldo + c * W,
               ldo,
               alpha + r0,
               p + r0 * p_row_stride,
               p_row_stride,
               p_key_stride,
               v + c * W,
               ldv,
               keys};
      if (pf_limit > 0 && r0 == 0 && c == 0) {  // the first pass over the keys fetches whole rows
        a.pf_keys = pf_keys;
        a.pf_limit = pf_limit;
        a.pf_bytes = row_bytes;
      }
      pv_dispatch<Arch, E>(R, nv, masked, a);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Prefetches `rows` rows of `cols` elements, `stride` elements apart, one request per cache line.
template <class E>
inline void prefetch_rows(const E* p, int64_t stride, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += 64 / static_cast<int64_t>(sizeof(E)))
      __builtin_prefetch(p + r * stride + c, 0, 3);
}

// Per-block bookkeeping shared by both paths.

struct RowMap {
  const FlashWork* w;
  int64_t position(int64_t r) const { return (w->row_begin + r) / w->group; }
  int64_t head(int64_t r) const { return (w->row_begin + r) % w->group; }
  const float* q(int64_t r) const { return w->q + head(r) * w->q_head_stride + position(r) * w->q_row_stride; }
  float* o(int64_t r) const { return w->o + head(r) * w->o_head_stride + position(r) * w->o_row_stride; }
  const float* bias(int64_t r) const {
    return w->bias + head(r) * w->bias_head_stride + position(r) * w->bias_row_stride;
  }
  // Visible keys [lo, hi) of query position i (see FlashWork).
  int64_t hi(int64_t r) const {
    const int64_t off = w->num_keys - w->num_queries;
    return w->causal ? min64(w->valid_keys, position(r) + off + 1) : w->valid_keys;
  }
  int64_t lo(int64_t r) const {
    const int64_t off = w->num_keys - w->num_queries;
    return w->window > 0 ? max64(0, position(r) + off - w->window + 1) : 0;
  }
};

// Writes the block's result: normalised output, or the unnormalised partial state for split-K.
template <class Arch>
void write_rows(const FlashWork& w, const RowMap& rows, const float* oacc, int64_t ldo, const float* m,
                const float* l) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  const int64_t dv = w.value_dim;
  for (int64_t r = 0; r < w.row_count; ++r) {
    const float* src = oacc + r * ldo;
    if (w.partial_acc) {
      w.partial_ml[2 * r] = m[r];
      w.partial_ml[2 * r + 1] = l[r];
      std::memcpy(w.partial_acc + r * dv, src, sizeof(float) * dv);
      continue;
    }
    // A row with no visible key has l == 0: it outputs zeros (documented), never 0/0. A NaN sum
    // (a NaN logit or value the row saw) stays NaN.
    const float inv = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
    float* dst = rows.o(r);
    int64_t d = 0;
    for (; d + W <= dv; d += W) (B::load_aligned(src + d) * B(inv)).store_unaligned(dst + d);
    for (; d < dv; ++d) dst[d] = src[d] * inv;
  }
}

// Converts `keys` rows of `cols` elements (row stride `ld` elements) to f32 rows `ldp` floats apart,
// zero-padding each row to `ldp`.
template <class E>
void to_f32_panel(const E* src, int64_t ld, int64_t keys, int64_t cols, int64_t ldp, float* panel) {
  for (int64_t j = 0; j < keys; ++j) {
    const E* in = src + j * ld;
    float* out = panel + j * ldp;
    if constexpr (std::is_same_v<E, float>) {
      std::memcpy(out, in, sizeof(float) * cols);
    } else {
      for (int64_t d = 0; d < cols; ++d) out[d] = to_float(in[d]);
    }
    for (int64_t d = cols; d < ldp; ++d) out[d] = 0.0f;
  }
}

// Key j's elements in a blocked K (FlashWork::k_blocked): D values kKeyBlock apart.
template <class E>
inline const E* blocked_key(const E* k, int64_t j, int64_t depth) {
  return k + (j / kKeyBlock) * kKeyBlock * depth + j % kKeyBlock;
}

// to_f32_panel for keys [j0, j0 + keys) of a blocked K.
template <class E>
void blocked_to_f32_panel(const E* k, int64_t j0, int64_t keys, int64_t depth, int64_t ldp, float* panel) {
  for (int64_t j = 0; j < keys; ++j) {
    const E* in = blocked_key(k, j0 + j, depth);
    float* out = panel + j * ldp;
    for (int64_t d = 0; d < depth; ++d) out[d] = to_float(in[d * kKeyBlock]);
    for (int64_t d = depth; d < ldp; ++d) out[d] = 0.0f;
  }
}

// Scratch layout, in floats, each part 64-byte aligned.
struct Layout {
  int64_t qt, st, oacc, kpanel, vpanel, m, l, alpha, lo, hi, colmax, zeros, total;
};

template <class Arch>
Layout make_layout(int64_t head_dim, int64_t value_dim, int64_t rows) {
  using T = Tiles<Arch>;
  constexpr int64_t W = T::W;
  const int64_t rows_p = round_up(max64(rows, 1), W);
  const int64_t keys = max64(T::kBlockKeys, T::kNarrowBlockKeys);
  const int64_t dvp = round_up(value_dim, W);
  const int64_t dp = round_up(head_dim, W);
  Layout s{};
  int64_t at = 0;
  auto take = [&](int64_t n) {
    const int64_t here = at;
    at += round_up(n, 16);
    return here;
  };
  s.qt = take(dp * rows_p);
  s.st = take(keys * rows_p);
  s.oacc = take(rows_p * dvp);
  s.kpanel = take(T::kBlockKeys * dp);
  s.vpanel = take(keys * dvp);
  s.m = take(rows_p);
  s.l = take(rows_p);
  s.alpha = take(rows_p);
  s.lo = take(rows_p);
  s.hi = take(rows_p);
  s.colmax = take(rows_p);
  s.zeros = take(dp);
  s.total = at;
  return s;
}

// ---------------------------------------------------------------------------------------------
// Wide path: a block of up to kBlockRows query rows.

// Sᵀ ← 2^((Sᵀ − ref)·log2 e) over `nk` keys, NV vectors of query rows per key, and sum[n] = the
// column sums. The NV exponentials of a key are independent and Sᵀ is walked in memory order
// (+1% on P1–P3 over one column of vectors at a time).
template <class Arch, int NV>
void exp_columns(float* st, int64_t ldr, int64_t nk, const vfloat<Arch>* ref, vfloat<Arch>* sum) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  B acc[NV], r[NV];
  ATTEND_UNROLL
  for (int n = 0; n < NV; ++n) {
    acc[n] = B(0.0f);
    r[n] = ref[n];
  }
  for (int64_t jj = 0; jj < nk; ++jj, st += ldr) {
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) {
      const B p = exp2_nonpositive<Arch>((B::load_aligned(st + n * W) - r[n]) * B(kLog2e));
      p.store_aligned(st + n * W);
      acc[n] += p;
    }
  }
  ATTEND_UNROLL
  for (int n = 0; n < NV; ++n) sum[n] = acc[n];
}

template <class Arch, class E>
void flash_wide(const FlashWork& w, float* scratch) {
  using T = Tiles<Arch>;
  using B = vfloat<Arch>;
  constexpr int W = T::W;
  const RowMap rows{&w};
  const int64_t nr = w.row_count, depth = w.head_dim;
  const int64_t ldr = round_up(nr, W);  // padded rows: the leading dimension of Qᵀ and Sᵀ
  const int nvr = static_cast<int>(ldr / W);
  const int64_t dvp = round_up(w.value_dim, W);
  const Layout L = make_layout<Arch>(w.head_dim, w.value_dim, nr);
  float* qt = scratch + L.qt;
  float* st = scratch + L.st;
  float* oacc = scratch + L.oacc;
  float* m = scratch + L.m;
  float* l = scratch + L.l;
  float* alpha = scratch + L.alpha;
  float* lo = scratch + L.lo;
  float* hi = scratch + L.hi;
  float* colmax = scratch + L.colmax;

  // Qᵀ panel, pre-scaled; padded rows are zero and inherit the last row's mask so they never
  // widen the key range or force masking.
  int64_t key_lo = w.key_end, key_hi = w.key_begin, max_lo = 0, min_hi = w.key_end;
  for (int64_t r = 0; r < ldr; ++r) {
    const int64_t rr = min64(r, nr - 1);
    const int64_t rlo = max64(rows.lo(rr), w.key_begin), rhi = min64(rows.hi(rr), w.key_end);
    lo[r] = static_cast<float>(rlo);
    hi[r] = static_cast<float>(rhi);
    if (rlo < rhi) {
      key_lo = min64(key_lo, rlo);
      key_hi = max64(key_hi, rhi);
    }
    max_lo = max64(max_lo, rlo);
    min_hi = min64(min_hi, rhi);
    m[r] = kNegInf;
    l[r] = 0.0f;
  }
  for (int64_t r0 = 0; r0 < ldr; r0 += W) {
    const float* src[W];
    for (int i = 0; i < W; ++i) src[i] = r0 + i < nr ? rows.q(r0 + i) : nullptr;
    transpose_rows_scaled<Arch>(src, depth, w.scale, qt + r0, ldr);
  }
  std::memset(oacc, 0, sizeof(float) * ldr * dvp);

  const E* kbase = static_cast<const E*>(w.k);
  const E* vbase = static_cast<const E*>(w.v);
  constexpr bool kFloat = std::is_same_v<E, float>;
  const float* krow[kMaxScoreR];
  for (int64_t j0 = key_lo; j0 < key_hi; j0 += T::kBlockKeys) {
    const int64_t nk = min64(T::kBlockKeys, key_hi - j0);

    // K is read in place (its elements broadcast); a bf16/f16 or blocked tile is first widened
    // into a row panel.
    const float* ktile;
    int64_t ldk;
    if (kFloat && !w.k_blocked) {
      ktile = reinterpret_cast<const float*>(kbase + j0 * w.k_row_stride);
      ldk = w.k_row_stride;
    } else {
      if (w.k_blocked)
        blocked_to_f32_panel(kbase, j0, nk, depth, depth, scratch + L.kpanel);
      else
        to_f32_panel(kbase + j0 * w.k_row_stride, w.k_row_stride, nk, depth, depth, scratch + L.kpanel);
      ktile = scratch + L.kpanel;
      ldk = depth;
    }
    // Tiles that every row sees whole skip the mask (and use the unguarded P·V).
    const bool whole = max_lo <= j0 && min_hi >= j0 + nk;
    // The column max comes out of the score microkernel, except where masking (or a bias) will
    // still change the scores: a masked-out large logit must not become the reference.
    const bool fuse_max = whole && !w.bias;
    if (fuse_max)
      for (int64_t r = 0; r < ldr; r += W) B(kNegInf).store_aligned(colmax + r);
    // Sᵀ = K·Qᵀ for this tile.
    for (int64_t jj = 0; jj < nk; jj += T::kScoreKeys) {
      const int R = static_cast<int>(min64(T::kScoreKeys, nk - jj));
      for (int r = 0; r < R; ++r) krow[r] = ktile + (jj + r) * ldk;
      ScoreArgs a{krow, qt, ldr, depth, st + jj * ldr, ldr, fuse_max ? colmax : nullptr};
      score_dispatch<Arch>(R, nvr, a);
    }
    if (w.bias) {
      for (int64_t r = 0; r < nr; ++r) {
        const float* b = rows.bias(r) + j0 * w.bias_key_stride;
        for (int64_t jj = 0; jj < nk; ++jj) st[jj * ldr + r] += b[jj * w.bias_key_stride];
      }
    }
    const bool masked = !whole || w.bias != nullptr;
    if (!whole) {
      for (int64_t jj = 0; jj < nk; ++jj) {
        const B jf(static_cast<float>(j0 + jj));
        for (int n = 0; n < nvr; ++n) {
          float* s = st + jj * ldr + n * W;
          const auto visible = (jf >= B::load_aligned(lo + n * W)) & (jf < B::load_aligned(hi + n * W));
          xsimd::select(visible, B::load_aligned(s), B(kNegInf)).store_aligned(s);
        }
      }
    }
    // Online softmax down the columns of Sᵀ, W query rows at a time: new maxima and rescale
    // factors first, then the exponentials of all columns together.
    B ref[T::kMaxRowVectors], sum[T::kMaxRowVectors];
    for (int n = 0; n < nvr; ++n) {
      B mx(kNegInf);
      if (fuse_max)
        mx = B::load_aligned(colmax + n * W);
      else
        for (int64_t jj = 0; jj < nk; ++jj) mx = xsimd::max(mx, B::load_aligned(st + jj * ldr + n * W));
      const B m_old = B::load_aligned(m + n * W);
      const B m_new = xsimd::max(m_old, mx);
      // All keys masked so far: use 0 as the reference so exp2(−inf − ref) is 0, not NaN.
      ref[n] = xsimd::select(m_new == B(kNegInf), B(0.0f), m_new);
      m_new.store_aligned(m + n * W);
      exp2_nonpositive<Arch>((m_old - ref[n]) * B(kLog2e)).store_aligned(alpha + n * W);
    }
    static_assert(T::kMaxRowVectors == 4, "exp_columns is dispatched for 1–4 row vectors");
    switch (nvr) {
      case 1: exp_columns<Arch, 1>(st, ldr, nk, ref, sum); break;
      case 2: exp_columns<Arch, 2>(st, ldr, nk, ref, sum); break;
      case 3: exp_columns<Arch, 3>(st, ldr, nk, ref, sum); break;
      default: exp_columns<Arch, 4>(st, ldr, nk, ref, sum); break;
    }
    for (int n = 0; n < nvr; ++n)
      xsimd::fma(B::load_aligned(l + n * W), B::load_aligned(alpha + n * W), sum[n]).store_aligned(l + n * W);
    if (kFloat && w.value_dim % W == 0) {
      pv_block<Arch>(oacc, dvp, alpha, st, 1, ldr, vbase + j0 * w.v_row_stride, w.v_row_stride, nr, dvp / W, nk,
                     masked);
    } else {  // pad (and widen) V rows so the microkernel never reads past a row
      to_f32_panel(vbase + j0 * w.v_row_stride, w.v_row_stride, nk, w.value_dim, dvp, scratch + L.vpanel);
      pv_block<Arch>(oacc, dvp, alpha, st, 1, ldr, scratch + L.vpanel, dvp, nr, dvp / W, nk, masked);
    }
  }
  write_rows<Arch>(w, rows, oacc, dvp, m, l);
}

// S[r][j] for NR rows × KG = W/NR keys starting at `kbase` (rows `ldk` floats apart; keys past `keys`
// read the zero row), one transpose-sum per W/NR keys. Writes rows < `rows` of S. Optionally
// prefetches the first `pf_keys` rows at `pf`, spread over the depth loop.
template <class Arch, int NR, class E>
void narrow_scores(const E* kbase, int64_t ldk, int64_t keys, const float* q, int64_t depth, const E* zeros, float* s,
                   int64_t lds, int64_t rows, const E* pf, int64_t pf_keys) {
  using B = vfloat<Arch>;
  constexpr int W = B::size, KG = W / NR;
  alignas(64) float sums[W];
  for (int64_t j = 0; j < W; j += KG) {
    const E* kp[KG];
    for (int k = 0; k < KG; ++k) kp[k] = j + k < keys ? kbase + (j + k) * ldk : zeros;
    const E* pp[KG];  // rows of the next group to prefetch, a line per depth step (null: none)
    for (int k = 0; k < KG; ++k) pp[k] = pf && j + k < pf_keys ? pf + (j + k) * ldk : nullptr;
    B acc[W];
    for (int i = 0; i < W; ++i) acc[i] = B(0.0f);
    for (int64_t d = 0; d < depth; d += W) {
      if (pf)
        for (int k = 0; k < KG; ++k)
          if (pp[k]) __builtin_prefetch(pp[k] + d, 0, 3);
      B kv[KG];
      for (int k = 0; k < KG; ++k) kv[k] = load_float<Arch>(kp[k] + d);
      for (int r = 0; r < NR; ++r) {
        const B qv = B::load_aligned(q + r * depth + d);
        for (int k = 0; k < KG; ++k) acc[r * KG + k] = xsimd::fma(qv, kv[k], acc[r * KG + k]);
      }
    }
    transpose_sum<Arch>(acc).store_aligned(sums);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(s + r * lds + j, sums + r * KG, sizeof(float) * KG);
  }
}

// S[r][0, G·kKeyBlock) for NR rows against G consecutive blocks of a blocked K (each [D][kKeyBlock],
// G·kKeyBlock·D contiguous elements): the keys sit in vector lanes, so every FMA scores W keys and
// nothing is reduced across lanes. Each broadcast query element feeds G·kKeyBlock/W FMAs, and U
// partial sums per output vector keep at least eight FMAs in flight. Writes all NR rows of S (the
// pack's padding rows have zero queries; scratch holds them).
template <class Arch, int NR, int G, class E>
void blocked_scores(const E* blk, int64_t depth, const float* q, float* s, int64_t lds, const E* pf) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  static_assert(kKeyBlock % W == 0, "a key block is a whole number of vectors");
  constexpr int KV = static_cast<int>(kKeyBlock / W), NV = G * KV;
  constexpr int U = NR * NV >= 8 ? 1 : 8 / (NR * NV);  // divides W, hence D on the narrow path
  B acc[U][NR][NV];
  for (int u = 0; u < U; ++u)
    for (int r = 0; r < NR; ++r)
      for (int v = 0; v < NV; ++v) acc[u][r][v] = B(0.0f);
  // The next G blocks (as many bytes as this call reads) are prefetched a slice per step, so the
  // requests are spread over the FMAs instead of stalling the core in a burst.
  constexpr int64_t kSlice = G * kKeyBlock * U * static_cast<int64_t>(sizeof(E));
  for (int64_t d = 0; d < depth; d += U) {
    if (pf) {
      const char* p = reinterpret_cast<const char*>(pf) + d / U * kSlice;
      for (int64_t o = 0; o < kSlice; o += 64) __builtin_prefetch(p + o, 0, 3);
    }
    for (int u = 0; u < U; ++u) {
      B kv[NV];
      for (int g = 0; g < G; ++g)
        for (int v = 0; v < KV; ++v)
          kv[g * KV + v] = load_float<Arch>(blk + g * kKeyBlock * depth + (d + u) * kKeyBlock + v * W);
      for (int r = 0; r < NR; ++r) {
        const B qb(q[r * depth + d + u]);
        for (int v = 0; v < NV; ++v) acc[u][r][v] = xsimd::fma(qb, kv[v], acc[u][r][v]);
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int v = 0; v < NV; ++v) {
      B sum = acc[0][r][v];
      for (int u = 1; u < U; ++u) sum += acc[u][r][v];
      sum.store_aligned(s + r * lds + v * W);
    }
}

// Blocks scored per call for a pack of NR rows: AVX-512 (32 registers) shares each broadcast
// across two or four blocks; the 16-register targets score one.
template <class Arch>
constexpr int blocked_group(int nr) {
  return Tiles<Arch>::kWideRegs ? (nr == 1 ? 4 : 2) : 1;
}

// Scores `blocks` consecutive key blocks (G at a time, then one at a time) for a pack of NR rows;
// `ahead` blocks from `blk` on exist (the next call's blocks among them are prefetched as the
// scoring goes; nothing past them is touched).
template <class Arch, int NR, class E>
void blocked_scores_run(const E* blk, int64_t blocks, int64_t ahead, int64_t depth, const float* q, float* s,
                        int64_t lds) {
  constexpr int G = blocked_group<Arch>(NR);
  const int64_t bd = kKeyBlock * depth;
  int64_t b = 0;
  for (; b + G <= blocks; b += G)  // (a partial last group ahead is left to the hardware)
    blocked_scores<Arch, NR, G, E>(blk + b * bd, depth, q, s + b * kKeyBlock, lds,
                                   b + 2 * G <= ahead ? blk + (b + G) * bd : nullptr);
  for (; b < blocks; ++b)
    blocked_scores<Arch, NR, 1, E>(blk + b * bd, depth, q, s + b * kKeyBlock, lds,
                                   b + 1 < ahead ? blk + (b + 1) * bd : nullptr);
}

template <class Arch, class E>
void blocked_scores_dispatch(int row_pack, const E* blk, int64_t blocks, int64_t ahead, int64_t depth, const float* q,
                             float* s, int64_t lds) {
  constexpr int kMax = Tiles<Arch>::kNarrowMaxRows;
  switch (row_pack) {
    case 1: return blocked_scores_run<Arch, 1, E>(blk, blocks, ahead, depth, q, s, lds);
    case 2:
      if constexpr (kMax >= 2) return blocked_scores_run<Arch, 2, E>(blk, blocks, ahead, depth, q, s, lds);
      break;
    case 4:
      if constexpr (kMax >= 4) return blocked_scores_run<Arch, 4, E>(blk, blocks, ahead, depth, q, s, lds);
      break;
    case 8:
      if constexpr (kMax >= 8) return blocked_scores_run<Arch, 8, E>(blk, blocks, ahead, depth, q, s, lds);
      break;
  }
}

template <class Arch, class E>
void narrow_scores_dispatch(int row_pack, const E* k, int64_t ldk, int64_t keys, const float* q, int64_t depth,
                            const E* zeros, float* s, int64_t lds, int64_t rows, const E* pf, int64_t pf_keys) {
  constexpr int W = vfloat<Arch>::size;
  switch (row_pack) {
    case 1: return narrow_scores<Arch, 1, E>(k, ldk, keys, q, depth, zeros, s, lds, rows, pf, pf_keys);
    case 2: return narrow_scores<Arch, 2, E>(k, ldk, keys, q, depth, zeros, s, lds, rows, pf, pf_keys);
    case 4:
      if constexpr (W >= 4) return narrow_scores<Arch, 4, E>(k, ldk, keys, q, depth, zeros, s, lds, rows, pf, pf_keys);
      break;
    case 8:
      if constexpr (W >= 8) return narrow_scores<Arch, 8, E>(k, ldk, keys, q, depth, zeros, s, lds, rows, pf, pf_keys);
      break;
    case 16:
      if constexpr (W >= 16)
        return narrow_scores<Arch, 16, E>(k, ldk, keys, q, depth, zeros, s, lds, rows, pf, pf_keys);
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// Narrow path: a few query rows (decode). Requires head_dim % W == 0.

template <class Arch, class E>
void flash_narrow(const FlashWork& w, float* scratch) {
  using T = Tiles<Arch>;
  using B = vfloat<Arch>;
  constexpr int W = T::W;
  const RowMap rows{&w};
  const int64_t nr = w.row_count, depth = w.head_dim;
  const int64_t dvp = round_up(w.value_dim, W);
  constexpr int64_t ldsn = T::kNarrowBlockKeys;
  const Layout L = make_layout<Arch>(w.head_dim, w.value_dim, nr);
  float* qn = scratch + L.qt;  // [nr][D], pre-scaled
  float* s = scratch + L.st;   // [nr][ldsn]
  float* oacc = scratch + L.oacc;
  float* m = scratch + L.m;
  float* l = scratch + L.l;
  float* alpha = scratch + L.alpha;
  float* zeros = scratch + L.zeros;  // a zero K row (all-zero bits are 0 in every element type)
  const E* kbase = static_cast<const E*>(w.k);
  const E* vbase = static_cast<const E*>(w.v);
  int64_t rlo[16], rhi[16];  // nr <= kNarrowMaxRows <= 8

  int64_t key_lo = w.key_end, key_hi = w.key_begin, max_lo = 0, min_hi = w.key_end;
  for (int64_t r = 0; r < nr; ++r) {
    rlo[r] = max64(rows.lo(r), w.key_begin);
    rhi[r] = min64(rows.hi(r), w.key_end);
    if (rlo[r] < rhi[r]) {
      key_lo = min64(key_lo, rlo[r]);
      key_hi = max64(key_hi, rhi[r]);
    }
    max_lo = max64(max_lo, rlo[r]);
    min_hi = min64(min_hi, rhi[r]);
    m[r] = kNegInf;
    l[r] = 0.0f;
    const float* q = rows.q(r);
    for (int64_t d = 0; d < depth; ++d) qn[r * depth + d] = q[d] * w.scale;
  }
  std::memset(zeros, 0, sizeof(float) * depth);
  std::memset(oacc, 0, sizeof(float) * nr * dvp);
  alignas(64) static constexpr float kIota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const B iota = B::load_aligned(kIota);

  // A blocked K is scored a whole block at a time: start at a block boundary (the keys before
  // key_lo are masked like any other invisible key; split-K ranges are block-aligned already).
  if (w.k_blocked && key_lo < key_hi) key_lo = key_lo / kKeyBlock * kKeyBlock;

  // Rows are processed in packs of a power of two; padding rows of the pack have zero queries.
  int row_pack = 1;
  while (row_pack < nr) row_pack *= 2;
  for (int64_t r = nr; r < row_pack; ++r) std::memset(qn + r * depth, 0, sizeof(float) * depth);
  for (int64_t j0 = key_lo; j0 < key_hi; j0 += ldsn) {
    const int64_t nk = min64(ldsn, key_hi - j0);
    const int64_t nkp = round_up(nk, W);
    // S = Q·Kᵀ. Row-major K: dot products along D, NR rows × W/NR keys per transpose-sum, so each K
    // vector loaded feeds NR FMAs. Blocked K: keys in lanes (blocked_scores).
    if (w.k_blocked) {
      // The whole tile in one call: blocks of kKeyBlock keys ([D][kKeyBlock] each, contiguous).
      const int64_t blocks = (nk + kKeyBlock - 1) / kKeyBlock;
      const int64_t ahead = (key_hi - j0 + kKeyBlock - 1) / kKeyBlock;
      blocked_scores_dispatch<Arch, E>(row_pack, kbase + j0 * depth, blocks, ahead, depth, qn, s, ldsn);
    } else {
      for (int64_t jg = 0; jg < nk; jg += W) {
        // Fetch the K rows of the next group while this one is scored. Measured in one process against
        // a plain read of the same bytes (D1–D4 shapes): one group ahead beats two, four or eight, and
        // prefetching V as well (for the P·V pass) or the next tile's K during P·V costs 5–15%: the
        // extra requests block the core once its miss buffers are full, and the hardware prefetcher
        // already streams V. With several rows (GQA) the scoring is long enough to spread the
        // requests over its FMAs (narrow_scores issues them per depth step): +1–10 points of stream
        // on D2/D3, most at high bandwidth; one row keeps the burst, which measured 2–3 points better.
        const int64_t pf_keys = min64(W, key_hi - (j0 + jg + W));
        const E* next = pf_keys > 0 ? kbase + (j0 + jg + W) * w.k_row_stride : nullptr;
        const bool spread = row_pack > 1;
        if (next && !spread) prefetch_rows(next, w.k_row_stride, pf_keys, depth);
        narrow_scores_dispatch<Arch, E>(row_pack, kbase + (j0 + jg) * w.k_row_stride, w.k_row_stride, min64(W, nk - jg),
                                        qn, depth, reinterpret_cast<const E*>(zeros), s + jg, ldsn, nr,
                                        spread ? next : nullptr, pf_keys);
      }
    }
    const bool whole = max_lo <= j0 && min_hi >= j0 + nk;
    const bool masked = !whole || w.bias != nullptr;
    for (int64_t r = 0; r < nr; ++r) {
      float* sr = s + r * ldsn;
      if (w.bias) {
        const float* b = rows.bias(r) + j0 * w.bias_key_stride;
        for (int64_t jj = 0; jj < nk; ++jj) sr[jj] += b[jj * w.bias_key_stride];
      }
      // Mask when the tile is not wholly visible, and always the padding past nk.
      const B lo_v(static_cast<float>(rlo[r] - j0)), hi_v(static_cast<float>(min64(rhi[r], j0 + nk) - j0));
      for (int64_t jj = whole ? nkp - (nk % W ? W : 0) : 0; jj < nkp; jj += W) {
        const B jf = iota + B(static_cast<float>(jj));
        const auto visible = (jf >= lo_v) & (jf < hi_v);
        xsimd::select(visible, B::load_aligned(sr + jj), B(kNegInf)).store_aligned(sr + jj);
      }
      B mx(kNegInf);
      for (int64_t jj = 0; jj < nkp; jj += W) mx = xsimd::max(mx, B::load_aligned(sr + jj));
      const float tile_max = horizontal_max<Arch>(mx);
      const float m_new = m[r] > tile_max ? m[r] : tile_max;
      const float ref = m_new == kNegInf ? 0.0f : m_new;
      B sum(0.0f);
      for (int64_t jj = 0; jj < nkp; jj += W) {
        const B p = exp2_nonpositive<Arch>((B::load_aligned(sr + jj) - B(ref)) * B(kLog2e));
        p.store_aligned(sr + jj);
        sum += p;
      }
      const float a = exp2_nonpositive<Arch>(B((m[r] - ref) * kLog2e)).get(0);
      l[r] = l[r] * a + xsimd::hadd(sum);
      m[r] = m_new;
      alpha[r] = a;
    }
    if (w.value_dim % W == 0) {  // V read (and widened) in place
      pv_block<Arch>(oacc, dvp, alpha, s, ldsn, 1, vbase + j0 * w.v_row_stride, w.v_row_stride, nr, dvp / W, nk, masked,
                     std::is_same_v<E, float> && nr == 1 ? 0 : key_hi - j0);
    } else {
      to_f32_panel(vbase + j0 * w.v_row_stride, w.v_row_stride, nk, w.value_dim, dvp, scratch + L.vpanel);
      pv_block<Arch>(oacc, dvp, alpha, s, ldsn, 1, scratch + L.vpanel, dvp, nr, dvp / W, nk, masked);
    }
  }
  write_rows<Arch>(w, rows, oacc, dvp, m, l);
}

template <class Arch, class E>
void flash_typed(const FlashWork& w, float* scratch) {
  using T = Tiles<Arch>;
  if (w.row_count <= T::kNarrowMaxRows && w.head_dim % T::W == 0)
    flash_narrow<Arch, E>(w, scratch);
  else
    flash_wide<Arch, E>(w, scratch);
}

template <class Arch>
void flash(const FlashWork& w, float* scratch) {
  switch (w.kv_type) {
    case KvType::f32: return flash_typed<Arch, float>(w, scratch);
    case KvType::bf16: return flash_typed<Arch, Bf16>(w, scratch);
    case KvType::f16: return flash_typed<Arch, F16>(w, scratch);
  }
}

template <class Arch>
size_t scratch_floats(int64_t head_dim, int64_t value_dim, int64_t rows) {
  return static_cast<size_t>(make_layout<Arch>(head_dim, value_dim, rows).total);
}

template <class Arch>
KernelTable make_table(const char* name) {
  using T = Tiles<Arch>;
  return KernelTable{name, KernelGeometry{T::kBlockRows, T::kBlockKeys, T::kNarrowMaxRows}, &flash<Arch>,
                     &scratch_floats<Arch>};
}

}  // namespace
}  // namespace attend::kernels
