// Microkernel: O[R rows][NV·W] = α·O + P·V over a run of keys, for both paths. R ≤ 6 rows,
// NV ≤ 8 vectors of the value dimension, V of f32, bf16 or f16 (widened as loaded); pv_block
// covers any rows × value width with these register blocks.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "../simd/convert.hpp"
#include "../tile_traits.hpp"

namespace attend::kernels {
namespace {

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
  // Optional software prefetch (decode): while key j is accumulated, the lines starting within the
  // first `pf_bytes` of V row j + pf_keys (from this call's column offset) are requested, for rows
  // below `pf_limit` (rows past `v` that exist). 0 = none.
  int64_t pf_keys = 0, pf_limit = 0, pf_bytes = 0;
};

// Masked: the tile had masked keys. Their p is exactly 0, but 0 · V is NaN where V holds NaN or
// inf, so a masked position would leak into rows that never saw it; the masked variant skips p == 0.
// acc[n] += pb·vv[n] except where pb == 0 (a NaN weight is live and poisons its row).
template <class Arch, int NV>
[[gnu::always_inline]] inline void fma_skip_zero(vfloat<Arch> pb, const vfloat<Arch>* vv, vfloat<Arch>* acc,
                                                 requires_arch<xsimd::generic>) {
  using B = vfloat<Arch>;
  const auto dead = pb == B(0.0f);  // ordered: NaN is not dead
  ATTEND_UNROLL
  for (int n = 0; n < NV; ++n) acc[n] = xsimd::select(dead, acc[n], xsimd::fma(pb, vv[n], acc[n]));
}

#if defined(__AVX512F__)
// One write-masked FMA per accumulator (GCC turns the generic select into move, FMA, blend).
// Unordered ≠: a NaN weight is live, as in the generic version.
template <class Arch, int NV>
[[gnu::always_inline]] inline void fma_skip_zero(vfloat<Arch> pb, const vfloat<Arch>* vv, vfloat<Arch>* acc,
                                                 requires_arch<xsimd::avx512f>) {
  const __mmask16 live = _mm512_cmp_ps_mask(pb, _mm512_setzero_ps(), _CMP_NEQ_UQ);
  ATTEND_UNROLL
  for (int n = 0; n < NV; ++n) acc[n] = _mm512_mask3_fmadd_ps(pb, vv[n], acc[n], live);
}
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
      // The lines that start inside [at, at + pf_bytes): when the passes cover a row's columns in
      // slices, each line is requested once, by the pass whose slice holds its first byte.
      const uintptr_t at = reinterpret_cast<uintptr_t>(v + a.pf_keys * a.ldv);
      for (uintptr_t line = (at + 63) & ~uintptr_t{63}; line < at + a.pf_bytes; line += 64)
        __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
    }
    B vv[NV];
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) vv[n] = load_float<Arch>(v + n * W);
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r) {
      const B pb(p[r * a.p_row_stride]);
      if constexpr (Masked) {
        fma_skip_zero<Arch, NV>(pb, vv, acc[r], Arch{});
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

// Function-pointer table so a runtime (rows, vectors) remainder picks the right specialisation.
constexpr int kMaxPvR = 6, kMaxPvNV = 8;

template <class Arch, class T, bool Masked, int... I>
constexpr auto make_pv_table(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const PvArgs&), sizeof...(I)>{
      &pv_tile<Arch, I / kMaxPvNV + 1, I % kMaxPvNV + 1, T, Masked>...};
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
// (Targets with 32 registers; decode on 16-register targets is sub-tiled, see pv_sub_keys.)
constexpr int64_t kVPrefetchBytes = 4096;

// Decode's P·V on 16-register targets runs in sub-tiles of at most Tiles::kPvSubTileBytes of V (a
// whole number of key blocks, at least one): all of a sub-tile's column passes before the next, so
// the later passes read V from L1, and every pass requests its own columns of the next sub-tile
// (within a run: a paged cache's next page is left to the hardware; requesting it as well showed
// no gain on the serve trace). With four rows of a GQA group and D 128 that is six passes of 3
// vectors; a 256-key tile's V is 128 KB in f32, so unsplit the later passes read it from L2.
// Zen 3 (AVX2), A/B against the unsplit tile, paired shares of a read, three rounds: sdpa D2/D3
// 66–71 → 69–79%, f32 cache D2/D3 63–71 → 67–77%, bf16 cache 45–56 → 49–62%, i8 and MHA (D1/D4)
// unchanged (docs/performance.md, session 14). Other targets take a tile's keys in one run
// (unlimited): not measured there.
template <class Arch, class E>
int64_t pv_sub_keys(int64_t value_vectors) {
  constexpr int64_t kBytes = Tiles<Arch>::kPvSubTileBytes;
  if (kBytes == 0) return INT64_MAX;
  const int64_t row_bytes = value_vectors * Tiles<Arch>::W * static_cast<int64_t>(sizeof(E));
  return max64(kKeyBlock, kBytes / row_bytes / kKeyBlock * kKeyBlock);
}

// O[rows][Dvp] = alpha·O + P·V over one key tile, split into register blocks. V holds elements of E.
// `pf_limit` > 0 turns on V prefetching: rows [0, pf_limit) from `v` exist. 16 registers (a
// pv_sub_keys sub-tile): every pass requests its own columns of the next sub-tile; 32 registers:
// the first pass requests whole rows kVPrefetchBytes ahead.
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
      if (pf_limit > 0 && T::kPvSubTileBytes > 0 && r0 == 0) {
        // Sub-tiled decode (pv_sub_keys): each pass fetches its columns one sub-tile ahead.
        a.pf_keys = keys;
        a.pf_limit = pf_limit;
        a.pf_bytes = nv * W * static_cast<int64_t>(sizeof(E));
      } else if (pf_limit > 0 && T::kPvSubTileBytes == 0 && r0 == 0 && c == 0) {
        // The first pass over the keys fetches whole rows kVPrefetchBytes ahead.
        a.pf_keys = pf_keys;
        a.pf_limit = pf_limit;
        a.pf_bytes = row_bytes;
      }
      pv_dispatch<Arch, E>(R, nv, masked, a);
    }
  }
}

}  // namespace
}  // namespace attend::kernels
