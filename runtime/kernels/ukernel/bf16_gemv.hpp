// attend's bf16 decode GEMV (kernels::Bf16GemvWork): a few rows of x against bf16 weights in
// oneDNN's BA16a64b2a packing, one vdpbf16ps per 64-byte line of weights and row, reading the
// weights once from memory and asking for them ahead.
//
// Why not oneDNN's matmul here: a decode step's projection is bound by reading the weights, and
// oneDNN 2.6's bf16 GEMV (brg:avx512_core_amx_bf16 / avx512_core_bf16 at one row) reads them at
// 64-67% of a plain read on the AMX Xeon, where its f32 GEMV reads 86-90%: it streams like a loop
// without software requests. The same loop with prefetcht0 4 KiB and prefetcht1 24 KiB ahead reads
// at 85-87% (docs/performance.md, sessions 36-37; docs/experiments/bf16_gemv_probe.cpp). The
// layer takes this kernel for up to kBf16GemvMaxRows rows over the very weights oneDNN packed
// (no second copy); prefill stays on oneDNN.
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
// 36's probe: 1-8 KiB into L1 all read alike, L2 alone was slower; 4/24 KiB as decode's K/V.
constexpr int64_t kL1Ahead = 4096, kL2Ahead = 24576;

inline __m512bh broadcast_pair(uint32_t pair) {
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
}

// acc[r][0..63] = Σ_p (x_r[2p], x_r[2p+1]) · (pair p of the column block at `w`) for R rows: the
// `full` whole pairs of x row r from xr[r], then, for an odd `in`, (x_r[in − 1], 0) from tail[r].
template <int R>
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
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) _mm_prefetch(w + kL1Ahead + l * 64, _MM_HINT_T0);
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) _mm_prefetch(w + kL2Ahead + l * 64, _MM_HINT_T1);
    uint32_t pairs[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) std::memcpy(&pairs[r], xr[r] + 2 * p, 4);
    step(w, pairs);
  }
  if (odd) step(w, tail);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) _mm512_store_ps(acc + r * 64 + l * 16, a[r][l]);
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
    switch (rows) {
      case 1: column_block<1>(block, xr, tail, full, odd, acc); break;
      case 2: column_block<2>(block, xr, tail, full, odd, acc); break;
      case 3: column_block<3>(block, xr, tail, full, odd, acc); break;
      default: column_block<4>(block, xr, tail, full, odd, acc); break;
    }
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
