// Microkernels of the narrow (decode) path under FpMath::bf16 over a bf16 K and V (a bf16 cache's
// blocks, or bf16 tensors), on AVX512_BF16 (the bf16-math table): Q·Kᵀ and P·V on `vdpbf16ps`,
// which multiplies 32 pairs of bf16 per instruction where the strict path widens every K and V
// element to f32 for an FMA of 16 (two widening operations and two FMAs per 32 elements and row,
// against one vdpbf16ps here). The queries and the softmax's weights are rounded to bf16 (round to
// nearest even) as the wide bf16-math path rounds them; K and V are bf16 already, so their products
// are exact, and the sums, the softmax and the output stay f32. A GQA group's decode over a bf16
// cache computes about as long as its read takes on a Zen 4 (the strict kernels: 6.5 µs per 256
// key-heads of a group of four against a read of 7.1 µs per thread), and half the instructions
// leave the read room to set the pace.
//
// Scores against a blocked K ([D][kKeyBlock] per block): a block's 64-byte line holds depths d and
// d + 1 of its 16 keys; one vpermw puts each key's pair (d, d + 1) in its own 32-bit lane, against
// the row's query pair (q[d], q[d + 1]) broadcast: keys in lanes, nothing reduced across lanes.
// P·V over a row-major V: two keys' rows interleaved by vpunpck[lh]wd (pairs along the keys, the
// columns of each 128-bit lane in two halves), against the rows' weight pairs (p[j], p[j + 1])
// broadcast; the columns are put back in order when O is stored.
#pragma once

#if defined(__AVX512BF16__)

#include <cstdint>
#include <cstring>

#include "../kernel_table.hpp"
#include "../simd/arch.hpp"
#include "bf16_dot_tiles.hpp"
#include "pv_tile.hpp"

namespace attend::kernels {
namespace {

// Rows of n floats (n a multiple of 16, row stride ld) rounded to bf16 pairs: out[r·(n/2) + i] holds
// (x[r][2i], x[r][2i + 1]), the first in the low half (round to nearest even): consecutive bf16
// (bf16_dot_tiles.hpp's stores), read as 32-bit words.
inline void round_rows_to_bf16_pairs(const float* x, int64_t ld, int64_t rows, int64_t n, uint32_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    uint16_t* o = reinterpret_cast<uint16_t*>(out + r * (n / 2));
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) store_bf16x32(o + i, _mm512_loadu_ps(xr + i), _mm512_loadu_ps(xr + i + 16));
    if (i < n) store_bf16x16(o + i, _mm512_loadu_ps(xr + i));
  }
}

[[gnu::always_inline]] inline __m512 dot_bf16(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}

// S[NR rows][G·kKeyBlock keys] = Q·Kᵀ for G blocks of a blocked bf16 K (blk[g]: [D][kKeyBlock]) and
// NR rows of query pairs (qp: row r's depth/2 pairs at qp + r·depth/2). U sets of accumulators over
// alternate depth pairs (added at the end) keep enough dot products in flight when NR·G is small.
// pf: null, or the G blocks the next call reads (a line of each per depth pair, as blocked_scores);
// l2: null, or G blocks further ahead, the same way into L2 (l2_pages: page starts only).
template <int NR, int G>
[[gnu::noinline]] void blocked_scores_bf16_dot(const Bf16* const* blk, int64_t depth, const uint32_t* qp, float* s,
                                               int64_t lds, const Bf16* const* pf, const Bf16* const* l2,
                                               bool l2_pages) {
  static_assert(kKeyBlock == 16, "a block's depth pair is one 64-byte line");
  constexpr int U = NR * G >= 8 ? 1 : (NR * G >= 4 ? 2 : 4);
  alignas(64) static constexpr uint16_t kPairUp[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i pair_up = _mm512_load_si512(kPairUp);
  __m512 acc[U][NR][G];
  ATTEND_UNROLL
  for (int u = 0; u < U; ++u)
    for (int r = 0; r < NR; ++r)
      for (int g = 0; g < G; ++g) acc[u][r][g] = _mm512_setzero_ps();
  const char* b[G];
  ATTEND_UNROLL
  for (int g = 0; g < G; ++g) b[g] = reinterpret_cast<const char*>(blk[g]);
  const int64_t pairs = depth / 2;
  const int64_t qstride = depth / 2;
  for (int64_t c = 0; c < pairs; c += U) {
    ATTEND_UNROLL
    for (int u = 0; u < U; ++u) {
      const int64_t line = (c + u) * 64;
      if (pf)
        for (int g = 0; g < G; ++g) __builtin_prefetch(reinterpret_cast<const char*>(pf[g]) + line, 0, 3);
      if (l2)
        for (int g = 0; g < G; ++g) {
          const char* at = reinterpret_cast<const char*>(l2[g]) + line;
          if (!l2_pages || starts_page(at)) __builtin_prefetch(at, 0, 2);
        }
      __m512i kp[G];
      ATTEND_UNROLL
      for (int g = 0; g < G; ++g) kp[g] = _mm512_permutexvar_epi16(pair_up, _mm512_loadu_si512(b[g] + line));
      ATTEND_UNROLL
      for (int r = 0; r < NR; ++r) {
        const __m512i qb = _mm512_set1_epi32(static_cast<int>(qp[r * qstride + c + u]));
        ATTEND_UNROLL
        for (int g = 0; g < G; ++g) acc[u][r][g] = dot_bf16(acc[u][r][g], kp[g], qb);
      }
    }
  }
  ATTEND_UNROLL
  for (int r = 0; r < NR; ++r)
    for (int g = 0; g < G; ++g) {
      __m512 sum = acc[0][r][g];
      ATTEND_UNROLL
      for (int u = 1; u < U; ++u) sum = _mm512_add_ps(sum, acc[u][r][g]);
      _mm512_store_ps(s + r * lds + g * kKeyBlock, sum);
    }
}

// blocked_scores_run's schedule for the bf16 dot products: `blocks` blocks for `packs` packs of NR
// rows (pack p's query pairs at qp + p·NR·depth/2, its scores at s + p·NR·lds), G at a time, then
// one at a time; the first pack requests the next group (l1_requests) and the group l2_blocks on
// (into L2), when known. in_order (FlashWork::hardware_stream): one block at a time in address
// order, no requests.
template <int NR>
void blocked_scores_bf16_dot_run(const Bf16* const* blk, int64_t blocks, int64_t known, int64_t depth,
                                 const uint32_t* qp, float* s, int64_t lds, int packs, int64_t l2_blocks,
                                 bool l1_requests, bool l2_pages, bool in_order) {
  constexpr int G = NR == 1 ? 4 : 2;
  const int64_t qpack = NR * depth / 2;
  int64_t b = 0;
  if (!in_order)
    for (; b + G <= blocks; b += G)
      for (int p = 0; p < packs; ++p)
        blocked_scores_bf16_dot<NR, G>(
            blk + b, depth, qp + p * qpack, s + p * NR * lds + b * kKeyBlock, lds,
            p == 0 && l1_requests && b + 2 * G <= known ? blk + b + G : nullptr,
            p == 0 && l2_blocks > 0 && b + l2_blocks + G <= known ? blk + b + l2_blocks : nullptr, l2_pages);
  for (; b < blocks; ++b)
    for (int p = 0; p < packs; ++p)
      blocked_scores_bf16_dot<NR, 1>(
          blk + b, depth, qp + p * qpack, s + p * NR * lds + b * kKeyBlock, lds,
          p == 0 && !in_order && l1_requests && b + 1 < known ? blk + b + 1 : nullptr,
          p == 0 && !in_order && l2_blocks > 0 && b + l2_blocks < known ? blk + b + l2_blocks : nullptr, l2_pages);
}

inline void blocked_scores_bf16_dot_dispatch(int row_pack, const Bf16* const* blk, int64_t blocks, int64_t known,
                                             int64_t depth, const uint32_t* qp, float* s, int64_t lds, int packs,
                                             int64_t l2_blocks, bool l1_requests, bool l2_pages, bool in_order) {
  switch (row_pack) {
    case 1:
      return blocked_scores_bf16_dot_run<1>(blk, blocks, known, depth, qp, s, lds, packs, l2_blocks, l1_requests,
                                            l2_pages, in_order);
    case 2:
      return blocked_scores_bf16_dot_run<2>(blk, blocks, known, depth, qp, s, lds, packs, l2_blocks, l1_requests,
                                            l2_pages, in_order);
    case 4:
      return blocked_scores_bf16_dot_run<4>(blk, blocks, known, depth, qp, s, lds, packs, l2_blocks, l1_requests,
                                            l2_pages, in_order);
    default:
      return blocked_scores_bf16_dot_run<8>(blk, blocks, known, depth, qp, s, lds, packs, l2_blocks, l1_requests,
                                            l2_pages, in_order);
  }
}

// O[R rows][C·32 columns] = alpha·O + P·V over `keys` keys of a row-major bf16 V (a.v, a.ldv
// elements apart), unmasked, with the rows' weights as bf16 pairs along the keys: pp[r·pps + j/2]
// holds (p[r][j], p[r][j + 1]) (an odd last key's pair has a zero second weight, which meets a zero
// V row here). Per key pair and 32 columns: the two rows loaded, interleaved into (V[j][c], V[j+1][c])
// by vpunpcklwd (columns 0–3 of each 128-bit lane) and vpunpckhwd (4–7), one vdpbf16ps per row and
// half. The accumulators hold a chunk's columns in that order; O is loaded and stored through the
// matching permutes. a's requests (PvArgs::pf_*, l2_*) are made for both keys of a pair.
template <int R, int C>
[[gnu::noinline]] void pv_tile_bf16_dot(const PvArgs& a, const uint32_t* pp, int64_t pps) {
  alignas(64) static constexpr int32_t kLo[16] = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
  alignas(64) static constexpr int32_t kHi[16] = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
  alignas(64) static constexpr int32_t kOut0[16] = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
  alignas(64) static constexpr int32_t kOut1[16] = {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};
  float* const o = a.o;  // (the arguments in locals, as pv_tile_vmem)
  const int64_t ldo = a.ldo, ldv = a.ldv, keys = a.keys;
  __m512 lo[R][C], hi[R][C];
  {
    const __m512i il = _mm512_load_si512(kLo), ih = _mm512_load_si512(kHi);
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r) {
      const __m512 al = _mm512_set1_ps(a.alpha[r]);
      ATTEND_UNROLL
      for (int c = 0; c < C; ++c) {
        const __m512 x0 = _mm512_mul_ps(_mm512_load_ps(o + r * ldo + 32 * c), al);
        const __m512 x1 = _mm512_mul_ps(_mm512_load_ps(o + r * ldo + 32 * c + 16), al);
        lo[r][c] = _mm512_permutex2var_ps(x0, il, x1);
        hi[r][c] = _mm512_permutex2var_ps(x0, ih, x1);
      }
    }
  }
  const Bf16* v = static_cast<const Bf16*>(a.v);
  const RowRequests<Bf16, C * 64> req(a, v);
  // Keys j and j + 1 (`second`: key j + 1's row, or a zero row for an odd last key, whose pair's
  // second weight is 0).
  auto pair = [&](int64_t j, auto second) {
    ATTEND_UNROLL
    for (int c = 0; c < C; ++c) {
      const __m512i x = _mm512_loadu_si512(v + 32 * c);
      const __m512i y = second(c);
      const __m512i vl = _mm512_unpacklo_epi16(x, y), vh = _mm512_unpackhi_epi16(x, y);
      ATTEND_UNROLL
      for (int r = 0; r < R; ++r) {
        const __m512i pb = _mm512_set1_epi32(static_cast<int>(pp[r * pps + j / 2]));
        lo[r][c] = dot_bf16(lo[r][c], vl, pb);
        hi[r][c] = dot_bf16(hi[r][c], vh, pb);
      }
    }
  };
  int64_t j = 0;
  for (; j + 2 <= keys; j += 2, v += 2 * ldv) {
    if (req.any()) req.next(j, v), req.ahead(j), req.next(j + 1, v + ldv), req.ahead(j + 1);
    pair(j, [&](int c) { return _mm512_loadu_si512(v + ldv + 32 * c); });
  }
  if (j < keys) {
    if (req.any()) req.next(j, v), req.ahead(j);
    pair(j, [](int) { return _mm512_setzero_si512(); });
  }
  const __m512i o0 = _mm512_load_si512(kOut0), o1 = _mm512_load_si512(kOut1);
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      _mm512_store_ps(o + r * ldo + 32 * c, _mm512_permutex2var_ps(lo[r][c], o0, hi[r][c]));
      _mm512_store_ps(o + r * ldo + 32 * c + 16, _mm512_permutex2var_ps(lo[r][c], o1, hi[r][c]));
    }
}

// The most accumulators a pass of pv_tile_bf16_dot keeps: two per row and 32 columns, so four rows
// of 128 columns take all 32 registers (the compiler keeps two of them and the V rows' interleaves on
// the stack) and read V in one pass. Zen 4, against 28 (a group of four in two passes of two rows,
// the second from L2), bf16 cache D2/D3's shapes (attend-bench alternated, 3 rounds): D3 2.07 /
// 2.38 / 2.48 → 1.86 / 2.02 / 2.39 ms, D2 within the spread; one thread L2-resident (2 kv heads ×
// 1024 keys) 36.7–38.9 → 33.9–37.7 µs.
constexpr int kBf16DotPvAcc = 32;

template <int R>
inline void pv_bf16_dot_columns(int chunks, const PvArgs& a, const uint32_t* pp, int64_t pps) {
  static_assert(R <= 4, "at most 4 rows × 4 chunks of 32 columns");
  switch (chunks) {
    case 1: return pv_tile_bf16_dot<R, 1>(a, pp, pps);
    case 2: return pv_tile_bf16_dot<R, 2>(a, pp, pps);
    case 3: return pv_tile_bf16_dot<R, 3>(a, pp, pps);
    default: return pv_tile_bf16_dot<R, 4>(a, pp, pps);
  }
}

// O[rows][value_vectors·16] = alpha·O + P·V over keys [0, keys) of a row-major bf16 V (value_vectors
// even), unmasked: rows in balanced passes of whole rows (each pass all the columns it can hold,
// kBf16DotPvAcc accumulators), the first pass reading V from memory with the decode requests
// (pf_limit > 0: PvArgs::pf_* and `ahead`, as pv_block's), the others from L2.
inline void pv_block_bf16_dot(float* oacc, int64_t ldo, const float* alpha, const uint32_t* pp, int64_t pps,
                              const Bf16* v, int64_t ldv, int64_t rows, int64_t value_vectors, int64_t keys,
                              int64_t pf_limit, const PvAhead& ahead) {
  const int64_t chunks = value_vectors / 2;
  const int64_t row_bytes = value_vectors * 32;
  // Column passes of up to 4 chunks (128 columns), then rows per pass within the accumulators.
  const int64_t cmax = chunks < 4 ? chunks : (chunks % 4 == 0 ? 4 : (chunks % 3 == 0 ? 3 : 4));
  for (int64_t c0 = 0; c0 < chunks; c0 += cmax) {
    const int C = static_cast<int>(min64(cmax, chunks - c0));
    const int64_t most = max64(1, min64(4, kBf16DotPvAcc / (2 * C)));
    const int64_t passes = (rows + most - 1) / most;
    const int64_t step = (rows + passes - 1) / passes;
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
      const int R = static_cast<int>(min64(step, rows - r0));
      PvArgs a{oacc + r0 * ldo + 32 * c0, ldo, alpha + r0, nullptr, 0, 1, v + 32 * c0, ldv, keys};
      if (pf_limit > 0 && r0 == 0 && c0 == 0 && !ahead.none) {
        a.pf_keys = max64(1, kVPrefetchBytes / row_bytes);
        a.pf_limit = pf_limit;
        a.pf_bytes = row_bytes;
        set_ahead(a, ahead);
      }
      const uint32_t* p = pp + r0 * pps;
      switch (R) {
        case 1: pv_bf16_dot_columns<1>(C, a, p, pps); break;
        case 2: pv_bf16_dot_columns<2>(C, a, p, pps); break;
        case 3: pv_bf16_dot_columns<3>(C, a, p, pps); break;
        default: pv_bf16_dot_columns<4>(C, a, p, pps); break;
      }
    }
  }
}

}  // namespace
}  // namespace attend::kernels

#endif
