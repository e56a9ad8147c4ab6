// Microkernel: decode scores against row-major K, S[NR rows][W keys] = Q·Kᵀ, as dot products
// along D (D a multiple of W): NR rows × W/NR keys per transpose-sum, so each K vector loaded
// feeds NR FMAs and one query row does not pay for a vector of padded rows. K of f32, bf16 or f16.
#pragma once

#include <cstring>

#include "../simd/convert.hpp"
#include "../simd/transpose.hpp"
#include "../tile_traits.hpp"

namespace attend::kernels {
namespace {

// S[r][j] for NR rows × KG = W/NR keys starting at `kbase` (rows `ldk` floats apart; keys past `keys`
// read the zero row), one transpose-sum per W/NR keys. Writes rows < `rows` of S. Optionally
// prefetches the first `pf_keys` rows at `pf` into L1 and the first `l2_keys` at `l2` into L2, spread
// over the scoring (several rows: over the depth loop, in address order when the rows are adjacent,
// L2 only then; one row: row by row). l2_pages (FlashWork::l2_pages): of the L2 requests only the
// starts of 4 KiB pages.
// Always inlined (into flash_narrow's packs loop GCC otherwise outlined it, and row-major decode
// measured 2–5% slower with a call: MHA decode D1 lost 3–4 points of a read).
template <class Arch, int NR, class E>
[[gnu::always_inline]] inline void narrow_scores(const E* kbase, int64_t ldk, int64_t keys, const float* q,
                                                 int64_t depth, const E* zeros, float* s, int64_t lds, int64_t rows,
                                                 const E* pf, int64_t pf_keys, const E* l2 = nullptr,
                                                 int64_t l2_keys = 0, bool l2_pages = false) {
  using B = vfloat<Arch>;
  constexpr int W = B::size, KG = W / NR;
  alignas(64) float sums[W];
  for (int64_t j = 0; j < W; j += KG) {
    const E* kp[KG];
    for (int k = 0; k < KG; ++k) kp[k] = j + k < keys ? kbase + (j + k) * ldk : zeros;
    // The next group's rows to prefetch, KG lines per depth step. Adjacent rows (ldk == depth) are
    // one run fetched in address order (run..run_end); otherwise a line of each row (pp) per step.
    // Address order measured +5–10 points of stream on GQA decode (D2/D3) over a line per row.
    const E* pp[KG];
    for (int k = 0; k < KG; ++k) pp[k] = pf && j + k < pf_keys ? pf + (j + k) * ldk : nullptr;
    B acc[W];
    if constexpr (NR == 1) {
      // One row: key by key, each K row read in address order, so a group's W rows are one run
      // the hardware prefetchers follow (depth-major, every step touched a line of each of the W
      // rows, 512 bytes apart at D 128), the query held in registers a chunk of QC vectors at a
      // time (one load of it per K load instead, as a first version did, lost the gain). Zen 4,
      // MHA decode, share of a plain read of the same bytes: D1's shape alternated in one process
      // 77 → 84–87%; with the requests below, the bench (alternated processes, 3 rounds) D1
      // 65–73 → 86–95%, D4 65–78 → 87–96%. The requests go key by key too: the next group's row
      // k (pp[k]) into L1 and row k of the group at l2 into L2 (any row stride: whole rows).
      constexpr int QC = Tiles<Arch>::kManyRegs ? 8 : 4;  // query vectors held in registers
      constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(E));
      for (int k = 0; k < KG; ++k) acc[k] = B(0.0f);
      for (int64_t d0 = 0; d0 < depth; d0 += QC * W) {
        const int64_t nq = (depth - d0) / W < QC ? (depth - d0) / W : QC;
        B qv[QC];
        for (int i = 0; i < QC; ++i) qv[i] = i < nq ? B::load_aligned(q + d0 + i * W) : B(0.0f);
        const int64_t chunk = nq * W;
        for (int k = 0; k < KG; ++k) {
          if (pp[k])
            for (int64_t c = d0; c < d0 + chunk; c += kLine) __builtin_prefetch(pp[k] + c, 0, 3);
          if (l2 && j + k < l2_keys) {
            if (!l2_pages)
              for (int64_t c = d0; c < d0 + chunk; c += kLine) __builtin_prefetch(l2 + (j + k) * ldk + c, 0, 2);
            else if (d0 == 0)
              request_row_pages<2>(l2 + (j + k) * ldk, ldk * static_cast<int64_t>(sizeof(E)));
          }
          B a[2] = {acc[k], B(0.0f)};
          for (int i = 0; i < QC; ++i)
            if (i < nq) a[i & 1] = xsimd::fma(qv[i], load_float<Arch>(kp[k] + d0 + i * W), a[i & 1]);
          acc[k] = a[0] + a[1];
        }
      }
      transpose_sum<Arch>(acc).store_aligned(sums);
      if (rows > 0) std::memcpy(s + j, sums, sizeof(float) * KG);
      continue;
    }
    const bool in_order = pf && ldk == depth && j < pf_keys;
    const char* run = in_order ? reinterpret_cast<const char*>(pf + j * ldk) : nullptr;
    const char* run_end =
        in_order ? reinterpret_cast<const char*>(pf + (j + KG < pf_keys ? j + KG : pf_keys) * ldk) : nullptr;
    // The rows further ahead (l2: adjacent rows only), into L2 at the same pace.
    const bool l2_in_order = l2 && ldk == depth && j < l2_keys;
    const char* l2_run = l2_in_order ? reinterpret_cast<const char*>(l2 + j * ldk) : nullptr;
    const char* l2_end =
        l2_in_order ? reinterpret_cast<const char*>(l2 + (j + KG < l2_keys ? j + KG : l2_keys) * ldk) : nullptr;
    // A whole run (KG rows of depth elements: KG·depth·sizeof(E) / 64 lines, at most KG per depth
    // step) needs no bound checks when a step's KG lines hold W elements of each of KG rows, i.e.
    // the run's lines are exactly KG per step (f32: 16 elements a line). Emerald Rapids, one
    // thread, sdpa decode with a GQA group of four (2 kv heads × 512 keys, L2-resident): 28.7 →
    // 27.1 µs a step; two threads from memory (sdpa/attend/D2, alternated) unchanged at 90–92%.
    constexpr bool kLinePerStep = W * static_cast<int>(sizeof(E)) == 64;
    const bool whole = kLinePerStep && in_order && run_end - run == KG * depth * static_cast<int64_t>(sizeof(E));
    const bool l2_whole =
        kLinePerStep && l2_in_order && !l2_pages && l2_end - l2_run == KG * depth * static_cast<int64_t>(sizeof(E));
    for (int i = 0; i < W; ++i) acc[i] = B(0.0f);
    for (int64_t d = 0; d < depth; d += W) {
      if (l2_whole) {
        for (int k = 0; k < KG; ++k) __builtin_prefetch(l2_run + 64 * k, 0, 2);
        l2_run += 64 * KG;
      } else if (l2_in_order) {
        for (int k = 0; k < KG; ++k, l2_run += 64)
          if (l2_run < l2_end && (!l2_pages || starts_page(l2_run))) __builtin_prefetch(l2_run, 0, 2);
      }
      if (whole) {
        for (int k = 0; k < KG; ++k) __builtin_prefetch(run + 64 * k, 0, 3);
        run += 64 * KG;
      } else if (in_order) {
        for (int k = 0; k < KG; ++k, run += 64)
          if (run < run_end) __builtin_prefetch(run, 0, 3);
      } else if (pf) {
        for (int k = 0; k < KG; ++k)
          if (pp[k]) __builtin_prefetch(pp[k] + d, 0, 3);
      }
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

template <class Arch, class E>
void narrow_scores_dispatch(int row_pack, const E* k, int64_t ldk, int64_t keys, const float* q, int64_t depth,
                            const E* zeros, float* s, int64_t lds, int64_t rows, const E* pf, int64_t pf_keys,
                            const E* l2 = nullptr, int64_t l2_keys = 0, bool l2_pages = false) {
  constexpr int W = vfloat<Arch>::size;
  switch (row_pack) {
    case 1:
      return narrow_scores<Arch, 1, E>(k, ldk, keys, q, depth, zeros, s, lds, rows, pf, pf_keys, l2, l2_keys, l2_pages);
    case 2:
      return narrow_scores<Arch, 2, E>(k, ldk, keys, q, depth, zeros, s, lds, rows, pf, pf_keys, l2, l2_keys, l2_pages);
    case 4:
      if constexpr (W >= 4)
        return narrow_scores<Arch, 4, E>(k, ldk, keys, q, depth, zeros, s, lds, rows, pf, pf_keys, l2, l2_keys,
                                         l2_pages);
      break;
    case 8:
      if constexpr (W >= 8)
        return narrow_scores<Arch, 8, E>(k, ldk, keys, q, depth, zeros, s, lds, rows, pf, pf_keys, l2, l2_keys,
                                         l2_pages);
      break;
    case 16:
      if constexpr (W >= 16)
        return narrow_scores<Arch, 16, E>(k, ldk, keys, q, depth, zeros, s, lds, rows, pf, pf_keys, l2, l2_keys,
                                          l2_pages);
      break;
  }
}

}  // namespace
}  // namespace attend::kernels
