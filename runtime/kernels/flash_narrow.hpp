// The narrow (decode) flash driver: a handful of query rows (a GQA group of one position, or a few
// positions) against a key range, in tiles of kNarrowBlockKeys keys. Scores are S = Q·Kᵀ: dot
// products along D for row-major K (narrow_dot_scores), keys in lanes for a blocked K
// (blocked_key_scores). The plan sends work here only when head_dim is a multiple of W.
#pragma once

#include "flash_common.hpp"
#include "score_terms.hpp"
#include "simd/exp2.hpp"
#include "ukernel/bf16_dot_decode.hpp"
#include "ukernel/blocked_key_scores.hpp"
#include "ukernel/narrow_dot_scores.hpp"
#include "ukernel/pv_tile.hpp"

namespace attend::kernels {
namespace {

// Narrow path: a few query rows (decode). Requires head_dim % W == 0.

// The rows' visible key ranges and the key range the work item walks.
struct NarrowRows {
  int64_t nr, depth, dvp;
  int row_pack;              // rows are scored in packs of a power of two (padding rows zero)…
  int packs;                 // …this many (16 registers: up to two packs of four rows)
  int64_t rlo[16], rhi[16];  // nr <= kNarrowRows <= 16
  int64_t key_lo, key_hi, max_lo, min_hi;
};

template <class Arch>
NarrowRows narrow_rows(const FlashWork& w) {
  const RowMap rows{&w};
  NarrowRows R{};
  R.nr = w.row_count;
  R.depth = w.head_dim;
  R.dvp = round_up(w.value_dim, Tiles<Arch>::W);
  R.key_lo = w.key_end;
  R.key_hi = w.key_begin;
  R.max_lo = 0;
  R.min_hi = w.key_end;
  for (int64_t r = 0; r < R.nr; ++r) {
    R.rlo[r] = max64(rows.lo(r), w.key_begin);
    R.rhi[r] = min64(rows.hi(r), w.key_end);
    if (R.rlo[r] < R.rhi[r]) {
      R.key_lo = min64(R.key_lo, R.rlo[r]);
      R.key_hi = max64(R.key_hi, R.rhi[r]);
    }
    R.max_lo = max64(R.max_lo, R.rlo[r]);
    R.min_hi = min64(R.min_hi, w.tree ? min64(R.rhi[r], w.first_position) : R.rhi[r]);
  }
  // A blocked K is scored a whole block at a time: start at a block boundary (the keys before
  // key_lo are masked like any other invisible key; split-K ranges are block-aligned already).
  if (w.k_blocked && R.key_lo < R.key_hi) R.key_lo = R.key_lo / kKeyBlock * kKeyBlock;
  R.row_pack = 1;
  while (R.row_pack < min64(R.nr, Tiles<Arch>::kNarrowMaxRows)) R.row_pack *= 2;
  R.packs = static_cast<int>((R.nr + R.row_pack - 1) / R.row_pack);
  return R;
}

// The head's state: pre-scaled queries [row_pack][D], accumulators, max and sum (running), and the
// current tile's scores and rescale factors.
// qp, pp: the bf16 dot-product decode's query pairs and a tile's weight pairs (Bf16Dot below).
struct NarrowHead {
  float *qn, *oacc, *m, *l, *s, *alpha;
  uint32_t *qp, *pp;
};

inline NarrowHead narrow_head(float* scratch, const Layout& L) {
  return {scratch + L.qt,
          scratch + L.oacc,
          scratch + L.m,
          scratch + L.l,
          scratch + L.st,
          scratch + L.alpha,
          reinterpret_cast<uint32_t*>(scratch + L.bf16_qp),
          reinterpret_cast<uint32_t*>(scratch + L.bf16_pp)};
}

// Decode under FpMath::bf16 over a bf16 K and V on vdpbf16ps (bf16_dot_decode.hpp): the bf16-math
// table's narrow driver (flash_kernels.hpp) sets Dot for E = Bf16 on AVX512_BF16. Its scores run
// on the dot products over a blocked K (a cache's), its P·V over any V whose value_dim is a
// multiple of 32 (two 16-lane vectors) in unmasked tiles; the rest of the tile's work is the
// strict path's.
template <class E, bool Dot>
constexpr bool bf16_dot() {
#if defined(__AVX512BF16__)
  return Dot && std::is_same_v<E, Bf16>;
#else
  return false;
#endif
}

template <class Arch, bool Dot = false>
void narrow_init(const FlashWork& w, const NarrowRows& R, const NarrowHead& h) {
  const RowMap rows{&w};
  for (int64_t r = 0; r < R.nr; ++r) {
    start_row_state(w, rows.head(r), h.m[r], h.l[r]);
    row_to_f32<Arch>(rows.q(r), w.q_type, R.depth, w.scale, h.qn + r * R.depth);
  }
  for (int64_t r = R.nr; r < R.packs * R.row_pack; ++r) std::memset(h.qn + r * R.depth, 0, sizeof(float) * R.depth);
  std::memset(h.oacc, 0, sizeof(float) * R.nr * R.dvp);
#if defined(__AVX512BF16__)
  // The pre-scaled queries (padding rows too) as bf16 pairs, for the dot-product scores.
  if constexpr (Dot)
    if (w.k_blocked) round_rows_to_bf16_pairs(h.qn, R.depth, R.packs * R.row_pack, R.depth, h.qp);
#endif
}

// Scratch besides the head's state.
struct NarrowShared {
  float* vpanel;
  const float *ones, *zeros;
};

template <class Arch>
NarrowShared narrow_shared(float* scratch, const Layout& L, int64_t depth, int64_t nr) {
  float* ones = scratch + L.ones;
  for (int64_t r = 0; r < nr; ++r) ones[r] = 1.0f;
  float* zeros = scratch + L.zeros;  // a zero K row (all-zero bits are 0 in every element type)
  std::memset(zeros, 0, sizeof(float) * depth);
  return {scratch + L.vpanel, ones, zeros};
}

// Blocked K: how many key blocks ahead a call requests into L2 (FlashWork::l2_ahead_bytes).
template <class E>
int64_t l2_key_blocks(const FlashWork& w) {
  if (w.l2_ahead_bytes <= 0) return 0;
  const int64_t block_bytes = kKeyBlock * w.head_dim * static_cast<int64_t>(sizeof(E));
  return min64(kMaxL2AheadBlocks, max64(1, w.l2_ahead_bytes / block_bytes));
}

// Rows of `row_elements` elements ahead the L2 requests reach: row-major K's (head_dim) in the
// scores, V's (value_dim) in the P·V.
template <class E>
int64_t l2_rows(const FlashWork& w, int64_t row_elements) {
  return w.l2_ahead_bytes > 0 ? max64(1, w.l2_ahead_bytes / (row_elements * static_cast<int64_t>(sizeof(E)))) : 0;
}

// A tile of keys [j0, j0 + nk), in three phases: scores, online softmax, P·V.
//
// Scores. Blocked K: blk[b] is the address of the tile's block b, and blocks [blocks, known) are
// the ones scored next (prefetched while this tile is scored).
template <class Arch, class E, bool Dot = false>
void narrow_scores_phase(const FlashWork& w, const NarrowRows& R, const NarrowHead& h, const NarrowShared& sh,
                         const KvSource<E>& src, const E* const* blk, int64_t known, int64_t j0, int64_t nk) {
  using T = Tiles<Arch>;
  constexpr int W = T::W;
  constexpr int64_t ldsn = T::kNarrowBlockKeys;
  const int64_t depth = R.depth;
  // S = Q·Kᵀ. Row-major K: dot products along D, NR rows × W/NR keys per transpose-sum, so each K
  // vector loaded feeds NR FMAs. Blocked K: keys in lanes (blocked_scores), the tile in one call.
  // More rows than a pack (16 registers): the packs take each key group (block) in turn while it
  // is in L1, the first pack prefetching the next.
#if defined(__AVX512BF16__)
  if constexpr (bf16_dot<E, Dot>()) {
    if (w.k_blocked) {
      blocked_scores_bf16_dot_dispatch(R.row_pack, blk, (nk + kKeyBlock - 1) / kKeyBlock, known, depth, h.qp, h.s, ldsn,
                                       R.packs, l2_key_blocks<E>(w), !w.no_k_l1_requests, w.l2_pages,
                                       w.hardware_stream);
      return;
    }
  }
#endif
  if (w.k_blocked) {
    blocked_scores_dispatch<Arch, E>(R.row_pack, blk, (nk + kKeyBlock - 1) / kKeyBlock, known, depth, h.qn, h.s, ldsn,
                                     R.packs, l2_key_blocks<E>(w), !w.no_k_l1_requests, w.l2_pages,
                                     w.hardware_stream || w.one_block_scores);
    if constexpr (KvSource<E>::kScaled) scale_by_keys<Arch>(h.s, ldsn, R.nr, src, src.k_scale, j0, nk);
    return;
  }
  const int64_t l2_ahead = l2_rows<E>(w, w.head_dim);
  for (int64_t jg = 0; jg < nk; jg += W) {
    // Fetch the K rows of the next group while this one is scored. Measured in one process against
    // a plain read of the same bytes (D1–D4 shapes): one group ahead beats two, four or eight, and
    // prefetching V as well (for the P·V pass) or the next tile's K during P·V costs 5–15%: the
    // extra requests block the core once its miss buffers are full, and the hardware prefetcher
    // already streams V. narrow_scores spreads the requests over its FMAs (several rows: a depth
    // step's lines of the next group in address order; one row: row by row as it scores them):
    // +1–10 points of stream on D2/D3; one row (Zen 4, D1/D4's shapes, since it scores key by
    // key) 86–89 → 92–96% and 87–88 → 90–93% against a burst per group before the scoring.
    const int64_t pf_keys = min64(W, R.key_hi - (j0 + jg + W));
    const E* next = pf_keys > 0 && !w.no_k_l1_requests ? src.key_row(j0 + jg + W) : nullptr;
    // And the rows l2_ahead_bytes further on into L2, at the same pace.
    const int64_t l2_at = j0 + jg + W + l2_ahead;
    const int64_t l2_keys = l2_ahead > 0 ? min64(W, R.key_hi - l2_at) : 0;
    const E* l2 = l2_keys > 0 ? src.key_row(l2_at) : nullptr;
    for (int p = 0; p < R.packs; ++p) {
      const int64_t r0 = p * R.row_pack;
      narrow_scores_dispatch<Arch, E>(R.row_pack, src.key_row(j0 + jg), w.k_row_stride, min64(W, nk - jg),
                                      h.qn + r0 * depth, depth, reinterpret_cast<const E*>(sh.zeros),
                                      h.s + r0 * ldsn + jg, ldsn, min64(R.row_pack, R.nr - r0), p == 0 ? next : nullptr,
                                      pf_keys, p == 0 ? l2 : nullptr, l2_keys, w.l2_pages);
    }
  }
}

// The tile's maxima, exponentials, running sums and rescale factors of rows [r0, r0 + G), the rows'
// loops interleaved: a row's maximum, its exponentials and its sum are each a chain of dependent
// operations (the sum's horizontal add and the rescale factor's exponential ~30 cycles of latency),
// and one row at a time left the core waiting on them. Each row's operations are the ones it took
// alone, in the same order: the same bits (decode_driver's output hashes equal for f32, bf16 and i8
// caches, 1–8 rows, 17–4100 keys). Zen 5, one thread, an 8-bit cache's GQA group of four (2 kv
// heads × 1024 keys, L2-resident), 20 runs alternated: 16.3 → 15.9–16.1 µs in the fast state,
// 22.4–23.2 → 21.6–22.1 in the slow one; the phase 10.7 → 6.3% of the step's perf samples.
template <class Arch, int G>
void narrow_softmax_rows(const NarrowHead& h, int64_t r0, int64_t nkp) {
  using B = vfloat<Arch>;
  constexpr int W = Tiles<Arch>::W;
  constexpr int64_t ldsn = Tiles<Arch>::kNarrowBlockKeys;
  float* sr[G];
  B mx[G];
  ATTEND_UNROLL
  for (int i = 0; i < G; ++i) {
    sr[i] = h.s + (r0 + i) * ldsn;
    mx[i] = B(kNegInf);
  }
  for (int64_t jj = 0; jj < nkp; jj += W) {
    ATTEND_UNROLL
    for (int i = 0; i < G; ++i) mx[i] = xsimd::max(mx[i], B::load_aligned(sr[i] + jj));
  }
  float m_new[G], ref[G];
  B sum[G];
  ATTEND_UNROLL
  for (int i = 0; i < G; ++i) {
    const float tile_max = horizontal_max<Arch>(mx[i]);
    m_new[i] = h.m[r0 + i] > tile_max ? h.m[r0 + i] : tile_max;
    ref[i] = m_new[i] == kNegInf ? 0.0f : m_new[i];
    sum[i] = B(0.0f);
  }
  for (int64_t jj = 0; jj < nkp; jj += W) {
    ATTEND_UNROLL
    for (int i = 0; i < G; ++i) {
      const B p = exp2_nonpositive<Arch>((B::load_aligned(sr[i] + jj) - B(ref[i])) * B(kLog2e));
      p.store_aligned(sr[i] + jj);
      sum[i] += p;
    }
  }
  ATTEND_UNROLL
  for (int i = 0; i < G; ++i) {
    const int64_t r = r0 + i;
    const float a = exp2_nonpositive<Arch>(B((h.m[r] - ref[i]) * kLog2e)).get(0);
    h.l[r] = h.l[r] * a + xsimd::hadd(sum[i]);
    h.m[r] = m_new[i];
    h.alpha[r] = a;
  }
}

// Bias, mask, the tile's maxima, exponentials, running sums and rescale factors (h.alpha).
template <class Arch>
void narrow_softmax_phase(const FlashWork& w, const NarrowRows& R, const NarrowHead& h, int64_t j0, int64_t nk) {
  using T = Tiles<Arch>;
  using B = vfloat<Arch>;
  constexpr int W = T::W;
  constexpr int64_t ldsn = T::kNarrowBlockKeys;
  const RowMap rows{&w};
  const int64_t nkp = round_up(nk, W);
  alignas(64) static constexpr float kIota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const B iota = B::load_aligned(kIota);
  const bool whole = R.max_lo <= j0 && R.min_hi >= j0 + nk;
  for (int64_t r = 0; r < R.nr; ++r) {
    float* sr = h.s + r * ldsn;
    if (w.softcap > 0.0f || w.alibi) narrow_score_terms<Arch>(w, sr, j0, nkp, rows.slope(r), rows.key_position(r));
    if (w.bias) {
      const float* b = rows.bias(r) + j0 * w.bias_key_stride;
      for (int64_t jj = 0; jj < nk; ++jj) sr[jj] += b[jj * w.bias_key_stride];
    }
    // Mask when the tile is not wholly visible, and always the padding past nk.
    const B lo_v(static_cast<float>(R.rlo[r] - j0)), hi_v(static_cast<float>(min64(R.rhi[r], j0 + nk) - j0));
    for (int64_t jj = whole ? nkp - (nk % W ? W : 0) : 0; jj < nkp; jj += W) {
      const B jf = iota + B(static_cast<float>(jj));
      const auto visible = (jf >= lo_v) & (jf < hi_v);
      xsimd::select(visible, B::load_aligned(sr + jj), B(kNegInf)).store_aligned(sr + jj);
    }
    if (w.tree && !whole) tree_terms(w, rows, h.s, ldsn, 1, r, r + 1, j0, nk);
  }
  // Rows four at a time (two with 16 registers), then pairs, then one.
  constexpr int kRows = T::kAccRegs >= 24 ? 4 : 2;
  int64_t r = 0;
  for (; r + kRows <= R.nr; r += kRows) narrow_softmax_rows<Arch, kRows>(h, r, nkp);
  if constexpr (kRows > 2)
    for (; r + 2 <= R.nr; r += 2) narrow_softmax_rows<Arch, 2>(h, r, nkp);
  for (; r < R.nr; ++r) narrow_softmax_rows<Arch, 1>(h, r, nkp);
}

// O = alpha·O + P·V over the tile.
template <class Arch, class E, bool Dot = false>
void narrow_pv_phase(const FlashWork& w, const NarrowRows& R, const NarrowHead& h, const NarrowShared& sh,
                     const KvSource<E>& src, int64_t j0, int64_t nk) {
  constexpr int W = Tiles<Arch>::W;
  constexpr int64_t ldsn = Tiles<Arch>::kNarrowBlockKeys;
  const bool whole = R.max_lo <= j0 && R.min_hi >= j0 + nk;
  const bool masked = !whole || w.bias != nullptr;
#if defined(__AVX512BF16__)
  // The weights as bf16 pairs along the keys (the padding past nk is 0: an odd tile's last pair),
  // then P·V run by run. A run starts at an even key of the tile: a paged cache's pages hold a
  // multiple of 16 tokens and a blocked K's tiles start on a block; a row-major V is one run.
  if constexpr (bf16_dot<E, Dot>()) {
    if (!masked && w.value_dim % (2 * W) == 0) {
      const int64_t nkp = round_up(nk, W);
      round_rows_to_bf16_pairs(h.s, ldsn, R.nr, nkp, h.pp);
      const int64_t pps = nkp / 2;
      for_each_v_run<Arch>(src, j0, nk, R.dvp / W, R.key_hi - j0, l2_rows<E>(w, w.value_dim), w.l2_pages,
                           w.hardware_stream, [&](int64_t j, int64_t n, int64_t pf, const PvAhead& ahead) {
                             pv_block_bf16_dot(h.oacc, R.dvp, j == 0 ? h.alpha : sh.ones, h.pp + j / 2, pps,
                                               src.value(j0 + j), src.v_row_stride, R.nr, R.dvp / W, n, pf, ahead);
                           });
      return;
    }
  }
#endif
  if (w.value_dim % W == 0) {  // V read (and widened) in place; i8: the weights carry V's scales
    if constexpr (KvSource<E>::kScaled) scale_by_keys<Arch>(h.s, ldsn, R.nr, src, src.v_scale, j0, nk);
    const bool requests = !(std::is_same_v<E, float> && R.nr == 1);
    pv_runs<Arch>(src, h.oacc, R.dvp, h.alpha, sh.ones, h.s, ldsn, 1, j0, nk, R.nr, R.dvp / W, masked,
                  requests ? R.key_hi - j0 : 0, requests ? l2_rows<E>(w, w.value_dim) : 0, w.l2_pages,
                  w.hardware_stream);
  } else {
    values_to_f32_panel(src, j0, nk, w.value_dim, R.dvp, sh.vpanel);
    pv_block<Arch>(h.oacc, R.dvp, h.alpha, h.s, ldsn, 1, sh.vpanel, R.dvp, R.nr, R.dvp / W, nk, masked);
  }
}

// Keys per tile (Tiles::kNarrowBlockKeys, kNarrowTileKeys): 512 over a cache's blocked f32 or
// 16-bit K, 256 over a row-major K or an 8-bit cache's (its one row, here). A property of the path,
// not of the machine: every machine class computes the same bits.
template <class Arch, class E>
int64_t narrow_tile_keys(const FlashWork& w) {
  return w.k_blocked && !KvSource<E>::kScaled ? Tiles<Arch>::kNarrowBlockKeys : Tiles<Arch>::kNarrowTileKeys;
}

// One kv head's work: a range of keys in tiles of narrow_tile_keys.
template <class Arch, class E, bool Dot = false>
void flash_narrow(const FlashWork& w, float* scratch) {
  constexpr int64_t ldsn = Tiles<Arch>::kNarrowBlockKeys;
  const int64_t tile = narrow_tile_keys<Arch, E>(w);
  const NarrowRows R = narrow_rows<Arch>(w);
  const Layout L = make_layout<Arch>(w.head_dim, w.value_dim, R.nr);
  const NarrowShared sh = narrow_shared<Arch>(scratch, L, R.depth, R.nr);
  const NarrowHead h = narrow_head(scratch, L);
  narrow_init<Arch, bf16_dot<E, Dot>()>(w, R, h);
  const KvSource<E> src(w);
  // Blocked K: the addresses of a tile's blocks and of the next blocks (prefetched while scoring).
  const E* blk[ldsn / kKeyBlock + kMaxBlockedGroup + kMaxL2AheadBlocks];
  const int64_t ahead_blocks = kMaxBlockedGroup + (w.k_blocked ? l2_key_blocks<E>(w) : 0);
  for (int64_t j0 = R.key_lo; j0 < R.key_hi; j0 += tile) {
    const int64_t nk = min64(tile, R.key_hi - j0);
    int64_t known = 0;
    if (w.k_blocked) {
      known = min64((nk + kKeyBlock - 1) / kKeyBlock + ahead_blocks, (R.key_hi - j0 + kKeyBlock - 1) / kKeyBlock);
      for (int64_t b = 0; b < known; ++b) blk[b] = src.key_block(j0 + b * kKeyBlock);
    }
    narrow_scores_phase<Arch, E, Dot>(w, R, h, sh, src, blk, known, j0, nk);
    narrow_softmax_phase<Arch>(w, R, h, j0, nk);
    narrow_pv_phase<Arch, E, Dot>(w, R, h, sh, src, j0, nk);
  }
  write_rows<Arch>(w, RowMap{&w}, h.oacc, R.dvp, h.m, h.l);
}

}  // namespace
}  // namespace attend::kernels
