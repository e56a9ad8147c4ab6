// attend's bf16 decode GEMV (kernels::Bf16GemvWork): a few rows of x against bf16 weights in
// oneDNN's BA16a64b2a packing, one vdpbf16ps per 64-byte line of weights and row, reading the
// weights once from memory and asking for them ahead.
//
// Why not oneDNN's matmul here: a decode step's projection is bound by reading the weights, and
// oneDNN 2.6's bf16 GEMV (brg:avx512_core_amx_bf16 / avx512_core_bf16 at one row) reads them at
// 64-67% of a plain read on the AMX Xeon, where its f32 GEMV reads 86-90%: it streams like a loop
// without software requests. The same loop with prefetcht0 4 KiB and prefetcht1 24 KiB ahead reads
// at 85-87% (docs/performance.md, sessions 36-37; docs/experiments/bf16_gemv_probe.cpp). The
// layer takes this kernel for up to detail::bf16_decode_gemv_rows() rows (kBf16GemvMaxRows, or 4
// where oneDNN's AMX kernel takes more) over the very weights oneDNN packed (no second copy);
// prefill stays on oneDNN.
//
// Built only into the avx512_bf16 object (raw intrinsics: xsimd 8 has no vdpbf16ps).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "../kernel_table.hpp"
#include "../simd/convert.hpp"

namespace attend::kernels::gemv {

// One reduction pair of a column block: 64 columns × 2 bf16, four lines.
constexpr int64_t kPairBytes = 256;
// Requests ahead of the line being read: into L1 (prefetcht0) and into L2 (prefetcht1). Session
// 36's probe: 1-8 KiB into L1 all read alike, L2 alone was slower; 4/24 KiB as decode's K/V. The L2
// requests are the class's (Bf16GemvWork::l2_requests): on a Zen 5 the 1–4 row kernel read 7–13%
// faster without them (K 4096, N 4096/6144, evicted, 2 threads, alternated in one process,
// session 64), where the hardware prefetcher keeps up.
constexpr int64_t kL1Ahead = 4096, kL2Ahead = kBf16GemvL2Ahead;

inline __m512bh broadcast_pair(uint32_t pair) {
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
}

// The four lines of the pair `ahead` bytes past wp, requested with hint H (_MM_HINT_T0 or
// _MM_HINT_T1). __builtin_prefetch with _mm_prefetch's locality (H & 3): GCC's _mm_prefetch takes
// an enum _mm_hint that clang (the fuzz build) does not have.
template <int H>
[[gnu::always_inline]] inline void request_pair(const char* wp, int64_t ahead) {
  static_assert(H == _MM_HINT_T0 || H == _MM_HINT_T1);
#pragma GCC unroll 4
  for (int l = 0; l < 4; ++l) __builtin_prefetch(wp + ahead + l * 64, 0, H & 3);
}

// pairs[r] = (x_r[2p], x_r[2p + 1]) for R rows.
template <int R>
[[gnu::always_inline]] inline void row_pairs(const uint16_t* const* xr, int64_t p, uint32_t* pairs) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) std::memcpy(&pairs[r], xr[r] + 2 * p, 4);
}

// acc[r][0..63] = Σ_p (x_r[2p], x_r[2p+1]) · (pair p of the column block at `w`) for R rows: the
// `full` whole pairs of x row r from xr[r], then, for an odd `in`, (x_r[in − 1], 0) from tail[r].
// kL2: the L2 requests too (Bf16GemvWork::l2_requests).
template <int R, bool kL2>
inline void column_block(const char* w, const uint16_t* const* xr, const uint32_t* tail, int64_t full, bool odd,
                         float* acc) {
  __m512 a[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) a[r][l] = _mm512_setzero_ps();
  const auto step = [&a](const char* wp, const uint32_t* pairs) {
    __m512bh b[4];
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) b[l] = reinterpret_cast<__m512bh>(_mm512_load_si512(wp + l * 64));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512bh xp = broadcast_pair(pairs[r]);
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) a[r][l] = _mm512_dpbf16_ps(a[r][l], b[l], xp);
    }
  };
  for (int64_t p = 0; p < full; ++p, w += kPairBytes) {
    request_pair<_MM_HINT_T0>(w, kL1Ahead);
    if constexpr (kL2) request_pair<_MM_HINT_T1>(w, kL2Ahead);
    uint32_t pairs[R];
    row_pairs<R>(xr, p, pairs);
    step(w, pairs);
  }
  if (odd) step(w, tail);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) _mm512_store_ps(acc + r * 64 + l * 16, a[r][l]);
}

// column_block's acc for R = 5–8 rows, which would need 4R accumulators in one pass: x's pairs in
// chunks of kHalfChunk (4 KiB of the block), each chunk taken twice — lines 0–1 of every pair (2R
// accumulators, R broadcasts: within the 32 registers), then lines 2–3 from L1 — with the
// accumulators held in acc between chunks. The first half requests all four lines kL1Ahead on
// into L1 and nothing into L2: the L2 requests cost 7–14% at 8 rows (Zen 5, a harness; session
// 64), where the hardware prefetcher alone keeps up. Every output is the same sum in the same
// order as column_block's (one vdpbf16ps per pair, pairs in order). Zen 5, K 4096, 8 rows, 2
// threads, evicted, alternated with oneDNN's brg:avx512_core_bf16 on the same weights
// (docs/experiments/bf16_gemv_rows.cpp, four runs): N 6144 0.71–0.78 against 0.92–1.02 ms, N 4096
// 0.49–0.54 against 0.62–0.70; 5 and 6 rows a tie or 2–10% ahead.
constexpr int64_t kHalfChunk = 16;
template <int R>
inline void column_block_halves(const char* w, const uint16_t* const* xr, const uint32_t* tail, int64_t full, bool odd,
                                float* acc) {
  static_assert(R <= 8, "2R accumulators and R broadcasts");
  std::memset(acc, 0, sizeof(float) * R * 64);
  const int64_t steps = full + (odd ? 1 : 0);
  for (int64_t p0 = 0; p0 < steps; p0 += kHalfChunk) {
    const int64_t whole_end = std::min<int64_t>(p0 + kHalfChunk, full);  // this chunk's whole pairs
    const bool with_tail = odd && p0 + kHalfChunk >= steps;              // and x's odd last element
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512 a[R][2];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
        for (int l = 0; l < 2; ++l) a[r][l] = _mm512_load_ps(acc + r * 64 + (2 * h + l) * 16);
      const auto step = [&a](const char* wp, const uint32_t* pairs) {
        const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_load_si512(wp));
        const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_load_si512(wp + 64));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512bh xp = broadcast_pair(pairs[r]);
          a[r][0] = _mm512_dpbf16_ps(a[r][0], b0, xp);
          a[r][1] = _mm512_dpbf16_ps(a[r][1], b1, xp);
        }
      };
      const char* wp = w + p0 * kPairBytes + h * 128;
      for (int64_t p = p0; p < whole_end; ++p, wp += kPairBytes) {
        if (h == 0) request_pair<_MM_HINT_T0>(wp, kL1Ahead);
        uint32_t pairs[R];
        row_pairs<R>(xr, p, pairs);
        step(wp, pairs);
      }
      if (with_tail) step(wp, tail);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
        for (int l = 0; l < 2; ++l) _mm512_store_ps(acc + r * 64 + (2 * h + l) * 16, a[r][l]);
    }
  }
}

// One column block for `rows` rows (1–8).
template <bool kL2>
inline void column_block_rows(int64_t rows, const char* block, const uint16_t* const* xr, const uint32_t* tail,
                              int64_t full, bool odd, float* acc) {
  switch (rows) {
    case 1: return column_block<1, kL2>(block, xr, tail, full, odd, acc);
    case 2: return column_block<2, kL2>(block, xr, tail, full, odd, acc);
    case 3: return column_block<3, kL2>(block, xr, tail, full, odd, acc);
    case 4: return column_block<4, kL2>(block, xr, tail, full, odd, acc);
    case 5: return column_block_halves<5>(block, xr, tail, full, odd, acc);
    case 6: return column_block_halves<6>(block, xr, tail, full, odd, acc);
    case 7: return column_block_halves<7>(block, xr, tail, full, odd, acc);
    default: return column_block_halves<8>(block, xr, tail, full, odd, acc);
  }
}

inline void bf16_gemv(const Bf16GemvWork& k) {
  if (k.rows <= 0) return;
  const int64_t rows = std::min<int64_t>(k.rows, kBf16GemvMaxRows);
  const int64_t full = k.in / 2;  // whole pairs of x; an odd `in` leaves x[in - 1] with a zero
  const bool odd = k.in % 2 != 0;
  alignas(64) float acc[kBf16GemvMaxRows * 64];
  const uint16_t* xr[kBf16GemvMaxRows];
  uint32_t tail[kBf16GemvMaxRows];
  for (int64_t r = 0; r < rows; ++r) {
    xr[r] = k.x + r * k.x_stride;
    tail[r] = odd ? xr[r][k.in - 1] : 0;
  }
  for (int64_t c = k.block_begin; c < k.block_end; ++c) {
    const char* block = reinterpret_cast<const char*>(k.w + c * k.k_padded * 64);
    if (k.l2_requests)
      column_block_rows<true>(rows, block, xr, tail, full, odd, acc);
    else
      column_block_rows<false>(rows, block, xr, tail, full, odd, acc);
    // y = acc (+ bias) for the block's columns below `out`, stored as f32 or rounded to bf16.
    const int64_t col = c * 64, n = std::min<int64_t>(64, k.out - col);
    for (int64_t r = 0; r < rows; ++r) {
      float* a = acc + r * 64;
      if (k.bias)
        for (int64_t j = 0; j < n; ++j) a[j] += k.bias[col + j];
      const int64_t element = k.y_bf16 ? 2 : 4;
      store_row<xsimd::avx512bw>(static_cast<char*>(k.y) + (r * k.y_stride + col) * element,
                                 k.y_bf16 ? KvType::bf16 : KvType::f32, a, 1.0f, n);
    }
  }
}

}  // namespace attend::kernels::gemv
