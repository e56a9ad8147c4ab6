// Bookkeeping both flash drivers share: which query row is which (RowMap), the per-thread scratch
// layout, widening K/V tiles into f32 panels, and writing a block's result.
#pragma once

#include <cstring>
#include <type_traits>

#include "kernel_table.hpp"
#include "simd/convert.hpp"
#include "tile_traits.hpp"
#include "ukernel/pv_tile.hpp"

namespace attend::kernels {
namespace {

// Prefetches `rows` rows of `cols` elements, `stride` elements apart, one request per cache line,
// with hint H: 3 into L1 (prefetcht0), 2 into L2 only (prefetcht1: decode's requests further ahead,
// FlashWork::l2_ahead_bytes).
template <int H = 3, class E>
inline void prefetch_rows(const E* p, int64_t stride, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += 64 / static_cast<int64_t>(sizeof(E)))
      __builtin_prefetch(p + r * stride + c, 0, H);
}

// Per-block bookkeeping shared by both paths.

struct RowMap {
  const FlashWork* w;
  int64_t position(int64_t r) const { return (w->row_begin + r) / w->group; }
  int64_t head(int64_t r) const { return (w->row_begin + r) % w->group; }
  // Row r's Q (elements of w->q_type) and O (elements of w->o_type).
  const void* q(int64_t r) const {
    return static_cast<const char*>(w->q) +
           (head(r) * w->q_head_stride + position(r) * w->q_row_stride) * kv_type_bytes(w->q_type);
  }
  void* o(int64_t r) const {
    return static_cast<char*>(w->o) +
           (head(r) * w->o_head_stride + position(r) * w->o_row_stride) * kv_type_bytes(w->o_type);
  }
  const float* bias(int64_t r) const {
    return w->bias + head(r) * w->bias_head_stride + position(r) * w->bias_row_stride;
  }
  // Visible keys [lo, hi) of query position i (see FlashWork); a tree row's chunk keys are further
  // masked by its bits (tree_mask_*).
  int64_t hi(int64_t r) const {
    const int64_t off = w->first_position;
    return w->causal ? min64(w->valid_keys, position(r) + off + 1) : w->valid_keys;
  }
  int64_t lo(int64_t r) const {
    const int64_t off = w->first_position;
    if (w->window <= 0) return 0;
    if (w->tree) return min64(off, max64(0, off + w->tree_depth[position(r)] - w->window + 1));
    return max64(0, position(r) + off - w->window + 1);
  }
  // Row r's ALiBi slope (0 without ALiBi) and position i + off (FlashWork::first_position; a tree
  // token's: off + its depth).
  float slope(int64_t r) const { return w->alibi ? w->alibi[head(r)] : 0.0f; }
  float key_position(int64_t r) const {
    const int64_t off = w->first_position;
    return static_cast<float>(off + (w->tree ? w->tree_depth[position(r)] : position(r)));
  }
  // Tree verification: whether row r sees chunk key j (j ≥ off), and the ALiBi correction of
  // that key (its position is not its index).
  bool tree_sees(int64_t r, int64_t j) const {
    const int64_t c = j - w->first_position;
    return (w->tree[position(r) * w->tree_words + c / 64] >> (c % 64)) & 1u;
  }
  float tree_alibi(int64_t r, int64_t j) const {
    const int64_t off = w->first_position;
    return slope(r) * static_cast<float>(off + w->tree_depth[j - off] - j);
  }
};

// Writes the block's result: normalised output, or the unnormalised partial state for split-K.
// Row r's element c is oacc[r·ldo + c·col_stride]; a transposed accumulator (col_stride ≠ 1, the
// wide path on 16 registers) is gathered row by row into `row_buf` first.
template <class Arch>
void write_rows(const FlashWork& w, const RowMap& rows, const float* oacc, int64_t ldo, const float* m, const float* l,
                int64_t col_stride = 1, float* row_buf = nullptr) {
  const int64_t dv = w.value_dim;
  for (int64_t r = 0; r < w.row_count; ++r) {
    const float* src = oacc + r * ldo;
    if (col_stride != 1) {
      for (int64_t c = 0; c < dv; ++c) row_buf[c] = src[c * col_stride];
      src = row_buf;
    }
    if (w.partial_acc) {
      w.partial_ml[2 * r] = m[r];
      w.partial_ml[2 * r + 1] = l[r];
      std::memcpy(w.partial_acc + r * dv, src, sizeof(float) * dv);
      continue;
    }
    // A row with no visible key has l == 0: it outputs zeros (documented), never 0/0. A NaN sum
    // (a NaN logit or value the row saw) stays NaN.
    const float inv = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
    store_row<Arch>(rows.o(r), w.o_type, src, inv, dv);
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

// Where a work item's keys and values live: one contiguous run (sdpa's tensors, a slot cache) or
// the pages of a paged cache (FlashWork::pages). Both layouts are the same within a run, so the
// drivers walk a tile run by run and the microkernels never see pages.
template <class E>
struct KvSource {
  const E* k;
  const E* v;
  const int32_t* pages;  // null: one run
  int64_t page_tokens, page_stride, k_row_stride, v_row_stride, depth, value_depth;
  // i8 (an 8-bit cache): each key's K and V scales (FlashWork::k_scale, v_scale).
  static constexpr bool kScaled = std::is_same_v<E, I8>;
  const float* k_scale;
  const float* v_scale;

  explicit KvSource(const FlashWork& w)
      : k(static_cast<const E*>(w.k)),
        v(static_cast<const E*>(w.v)),
        pages(w.pages),
        page_tokens(w.page_tokens),
        page_stride(w.page_stride),
        k_row_stride(w.k_row_stride),
        v_row_stride(w.v_row_stride),
        depth(w.head_dim),
        value_depth(w.value_dim),
        k_scale(w.k_scale),
        v_scale(w.v_scale) {}

  // Keys from j to the end of its run (capped at `limit`): to the end of its page, and on through
  // the pages after it that are adjacent in memory (a head-major pool, pages taken together). Keys
  // below j + limit exist, so the pages looked at are in the table.
  int64_t run(int64_t j, int64_t limit) const {
    if (!pages) return limit;
    int64_t n = page_tokens - j % page_tokens;
    if (page_stride == page_tokens)  // consecutive page ids are consecutive in memory
      for (int64_t p = j / page_tokens; n < limit && pages[p + 1] == pages[p] + 1; ++p) n += page_tokens;
    return min64(limit, n);
  }
  // Token rows from a head's page-0 base to key j's page, and j's index within that page.
  int64_t page_rows(int64_t j) const { return pages ? pages[j / page_tokens] * page_stride : 0; }
  int64_t in_page(int64_t j) const { return pages ? j % page_tokens : j; }
  // Blocked K: the block [D][kKeyBlock] holding key j (j a multiple of kKeyBlock).
  const E* key_block(int64_t j) const { return k + (page_rows(j) + in_page(j)) * depth; }
  // Blocked K: key j's elements, kKeyBlock apart.
  const E* blocked_key(int64_t j) const { return key_block(j - j % kKeyBlock) + j % kKeyBlock; }
  // Row-major K (never paged): key j's row.
  const E* key_row(int64_t j) const { return k + j * k_row_stride; }
  // V row of key j.
  const E* value(int64_t j) const { return v + page_rows(j) * value_depth + in_page(j) * v_row_stride; }
  // i8: where key j's scales are in k_scale / v_scale (contiguous along a run).
  int64_t scale_index(int64_t j) const { return page_rows(j) + in_page(j); }
  float key_scale(int64_t j) const { return k_scale[scale_index(j)]; }
  float value_scale(int64_t j) const { return v_scale[scale_index(j)]; }
};

// i8: s[r·lds + j] *= scales of key j0 + j (k_scale or v_scale), for `rows` rows and keys [0, nk),
// run by run: a score tile (K scales) or the weights P before an in-place P·V (V scales). A zero
// stays zero: a masked key's weight must stay exactly 0 even when its scale is NaN (a token stored
// with a non-finite value), or the P·V would let it reach rows that never saw it.
template <class Arch, class E>
void scale_by_keys(float* s, int64_t lds, int64_t rows, const KvSource<E>& src, const float* scales, int64_t j0,
                   int64_t nk) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  for (int64_t j = 0; j < nk;) {
    const int64_t n = src.run(j0 + j, nk - j);
    const float* sc = scales + src.scale_index(j0 + j);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s + r * lds + j;
      int64_t jj = 0;
      for (; jj + W <= n; jj += W) {
        const B x = B::load_unaligned(row + jj);
        xsimd::select(x == B(0.0f), x, x * B::load_unaligned(sc + jj)).store_unaligned(row + jj);
      }
      for (; jj < n; ++jj) row[jj] = row[jj] == 0.0f ? row[jj] : row[jj] * sc[jj];
    }
    j += n;
  }
}

// A blocked K's keys [j0, j0 + keys) as f32 blocks for the score microkernel (ScoreArgs::kstep =
// kKeyBlock): every kKeyBlock-key block from the one holding j0 on, widened ([D][kKeyBlock], an i8
// block times its keys' scales; no transpose), one block every depth·kKeyBlock floats at `panel`
// (64-byte aligned). Key j0 + j is then at blocked_panel_key(panel, depth, j0, j).
template <class Arch, class E>
void widen_key_blocks(const KvSource<E>& src, int64_t j0, int64_t keys, float* panel) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  static_assert(kKeyBlock % W == 0, "a block's row is whole vectors");
  constexpr int NV = kKeyBlock / W;
  const int64_t n = src.depth * kKeyBlock;
  for (int64_t b = j0 - j0 % kKeyBlock; b < j0 + keys; b += kKeyBlock, panel += n) {
    const E* in = src.key_block(b);
    if constexpr (KvSource<E>::kScaled) {
      const float* sc = src.k_scale + src.scale_index(b);  // a block lies within one page
      B s[NV];
      for (int i = 0; i < NV; ++i) s[i] = B::load_unaligned(sc + i * W);
      for (int64_t d = 0; d < n; d += kKeyBlock)
        for (int i = 0; i < NV; ++i) (load_float<Arch>(in + d + i * W) * s[i]).store_aligned(panel + d + i * W);
    } else {
      for (int64_t d = 0; d < n; d += W) load_float<Arch>(in + d).store_aligned(panel + d);
    }
  }
}
inline const float* blocked_panel_key(const float* panel, int64_t depth, int64_t j0, int64_t j) {
  const int64_t at = j0 % kKeyBlock + j;
  return panel + at / kKeyBlock * depth * kKeyBlock + at % kKeyBlock;
}

// to_f32_panel for keys [j0, j0 + keys) of a blocked K, transposed into rows (the bf16-math path,
// which rounds rows to bf16 pairs).
template <class E>
void blocked_to_f32_panel(const KvSource<E>& src, int64_t j0, int64_t keys, int64_t ldp, float* panel) {
  const int64_t depth = src.depth;
  for (int64_t j = 0; j < keys; ++j) {
    const E* in = src.blocked_key(j0 + j);
    float* out = panel + j * ldp;
    if constexpr (KvSource<E>::kScaled) {
      const float sc = src.key_scale(j0 + j);
      for (int64_t d = 0; d < depth; ++d) out[d] = to_float(in[d * kKeyBlock]) * sc;
    } else {
      for (int64_t d = 0; d < depth; ++d) out[d] = to_float(in[d * kKeyBlock]);
    }
    for (int64_t d = depth; d < ldp; ++d) out[d] = 0.0f;
  }
}

// to_f32_panel for the V rows of keys [j0, j0 + keys), run by run.
template <class E>
void values_to_f32_panel(const KvSource<E>& src, int64_t j0, int64_t keys, int64_t cols, int64_t ldp, float* panel) {
  if constexpr (KvSource<E>::kScaled) {  // i8: each row times its scale
    for (int64_t j = 0; j < keys; ++j) {
      const E* in = src.value(j0 + j);
      const float sc = src.value_scale(j0 + j);
      float* out = panel + j * ldp;
      for (int64_t d = 0; d < cols; ++d) out[d] = to_float(in[d]) * sc;
      for (int64_t d = cols; d < ldp; ++d) out[d] = 0.0f;
    }
    return;
  }
  for (int64_t j = 0; j < keys;) {
    const int64_t n = src.run(j0 + j, keys - j);
    to_f32_panel(src.value(j0 + j), src.v_row_stride, n, cols, ldp, panel + j * ldp);
    j += n;
  }
}

// The V rows a run of n rows requests into L2 (PvAhead): n rows from key j, those below j + avail
// (the rows that exist), as at most two runs (with pages of at least a run's length, all of them;
// otherwise the rows past the second run go unrequested); pages: FlashWork::l2_pages.
template <class E>
PvAhead ahead_rows(const KvSource<E>& src, int64_t j, int64_t n, int64_t avail, bool pages) {
  PvAhead a;
  a.pages = pages;
  const int64_t count = min64(n, avail);
  if (count <= 0) return a;
  a.v[0] = src.value(j);
  a.split = src.run(j, count);
  a.count = a.split;
  if (a.split < count) {
    a.v[1] = src.value(j + a.split);
    a.count += src.run(j + a.split, count - a.split);
  }
  return a;
}

// The runs of V rows over keys [j0, j0 + nk), each as block(j, n, pf, ahead): keys [j0 + j, j0 + j +
// n) in one run, pf of them (from j, within the run) below pf_end to request into L1, `ahead` the
// rows l2_keys on into L2 and the next run's rows the L1 requests go on into. pf_end > 0 (decode):
// V rows up to key j0 + pf_end exist and are prefetched, and runs are cut into pv_sub_keys
// sub-tiles; no_requests: none at all (FlashWork::hardware_stream).
template <class Arch, class E, class Block>
void for_each_v_run(const KvSource<E>& src, int64_t j0, int64_t nk, int64_t value_vectors, int64_t pf_end,
                    int64_t l2_keys, bool l2_pages, bool no_requests, Block&& block) {
  const int64_t sub = pf_end > 0 ? pv_sub_keys<Arch, E>(value_vectors) : nk;
  for (int64_t j = 0; j < nk;) {
    const int64_t n = min64(sub, src.run(j0 + j, nk - j));
    const int64_t pf = pf_end > 0 ? src.run(j0 + j, pf_end - j) : 0;
    // The rows l2_keys ahead of this run's, up to pf_end.
    PvAhead ahead =
        pf_end > 0 && l2_keys > 0 ? ahead_rows(src, j0 + j + l2_keys, n, pf_end - j - l2_keys, l2_pages) : PvAhead{};
    if (pf > 0 && j + pf < pf_end) {  // the L1 requests go on into the next run (a paged cache's page)
      ahead.next = src.value(j0 + j + pf);
      ahead.next_count = src.run(j0 + j + pf, pf_end - j - pf);
    }
    ahead.none = no_requests;
    block(j, n, pf, ahead);
    j += n;
  }
}

// P·V over keys [j0, j0 + nk) with V read in place, one pv_block per run (for_each_v_run): the first
// run rescales O by alpha, the rest by `ones` (exact), so a tile split by pages gives the bits of
// one contiguous call (sub-tiles: the same sums in the same order, the same bits).
template <class Arch, class E>
void pv_runs(const KvSource<E>& src, float* oacc, int64_t ldo, const float* alpha, const float* ones, const float* p,
             int64_t p_row_stride, int64_t p_key_stride, int64_t j0, int64_t nk, int64_t rows, int64_t value_vectors,
             bool masked, int64_t pf_end, int64_t l2_keys = 0, bool l2_pages = false, bool no_requests = false) {
  for_each_v_run<Arch>(src, j0, nk, value_vectors, pf_end, l2_keys, l2_pages, no_requests,
                       [&](int64_t j, int64_t n, int64_t pf, const PvAhead& ahead) {
                         pv_block<Arch>(oacc, ldo, j == 0 ? alpha : ones, p + j * p_key_stride, p_row_stride,
                                        p_key_stride, src.value(j0 + j), src.v_row_stride, rows, value_vectors, n,
                                        masked, pf, ahead);
                       });
}

// pvt_block over keys [j0, j0 + nk) of an f32 V read in place, run by run (the first run rescales
// Oᵀ by alpha, the rest by `ones`, as pv_runs).
template <class Arch, class E>
void pvt_runs(const KvSource<E>& src, float* ot, int64_t ldot, const float* alpha, const float* ones, const float* pt,
              int64_t ldp, int64_t j0, int64_t nk, int64_t value_dim, int nv, bool masked) {
  static_assert(std::is_same_v<E, float>, "16- and 8-bit V go through an f32 panel");
  for (int64_t j = 0; j < nk;) {
    const int64_t n = src.run(j0 + j, nk - j);
    pvt_block<Arch>(ot, ldot, j == 0 ? alpha : ones, pt + j * ldp, ldp, src.value(j0 + j), src.v_row_stride, value_dim,
                    nv, n, masked);
    j += n;
  }
}

// Scratch layout, in floats, each part 64-byte aligned.
struct Layout {
  int64_t qt, st, oacc, kpanel, vpanel, m, l, alpha, ones, lo, hi, colmax, slope, pos, zeros, qstage;
  // The 8-bit cache's integer decode (flash_narrow_i8), for up to 16 rows: query quads (int32),
  // query and weight scales, weight codes (int16, one kNarrowBlockKeys row each, or a query row)
  // and the tile's P·V sums (int32).
  int64_t i8_q, i8_scales, i8_w, i8_acc;
  // The bf16 dot-product decode (FpMath::bf16 over bf16 K/V, bf16_dot_decode.hpp): the rows'
  // queries and a tile's weights as bf16 pairs (uint32 words).
  int64_t bf16_qp, bf16_pp;
  int64_t total;
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
  s.kpanel = take((T::kBlockKeys + kKeyBlock) * dp);  // rows, or the blocks a tile touches
  s.vpanel = take(keys * dvp);
  s.m = take(rows_p);
  s.l = take(rows_p);
  s.alpha = take(rows_p);
  s.ones = take(rows_p);
  s.lo = take(rows_p);
  s.hi = take(rows_p);
  s.colmax = take(rows_p);
  s.slope = take(rows_p);  // ALiBi: each row's slope and position (FlashWork::alibi)
  s.pos = take(rows_p);
  s.zeros = take(dp);
  s.qstage = take(W * head_dim);  // W rows of a 16-bit Q widened before the transpose
  const int64_t rows16 = min64(rows_p, 16);
  s.i8_q = take(4 * rows16 * dp);
  s.i8_scales = take(2 * rows_p);
  s.i8_w = take(max64(rows16 * T::kNarrowBlockKeys, dp) / 2);
  s.i8_acc = take(rows16 * dvp);
  s.bf16_qp = take(rows_p * dp / 2);
  s.bf16_pp = take(rows_p * keys / 2);
  s.total = at;
  return s;
}

}  // namespace
}  // namespace attend::kernels
