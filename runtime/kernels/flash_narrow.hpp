// The narrow (decode) flash driver: a handful of query rows (a GQA group of one position, or a few
// positions) against a key range, in tiles of kNarrowBlockKeys keys. Scores are S = Q·Kᵀ: dot
// products along D for row-major K (narrow_dot_scores), keys in lanes for a blocked K
// (blocked_key_scores). The plan sends work here only when head_dim is a multiple of W.
#pragma once

#include "flash_common.hpp"
#include "simd/exp2.hpp"
#include "ukernel/blocked_key_scores.hpp"
#include "ukernel/narrow_dot_scores.hpp"
#include "ukernel/pv_tile.hpp"

namespace attend::kernels {
namespace {

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
  const KvSource<E> src(w);
  float* ones = scratch + L.ones;
  for (int64_t r = 0; r < nr; ++r) ones[r] = 1.0f;
  // Blocked K: the addresses of a tile's blocks and of the next blocks (prefetched while scoring).
  constexpr int64_t kTileBlocks = ldsn / kKeyBlock;
  const E* blk[kTileBlocks + kMaxBlockedGroup];
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
      // The whole tile in one call, blocks of kKeyBlock keys ([D][kKeyBlock] each) wherever they
      // live, plus the blocks after it that exist (prefetched).
      const int64_t blocks = (nk + kKeyBlock - 1) / kKeyBlock;
      const int64_t known = min64(blocks + kMaxBlockedGroup, (key_hi - j0 + kKeyBlock - 1) / kKeyBlock);
      for (int64_t b = 0; b < known; ++b) blk[b] = src.key_block(j0 + b * kKeyBlock);
      blocked_scores_dispatch<Arch, E>(row_pack, blk, blocks, known, depth, qn, s, ldsn);
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
        const E* next = pf_keys > 0 ? src.key_row(j0 + jg + W) : nullptr;
        const bool spread = row_pack > 1;
        if (next && !spread) prefetch_rows(next, w.k_row_stride, pf_keys, depth);
        narrow_scores_dispatch<Arch, E>(row_pack, src.key_row(j0 + jg), w.k_row_stride, min64(W, nk - jg), qn, depth,
                                        reinterpret_cast<const E*>(zeros), s + jg, ldsn, nr, spread ? next : nullptr,
                                        pf_keys);
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
      pv_runs<Arch>(src, oacc, dvp, alpha, ones, s, ldsn, 1, j0, nk, nr, dvp / W, masked,
                    std::is_same_v<E, float> && nr == 1 ? 0 : key_hi - j0);
    } else {
      values_to_f32_panel(src, j0, nk, w.value_dim, dvp, scratch + L.vpanel);
      pv_block<Arch>(oacc, dvp, alpha, s, ldsn, 1, scratch + L.vpanel, dvp, nr, dvp / W, nk, masked);
    }
  }
  write_rows<Arch>(w, rows, oacc, dvp, m, l);
}

}  // namespace
}  // namespace attend::kernels
