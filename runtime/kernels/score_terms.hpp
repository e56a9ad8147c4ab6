// The score terms of model families (FlashWork::softcap, alibi, sinks), applied to a tile of scaled
// scores before the bias and the masks: logit soft-capping (Gemma 2), ALiBi (BLOOM, MPT) and the
// running-state start of attention sinks (gpt-oss).
#pragma once

#include "flash_common.hpp"
#include "kernel_table.hpp"
#include "simd/tanh.hpp"

namespace attend::kernels {
namespace {

// Wide path: Sᵀ (keys × ldr rows) for keys [j0, j0 + nk); slope[r] and pos[r] per padded row. The
// tile is contiguous (nk rows of ldr floats), so a softcap alone runs as one flat loop.
template <class Arch>
void wide_score_terms(const FlashWork& w, float* st, int64_t ldr, int nvr, int64_t j0, int64_t nk, const float* slope,
                      const float* pos) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  const float cap = w.softcap, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
  if (cap > 0.0f) {
    const int64_t n = nk * ldr;
    int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {  // two independent chains per iteration
      const B a = softcap_f32<Arch>(B::load_aligned(st + i), cap, inv_cap);
      const B b = softcap_f32<Arch>(B::load_aligned(st + i + W), cap, inv_cap);
      a.store_aligned(st + i);
      b.store_aligned(st + i + W);
    }
    for (; i < n; i += W) softcap_f32<Arch>(B::load_aligned(st + i), cap, inv_cap).store_aligned(st + i);
  }
  if (!w.alibi) return;
  for (int64_t jj = 0; jj < nk; ++jj) {
    const B jf(static_cast<float>(j0 + jj));
    for (int n = 0; n < nvr; ++n) {
      float* s = st + jj * ldr + n * W;
      xsimd::fma(B::load_aligned(slope + n * W), jf - B::load_aligned(pos + n * W), B::load_aligned(s))
          .store_aligned(s);
    }
  }
}

// Narrow path: one row's scores s[0, nkp) for keys j0 + jj; `slope` and `pos` of that row.
template <class Arch>
void narrow_score_terms(const FlashWork& w, float* s, int64_t j0, int64_t nkp, float slope, float pos) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  alignas(64) static constexpr float kIota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const float cap = w.softcap, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
  const B iota = B::load_aligned(kIota);
  for (int64_t jj = 0; jj < nkp; jj += W) {
    B x = B::load_aligned(s + jj);
    if (cap > 0.0f) x = softcap_f32<Arch>(x, cap, inv_cap);
    if (w.alibi) x = xsimd::fma(B(slope), (iota + B(static_cast<float>(j0 + jj))) - B(pos), x);
    x.store_aligned(s + jj);
  }
}

// Tree verification (FlashWork::tree), after the range masks: a chunk key a row does not descend
// from is masked, a visible one gets its ALiBi distance from positions instead of indices. Scores
// of row r ∈ [r_begin, r_end) and key j0 + jj at s[r·row_stride + jj·key_stride]; scalar, over the
// chunk's keys only.
inline void tree_terms(const FlashWork& w, const RowMap& rows, float* s, int64_t row_stride, int64_t key_stride,
                       int64_t r_begin, int64_t r_end, int64_t j0, int64_t nk) {
  const int64_t off = w.first_position;
  for (int64_t r = r_begin; r < r_end; ++r)
    for (int64_t jj = max64(0, off - j0); jj < nk; ++jj) {
      float& x = s[r * row_stride + jj * key_stride];
      if (!rows.tree_sees(r, j0 + jj))
        x = kNegInf;
      else if (w.alibi)
        x += rows.tree_alibi(r, j0 + jj);
    }
}

// The running (max, sum) a row starts from: (sink, 1) — e^(sink − sink) — for the work item that
// holds key 0 when the call has sinks, else (−inf, 0).
inline void start_row_state(const FlashWork& w, int64_t head, float& m, float& l) {
  if (w.sinks && w.key_begin == 0) {
    m = w.sinks[head];
    l = 1.0f;
  } else {
    m = kNegInf;
    l = 0.0f;
  }
}

}  // namespace
}  // namespace attend::kernels
